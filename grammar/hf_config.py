"""A Hugging Face ``config.json`` (or a preset of ``grammar/data/models.toml``) → ``ModelSpec``:
the facts about one decoder layer that its op graph needs, checked, with defaults as
transformers applies them.

Supported ``model_type``: llama, mistral, qwen2, qwen3 (per-head q/k RMSNorm), mixtral
(softmax top-k router) and deepseek_v3 (MLA, sigmoid grouped top-k router, shared experts, the
first ``first_k_dense_replace`` layers dense). A wrong or missing value is reported at its key:
sizes are whole numbers from 1 (or 0) to :data:`MAX_SIZE`, other numbers finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from layerc.grammar.config_files import ConfigFile, finite_number, read_json_config, read_toml_config, shown
from layerc.ir.diagnostics import LayercError

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "deepseek_v3")
ACTIVATIONS = ("silu", "gelu", "gelu_pytorch_tanh", "relu")
DTYPES = {"bfloat16": "torch.bfloat16", "float16": "torch.float16", "float32": "torch.float32"}
#: The largest size a config may give (hidden size, heads, experts, layers...): the kernels that
#: run a layer take their sizes as 32-bit ints (cuBLAS's and CUTLASS's GEMM m, n, k).
MAX_SIZE = 2**31 - 1


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds ``kv_lora_rank +
    qk_rope_head_dim`` values per token, shared by all heads."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rope_interleave: bool


@dataclass(frozen=True)
class MoESpec:
    """Routed experts; ``router`` is ``softmax`` (Mixtral) or ``sigmoid_group`` (DeepSeek-V3)."""

    experts: int
    top_k: int
    expert_intermediate: int
    shared_intermediate: int  #: 0 without shared experts
    router: str
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0


@dataclass(frozen=True)
class ModelSpec:
    name: str  #: preset name or config path
    model_type: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    num_layers: int
    eps: float
    activation: str
    attention_bias: bool  #: biases on the q, k, v projections
    o_proj_bias: bool
    mlp_bias: bool
    qk_norm: bool
    softmax_scale: float
    dtype: str  #: torch dtype name, e.g. ``torch.bfloat16``
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    first_dense_layers: int = 0  #: MoE models: layers before this index use a dense MLP
    moe_layer_freq: int = 1
    config: dict | None = None  #: the config as read (for building the transformers layer)
    source: "_Doc | None" = field(default=None, compare=False, repr=False)  #: where the values were read

    def error(self, message: str, key: str | None = None) -> LayercError:
        """An error about the config's values, at ``key`` in its file (at the file's top without one)."""
        if self.source is None:
            return LayercError(message, self.name)
        return self.source.error(message, key)

    @property
    def path(self) -> str | None:
        """The config file the spec was read from (None for a preset or a dict)."""
        return self.source.file.path if self.source is not None and self.source.is_file else None

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and layer >= self.first_dense_layers and (layer - self.first_dense_layers) % self.moe_layer_freq == 0

    def default_layer(self) -> int:
        """The layer a simulation shows by default: the kind most layers are (DeepSeek-V3's MoE;
        layer 0 when every layer is dense, ``first_k_dense_replace`` covering them all)."""
        return self.first_dense_layers if self.moe is not None and self.first_dense_layers < self.num_layers else 0


# -- presets -----------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _presets_file() -> ConfigFile:
    item = resources.files("layerc.grammar").joinpath("data/models.toml")
    return read_toml_config(Path(str(item)), item.read_text(encoding="utf-8"))


def preset_names() -> tuple[str, ...]:
    return tuple(_presets_file().doc)


def load_preset(name: str) -> ModelSpec:
    f = _presets_file()
    key = name.lower()
    if key not in f.doc:
        raise LayercError(f"unknown preset '{name}' (presets: {', '.join(preset_names())})")
    return spec_from_config(_Doc(f, f.doc[key], table=key), key)


def load_config(path: str | Path) -> ModelSpec:
    """A ``config.json`` file; a ``text_config`` (multimodal wrappers) is used when present."""
    f = read_json_config(path)
    text_config = f.doc.get("text_config")
    doc = text_config if isinstance(text_config, dict) else f.doc
    return spec_from_config(_Doc(f, doc, is_file=True), str(path))


def spec_from_dict(config: dict, name: str = "<config>") -> ModelSpec:
    """A config given as a dict (tests, other tools)."""
    import json

    text = json.dumps(config, indent=2)
    return spec_from_config(_Doc(ConfigFile(name, text, config), config), name)


# -- checking ----------------------------------------------------------------------------------
class _Doc:
    """Typed access to a config's keys; errors point at the key."""

    def __init__(self, file: ConfigFile, doc: dict, table: str | None = None, is_file: bool = False):
        self.file, self.doc, self.table, self.is_file = file, doc, table, is_file

    def error(self, message: str, key: str | None = None) -> LayercError:
        return self.file.error(message, key, self.table)

    def has(self, key: str) -> bool:
        return self.doc.get(key) is not None

    def int(self, key: str, default: Any = ..., minimum: int = 1, maximum: int = MAX_SIZE) -> Any:
        value = self.doc.get(key)
        if value is None:
            if default is ...:
                raise self.error(f"the config has no '{key}' (needed for the decoder layer)")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"'{key}' must be an integer >= {minimum}, not {shown(value)}", key)
        if value > maximum:
            raise self.error(f"'{key}' must be an integer <= {maximum} (kernels take sizes as 32-bit ints), "
                             f"not {shown(value)}", key)
        return value

    def float(self, key: str, default: float) -> float:
        value = self.doc.get(key)
        if value is None:
            return default
        x = finite_number(value)
        if x is None or x <= 0:
            raise self.error(f"'{key}' must be a positive number, not {shown(value)}", key)
        return x

    def bool(self, key: str, default: bool) -> bool:
        value = self.doc.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"'{key}' must be true or false, not {value!r}", key)
        return value

    def choice(self, key: str, choices, default: str | None) -> str:
        value = self.doc.get(key, default)
        if not isinstance(value, str) or value not in choices:
            raise self.error(f"'{key}' must be one of {', '.join(choices)}, not {shown(value)}", key)
        return value


def spec_from_config(d: _Doc, name: str) -> ModelSpec:
    model_type = d.choice("model_type", MODEL_TYPES, None) if d.has("model_type") else None
    if model_type is None:
        raise d.error(f"the config has no 'model_type' (supported: {', '.join(MODEL_TYPES)})")
    hidden = d.int("hidden_size")
    heads = d.int("num_attention_heads")
    kv_heads = d.int("num_key_value_heads", heads)
    if heads % kv_heads:
        raise d.error(f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})",
                      "num_key_value_heads")
    head_dim = d.int("head_dim", None)
    if head_dim is None:
        if hidden % heads:
            raise d.error(f"hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}); give head_dim",
                          "hidden_size")
        head_dim = hidden // heads
    dtype_key = "torch_dtype" if d.has("torch_dtype") else "dtype"
    dtype_name = d.doc.get(dtype_key, "bfloat16") if d.has(dtype_key) else "bfloat16"
    if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
        raise d.error(f"'{dtype_key}' must be one of {', '.join(DTYPES)}, not {shown(dtype_name)}", dtype_key)
    mla = _mla(d) if model_type == "deepseek_v3" else None
    qk_dim = (mla.qk_nope_head_dim + mla.qk_rope_head_dim) if mla else head_dim
    moe, first_dense, freq = _moe(d, model_type)
    return ModelSpec(
        name=name,
        model_type=model_type,
        hidden=hidden,
        heads=heads,
        kv_heads=heads if mla else kv_heads,
        head_dim=head_dim,
        intermediate=d.int("intermediate_size"),
        num_layers=d.int("num_hidden_layers", 1),
        eps=d.float("rms_norm_eps", 1e-6),
        activation=d.choice("hidden_act", ACTIVATIONS, "silu"),
        attention_bias=True if model_type == "qwen2" else d.bool("attention_bias", False),
        o_proj_bias=False if model_type == "qwen2" else d.bool("attention_bias", False),
        mlp_bias=d.bool("mlp_bias", False),
        qk_norm=model_type == "qwen3",
        softmax_scale=qk_dim ** -0.5 * _yarn_mscale(d) ** 2,
        dtype=DTYPES[dtype_name],
        mla=mla,
        moe=moe,
        first_dense_layers=first_dense,
        moe_layer_freq=freq,
        config=dict(d.doc),
        source=d,
    )


def _mla(d: _Doc) -> MLASpec:
    return MLASpec(
        q_lora_rank=d.int("q_lora_rank", None),
        kv_lora_rank=d.int("kv_lora_rank"),
        qk_nope_head_dim=d.int("qk_nope_head_dim"),
        qk_rope_head_dim=d.int("qk_rope_head_dim"),
        v_head_dim=d.int("v_head_dim"),
        rope_interleave=d.bool("rope_interleave", True),
    )


def _moe(d: _Doc, model_type: str) -> tuple[MoESpec | None, int, int]:
    if model_type == "mixtral":
        experts = d.int("num_local_experts")
        top_k = d.int("num_experts_per_tok", 2)
        if top_k > experts:
            raise d.error(f"num_experts_per_tok ({top_k}) exceeds num_local_experts ({experts})", "num_experts_per_tok")
        return MoESpec(experts, top_k, d.int("intermediate_size"), 0, "softmax"), 0, 1
    if model_type == "deepseek_v3":
        experts = d.int("n_routed_experts")
        top_k = d.int("num_experts_per_tok")
        n_group, topk_group = d.int("n_group", 1), d.int("topk_group", 1)
        if experts % n_group:
            raise d.error(f"n_routed_experts ({experts}) must be a multiple of n_group ({n_group})", "n_group")
        if topk_group > n_group:
            raise d.error(f"topk_group ({topk_group}) exceeds n_group ({n_group})", "topk_group")
        if top_k > topk_group * (experts // n_group):
            raise d.error(f"num_experts_per_tok ({top_k}) exceeds the experts of {topk_group} groups", "num_experts_per_tok")
        inter = d.int("moe_intermediate_size")
        shared = d.int("n_shared_experts", 0, minimum=0) * inter
        spec = MoESpec(experts, top_k, inter, shared, "sigmoid_group", n_group, topk_group,
                       d.bool("norm_topk_prob", True), d.float("routed_scaling_factor", 1.0))
        return spec, d.int("first_k_dense_replace", 0, minimum=0), d.int("moe_layer_freq", 1)
    return None, 0, 1


def _yarn_mscale(d: _Doc) -> float:
    """DeepSeek's YaRN softmax-scale correction (``yarn_get_mscale(factor, mscale_all_dim)``)."""
    key = "rope_scaling" if d.doc.get("rope_scaling") else "rope_parameters"
    rope = d.doc.get(key) or {}
    if not isinstance(rope, dict):
        raise d.error(f"'{key}' must be an object", key)
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind in ("default", None) or not rope.get("mscale_all_dim"):
        return 1.0
    factor, all_dim = finite_number(rope.get("factor", 1.0)), finite_number(rope["mscale_all_dim"])
    if factor is None or factor <= 0 or all_dim is None or not 0 < all_dim <= MAX_SIZE:
        raise d.error(f"'{key}' needs a positive 'factor' and a positive 'mscale_all_dim' up to {MAX_SIZE}, not "
                      f"{shown(rope.get('factor'))} and {shown(rope['mscale_all_dim'])}", key)
    if factor <= 1:
        return 1.0
    return 0.1 * all_dim * math.log(factor) + 1.0
