"""Every constant torch.export, torch.fx and AutoDeploy print reads back as its value and prints
back byte-identical, in both syntaxes: strings with commas, arrows, brackets, quotes and spaces
(unquoted where the schema says ``str``), inf/-inf/nan, complex numbers, Ellipsis, slices, nested
lists, tuples and dicts, dtypes, devices, layouts, memory formats, symbolic sizes and None. A
malformed constant is an error at its place in the file."""

from __future__ import annotations

import json
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.backends.autodeploy import print_module
from layerc.backends.fx import print_graph
from layerc.grammar.dumps import parse_and_verify
from layerc.grammar.op_schemas import schema_of, split_positional
from layerc.ir.constants import Device, DType, TorchAttr, same_constant
from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import Value
from layerc.ir.types import SymDim

from layerc.testing.graphs import complexes, floats, quoted_strings, schema_strings, sym_sizes, torch_consts

AD_HEAD = "# Transform: t\n# Stage: export\n# GraphModules found: 1\n\n\n" + "=" * 80 + "\n# GraphModule: (root)\n" + "=" * 80 + "\n\n"
AD_X = "%x : 2x3 : torch.float32\n"
FX_X = "graph():\n    %x : [num_users={n}] = placeholder[target=x]\n"


def ad_line(target: str, args: str, out: str = "2x3 : torch.float32") -> str:
    return AD_HEAD + AD_X + f"%y = {target}({args}) : {out}\n"


def fx_line(target: str, args: str, kwargs: str = "{}", users: int = 0) -> str:
    return FX_X.format(n=users) + f"    %y : [num_users=0] = call_function[target={target}](args = {args}, kwargs = {kwargs})\n    return None"


def read_ad(text: str):
    module = parse_and_verify(text, "d.txt")
    assert print_module(module) == text
    return module.graphs[0].value("y")


def read_fx(text: str):
    module = parse_and_verify(text, "g.fx", syntax="fx")
    assert print_graph(module.graphs[0]) == text
    return module.graphs[0].value("y")


def same(a, b) -> bool:
    """Values equal kind by kind; nodes by name."""
    if isinstance(a, Value) or isinstance(b, Value):
        return isinstance(a, Value) and isinstance(b, Value) and a.name == b.name
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return same_constant(a, b)


# -- the lines, from real torch.export graphs ------------------------------------------------
EINSUM = "bclhn,bcshn->bclsh"
MESSAGE = "Runtime assertion failed for expression Eq(u0 + u1, 32) on node 'eq_1'"


def test_einsum_equation_in_both_syntaxes():
    y = read_ad(AD_HEAD + AD_X + "%z = aten.relu.default(%x : 2x3 : torch.float32) : 2x3 : torch.float32\n"
                + f"%y = aten.einsum.default({EINSUM}, [x, z]) : 2x3 : torch.float32\n")
    assert y.args[0] == EINSUM and [v.name for v in y.args[1]] == ["x", "z"]
    y = read_fx(fx_line("torch.ops.aten.einsum.default", f"({EINSUM}, [%x, %x])", users=1))
    assert y.args[0] == EINSUM and [v.name for v in y.args[1]] == ["x", "x"]


def test_assertion_message_in_both_syntaxes():
    ad = AD_HEAD + "%eq_1 : ? : SymBool\n" + f"%y = aten._assert_scalar.default(%eq_1 : ? : SymBool, {MESSAGE}) : ? : NoneType\n"
    assert read_ad(ad).args[1] == MESSAGE
    fx = fx_line("torch.ops.aten._assert_scalar.default", f"(%x, {MESSAGE})", users=1)
    assert read_fx(fx).args[1] == MESSAGE


@pytest.mark.parametrize("text", ["a, b", "x) : 2x3 : torch.float32", "[1, 2]", "None", "1", "'q'", "", " x ", "%x", "s0"])
def test_a_str_parameter_is_its_text_whatever_it_holds(text):
    """The schema says ``str``: the text is the string, even where it reads as something else."""
    assert read_ad(ad_line("aten._assert_async.msg", f"%x : 2x3 : torch.float32, {text}")).args[1] == text
    assert read_fx(fx_line("torch.ops.aten._assert_async.msg", f"(%x, {text})", users=1)).args[1] == text


def test_a_str_before_other_parameters_ends_where_they_fit():
    y = read_ad(ad_line("aten.pad.default", "%x : 2x3 : torch.float32, [1, 1], reflect, 0.5"))
    assert y.args[1:] == ([1, 1], "reflect", 0.5)
    y = read_ad(ad_line("aten.pad.default", "%x : 2x3 : torch.float32, [1, 1], constant, None"))
    assert y.args[2:] == ("constant", None)
    y = read_fx(fx_line("torch.ops.aten.einsum.default", "(ab, [c], d, [%x])", users=1))
    assert y.args[0] == "ab, [c], d" and len(y.args[1]) == 1
    y = read_fx(fx_line("torch.ops.aten._print.default", "(a, b,)"))
    assert y.args == ("a, b",)
    y = read_fx(fx_line("torch.ops.aten._print.default", "(,)"))
    assert y.args == ("",)


def test_str_keywords_in_fx():
    y = read_fx(fx_line("torch.ops.aten.gelu.default", "(%x,)", "{approximate: tan, h}", users=1))
    assert y.kwargs == {"approximate": "tan, h"}
    y = read_fx(fx_line("torch.ops.aten.div.Tensor_mode", "(%x, %x)", "{rounding_mode: None}", users=1))
    assert y.kwargs == {"rounding_mode": None}


# -- every class, both syntaxes -------------------------------------------------------------------
#: (AutoDeploy text, fx text, value) of one argument after %x; None where a syntax cannot print it.
CASES = [
    ("inf", "inf", math.inf),
    ("-inf", "-inf", -math.inf),
    ("nan", "nan", math.nan),
    ("[inf, -inf, nan]", "[inf, -inf, nan]", [math.inf, -math.inf, math.nan]),
    ("(1+2j)", "(1+2j)", 1 + 2j),
    ("1j", "1j", 1j),
    ("(-0-1j)", "(-0-1j)", -1j),
    ("(nan+infj)", "(nan+infj)", complex(math.nan, math.inf)),
    ("[1j, (1.5-2j), infj]", "[1j, (1.5-2j), infj]", [1j, 1.5 - 2j, complex(0, math.inf)]),
    ("Ellipsis", "Ellipsis", Ellipsis),
    ("(Ellipsis, slice(None, 64, None))", "(Ellipsis, slice(None, 64, None))", (Ellipsis, slice(None, 64, None))),
    ("slice(1, None, 2)", "slice(1, None, 2)", slice(1, None, 2)),
    ("[[1, [2, (3,)]], ()]", "[[1, [2, (3,)]], ()]", [[1, [2, (3,)]], ()]),
    ("{'a, b': [1, 2], 3: ('x->y', None)}", None, {"a, b": [1, 2], 3: ("x->y", None)}),
    (None, "{a: [1, 2], b: (None, 2.5)}", {"a": [1, 2], "b": (None, 2.5)}),
    ("[\"it's\", 'q', '[(', ' ', 'a\\nb']", None, ["it's", "q", "[(", " ", "a\nb"]),
    ("torch.float32", "torch.float32", DType("float32")),
    ("torch.strided", "torch.strided", TorchAttr("strided")),
    ("torch.contiguous_format", "torch.contiguous_format", TorchAttr("contiguous_format")),
    ("cpu", "cpu", Device("cpu")),
    ("cuda:1", "cuda:1", Device("cuda", 1)),
    ("[device(type='cpu'), torch.channels_last]", "[cpu, torch.channels_last]", [Device("cpu"), TorchAttr("channels_last")]),
    ("s0", "s0", SymDim("s0")),
    ("2*s77", "2*s77", SymDim("2*s77")),
    ("s0 + 1", "s0 + 1", SymDim("s0 + 1")),
    ("[s0, 2*s77, Max(1, s0), 8]", "[s0, 2*s77, Max(1, s0), 8]", [SymDim("s0"), SymDim("2*s77"), SymDim("Max(1, s0)"), 8]),
    ("None", "None", None),
    ("[None, True, 1e-06]", "[None, True, 1e-06]", [None, True, 1e-06]),
]


@pytest.mark.parametrize("ad, fx, value", CASES, ids=[c[0] or c[1] for c in CASES])
def test_every_constant_class(ad, fx, value):
    if ad is not None:
        assert same(read_ad(ad_line("aten.foo.default", f"%x : 2x3 : torch.float32, {ad}")).args[1], value)
    if fx is not None:
        assert same(read_fx(fx_line("torch.ops.aten.foo.default", f"(%x, {fx})", users=1)).args[1], value)


def test_a_node_named_like_a_size_is_the_node():
    y = read_ad(AD_HEAD + "%s0 : ? : SymInt\n%y = aten.view.default(%s0 : ? : SymInt, [s0, s1]) : ? : N/A\n")
    assert isinstance(y.args[1][0], Value) and y.args[1][1] == SymDim("s1")


# -- a property over all of them ------------------------------------------------------------------
_leaf = st.one_of(st.integers(-(2**63), 2**63), floats, complexes, st.booleans(), st.none(), st.just(Ellipsis),
                  torch_consts, sym_sizes)
_ad_nested = st.recursive(  # inside containers strings are repr()-quoted: any text
    st.one_of(_leaf, quoted_strings),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(st.one_of(quoted_strings, st.integers()), inner, max_size=2),
                            st.builds(slice, inner, inner, inner)),
    max_leaves=8,
)
_ad_const = st.one_of(_leaf, st.lists(_ad_nested, max_size=3), st.lists(_ad_nested, max_size=3).map(tuple),
                      st.dictionaries(quoted_strings, _ad_nested, max_size=2), st.builds(slice, _ad_nested, _ad_nested))
_fx_name = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda s: s not in ("nan", "inf", "infj", "nanj"))
_fx_const = st.recursive(
    st.one_of(_leaf, st.builds(slice, *[st.one_of(st.none(), st.integers(), sym_sizes)] * 3)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(_fx_name, inner, max_size=2)),
    max_leaves=8,
)


@settings(max_examples=300)
@given(const=_ad_const, text=schema_strings)
def test_ad_constants_round_trip(const, text):
    from layerc.ir.pyformat import python_str

    y = read_ad(ad_line("aten.foo.default", f"%x : 2x3 : torch.float32, {python_str(const)}"))
    assert same(y.args[1], const)
    y = read_ad(ad_line("aten.einsum.default", f"{text}, [x, {python_str(const, True)}]"))
    assert y.args[0] == text and same(y.args[1][1], const)


@settings(max_examples=300)
@given(const=_fx_const, text=schema_strings)
def test_fx_constants_round_trip(const, text):
    from layerc.backends.fx import format_arg

    y = read_fx(fx_line("torch.ops.aten.foo.default", f"(%x, {format_arg(const)})", users=1))
    assert same(y.args[1], const)
    y = read_fx(fx_line("torch.ops.aten._assert_async.msg", f"(%x, {text})", f"{{k: {format_arg(const)}}}", users=1))
    assert y.args[1] == text and same(y.kwargs["k"], const)


# -- malformed constants: errors at their place ---------------------------------------------------
@pytest.mark.parametrize("args, column, message", [
    (f"{EINSUM}, [x, y)", 51, "unexpected ')'"),  # not a list: the text fits no schema split
    (f"{EINSUM}, [x, foo(1)]", 50, "unsupported constant 'foo(...)'"),
    ("%x : 2x3 : torch.float32, [1, 1, reflect", 63, "unexpected end of input"),
    ("%x : 2x3 : torch.float32, [1, (1+2.0j)], reflect", 53, "not a complex number"),
    ("%x : 2x3 : torch.flo at32, [1, 1], reflect", 43, "expected ', '"),
])
def test_malformed_arguments_of_schema_ops_are_located(args, column, message):
    target = "aten.einsum.default" if args.startswith(EINSUM) else "aten.pad.default"
    with pytest.raises(LayercError) as e:
        parse_and_verify(ad_line(target, args), "d.txt")
    assert e.value.format().startswith(f"d.txt:11:{column}: error: "), e.value.format()
    assert message in e.value.message, e.value.message


def test_malformed_fx_arguments_are_located():
    text = fx_line("torch.ops.aten.einsum.default", "(ij->j, [%x, %q])", users=1)
    with pytest.raises(LayercError) as e:
        parse_and_verify(text, "g.fx", syntax="fx")
    assert e.value.format().startswith("g.fx:3:98: error: use of undefined value '%q'"), e.value.format()
    text = fx_line("torch.ops.aten.einsum.default", "(ij->j, [%x])", kwargs="{path: [1}", users=1)
    with pytest.raises(LayercError) as e:
        parse_and_verify(text, "g.fx", syntax="fx")
    assert e.value.format().startswith("g.fx:3:"), e.value.format()
    text = fx_line("torch.ops.aten.einsum.default", "(ij->j, [%x])", users=1).replace("kwargs = {})", "kwargs = {}")
    with pytest.raises(LayercError) as e:
        parse_and_verify(text, "g.fx", syntax="fx")
    assert "kwargs" in e.value.message and e.value.loc.line == 3


def test_nesting_limit_holds_inside_schema_ops():
    with pytest.raises(LayercError) as e:
        parse_and_verify(ad_line("aten.einsum.default", "ij, " + "[" * 100 + "x" + "]" * 100), "d.txt")
    assert "nesting deeper than 100" in e.value.message and e.value.loc.line == 11
    y = read_ad(ad_line("aten.einsum.default", "ij, " + "[" * 99 + "x" + "]" * 99))
    assert y.args[0] == "ij"


HOSTILE = {
    "200,000 places a string could end": ", [".join(["a"] * 200_000),
    "100,000 unclosed lists": "x, [" * 100_000 + "]",
    "100,000 ') : '": "%x : 2x3 : torch.float32, " + ") : " * 100_000,
    "a deep list, then a long flat tail": "a, [" + "[a, " * 50 + ", a" * 300_000,
}


@pytest.mark.parametrize("args", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_schema_lines_stay_fast(args):
    """Many places a string could end, none of which fits: bounded work, then an error at its
    place, or a value."""
    t = time.perf_counter()
    for text, syntax in ((ad_line("aten.einsum.default", args), "ad"),
                         (fx_line("torch.ops.aten.einsum.default", f"({args})", users=1), "fx")):
        try:
            parse_and_verify(text, "d.txt", syntax=syntax)
        except LayercError as e:
            assert e.format().startswith(f"d.txt:{e.loc.line}:{e.loc.column}: error: ") and e.loc.line in (3, 11)
    assert time.perf_counter() - t < 5


def test_schemas_cover_the_ops_with_strings():
    einsum = schema_of("aten.einsum.default")
    assert [p.type for p in einsum.positional] == ["str", "Tensor[]"] and "path" in einsum.params
    assert schema_of("torch.ops.aten._assert_scalar.default").positional[1].is_str
    assert schema_of("aten.add.Tensor") is None and schema_of("auto_deploy.einsum.default") is None
    assert split_positional("ab, [c], d, [x]", einsum.positional) == [(0, 10), (12, 15)]


def test_schema_data_is_what_torch_says():
    """The shipped file is what tools/gen_op_schemas.py writes from this torch (when it is the
    torch the file names): regenerate it when this fails after a torch upgrade."""
    torch = pytest.importorskip("torch")
    from importlib import resources

    from layerc.tools.gen_op_schemas import collect

    doc = json.loads(resources.files("layerc.grammar").joinpath("data/aten_str_schemas.json").read_text())
    if f"from torch {torch.__version__.split('+')[0]};" not in doc["about"]:
        pytest.skip(f"the schema file is from another torch than {torch.__version__}")
    assert collect() == doc["schemas"]


# -- real torch.export graphs ---------------------------------------------------------------------
def test_torch_export_graphs_with_strings_round_trip(tmp_path):
    """einsum, a data-dependent assertion and a padding mode, exported by torch itself."""
    torch = pytest.importorskip("torch")
    from layerc.backends.synth.hf_export import write_dump

    class M(torch.nn.Module):
        def forward(self, a, b, n):
            u0, u1 = n.tolist()
            torch._check(u0 + u1 == 32)
            x = torch.einsum("bclhn,bcshn->bclsh", a, b)
            return x * u0, torch.nn.functional.pad(a[0, 0], [1, 1], mode="reflect")

    args = (torch.randn(2, 1, 8, 4, 16), torch.randn(2, 1, 8, 4, 16), torch.tensor([16, 16]))
    gm = torch.export.export(M(), args).module()
    dump = tmp_path / "001_export_export_to_gm.txt"
    with dump.open("w") as f:
        write_dump(f, gm)
    fx_text = str(gm.graph)
    for text, syntax, printer in ((dump.read_text(), "ad", print_module), (fx_text, "fx", lambda m: print_graph(m.graphs[0]))):
        module = parse_and_verify(text, syntax, syntax=syntax)
        assert printer(module) == text
        ops = {n.target: n for n in module.graphs[0].ops}
        assert ops["aten.einsum.default"].args[0] == EINSUM
        assert ops["aten._assert_scalar.default"].args[1] == MESSAGE
        assert ops["aten.pad.default"].args[1:] == ([1, 1], "reflect")


def test_every_constant_class_has_a_json_form():
    """``opt --emit json`` keeps kinds apart for the classes the readers now take."""
    from layerc.backends.json_ir import arg_to_json

    assert arg_to_json([1 + 2j, SymDim("2*s77"), Ellipsis, slice(None, SymDim("s0"), None), math.nan]) == [
        {"complex": "(1+2j)"}, {"sym": "2*s77"}, {"ellipsis": True}, {"slice": [None, {"sym": "s0"}, None]}, {"float": "nan"}]
