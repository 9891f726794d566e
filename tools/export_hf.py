"""Export a tiny random-weight Hugging Face causal LM to an AutoDeploy-style graph dump.

``layerc export-hf --arch llama OUTDIR`` builds a small model from a config (no
download, ``torch.manual_seed(0)``, CPU, float32), runs ``torch.export.export``
on it and writes, into OUTDIR:

``001_export_export_to_gm.txt``
    The graph in TensorRT-LLM AutoDeploy's graph-dump (v3) format, the file
    AutoDeploy writes after its ``export_to_gm`` transform when
    ``AD_DUMP_GRAPHS_DIR`` is set.
``fx_graph.txt``
    ``str(gm.graph)``: torch.fx's own print of the same GraphModule.
``layers.json``
    Ground truth for layer attribution: the decoder layer each node belongs
    to (from ``node.meta["nn_module_stack"]``, or from the qualified parameter
    name for ``get_attr`` nodes), plus the qualified target of every
    ``get_attr`` node.

The export mirrors what AutoDeploy's ``torch_export_to_gm`` does to a model
before it dumps the graph: ``torch.autocast`` is a no-op while tracing (so the
rotary embedding is not wrapped in an autocast higher-order op), the unlifted
GraphModule from ``ep.module()`` is used (parameters and buffers are
``get_attr`` nodes), tied parameters are deduplicated, and unused
shape/metadata assertions are removed.

torch and transformers are imported lazily: this module imports without them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any, TextIO

from layerc.backends.outputs import atomic_open, atomic_path, write_atomic
from layerc.ir.diagnostics import LayercError
from layerc.tools.args import output_directory

DUMP_FILENAME = "001_export_export_to_gm.txt"
FX_FILENAME = "fx_graph.txt"
LAYERS_FILENAME = "layers.json"

TRANSFORM_NAME = "export_to_gm"
STAGE = "export"

BATCH = 2
SEQ_LEN = 8

# --------------------------------------------------------------------------
# Tiny configs
# --------------------------------------------------------------------------

# Shared by every arch: hidden 64, intermediate 128, 4 heads, 2 KV heads, vocab 128.
_BASE: dict[str, Any] = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "use_cache": False,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# MoE shapes: 8 experts of width 32, top-2 routing.
_MOE: dict[str, Any] = {"moe_intermediate_size": 32, "num_experts_per_tok": 2}

# DeepSeek-style MLA + grouped top-k routing; layer 0 dense (first_k_dense_replace=1).
_DEEPSEEK: dict[str, Any] = {
    **_MOE,
    "num_key_value_heads": 4,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "n_group": 2,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "routed_scaling_factor": 1.0,
    "norm_topk_prob": True,
}

# arch (config model_type) -> overrides on top of _BASE.  Every entry exports
# with torch 2.13 / transformers 5.x (checked by tests/test_export_hf.py).
ARCH_CONFIGS: dict[str, dict[str, Any]] = {
    # dense decoders
    "llama": {},
    "mistral": {"sliding_window": None},
    "qwen2": {},
    "qwen3": {"head_dim": 16},
    "phi": {},
    "phi3": {},
    "gemma": {"head_dim": 16},
    "gemma2": {"head_dim": 16, "sliding_window": 4, "query_pre_attn_scalar": 16},
    "gemma3_text": {"head_dim": 16, "sliding_window": 4, "query_pre_attn_scalar": 16},
    "olmo": {},
    "olmo2": {},
    "olmo3": {"sliding_window": 4},
    "granite": {},
    "starcoder2": {"sliding_window": None},
    "glm": {"head_dim": 16},
    "glm4": {"head_dim": 16},
    "cohere": {},
    "cohere2": {"sliding_window": 4},
    "smollm3": {},
    "helium": {"head_dim": 16},
    "ministral": {"head_dim": 16},
    "internlm3": {},
    "exaone4": {"sliding_window": 4},
    "seed_oss": {"head_dim": 16},
    "nemotron": {},
    "stablelm": {},
    "gpt_neox": {},
    "falcon": {},
    # mixture of experts
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None},
    "phimoe": {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None},
    "qwen2_moe": {
        **_MOE,
        "shared_expert_intermediate_size": 64,
        "num_experts": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    },
    "qwen3_moe": {
        **_MOE,
        "head_dim": 16,
        "num_experts": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    },
    "olmoe": {"num_experts": 8, "num_experts_per_tok": 2},
    "granitemoe": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "granitemoeshared": {
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "shared_intermediate_size": 64,
    },
    "deepseek_v2": dict(_DEEPSEEK),
    "deepseek_v3": dict(_DEEPSEEK),
    "dots1": {
        **_MOE,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "n_group": 2,
        "topk_group": 1,
        "first_k_dense_replace": 1,
    },
    "glm4_moe": {
        **_MOE,
        "head_dim": 16,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "n_group": 2,
        "topk_group": 1,
        "first_k_dense_replace": 1,
    },
    "ernie4_5_moe": {"moe_intermediate_size": 32, "moe_num_experts": 8, "moe_k": 2, "moe_layer_start_index": 1},
    "hunyuan_v1_moe": {"head_dim": 16, "num_experts": 4, "moe_topk": 2},
    "minimax": {"head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2},
    # max_position_embeddings at its default, or YaRN warns about its factor
    "gpt_oss": {
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": 4,
        "max_position_embeddings": 131072,
    },
    "llama4_text": {
        "head_dim": 16,
        "intermediate_size_mlp": 128,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
    },
}

ARCHES: tuple[str, ...] = tuple(ARCH_CONFIGS)


def tiny_config(arch: str) -> dict[str, Any]:
    """The tiny config of ``arch`` as HF config keys: the shared base (transformers maps the
    common names to each model's own through ``attribute_map``), then the arch's overrides."""
    return {**_BASE, **ARCH_CONFIGS.get(arch, {})}


def model_types() -> list[str]:
    """Every causal-LM model type of the installed transformers (``ARCHES`` are the tested ones)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise LayercError("export-hf needs the [torch] extra: pip install 'layerc[torch]'") from exc


EXPERTS_IMPLEMENTATIONS: tuple[str, ...] = ("grouped_mm", "batched_mm")
DTYPES: tuple[str, ...] = ("float32", "bfloat16")


def build_model(arch: str, layers: int, *, experts: str | None = None, dtype: str = "float32"):
    """A tiny random-weight causal LM of ``arch`` with ``layers`` decoder layers, on CPU.

    ``experts`` picks transformers' MoE experts implementation (None: its
    default, ``grouped_mm``, which on CPU/float32 traces to the
    ``transformers.grouped_mm_fallback`` custom op; ``batched_mm``: plain aten
    ``index``/``bmm``).  ``eager`` is not offered: its per-expert Python loop
    over ``nonzero()`` is data-dependent and torch.export rejects it.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if arch not in ARCH_CONFIGS and arch not in model_types():
        raise LayercError(f"unknown --arch {arch!r}: not a causal-LM model type of transformers; tested: {', '.join(ARCHES)}")
    if layers < 1:
        raise LayercError(f"--layers must be at least 1, got {layers}")
    if experts is not None and experts not in EXPERTS_IMPLEMENTATIONS:
        raise LayercError(
            f"unknown --experts {experts!r}; choose one of: {', '.join(EXPERTS_IMPLEMENTATIONS)}"
        )
    if dtype not in DTYPES:
        raise LayercError(f"unknown --dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")
    config = AutoConfig.for_model(arch, **{**tiny_config(arch), "num_hidden_layers": layers})
    torch.manual_seed(0)
    extra: dict[str, Any] = {}
    if experts is not None:
        extra["experts_implementation"] = experts
    model = AutoModelForCausalLM.from_config(
        config, attn_implementation="eager", dtype=getattr(torch, dtype), **extra
    )
    return model.to("cpu").eval()


# --------------------------------------------------------------------------
# Export (what AutoDeploy's torch_export_to_gm does before its first dump)
# --------------------------------------------------------------------------


@contextlib.contextmanager
def _autocast_noop():
    """torch.autocast as a null context while tracing (AutoDeploy's ``autocast_noop`` patch)."""
    import torch

    orig_autocast = torch.autocast
    orig_enabled = torch.is_autocast_enabled

    def _safe_is_autocast_enabled(*args, **kwargs):
        try:
            return orig_enabled(*args, **kwargs)
        except RuntimeError:
            return False

    torch.autocast = lambda *args, **kwargs: contextlib.nullcontext()
    torch.is_autocast_enabled = _safe_is_autocast_enabled
    try:
        yield
    finally:
        torch.autocast = orig_autocast
        torch.is_autocast_enabled = orig_enabled


def _deduplicate_get_attrs(gm) -> None:
    """One get_attr node per tensor (tied embeddings), keeping the first."""
    by_tensor: dict[int, Any] = {}
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        tensor = _resolve_attr(gm, str(node.target))
        if tensor is None:
            continue
        kept = by_tensor.setdefault(id(tensor), node)
        if kept is not node:
            node.replace_all_uses_with(kept)
            gm.graph.erase_node(node)


def _clean_up_assertions(gm) -> None:
    """Drop unused shape/metadata assertion nodes, like AutoDeploy's export does."""
    import torch

    checks = {
        torch.ops.aten._assert_scalar,
        torch.ops.aten.sym_constrain_range,
        torch.ops.aten.sym_constrain_range_for_size,
        torch.ops.aten._assert_tensor_metadata,
    }
    for node in reversed(list(gm.graph.nodes)):
        if node.users or node.op != "call_function":
            continue
        target = node.target
        packet = getattr(target, "overloadpacket", target)
        if packet in checks or target in checks:
            gm.graph.erase_node(node)


def _resolve_attr(gm, target: str):
    obj = gm
    for part in target.split("."):
        if not hasattr(obj, part):
            return None
        obj = getattr(obj, part)
    return obj


def _ensure_vals(gm) -> int:
    """Give every get_attr / placeholder / op node a ``meta["val"]``; returns how many were added.

    torch.export usually records FakeTensors for all of them already (torch >= 2.5
    also on the get_attr nodes of ``ep.module()``); where it did not, the
    get_attr values are faked from the real tensors and the rest is filled in by
    fake-tensor propagation over the whole graph.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    # call_module nodes (export's _guards_fn) have no value, and neither do unused
    # assertion ops; AutoDeploy's dump prints "? : N/A" for those.
    missing = [
        n
        for n in gm.graph.nodes
        if n.op in ("get_attr", "placeholder", "call_function", "call_method")
        and "val" not in n.meta
        and not (n.op == "call_function" and not n.users and "assert" in str(n.target))
    ]
    if not missing:
        return 0
    mode = None
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor) and hasattr(val, "fake_mode"):
            mode = val.fake_mode
            break
    if mode is None:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
    added = 0
    for n in gm.graph.nodes:
        if n.op == "get_attr" and "val" not in n.meta:
            tensor = _resolve_attr(gm, str(n.target))
            if isinstance(tensor, torch.Tensor):
                n.meta["val"] = mode.from_tensor(tensor, static_shapes=True)
                added += 1
    if any("val" not in n.meta for n in missing):
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp

        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        inputs = [n.meta.get("val") for n in placeholders]
        if all(v is not None for v in inputs):
            had_val = {n for n in gm.graph.nodes if "val" in n.meta}
            FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*inputs)
            for n in gm.graph.nodes:
                if n in had_val or "val" not in n.meta:
                    continue
                added += 1
                # export records multi-output values as plain lists/tuples;
                # FakeTensorProp leaves fx's immutable_list, whose type name would leak
                # into the dump ("? : immutable_list").
                if isinstance(n.meta["val"], list) and type(n.meta["val"]) is not list:
                    n.meta["val"] = list(n.meta["val"])
    return added


def _input_ids(model):
    """The token ids the export traces with (and the profile runs on): seeded, so both agree."""
    import torch

    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, model.config.vocab_size, (BATCH, SEQ_LEN), generator=gen)


def export_graph_module(arch: str, layers: int, *, experts: str | None = None, dtype: str = "float32"):
    """(model, gm) for ``arch``: the unlifted, cleaned GraphModule of a tiny model."""
    import torch

    model = build_model(arch, layers, experts=experts, dtype=dtype)
    with _autocast_noop(), torch.no_grad():
        ep = torch.export.export(model, (), {"input_ids": _input_ids(model)}, strict=False)
    gm = ep.module()
    _deduplicate_get_attrs(gm)
    _clean_up_assertions(gm)
    gm.graph.lint()
    gm.recompile()
    _ensure_vals(gm)
    return model, gm


# --------------------------------------------------------------------------
# AutoDeploy graph dump (v3 writer format)
# --------------------------------------------------------------------------


def _dtype_or_type(val) -> Any:
    if hasattr(val, "dtype"):
        return val.dtype
    return type(val).__name__


def _shape_str(val) -> str:
    if hasattr(val, "shape"):
        dims = [str(int(d)) if str(d).isdigit() else str(d) for d in val.shape]
        return "x".join(dims) if dims else "scalar"
    return "?"


def _shape_dtype(val) -> str:
    return f"{_shape_str(val)} : {_dtype_or_type(val)}"


def write_ssa(f: TextIO, gm) -> None:
    """One graph's body, node by node, in AutoDeploy's SSA dump style."""
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            info = _shape_dtype(node.meta["val"]) if "val" in node.meta else "? : unknown"
            f.write(f"%{node.name} : {info}\n")
        elif node.op in ("call_function", "call_method", "call_module"):
            inputs = []
            for arg in node.args:
                if hasattr(arg, "name"):
                    if hasattr(arg, "meta") and "val" in arg.meta:
                        inputs.append(f"%{arg.name} : {_shape_dtype(arg.meta['val'])}")
                    else:
                        inputs.append(f"%{arg.name} : ? : unknown")
                else:
                    inputs.append(str(arg))
            if "val" in node.meta:
                out = node.meta["val"]
                if isinstance(out, (tuple, list)):
                    shapes, dtypes = [], []
                    for v in out:
                        if v is None:
                            shapes.append("?")
                            dtypes.append("None")
                        else:
                            shapes.append(_shape_str(v))
                            dtypes.append(str(_dtype_or_type(v)))
                    out_info = f"({', '.join(shapes)}) : ({', '.join(dtypes)})"
                else:
                    out_info = _shape_dtype(out)
            else:
                out_info = "? : N/A"
            f.write(f"%{node.name} = {node.target}({', '.join(inputs)}) : {out_info}\n")
        elif node.op == "output":
            outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else [node.args[0]]
            names = [f"%{o.name}" if hasattr(o, "name") else str(o) for o in outs]
            f.write(f"output {', '.join(names)}\n")
        # get_attr nodes are not written


def write_dump(f: TextIO, mod, transform: str = TRANSFORM_NAME, stage: str = STAGE) -> int:
    """The whole dump file for ``mod``; returns the number of GraphModules written."""
    from torch.fx import GraphModule

    graph_modules = [
        (name or "(root)", sub) for name, sub in mod.named_modules() if isinstance(sub, GraphModule)
    ]
    f.write(f"# Transform: {transform}\n")
    f.write(f"# Stage: {stage}\n")
    f.write(f"# GraphModules found: {len(graph_modules)}\n\n")
    for name, gm in graph_modules:
        f.write(f"\n{'=' * 80}\n")
        f.write(f"# GraphModule: {name}\n")
        f.write(f"{'=' * 80}\n\n")
        write_ssa(f, gm)
    return len(graph_modules)


# --------------------------------------------------------------------------
# Layer attribution
# --------------------------------------------------------------------------

_SUBSCRIPT = re.compile(r"\[\s*['\"]?([^\]'\"]*?)['\"]?\s*\]")
_GENERIC_LAYER = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks)\.(\d+)(?=\.|$)")


def normalize_module_path(path: str) -> str:
    """``L['self'].model.layers[3]`` / ``L__self__.model.layers.3`` -> ``model.layers.3``."""
    path = _SUBSCRIPT.sub(r".\1", str(path))
    path = re.sub(r"^(?:L\.self|L__self__|self)(?=\.|$)\.?", "", path)
    return path.strip(".")


def decoder_layers_prefix(model) -> str | None:
    """Qualified name of the ModuleList holding the decoder layers (``model.layers``, ``transformer.h``)."""
    import torch

    n = getattr(model.config, "num_hidden_layers", None)
    best = None
    for name, mod in model.named_modules():
        if not name or not isinstance(mod, torch.nn.ModuleList):
            continue
        if n is not None and len(mod) != n:
            continue
        if best is None or name.count(".") < best.count("."):
            best = name
    return best


def layer_of_path(path: str, prefix: str | None = None) -> int | None:
    """The decoder-layer index in a module path or parameter name, or None.

    With ``prefix`` (the decoder ModuleList, e.g. ``model.layers``) only
    ``{prefix}.N`` counts; without it, the last ``layers.N`` / ``h.N`` /
    ``blocks.N`` component does.
    """
    path = normalize_module_path(path)
    if prefix:
        m = re.match(re.escape(prefix) + r"\.(\d+)(?=\.|$)", path)
        return int(m.group(1)) if m else None
    found = None
    for m in _GENERIC_LAYER.finditer(path):
        found = int(m.group(1))
    return found


def layer_of_node(node, prefix: str | None = None) -> int | None:
    """Decoder layer of one FX node: get_attr by its target, others by ``nn_module_stack``.

    ``nn_module_stack`` maps an opaque key (``L__self__model.layers.0`` under
    non-strict export, an object id under strict export) to ``(qualified
    path, class name)``, outermost module first; the path is what counts.
    """
    if node.op == "get_attr":
        return layer_of_path(str(node.target), prefix)
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    layer = None
    for key, value in stack.items():
        path = value[0] if isinstance(value, (tuple, list)) and value else key
        idx = layer_of_path(str(path), prefix)
        if idx is not None:
            layer = idx
    return layer


def layer_map(gm, arch: str, num_layers: int, prefix: str | None = None) -> dict[str, Any]:
    """The layers.json document for ``gm``."""
    nodes = {n.name: layer_of_node(n, prefix) for n in gm.graph.nodes}
    weights = {n.name: str(n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    return {
        "arch": arch,
        "num_layers": num_layers,
        "layers_module": prefix,
        "nodes": nodes,
        "weights": weights,
    }


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def export(
    arch: str,
    layers: int,
    outdir: str | Path,
    *,
    experts: str | None = None,
    dtype: str = "float32",
) -> dict:
    """Export ``arch`` with ``layers`` decoder layers into ``outdir``; returns paths and metadata."""
    _require_torch()
    from layerc.backends.outputs import output_dir

    outdir = output_dir(outdir)
    t0 = time.perf_counter()
    model, gm = export_graph_module(arch, layers, experts=experts, dtype=dtype)
    prefix = decoder_layers_prefix(model)
    seconds = time.perf_counter() - t0

    dump_path = outdir / DUMP_FILENAME
    fx_path = outdir / FX_FILENAME
    layers_path = outdir / LAYERS_FILENAME
    counts: dict[str, int] = {}
    with atomic_open(dump_path) as f:
        counts["graph_modules"] = write_dump(f, gm)
    write_atomic(fx_path, str(gm.graph))
    lmap = layer_map(gm, arch, layers, prefix)
    write_atomic(layers_path, json.dumps(lmap, indent=1) + "\n")
    return {
        "arch": arch,
        "num_layers": layers,
        "dump": str(dump_path),
        "fx_graph": str(fx_path),
        "layers": str(layers_path),
        "graph_modules": counts["graph_modules"],
        "num_nodes": len(gm.graph.nodes),
        "export_seconds": round(seconds, 3),
    }


PROFILE_FILENAME = "profile.json"
NODE_MODULES_FILENAME = "node_modules.json"


def profile_model(model, path: str | Path, *, annotate_modules: bool = True) -> None:
    """Run ``model`` once on the export's inputs under torch.profiler (CPU, shapes and module
    spans recorded) and write the Kineto trace to ``path``. ``annotate_modules`` wraps every
    module call in a ``record_function`` named by its qualified name (``module: model.layers.0.mlp``):
    the truth that kernel binding is checked against."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    handles, open_ranges = [], []
    if annotate_modules:
        for qual, mod in model.named_modules():
            def pre(_m, _a, qual=qual):
                r = record_function(f"module: {qual or '(root)'}")
                r.__enter__()
                open_ranges.append(r)

            def post(_m, _a, _o):
                open_ranges.pop().__exit__(None, None, None)

            handles += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]
    device = next(model.parameters()).device
    ids = _input_ids(model).to(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    try:
        with torch.no_grad():
            model(input_ids=ids)  # warm-up: lazy inits stay out of the profile
            with profile(activities=activities, record_shapes=True, with_stack=True, with_modules=True) as prof:
                model(input_ids=ids)
    finally:
        for h in handles:
            h.remove()
    with atomic_path(path) as tmp:
        prof.export_chrome_trace(str(tmp))


def node_modules(gm) -> dict[str, str]:
    """Node name → the qualified name of the innermost module that ran it (``nn_module_stack``)."""
    out = {}
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            path = list(stack.values())[-1][0]
            out[node.name] = normalize_module_path(path) or "(root)"
    return out


def configure_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", required=True, metavar="MODEL_TYPE",
                   help=f"model architecture: any causal-LM model_type of transformers; tested: {', '.join(ARCHES)}")
    p.add_argument("--layers", type=int, default=2, metavar="N", help="number of decoder layers (default 2)")
    p.add_argument(
        "--experts",
        choices=EXPERTS_IMPLEMENTATIONS,
        default=None,
        help="MoE experts implementation (default: transformers' default, grouped_mm)",
    )
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="parameter dtype (default float32)")
    p.add_argument("outdir", type=output_directory, help="directory to write the dump, fx_graph.txt and layers.json into")


def run(args: argparse.Namespace) -> int:
    _require_torch()
    result = export(
        args.arch,
        args.layers,
        args.outdir,
        experts=getattr(args, "experts", None),
        dtype=getattr(args, "dtype", "float32"),
    )
    for key in ("dump", "fx_graph", "layers"):
        print(result[key])
    return 0
