"""``infer-groups``: what part of a decoder layer each op is — norm, attention / mla, moe, mlp,
mamba, gdn or other — and the finer ``sub_group`` (q_branch, kv_branch, rope, moe_router,
moe_experts, shared_experts, mamba_*, gdn_*), plus the multi-stream regions between
``begin_aux_stream_passthrough`` and ``end_aux_stream_passthrough``.

Only ops that say what they are decide directly: by the weights they read and by their op name
(the tables below). Everything else — views, getitems, casts, router arithmetic — is decided by
dataflow: the groups of the nearest classified producers and consumers, the argument positions
of the attention op (its q inputs and its k/v inputs), the position relative to the router and
the experts op. Node names and ids never decide. Results: ``meta['group']``,
``meta['sub_group']`` (absent when none), ``meta['aux_stream']`` (the begin marker's name).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import OP, Graph, Module, Node, Value, Weight
from layerc.passes.base import Context, ModulePass, node_op_name

_LAYER_PREFIX = re.compile(r"^(?:model_|backbone_|transformer_|gpt_neox_)?(?:layers|h|blocks)_\d+_")

# -- what weights say (short names: the layer prefix stripped) ----------------------------------
_W_NORM = re.compile(r"(^|_)(input_layernorm|post_attention_layernorm|pre_feedforward_layernorm|post_feedforward_layernorm|ln_\d|ln_attn|ln_mlp|layernorm)(_weight|_bias)?$|^norm(_weight|_bias)?$")
_W_MLA = re.compile(r"q_a_proj|q_b_proj|kv_a_proj|kv_b_proj|q_a_layernorm|kv_a_layernorm|wkv|wq_a|wq_b")
_W_ATTN = re.compile(r"self_attn|(^|_)attn_|attention|(^|_)(q|k|v|o|qkv)_proj|query_key_value|c_attn|q_norm|k_norm")
_W_ROUTER = re.compile(r"(mlp|moe|ffn|mixer|block_sparse_moe)_(gate|router)(_weight|_bias)?$|e_score_correction_bias|router|gate_tid2eid|ffn_gate_bias")
_W_SHARED = re.compile(r"shared_expert")
_W_EXPERTS = re.compile(r"experts|^fused_moe_|w1_stacked|w2_stacked|w3_w1_stacked")
_W_MAMBA = re.compile(r"mixer_(in_proj|conv1d|a_log|dt_bias|d|norm|out_proj)|(^|_)a_log|dt_bias|conv1d")
_W_GDN = re.compile(r"linear_attn")
_W_MLP = re.compile(r"(^|_)(mlp|ffn|feed_forward|mixer)_|gate_proj|up_proj|down_proj|fc1|fc2|dense_h_to_4h|dense_4h_to_h|c_fc|c_proj")

# -- what op names say -------------------------------------------------------------------------
_OP_NORM = re.compile(r"rms_?norm|layer_?norm|fused_add_rms|allreduce_residual_rmsnorm|native_layer_norm")
_OP_GATED_NORM = re.compile(r"rmsnorm_gated|gated_rms")
_OP_MLA = re.compile(r"mla")
_OP_ATTN = re.compile(r"attention|(^|_)mha|sdpa|scaled_dot_product|flash_attn|paged_")
_OP_ROPE = re.compile(r"rope|rotary")
_OP_ROUTER = re.compile(r"noaux_tc|topk_softmax|router|fused_topk|moe_gate")
_OP_EXPERTS = re.compile(r"moe(?!_gate)|grouped_mm|experts")
_OP_MAMBA_SSM = re.compile(r"ssm|selective_scan|mamba")
_OP_CONV = re.compile(r"causal_conv1d|conv1d")
_OP_GDN = re.compile(r"gated_delta|gdn|delta_rule")
_OP_MLP = re.compile(r"swiglu|act_and_mul|geglu")
_SHAPE_OPS = {"view", "reshape", "_unsafe_view", "flatten", "unsqueeze", "squeeze", "expand", "permute", "transpose", "t", "contiguous", "to", "_to_copy", "clone", "slice", "select", "split", "split_with_sizes", "chunk", "unflatten"}
_ATTENTION_Q_KV = {  # op-name pattern → (q argument positions, k/v argument positions)
    "mla": ((0, 1), (2, 3)),
    "": ((0,), (1, 2)),
}


def short_weight_name(name: str) -> str:
    return _LAYER_PREFIX.sub("", name)


def _weights_group(node: Node) -> tuple[str | None, str | None]:
    """(group, sub_group) the op's weights give, or (None, None)."""
    names = [short_weight_name(w.name) for w in node.inputs if isinstance(w, Weight)]
    if not names:
        return None, None
    votes: Counter[str] = Counter()
    for n in names:
        if _W_GDN.search(n):
            votes["gdn"] += 1
        elif _W_MAMBA.search(n) and not _W_ATTN.search(n):
            votes["mamba"] += 1
        elif _W_NORM.search(n) and not _W_MLA.search(n):
            votes["norm"] += 1
        elif _W_MLA.search(n):
            votes["mla"] += 1
        elif _W_ATTN.search(n):
            votes["attention"] += 1
        elif _W_SHARED.search(n):
            votes["shared_experts"] += 1
        elif _W_ROUTER.search(n):
            votes["moe_router"] += 1
        elif _W_EXPERTS.search(n):
            votes["moe_experts"] += 1
        elif _W_MLP.search(n):
            votes["mlp"] += 1
    if not votes:
        return None, None
    kind = votes.most_common(1)[0][0]
    return {
        "shared_experts": ("mlp", "shared_experts"),
        "moe_router": ("moe", "moe_router"),
        "moe_experts": ("moe", "moe_experts"),
    }.get(kind, (kind, None))


def _op_group(node: Node) -> tuple[str | None, str | None]:
    name = node_op_name(node)
    if _OP_GATED_NORM.search(name):
        return "gated_norm", None
    if _OP_NORM.search(name):
        return "norm", None
    if _OP_ROPE.search(name):
        return "attention", "rope"
    if _OP_MLA.search(name):
        return "mla", None
    if _OP_GDN.search(name):
        return "gdn", "gdn_rule"
    if _OP_MAMBA_SSM.search(name):
        return "mamba", "mamba_ssm"
    if _OP_CONV.search(name):
        return "conv", None
    if _OP_ATTN.search(name):
        return "attention", None
    if _OP_ROUTER.search(name):
        return "moe", "moe_router"
    if _OP_EXPERTS.search(name):
        return "moe", "moe_experts"
    if _OP_MLP.search(name):
        return "mlp", None
    return None, None


def infer_groups(nodes: list[Node]) -> None:
    """Group the ops of one decoder layer (given in program order)."""
    members = [n for n in nodes if n.kind == OP]
    inside = set(members)
    group: dict[Node, str] = {}
    sub: dict[Node, str] = {}
    for n in members:
        g, s = _op_group(n)
        wg, ws = _weights_group(n)
        # The weights decide, but for mixer parts (resolved below); a norm inside a block
        # (MLA's q_a_layernorm, Qwen3's q_norm) belongs to that block.
        if wg is not None and (g is None or g == "norm" and wg != "norm"):
            g, s = wg, ws or s
        if g is None:
            continue
        group[n] = g
        if s:
            sub[n] = s
    # A mixer block (Mamba or GDN) claims its convolution and gated norm.
    kinds = set(group.values())
    mixer = "gdn" if "gdn" in kinds else "mamba" if "mamba" in kinds else None
    for n, g in list(group.items()):
        if g in ("conv", "gated_norm"):
            group[n] = mixer or ("norm" if g == "gated_norm" else "other")
            if mixer:
                sub[n] = f"{mixer}_{'conv' if g == 'conv' else 'norm'}"
    # The rest: between classified producers and consumers. An add that reads from outside the
    # layer, or joins two blocks, is a residual add.
    for n in members:
        if n in group:
            continue
        producers = _nearest(n, inside, group, "up")
        consumers = _nearest(n, inside, group, "down")
        if node_op_name(n) in ("add", "add_") and any(isinstance(v, Node) and v not in inside for v in n.inputs):
            group[n] = "other"
        else:
            group[n] = _between(n, producers, consumers)
    if any(g == "mla" for g in group.values()):
        group.update({n: "mla" for n, g in group.items() if g == "attention"})
    _attention_branches(members, group, sub)
    _ffn_subgroups(members, group, sub)
    _mixer_subgroups(members, group, sub, mixer)
    aux = aux_regions(members, inside)
    for n in members:
        n.meta["group"] = group[n]
        if n in sub:
            n.meta["sub_group"] = sub[n]
        else:
            n.meta.pop("sub_group", None)
        if n in aux:
            n.meta["aux_stream"] = aux[n]
        else:
            n.meta.pop("aux_stream", None)


def _nearest(n: Node, inside: set[Node], group: dict[Node, str], direction: str) -> list[str]:
    """Groups of the closest classified ops upstream (``up``) or downstream (``down``) of n."""
    found: list[str] = []
    seen: set[Value] = {n}
    frontier = [n]
    while frontier and not found:
        nxt: list[Node] = []
        for x in frontier:
            for y in (x.inputs if direction == "up" else x.users):
                if y in seen or y not in inside:
                    continue
                seen.add(y)
                if y in group:
                    found.append(group[y])
                else:
                    nxt.append(y)
        frontier = nxt
    return found


def _between(n: Node, producers: list[str], consumers: list[str]) -> str:
    name = node_op_name(n)
    if name == "begin_aux_stream_passthrough" and consumers:
        return Counter(consumers).most_common(1)[0][0]  # opens the work it hands to the other stream
    if name in ("end_aux_stream_passthrough", "wait_aux_stream_passthrough") and producers:
        return Counter(producers).most_common(1)[0][0]
    common = set(producers) & set(consumers)
    if common:
        return Counter(g for g in producers + consumers if g in common).most_common(1)[0][0]
    if name == "getitem" and producers:
        return producers[0]
    if name in ("add", "add_") and len(set(producers)) > 1:
        return "other"  # a residual add joins two blocks
    if consumers and (name in _SHAPE_OPS or not producers or n.weights):  # a projection feeds its block
        return Counter(consumers).most_common(1)[0][0]
    if producers:
        return Counter(producers).most_common(1)[0][0]
    return "other"


def _attention_branches(members: list[Node], group: dict[Node, str], sub: dict[Node, str]) -> None:
    """q_branch / kv_branch: what feeds the attention op's q inputs, and its k/v inputs."""
    attn = {"attention", "mla"}
    for op in members:
        if group.get(op) not in attn or sub.get(op) == "rope" or not _OP_ATTN.search(node_op_name(op)) and not _OP_MLA.search(node_op_name(op)):
            continue
        q_pos, kv_pos = _ATTENTION_Q_KV["mla" if _OP_MLA.search(node_op_name(op)) else ""]
        q = _feeders(op, q_pos, group, attn)
        kv = _feeders(op, kv_pos, group, attn)
        for n in q - kv:
            sub.setdefault(n, "q_branch")
        for n in kv - q:
            sub.setdefault(n, "kv_branch")
    if not any(s in ("q_branch", "kv_branch") for s in sub.values()):
        _branches_from_projections(members, group, sub, attn)
    for op in members:  # a RoPE op's outputs are part of it
        if sub.get(op) == "rope":
            for u in op.users:
                if node_op_name(u) == "getitem" and u in group:
                    sub[u] = "rope"


_W_Q = re.compile(r"(^|_)(q_proj|q_a_proj|q_b_proj|q_a_layernorm|q_norm|wq_a|wq_b|wq)(_weight|_bias)?$")
_W_KV = re.compile(r"(^|_)(k_proj|v_proj|kv_a_proj_with_mqa|kv_a_proj|kv_b_proj|kv_a_layernorm|k_norm|wkv)(_weight|_bias)?$")


def _branches_from_projections(members: list[Node], group: dict[Node, str], sub: dict[Node, str], attn: set[str]) -> None:
    """Without an attention op (eager graphs): the q and k/v projections start the branches,
    which run forward until they meet (the score matmul)."""
    branch: dict[Node, str] = {}
    for n in members:
        if group.get(n) not in attn:
            continue
        names = [short_weight_name(w.name) for w in n.weights]
        if any(_W_Q.search(x) for x in names):
            branch[n] = "q_branch"
        elif any(_W_KV.search(x) for x in names):
            branch[n] = "kv_branch"
        elif sub.get(n) is None:
            seen = {branch[v] for v in n.inputs if v in branch}
            from_attn = [v for v in n.inputs if isinstance(v, Node) and group.get(v) in attn]
            if len(seen) == 1 and all(v in branch for v in from_attn):
                branch[n] = seen.pop()
    for n, b in branch.items():
        sub.setdefault(n, b)


def _feeders(op: Node, positions: tuple[int, ...], group: dict[Node, str], attn: set[str]) -> set[Node]:
    """Attention-group ops upstream of the given arguments; through a RoPE op, only the side
    (q: argument 0, k: argument 1) that the getitem index selects."""
    out: set[Node] = set()
    stack = [op.args[i] for i in positions if i < len(op.args)]
    while stack:
        v = stack.pop()
        if not isinstance(v, Node) or v.kind != OP or v in out or group.get(v) not in attn:
            continue
        if _OP_ROPE.search(node_op_name(v)):
            continue  # reached through a getitem below
        out.add(v)
        if node_op_name(v) == "getitem" and isinstance(v.args[0], Node) and _OP_ROPE.search(node_op_name(v.args[0])):
            rope, side = v.args[0], v.args[1]
            if isinstance(side, int) and side < len(rope.args):
                stack.append(rope.args[side])
            continue
        stack.extend(v.inputs)
    return out


def _ffn_subgroups(members: list[Node], group: dict[Node, str], sub: dict[Node, str]) -> None:
    """moe_router before the experts op, moe_experts from it on; an MLP beside experts is shared."""
    moe = [n for n in members if group[n] == "moe"]
    if not moe:
        return
    experts = [n for n in moe if sub.get(n) == "moe_experts"]
    downstream = _reach(experts, "down", set(moe))
    routers = [n for n in moe if sub.get(n) == "moe_router"]
    after_router = _reach(routers, "down", set(moe))
    for n in moe:
        if n in sub:
            continue
        if n in downstream:
            sub[n] = "moe_experts"
        elif n in after_router:
            sub[n] = "moe_router"
    for n in members:
        if group[n] == "mlp":
            sub[n] = "shared_experts"


def _mixer_subgroups(members: list[Node], group: dict[Node, str], sub: dict[Node, str], mixer: str | None) -> None:
    if mixer is None:
        return
    for n in members:
        if group[n] != mixer or n in sub:
            continue
        names = " ".join(short_weight_name(w.name) for w in n.weights)
        if "in_proj" in names or "qkvz" in names or "ba_proj" in names:
            sub[n] = f"{mixer}_in_proj"
        elif "out_proj" in names:
            sub[n] = f"{mixer}_out_proj"
    for n in members:  # glue between the parts takes the part that feeds it
        if group[n] == mixer and n not in sub:
            for v in n.inputs:
                if v in sub and sub[v].startswith(mixer):
                    sub[n] = sub[v]
                    break


def _reach(starts: list[Node], direction: str, within: set[Node]) -> set[Node]:
    seen: set[Node] = set()
    stack = list(starts)
    while stack:
        x = stack.pop()
        for y in (x.users if direction == "down" else x.inputs):
            if y in within and y not in seen:
                seen.add(y)
                stack.append(y)
    return seen


def aux_regions(members: list[Node], inside: set[Node]) -> dict[Node, str]:
    """Ops on the auxiliary CUDA stream: after a begin marker, up to the end markers it reaches
    before any other region begins."""
    region: dict[Node, str] = {}
    for b in members:
        if node_op_name(b) != "begin_aux_stream_passthrough":
            continue
        down, ends, stack = set(), [], [b]
        while stack:  # forward from the marker, not past an end marker
            x = stack.pop()
            for y in x.users:
                if y in inside and y not in down:
                    down.add(y)
                    marker = node_op_name(y)
                    if marker == "end_aux_stream_passthrough":
                        ends.append(y)
                    elif marker != "begin_aux_stream_passthrough":  # another region starts
                        stack.append(y)
        if not ends:
            continue
        up = _reach(ends, "up", inside)
        for n in [b, *ends, *(down & up)]:
            region.setdefault(n, b.name)
    return region


@dataclass(frozen=True)
class InferGroups(ModulePass[Module]):
    """Name the part of its layer each op is (meta 'group', 'sub_group', 'aux_stream')."""

    name: ClassVar[str] = "infer-groups"
    requires: ClassVar[tuple[str, ...]] = ("slice-layers",)

    def apply(self, ctx: Context, module: Module) -> None:
        for graph in module.graphs:
            if "layer" in graph.meta:  # one sliced layer
                infer_groups(graph.nodes)
                continue
            if "layers" not in graph.meta:
                raise LayercError(f"infer-groups needs the layers of graph '{graph.name}': run slice-layers first (a PassManager does)")
            by_layer: dict[int, list[Node]] = {}
            for n in graph.nodes:
                if n.kind == OP and n.meta.get("layer") is not None:
                    by_layer.setdefault(n.meta["layer"], []).append(n)
            for nodes in by_layer.values():
                infer_groups(nodes)


def graph_groups(graph: Graph) -> Counter[str | None]:
    return Counter(n.meta.get("group") for n in graph.nodes if n.kind == OP)
