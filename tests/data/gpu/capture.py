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
}
TINY = dict(hidden_size=128, intermediate_size=256, moe_intermediate_size=64, shared_expert_intermediate_size=64,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_value_heads=4,
            linear_num_key_heads=2, linear_key_head_dim=32, linear_value_head_dim=32, vocab_size=512)


def build(model_key: str, device: str, dtype: torch.dtype, tiny: bool):
    model_type, kw = MODELS[model_key]
    kw = {**kw, **({k: v for k, v in TINY.items() if k in kw or k in ("head_dim",)} if tiny else {})}
    config = AutoConfig.for_model(model_type, **kw)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
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


CASES = {
    # case: (model, kind, batch, prompt, decode steps)
    "eager": ("llama", "eager", 4, 256, 4),
    "cudagraph": ("llama", "cudagraph", 8, 256, 6),
    "compiled": ("llama", "compiled", 8, 256, 6),
    "moe": ("qwen3_moe", "eager", 4, 128, 3),
    "hybrid": ("qwen3_next", "eager", 2, 128, 3),
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
        "hidden_size": config.hidden_size, "vocab_size": config.vocab_size,
        "kind": kind, "batch": batch, "prompt_tokens": prompt,
        "stages": ["prefill"] + ["decode"] * steps, "decode_steps": steps,
        "cuda_graph_replays": steps if kind != "eager" else 0,
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
