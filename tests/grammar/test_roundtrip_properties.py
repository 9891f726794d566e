"""Property tests: IR → text → IR is the identity, for both syntaxes; damaged text is reported
as a located layerc error, never as anything else."""

from __future__ import annotations


from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import DATA
from layerc.backends.autodeploy import print_module
from layerc.backends.fx import print_graph
from layerc.grammar.dumps import decode, parse_and_verify
from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import structural_key

from layerc.testing import ad_modules, fx_modules



@settings(max_examples=150)
@given(ad_modules())
def test_autodeploy_print_parse_is_identity(module):
    module.verify()
    text = print_module(module)
    back = parse_and_verify(text, "<generated>")
    if module.generation < 3 and not any(line.startswith("%") for line in text.splitlines()):
        # Without node lines, generation-1 and generation-2 texts are the same bytes.
        back.generation = module.generation
    assert structural_key(back) == structural_key(module), text
    assert print_module(back) == text


@settings(max_examples=150)
@given(fx_modules())
def test_fx_print_parse_is_identity(module):
    module.verify()
    text = print_graph(module.graphs[0])
    back = parse_and_verify(text, "<generated>", syntax="fx")
    assert structural_key(back) == structural_key(module), text
    assert print_graph(back.graphs[0]) == text


def _valid_samples() -> list[bytes]:
    return [p.read_bytes() for p in sorted(DATA.glob("*.txt"))]


@st.composite
def mutated(draw):
    data = bytearray(draw(st.sampled_from(_valid_samples())))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = draw(st.sampled_from([*b"%:,()[]{}x=\n ?'\"0123456789abc", 0xFF, 0xC3, 0x00]))
        if op == "replace":
            data[pos] = byte
        elif op == "insert":
            data.insert(pos, byte)
        else:
            del data[pos]
    return bytes(data)


@settings(max_examples=1000)
@given(mutated())
def test_mutations_give_located_errors_only(data):
    try:
        text = decode(data, "mutated.txt")
        parse_and_verify(text, "mutated.txt")
    except LayercError as e:
        assert e.loc is not None, e.format()
        assert e.format().startswith(f"mutated.txt:{e.loc.line}:{e.loc.column}: error: "), e.format()
