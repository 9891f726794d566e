"""Kineto traces of what is not LLM serving, with truth: training steps and an HPC code.

A layer detector must not take a training iteration for a layer, nor the time steps of a
stencil code for a decoder stack. These traces are the counter-examples:

- ``training``: ``steps`` iterations of a small Llama, each inside a ``ProfilerStep#N`` range
  (what ``torch.profiler``'s ``step()`` records): the forward pass launched by the main thread
  (nn.Module spans optional), the loss, the backward pass launched by autograd's own thread
  (each layer's gradient kernels in reverse order: dgrad and wgrad GEMMs, FlashAttention
  backward, norm and activation backward), then the optimizer's fused Adam on the main thread.
  Truth: per step two passes, the forward and the backward, of ``layers`` layers each (a
  backward kernel belongs to the layer whose gradient it computes); the optimizer is in none.
- ``hpc``: a CloverLeaf-like hydrodynamics code: ``steps`` time steps of the same two dozen
  stencil kernels, a reduction and a device-to-host copy of the time step. Truth: no layers.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import orjson

from layerc.backends.outputs import output_dir, write_atomic
from layerc.backends.synth.kineto import _BASE, _KIND, KinetoWriter, Op, _pass_ops, truth_path

WORKLOADS = ("training", "hpc")

#: backward kernels: catalog-like rows (type, cpu op, grid kind, base µs) and CUDA names
_BWD = {
    "gemm_dgrad": ("LINEAR", "aten::mm", "gemm", 12.0, "nvjet_tst_256x128_64x4_2x1_v_bz_coopA_NNT"),
    "gemm_wgrad": ("LINEAR", "aten::mm", "gemm", 14.0, "nvjet_tst_128x256_64x4_1x2_h_bz_coopB_TNN"),
    "act_bwd": ("ELEMENTWISE", "aten::silu_backward", "ew", 5.0,
                "void at::native::vectorized_elementwise_kernel<4, at::native::silu_backward_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, at::native::silu_backward_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul>)"),
    "mul": ("ELEMENTWISE", "aten::mul", "ew", 3.0,
            "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)"),
    "norm_bwd": ("NORM", "aten::native_layer_norm_backward", "rows", 6.0,
                 "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, int)"),
    "norm_wgrad": ("NORM", "aten::native_layer_norm_backward", "rows", 5.0,
                   "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<c10::BFloat16, float>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16*, c10::BFloat16*)"),
    "attn_dot": ("ATTENTION", "aten::_flash_attention_backward", "attn", 4.0,
                 "void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(Flash_bwd_params)"),
    "attn_bwd": ("ATTENTION", "aten::_flash_attention_backward", "attn", 60.0,
                 "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, false, false, false, true, false, false>(Flash_bwd_params)"),
    "attn_dq": ("ATTENTION", "aten::_flash_attention_backward", "attn", 4.0,
                "void flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(Flash_bwd_params, int)"),
    "loss": ("ELEMENTWISE", "aten::nll_loss_forward", "small", 5.0,
             "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)"),
    "adam": ("ELEMENTWISE", "Optimizer.step#AdamW.step", "ew", 40.0,
             "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, bool*, bool*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, bool*, bool*)"),
}
#: one layer's backward, last op first: MLP (down, act, gate/up), post-norm, attention, input norm
_LAYER_BWD = ["add", "gemm_dgrad", "gemm_wgrad", "act_bwd", "mul", "gemm_dgrad", "gemm_wgrad", "gemm_dgrad", "gemm_wgrad",
              "norm_bwd", "norm_wgrad", "add", "gemm_dgrad", "gemm_wgrad", "attn_dot", "attn_bwd", "attn_dq", "rope",
              "gemm_dgrad", "gemm_wgrad", "norm_bwd", "norm_wgrad"]

#: a CloverLeaf time step, as its CUDA port launches it
_HPC_STEP = ["ideal_gas", "update_halo_density", "update_halo_energy", "viscosity", "calc_dt", "min_reduction", "PdV_predict",
             "ideal_gas", "update_halo_pressure", "revert", "PdV_correct", "accelerate", "flux_calc", "advec_cell_xdir_1",
             "advec_cell_xdir_2", "advec_cell_ydir_1", "advec_cell_ydir_2", "advec_mom_vol", "advec_mom_node_flux",
             "advec_mom_node_mass", "advec_mom_flux", "advec_mom_vel", "reset_field", "field_summary", "sum_reduction"]


def _hpc_name(key: str) -> str:
    if key.endswith("reduction"):
        op = "Min" if key.startswith("min") else "Sum"
        return f"void reduction<double, Reduce{op}<double> >(int, double*, double*)"
    return f"device_{key}_kernel_cuda(int, int, double const*, double*, double*)"


def generate(path: str | os.PathLike, *, workload: str, layers: int = 4, steps: int = 3, seed: int = 0, modules: str = "none") -> dict:
    """Write a training or HPC Kineto trace to ``path`` and its truth beside it; return the truth."""
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, not {workload!r}")
    if layers < 1 or steps < 1:
        raise ValueError("layers and steps must be >= 1")
    t0 = time.perf_counter()
    w = KinetoWriter("llama", "cuda", 1, seed, modules)
    passes = _training(w, layers, steps) if workload == "training" else _hpc(w, steps)
    path = Path(path)
    output_dir(path.parent)
    size = write_atomic(path, orjson.dumps(w.document()))
    kernels = sorted(w.kernels, key=lambda k: (k["start"], k["stream"]))
    truth = {"path": str(path), "workload": workload, "seed": seed, "modules": modules, "steps": steps,
             "totals": {"kernels": len(kernels), "passes": len(passes), "layers": sum(p["layers"] for p in passes)},
             "passes": passes, "bytes": size, "seconds": round(time.perf_counter() - t0, 3), "kernels": kernels}
    if (beside := truth_path(path)) is not None:
        write_atomic(beside, json.dumps(truth, separators=(",", ":")) + "\n")
    return truth


def _launch(w: KinetoWriter, key: str, pass_index: int, layer: int | None, tid: int | None = None) -> tuple[int, int]:
    """Launch one kernel eagerly; its truth row; the op's host span."""
    if key in _BWD:
        ktype, cpu_name, grid_kind, base, name = _BWD[key]
    elif key in _KIND or key in _BASE:
        ktype, cpu_name, grid_kind, base = w.kind(key)
        name = w.name(key, "prefill")
    else:
        ktype, cpu_name, grid_kind, base, name = "OTHER", f"cloverleaf::{key}", "ew", 8.0, _hpc_name(key)
    dur = w.ns(base * w.rng.uniform(0.85, 1.2) * (1 + 4 * (grid_kind in ("gemm", "attn"))))
    start, stream, corr, _, span = w.eager(Op(key, layer), name, cpu_name, dur, tid)
    grid, block = w.geometry(grid_kind, 2048, True)
    w.events.append(w.kernel_event(name, start, dur, stream, corr, None, grid, block))
    w.kernels.append({"correlation": corr, "start": start, "name": name, "op": key, "stream": stream, "pass": pass_index,
                      "stage": "hpc" if key in _HPC_STEP else "training", "layer": layer, "kernel_type": ktype})
    return span


def _training(w: KinetoWriter, layers: int, steps: int) -> list[dict]:
    autograd = w.pid + 1  # autograd's device thread launches the backward pass
    passes = []
    ops, _ = _pass_ops("llama", "cuda", 1, "prefill", layers)
    ops = [op for op in ops if op.key not in ("kv_indices", "positions", "argmax")]  # no KV cache, no sampling
    for step in range(steps):
        begin = w.cpu
        fwd, bwd = 2 * step, 2 * step + 1
        spans = [_launch(w, op.key, fwd, op.layer) for op in ops]
        w.module_spans(ops, spans)
        _launch(w, "loss", fwd, None)
        w.cpu += w.ns(20)
        for i in reversed(range(layers)):
            for key in _LAYER_BWD:
                _launch(w, key, bwd, i, tid=autograd)
        _launch(w, "gemm_dgrad", bwd, None, tid=autograd)  # the embedding's gradient
        for _ in range(3):
            _launch(w, "adam", fwd, None)
        w.cpu = max(w.cpu, w.gpu) + w.ns(w.rng.uniform(300, 600))  # the next batch
        w.events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": w.pid, "tid": w.pid,
                         "ts": begin / 1000, "dur": (w.cpu - begin) / 1000, "args": {"External id": w.next_ext()}})
        passes += [{"index": fwd, "step": step, "stage": "forward", "layers": layers},
                   {"index": bwd, "step": step, "stage": "backward", "layers": layers}]
    return passes


def _hpc(w: KinetoWriter, steps: int) -> list[dict]:
    for _ in range(steps):
        for key in _HPC_STEP:
            _launch(w, key, 0, None)
        w.memcpy(8)  # the time step's minimum, read back by the host
        w.cpu = max(w.cpu, w.gpu) + w.ns(w.rng.uniform(20, 60))
    return [{"index": 0, "stage": "hpc", "layers": 0}]
