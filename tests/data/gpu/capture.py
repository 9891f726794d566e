"""Capture real torch.profiler (Kineto) traces of small random HF decoder models on a GPU.

How the traces beside this file were made (see README.md there). Each case writes
`<case>.json.gz` (the profiler's Chrome trace, its host `metadata` and `distributedInfo`
removed) and `<case>.truth.json` (what the run really was: model config, layer types,
prefill/decode steps, CUDA-graph mode). The truth is never read from the trace.

Cases, each a class of real input:
- `eager`: HF eager prefill + decode, `nn.Module` spans recorded (with_stack).
- `cudagraph`: decode steps captured once as a CUDA graph (StaticCache), then replayed.
- `compiled`: torch.compile(mode="reduce-overhead"): Inductor's Triton kernels, replayed by
  CUDA-graph trees.
- `moe`: a Qwen3-MoE model eager (data-dependent expert loops: layers differ in kernels).
- `hybrid`: a Qwen3-Next model eager (3 linear-attention layers, then 1 full-attention layer).
- `piecewise`: vLLM's piecewise CUDA graphs, by hand on a Llama: every decode step replays one
  CUDA graph per stretch between two attentions (n_layers + 1 of them) and runs attention eagerly.
- `piecewise_compiled`: the same with each piece compiled by Inductor first, as vLLM does.
- `mla`: a DeepSeek-V3 model eager (multi-head latent attention; layer 0 dense, the rest MoE with a
  shared expert).
- `gemma3`: a Gemma-3 text model eager (four norms per layer, GELU-tanh, five sliding-window
  layers then one global one).
- `gptoss`: a gpt-oss model eager (attention sinks through the eager attention: matmuls and a
  softmax, no attention kernel; alternating sliding and full layers; MoE).
- `mamba`: a Bamba model eager (Mamba-2 layers through transformers' PyTorch path, attention in
  layers 2 and 5).
- `neox`: a GPT-NeoX model eager (LayerNorm, fused QKV, GELU, attention and MLP in parallel off one
  residual).

Run: python capture.py OUTDIR [--cases a,b] [--device cuda] [--tiny]
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import torch
import transformers
from torch.profiler import ProfilerActivity, profile
from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache, StaticCache

LLAMA = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=16,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)
MODELS = {
    "llama": ("llama", LLAMA),
    "qwen3_moe": ("qwen3_moe", dict(hidden_size=1024, intermediate_size=2816, moe_intermediate_size=512,
                                    num_experts=16, num_experts_per_tok=4, num_hidden_layers=6,
                                    num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                                    vocab_size=32000, decoder_sparse_step=1, mlp_only_layers=[])),
    "qwen3_next": ("qwen3_next", dict(hidden_size=1024, intermediate_size=2816, moe_intermediate_size=512,
                                      num_experts=16, num_experts_per_tok=4, shared_expert_intermediate_size=512,
                                      num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                                      head_dim=64, linear_num_value_heads=16, linear_num_key_heads=8,
                                      linear_key_head_dim=64, linear_value_head_dim=64, vocab_size=32000,
                                      full_attention_interval=4, decoder_sparse_step=1, mlp_only_layers=[])),
    "deepseek_v3": ("deepseek_v3", dict(hidden_size=1024, intermediate_size=2816, moe_intermediate_size=512,
                                        n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=1, n_group=4,
                                        topk_group=2, first_k_dense_replace=1, num_hidden_layers=6,
                                        num_attention_heads=16, num_key_value_heads=16, q_lora_rank=384,
                                        kv_lora_rank=256, qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64,
                                        vocab_size=32000, rope_scaling=None)),
    "gemma3": ("gemma3_text", dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8,
                                   num_attention_heads=8, num_key_value_heads=4, head_dim=128, sliding_window=128,
                                   vocab_size=32000)),
    "gpt_neox": ("gpt_neox", dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8,
                                  num_attention_heads=16, vocab_size=32000, use_parallel_residual=True)),
    "gpt_oss": ("gpt_oss", dict(hidden_size=1024, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=16,
                                num_key_value_heads=4, head_dim=64, num_local_experts=16, num_experts_per_tok=4,
                                sliding_window=128, vocab_size=32000)),
    "bamba": ("bamba", dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6, num_attention_heads=16,
                            num_key_value_heads=4, attn_layer_indices=[2, 5], mamba_n_heads=32, mamba_d_head=64,
                            mamba_d_state=64, mamba_n_groups=1, mamba_expand=2, mamba_chunk_size=64, vocab_size=32000)),
}
#: what a tiny model of these needs besides ``TINY`` (sizes that must agree with each other)
TINY_MORE = {"bamba": dict(mamba_n_heads=4, mamba_d_head=64, mamba_d_state=16, mamba_chunk_size=16),
             "gpt_oss": dict(intermediate_size=128)}
#: attention for models whose SDPA path does not cover them (gpt-oss's attention sinks)
ATTENTION = {"gpt_oss": "eager"}
TINY = dict(hidden_size=128, intermediate_size=256, moe_intermediate_size=64, shared_expert_intermediate_size=64,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_value_heads=4,
            linear_num_key_heads=2, linear_key_head_dim=32, linear_value_head_dim=32, vocab_size=512,
            q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
            sliding_window=16)


def build(model_key: str, device: str, dtype: torch.dtype, tiny: bool):
    model_type, kw = MODELS[model_key]
    kw = {**kw, **({k: v for k, v in TINY.items() if k in kw or (k == "head_dim" and model_key != "deepseek_v3")} if tiny else {})}
    kw = {**kw, **(TINY_MORE.get(model_key, {}) if tiny else {})}
    if model_type == "deepseek_v3":  # MLA: one key/value head per query head
        kw["num_key_value_heads"] = kw["num_attention_heads"]
    config = AutoConfig.for_model(model_type, **kw)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTENTION.get(model_key, "sdpa"))
    return config, model.to(dtype).eval()


def activities(device: str):
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_eager(model, config, device, batch, prompt, steps, with_stack):
    """Prefill then `steps` decode steps, eager, one profiler window."""
    ids = torch.randint(config.vocab_size, (batch, prompt), device=device)
    with torch.no_grad():
        model(input_ids=ids, past_key_values=DynamicCache(config=config), use_cache=True)  # warm-up
        sync(device)
        with profile(activities=activities(device), record_shapes=True, with_stack=with_stack) as prof:
            cache = DynamicCache(config=config)
            out = model(input_ids=ids, past_key_values=cache, use_cache=True)
            for _ in range(steps):
                tok = out.logits[:, -1:].argmax(-1)
                out = model(input_ids=tok, past_key_values=cache, use_cache=True)
            sync(device)
    return prof


def run_graphed(model, config, device, batch, prompt, steps, compiled):
    """Eager prefill into a StaticCache, then decode steps replayed from CUDA graphs.

    `compiled`: torch.compile(mode="reduce-overhead") makes the graphs (CUDA-graph trees);
    else one decode step is captured by hand with torch.cuda.graph."""
    cache = StaticCache(config=config, max_cache_len=prompt + steps + 8)
    ids = torch.randint(config.vocab_size, (batch, prompt), device=device)
    tok = torch.zeros(batch, 1, dtype=torch.long, device=device)
    pos = torch.tensor([prompt], device=device)
    forward = model.forward
    step_fn = torch.compile(forward, mode="reduce-overhead", fullgraph=True) if compiled else forward

    def step():
        if compiled:
            torch.compiler.cudagraph_mark_step_begin()
        return step_fn(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True).logits

    with torch.no_grad():
        prefill_pos = torch.arange(prompt, device=device)
        forward(input_ids=ids, past_key_values=cache, cache_position=prefill_pos, use_cache=True)
        if compiled:
            for _ in range(3):
                step()
            graph_step = step
        else:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                logits = step()

            def graph_step():
                graph.replay()
                return logits
        sync(device)
        cache.reset()
        with profile(activities=activities(device), record_shapes=True) as prof:
            out = forward(input_ids=ids, past_key_values=cache, cache_position=prefill_pos, use_cache=True).logits
            pos.fill_(prompt)
            for _ in range(steps):
                tok.copy_(out[:, -1:].argmax(-1))
                out = graph_step().clone()
                pos.add_(1)
            sync(device)
    return prof


def run_piecewise(model, config, device, batch, prompt, steps, compiled=False):
    """vLLM's piecewise CUDA graphs, by hand, on a Llama: the model is cut at each attention;
    each stretch between two attentions (embedding to layer 0's q/k/v, one layer's output
    projection and MLP to the next layer's q/k/v, the last one to the logits) is one CUDA graph,
    and attention runs eagerly between the replays over a KV cache of its own. The prefill runs
    the same pieces eagerly (vLLM graphs only decode batch sizes). `compiled`: each piece is
    compiled by Inductor first (vLLM's default), so the graphs replay fused Triton kernels."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    inner, layers = model.model, model.model.layers
    n, head_dim = len(layers), config.hidden_size // config.num_attention_heads
    dtype = next(model.parameters()).dtype
    kv_shape = (batch, config.num_key_value_heads, prompt + steps + 8, head_dim)
    keys = [torch.zeros(kv_shape, device=device, dtype=dtype) for _ in range(n)]
    values = [torch.zeros(kv_shape, device=device, dtype=dtype) for _ in range(n)]

    def piece(i, ids, positions, residual, attn):
        """Layer i-1's attention output to layer i's q/k/v (i == 0: from the ids; i == n: to the logits)."""
        if i == 0:
            x = inner.embed_tokens(ids)
        else:
            prev = layers[i - 1]
            x = residual + prev.self_attn.o_proj(attn)
            x = x + prev.mlp(prev.post_attention_layernorm(x))
        if i == n:
            return model.lm_head(inner.norm(x))
        h, attention = layers[i].input_layernorm(x), layers[i].self_attn
        shape = (*h.shape[:-1], -1, head_dim)
        q, k, v = (proj(h).view(shape).transpose(1, 2) for proj in (attention.q_proj, attention.k_proj,
                                                                    attention.v_proj))
        cos, sin = inner.rotary_emb(h, positions)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return x, q, k, v

    if compiled:
        torch._dynamo.config.cache_size_limit = 64  # one compiled piece per (index, prefill or decode)
        piece = torch.compile(piece, fullgraph=True, dynamic=False)

    def attend(i, q, k, v, start):
        """Eager attention of layer i over its cache, the new keys and values written at `start`."""
        end = start + q.shape[2]
        keys[i][:, :, start:end].copy_(k)
        values[i][:, :, start:end].copy_(v)
        out = torch.nn.functional.scaled_dot_product_attention(q, keys[i][:, :, :end], values[i][:, :, :end],
                                                               is_causal=q.shape[2] > 1, enable_gqa=True)
        return out.transpose(1, 2).reshape(batch, q.shape[2], -1)

    def prefill(ids, positions):
        x, q, k, v = piece(0, ids, positions, None, None)
        for i in range(n):
            out = piece(i + 1, ids, positions, x, attend(i, q, k, v, 0))
            if i + 1 < n:
                x, q, k, v = out
        return out

    graphed = device.startswith("cuda")
    tok = torch.zeros(batch, 1, dtype=torch.long, device=device)
    pos = torch.zeros(1, 1, dtype=torch.long, device=device)
    attn_in = [torch.zeros(batch, 1, config.hidden_size, device=device, dtype=dtype) for _ in range(n)]
    graphs, outputs = [], []

    def run_piece(i, residual):
        """Piece i of a decode step over the static inputs: its graph replayed once captured."""
        if graphs:
            graphs[i].replay()
            return outputs[i]
        return piece(i, tok, pos, residual, attn_in[i - 1] if i else None)

    def decode(start):
        """One decode step: piece 0, then each layer's eager attention and the piece after it."""
        x, q, k, v = run_piece(0, None)
        for i in range(n):
            attn_in[i].copy_(attend(i, q, k, v, start))
            out = run_piece(i + 1, x)
            if i + 1 < n:
                x, q, k, v = out
        return out

    with torch.no_grad():
        ids = torch.randint(config.vocab_size, (batch, prompt), device=device)
        prefill_pos = torch.arange(prompt, device=device)[None]
        prefill(ids, prefill_pos)  # warm-up
        if graphed:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    decode(prompt)
            torch.cuda.current_stream().wait_stream(side)
            pool = torch.cuda.graph_pool_handle()
            for i in range(n + 1):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    outputs.append(piece(i, tok, pos, outputs[i - 1][0] if i else None, attn_in[i - 1] if i else None))
                graphs.append(graph)
        sync(device)
        with profile(activities=activities(device), record_shapes=True) as prof:
            logits = prefill(ids, prefill_pos)
            for step in range(steps):
                tok.copy_(logits[:, -1:].argmax(-1))
                pos.fill_(prompt + step)
                logits = decode(prompt + step)
            sync(device)
    return prof


CASES = {
    # case: (model, kind, batch, prompt, decode steps)
    "eager": ("llama", "eager", 4, 256, 4),
    "cudagraph": ("llama", "cudagraph", 8, 256, 6),
    "compiled": ("llama", "compiled", 8, 256, 6),
    "moe": ("qwen3_moe", "eager", 4, 128, 3),
    "hybrid": ("qwen3_next", "eager", 2, 128, 3),
    "piecewise": ("llama", "piecewise", 8, 256, 6),
    "piecewise_compiled": ("llama", "piecewise_compiled", 8, 256, 6),
    "mla": ("deepseek_v3", "eager", 4, 128, 3),
    "gemma3": ("gemma3", "eager", 4, 256, 3),
    "neox": ("gpt_neox", "eager", 4, 256, 3),
    "gptoss": ("gpt_oss", "eager", 4, 128, 3),
    "mamba": ("bamba", "eager", 2, 128, 3),
}


def export(prof, path: Path) -> None:
    """The profiler's Chrome trace, gzipped, without host metadata (environment, host name, paths)."""
    raw = path.with_suffix("")
    prof.export_chrome_trace(str(raw))
    doc = json.loads(raw.read_text())
    for key in ("metadata", "distributedInfo", "host_name"):
        doc.pop(key, None)
    doc["traceName"] = path.name
    raw.unlink()
    with gzip.open(path, "wt", compresslevel=9) as f:
        json.dump(doc, f, separators=(",", ":"))


def truth(config, model_key, kind, batch, prompt, steps, device, seconds) -> dict:
    layer_types = getattr(config, "layer_types", None)
    return {
        "model_type": config.model_type, "model": model_key, "num_hidden_layers": config.num_hidden_layers,
        "layer_types": list(layer_types) if layer_types else None,
        "dense_layers_first": getattr(config, "first_k_dense_replace", None),
        "attention_layers": getattr(config, "attn_layer_indices", None),
        "hidden_size": config.hidden_size, "vocab_size": config.vocab_size,
        "kind": kind, "batch": batch, "prompt_tokens": prompt,
        "stages": ["prefill"] + ["decode"] * steps, "decode_steps": steps,
        "cuda_graph_replays": 0 if kind == "eager" else steps * (config.num_hidden_layers + 1) if kind.startswith("piecewise") else steps,
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else device,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "cuda": torch.version.cuda, "python": platform.python_version(), "capture_seconds": round(seconds, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes, to check the script on a CPU")
    ap.add_argument("--prefix", default="hf")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    failed = 0
    for case in args.cases.split(","):
        model_key, kind, batch, prompt, steps = CASES[case]
        t0 = time.time()
        try:
            config, model = build(model_key, args.device, dtype, args.tiny)
            if kind == "eager":
                prof = run_eager(model, config, args.device, batch, prompt, steps, with_stack=True)
            elif kind.startswith("piecewise"):
                prof = run_piecewise(model, config, args.device, batch, prompt, steps, compiled=kind.endswith("compiled"))
            else:
                prof = run_graphed(model, config, args.device, batch, prompt, steps, compiled=kind == "compiled")
            name = f"{args.prefix}_{model_key}_{kind}"
            export(prof, args.out / f"{name}.json.gz")
            info = truth(config, model_key, kind, batch, prompt, steps, args.device, time.time() - t0)
            (args.out / f"{name}.truth.json").write_text(json.dumps(info, indent=1) + "\n")
            print(f"{case}: {name} in {time.time() - t0:.1f} s", flush=True)
        except Exception:
            failed += 1
            print(f"{case}: FAILED after {time.time() - t0:.1f} s", flush=True)
            traceback.print_exc()
        finally:
            model = prof = None
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
