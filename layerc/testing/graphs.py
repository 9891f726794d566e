"""Hypothesis strategies: random IR modules that each syntax can express.

AutoDeploy text has no kwargs and shows types; torch.fx text has kwargs and opcodes but no
types. Both strategies draw names, targets, constants and types the writers really produce:
every constant class torch.export and torch.fx print (strings, inf/nan, complex, Ellipsis, slices,
nested containers, dtypes, devices, layouts, memory formats, symbolic sizes, None), and ops whose
schema takes a string, printed unquoted whatever it holds.
"""

from __future__ import annotations

import keyword
import re
import string

from hypothesis import strategies as st

from layerc.ir.constants import Device, DType, TorchAttr, atom_value
from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Graph, Module, Node, Weight
from layerc.ir.types import TORCH_DTYPES, UNKNOWN, OpaqueType, SymDim, TensorType, TupleType

_RESERVED = {"None", "True", "False", "inf", "nan", "infj", "nanj", "Ellipsis", "output"}
#: A size symbol (s0, u3) names no node or weight here: inside a container it reads as the size.
_SYMBOL = re.compile(r"[su]\d+\Z")
names = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True).filter(
    lambda s: s not in _RESERVED and not keyword.iskeyword(s) and not _SYMBOL.match(s)
)

dtypes = st.sampled_from(["torch.bfloat16", "torch.float32", "torch.int32", "torch.int64", "torch.float8_e4m3fn", "torch.bool", "torch.uint8"])
sym_dims = st.sampled_from(["s72", "s70*s72", "2048*s72", "s0 + 1", "u0", "Max(1, s0)", "s70*s72*s0"]).map(SymDim)
dims = st.one_of(st.integers(0, 70000), sym_dims)
shapes = st.lists(dims, max_size=4).map(tuple)
tensor_types = st.builds(TensorType, shapes, dtypes)
opaque_types = st.sampled_from(["SymInt", "int", "float", "NoneType", "SymFloat", "bool"]).map(OpaqueType)
value_types = st.one_of(tensor_types, tensor_types, opaque_types, st.just(UNKNOWN), st.builds(TensorType, st.none(), dtypes))
element_types = st.one_of(tensor_types, st.sampled_from(["None", "SymInt", "list"]).map(OpaqueType))
tuple_types = st.builds(TupleType, st.lists(element_types, min_size=1, max_size=4).map(tuple))

# Bare strings the writer prints with str(): they must read back as strings.
bare_strings = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True).filter(
    lambda s: type(atom_value(s)) is str and s not in _RESERVED
)
#: Strings inside containers are repr()-quoted: anything goes, separators and quotes included.
_TRICKY = ["a, b", "->", "bclhn,bcshn->bclsh", "[x]", "(y)", "{z}", "it's", '"q"', "'", " sp ", "x: y", "%w", "\\", ""]
quoted_strings = st.one_of(
    st.sampled_from(_TRICKY),
    st.text(alphabet=string.printable.replace("\x0b", "").replace("\x0c", ""), max_size=8),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=6),
)
floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
complexes = st.complex_numbers(allow_nan=True, allow_infinity=True)
torch_consts = st.one_of(
    st.sampled_from(sorted(TORCH_DTYPES)).map(DType),
    st.sampled_from(["contiguous_format", "channels_last", "preserve_format", "strided", "sparse_coo", "jagged"]).map(TorchAttr),
    st.builds(Device, st.sampled_from(["cuda", "cpu", "meta"]), st.one_of(st.none(), st.integers(0, 7))),
)
sym_sizes = st.sampled_from(
    ["s0", "s77", "u0", "2*s77", "s0 + 1", "s70*s72", "-s0", "s0**2", "s0//2", "Max(1, s0)", "Min(s0, 2*s1)"]
).map(SymDim)
scalars = st.one_of(st.integers(-(2**63), 2**63), floats, complexes, st.booleans(), st.none(), st.just(Ellipsis),
                    torch_consts, sym_sizes)

# -- ops whose schema takes a string: printed with str(), unquoted, so the text may hold anything a
# line can; the op's schema tells where it ends.
_LINE_TEXT = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r")
schema_strings = st.one_of(
    st.sampled_from([*_TRICKY, "Runtime assertion failed for expression Eq(u0 + u1, 32) on node 'eq_1'", "sum",
                     "mean", "reflect", "None", "a, [b]", "x) : 4 : torch.int64", "z), kwargs = {", " lead", "trail "]),
    st.text(_LINE_TEXT, max_size=16),
    st.text(st.sampled_from(list(", ->[](){}'\"%:bc0")), max_size=12),
)
#: A string followed by an argument the schema may leave out (pad's mode before its value): no ", ".
_word_strings = st.one_of(st.sampled_from(["constant", "reflect", "replicate", "circular", "fro", "nuc"]),
                          schema_strings.filter(lambda s: ", " not in s))
#: A keyword's string in fx (``{approximate: tanh}``): no ", name: " that would start another keyword.
_keyword_strings = schema_strings.filter(lambda s: not re.search(r", [A-Za-z_]\w*: ", s) and s != "None")


@st.composite
def schema_call(draw, refs, kwargs: bool):
    """(target, args, kwargs) of an aten op with a str parameter, arguments from ``refs``."""
    ref = st.sampled_from(refs)
    kind = draw(st.sampled_from(["einsum", "assert", "assert_async", "pad", "index_reduce", "segment_reduce", "print",
                                 "norm", "div", "gelu"]))
    if kind == "einsum":
        return "aten.einsum.default", (draw(schema_strings), draw(st.lists(ref, min_size=1, max_size=3))), {}
    if kind == "assert":
        return "aten._assert_scalar.default", (draw(st.one_of(ref, st.booleans(), st.integers())), draw(schema_strings)), {}
    if kind == "assert_async":
        return "aten._assert_async.msg", (draw(ref), draw(schema_strings)), {}
    if kind == "pad":
        tail = draw(st.sampled_from([(), (draw(_word_strings),), (draw(_word_strings), draw(st.one_of(st.none(), floats)))]))
        return "aten.pad.default", (draw(ref), draw(st.lists(st.integers(-4, 4), max_size=4)), *tail), {}
    if kind == "index_reduce":
        return "aten.index_reduce.default", (draw(ref), draw(st.integers(-3, 3)), draw(ref), draw(ref), draw(schema_strings)), {}
    if kind == "segment_reduce":
        return "aten.segment_reduce.default", (draw(ref), draw(schema_strings)), {}
    if kind == "print":
        return "aten._print.default", (draw(schema_strings),), {}
    if kind == "norm":
        return "aten.linalg_norm.ord_str", (draw(ref), draw(_word_strings), draw(st.lists(st.integers(-3, 3), max_size=2))), {}
    mode = {"rounding_mode": draw(st.one_of(st.none(), _keyword_strings))} if kwargs else {}
    if kind == "div":
        return "aten.div.Tensor_mode", (draw(ref), draw(ref)), mode
    return "aten.gelu.default", (draw(ref),), {"approximate": draw(_keyword_strings)} if kwargs else {}

AD_TARGETS = [
    "aten.add.Tensor", "aten.view.default", "auto_deploy.torch_linear_simple.default", "auto_deploy.trtllm_moe_fused",
    "trtllm.noaux_tc_op.default", "dist.trtllm_fused_allreduce_residual_rmsnorm.default", "<built-in function getitem>",
    "<function begin_aux_stream_passthrough at 0x7f2a1c0b3d90>", "view", "auto_deploy.mlir_fused_0123456789abcdef",
]


@st.composite
def ad_modules(draw, generation: int | None = None) -> Module:
    gen = draw(st.sampled_from([1, 2, 3])) if generation is None else generation
    n_graphs = draw(st.integers(1, 3)) if gen == 3 else 1
    section_names = draw(st.lists(st.sampled_from(["(root)", "monolithic.model", "piecewise.split_gm", "piecewise.split_gm.submod_0", "model"]), min_size=n_graphs, max_size=n_graphs, unique=True))
    module = Module(draw(names), draw(st.sampled_from(["export", "compile", "post_load_fusion"])), gen)
    for i in range(n_graphs):
        module.graphs.append(draw(_ad_graph(section_names[i] if gen == 3 else None, gen)))
    return module


@st.composite
def _ad_graph(draw, section: str | None, gen: int) -> Graph:
    g = Graph(section)
    used_names: set[str] = set()

    def fresh():
        return draw(names.filter(lambda s: s not in used_names))

    typed = gen > 1
    values = []
    for _ in range(draw(st.integers(0, 3))):
        name = fresh()
        used_names.add(name)
        t = draw(value_types) if typed else draw(st.one_of(st.just(UNKNOWN), st.builds(TensorType, st.none(), dtypes), opaque_types))
        values.append(g.append(Node(PLACEHOLDER, name, type=t)))
    weight_types: dict[str, object] = {}
    for _ in range(draw(st.integers(0, 8))):
        if values and draw(st.integers(0, 3)) == 0:
            target, args, _ = draw(schema_call(values, kwargs=False))
        else:
            target = draw(st.sampled_from(AD_TARGETS))
            args = [draw(_ad_arg(g, values, used_names, weight_types, typed, depth=0)) for _ in range(draw(st.integers(0, 4)))]
        name = fresh()
        used_names.add(name)
        if typed:
            t = draw(st.one_of(value_types, tuple_types))
        else:
            t = draw(st.one_of(st.just(UNKNOWN), st.builds(TensorType, st.none(), dtypes), opaque_types))
        values.append(g.append(Node(OP, name, target, tuple(args), type=t)))
    # A weight's type is printed only where it is an argument itself, never inside a list.
    for w in g.weights.values():
        if not any(w in n.args for n in w.users):
            w.type = UNKNOWN
    # A multi-output value shows its container only where it is an argument itself.
    for n in g.nodes:
        if isinstance(n.type, TupleType):
            shown = any(n in u.args for u in n.users)
            n.type = TupleType(n.type.elements, draw(st.sampled_from(["tuple", "list"])) if shown else "tuple")
    if draw(st.booleans()) or values:
        refs = st.sampled_from(values) if values else st.nothing()
        result = draw(st.one_of(refs, st.lists(st.one_of(refs, scalars), min_size=2, max_size=3).map(tuple), st.just(())))
        g.append(Node(OUTPUT, "output", args=(result,)))
    return g


@st.composite
def _ad_arg(draw, g, values, used_names, weight_types, typed, depth):
    kind = draw(st.sampled_from(["ref", "weight", "scalar", "bare", "container"] if depth < 2 else ["ref", "weight", "scalar"]))
    if kind == "ref" and values:
        return draw(st.sampled_from(values))
    if kind == "weight":
        name = draw(names.filter(lambda s: s not in used_names or s in weight_types))
        if name not in weight_types:
            used_names.add(name)
            w = g.weight(name, draw(st.one_of(tensor_types, st.just(UNKNOWN))) if typed else UNKNOWN)
            weight_types[name] = w
        return weight_types[name]
    if kind == "bare" and depth == 0:
        return draw(bare_strings)
    if kind == "container":
        items = draw(st.lists(st.one_of(_ad_arg(g, values, used_names, weight_types, typed, depth + 1), quoted_strings), max_size=3))
        shape = draw(st.sampled_from(["list", "tuple", "dict", "slice"]))
        if shape == "list":
            return items
        if shape == "tuple":
            return tuple(items)
        if shape == "dict":
            return {k: v for k, v in zip(draw(st.lists(quoted_strings, min_size=len(items), max_size=len(items), unique=True)), items)}
        return slice(*(items + [None, None, None])[:3])
    return draw(scalars)


FX_TARGETS = [
    ("call_function", "aten.add.Tensor"), ("call_function", "aten.linear.default"), ("call_function", "<built-in function getitem>"),
    ("call_function", "auto_deploy.trtllm_moe_fused"), ("call_method", "view"), ("call_module", "lin"),
    ("call_function", "torch.functional.split"),
]


@st.composite
def fx_modules(draw) -> Module:
    module = Module(generation=3)
    g = Graph("(root)")
    module.graphs.append(g)
    used: set[str] = set()
    values = []
    for _ in range(draw(st.integers(0, 3))):
        w = g.weight(draw(names.filter(lambda s: s not in used)))
        used.add(w.name)
        w.target = draw(st.sampled_from(["lin.weight", "model.layers.0.mlp.gate.weight", w.name]))
        values.append(w)
    for _ in range(draw(st.integers(0, 3))):
        name = draw(names.filter(lambda s: s not in used))
        used.add(name)
        default = draw(st.one_of(st.just(()), st.tuples(st.one_of(st.none(), st.integers(), bare_strings))))
        values.append(g.append(Node(PLACEHOLDER, name, target=name, args=default)))
    fx_scalars = st.one_of(st.integers(-1000, 10**12), floats, complexes, st.booleans(), st.none(), st.just(Ellipsis),
                           torch_consts, sym_sizes, bare_strings)
    for _ in range(draw(st.integers(0, 8))):
        refs = st.sampled_from(values) if values else st.nothing()
        part = st.one_of(st.none(), st.integers(-10, 10**6), sym_sizes)  # str(slice) shows its parts' repr
        leaf = st.one_of(refs, fx_scalars, st.builds(slice, part, part, part))
        arg = st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
                                                         st.dictionaries(names, inner, max_size=2)), max_leaves=5)
        if values and draw(st.integers(0, 3)) == 0:
            opcode, (target, args, kwargs) = "call_function", draw(schema_call(values, kwargs=True))
        else:
            args = tuple(draw(st.lists(arg, max_size=4)))
            kwargs = draw(st.dictionaries(names, arg, max_size=2))
            opcode, target = draw(st.sampled_from(FX_TARGETS))
        name = draw(names.filter(lambda s: s not in used))
        used.add(name)
        values.append(g.append(Node(OP, name, target, args, kwargs, opcode=opcode)))
    nodes = [v for v in values if isinstance(v, Node)]
    if nodes:
        refs = st.sampled_from(nodes)
        result = draw(st.one_of(refs, st.lists(st.one_of(refs, st.none()), max_size=3).map(tuple), st.dictionaries(quoted_strings, refs, max_size=2)))
        g.append(Node(OUTPUT, "output", args=(result,)))
    return module


def unused_weights(g: Graph) -> list[Weight]:
    return [w for w in g.weights.values() if not w.users]
