"""Real graphs: tiny HF models exported by `layerc export-hf` read back exactly, in both syntaxes,
and the two syntaxes describe the same graph."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from layerc.backends.autodeploy import print_module  # noqa: E402
from layerc.backends.fx import print_graph  # noqa: E402
from layerc.grammar.dumps import load, parse_and_verify  # noqa: E402
from layerc.backends.synth import hf_export as export_hf  # noqa: E402

ARCHES = ["llama", "qwen3_moe", "mixtral", "deepseek_v3", "qwen2", "gemma2", "phi3", "falcon"]
#: Mamba-2 and its hybrids: their chunked scans print einsum equations, unquoted.
HYBRIDS = ["mamba2", "bamba", "nemotron_h", "granitemoehybrid", "falcon_h1", "zamba2"]
ARCHES += HYBRIDS


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {arch: export_hf.export(arch, 2, root / arch) and root / arch for arch in ARCHES}


@pytest.mark.parametrize("arch", ARCHES)
def test_dump_round_trips_byte_identical(exported, arch):
    path = exported[arch] / "001_export_export_to_gm.txt"
    text = path.read_text()
    module = load(exported[arch])  # the directory: picks the highest counter
    assert module.source == str(path) and module.counter == 1 and module.generation == 3
    assert print_module(module) == text
    g = module.main_graph()
    assert g.name == "(root)" and len(g.ops) > 50 and g.weights


@pytest.mark.parametrize("arch", ARCHES)
def test_fx_print_round_trips_and_agrees_with_dump(exported, arch):
    fx_text = (exported[arch] / "fx_graph.txt").read_text()
    fx = parse_and_verify(fx_text, "fx_graph.txt")
    assert print_graph(fx.graphs[0]) == fx_text
    ad = load(exported[arch]).main_graph()
    g = fx.graphs[0]
    # Same nodes (the dump has no get_attr lines: those are its weights), same targets, same edges.
    assert [n.name for n in g.nodes] == [n.name for n in ad.nodes]
    assert {w.name for w in g.weights.values() if w.users} == set(ad.weights)  # unused ones never print in a dump
    for a, b in zip(g.nodes, ad.nodes):
        assert a.kind == b.kind and (a.target == b.target or a.kind == "placeholder"), (a, b)
        assert _names(a.args) == _names(b.args), a.name  # the dump drops kwargs; args agree


def _names(arg) -> list[str]:
    if isinstance(arg, (list, tuple)):
        return [n for a in arg for n in _names(a)]
    return [arg.name] if hasattr(arg, "users") else []


@pytest.mark.parametrize("arch", HYBRIDS)
def test_einsum_equations_read_as_strings(exported, arch):
    """``aten.einsum.default(bclhn,bcshn->bclsh, [a, b])``: the schema says the first argument is
    a str, so its commas and arrow are the string's; in both syntaxes the same equations."""
    dump = load(exported[arch]).main_graph()
    fx = parse_and_verify((exported[arch] / "fx_graph.txt").read_text(), "fx_graph.txt").graphs[0]
    equations = []
    for g in (dump, fx):
        ops = [n for n in g.ops if n.target == "aten.einsum.default"]
        assert ops and all(type(n.args[0]) is str and "->" in n.args[0] for n in ops)
        assert all(all(hasattr(v, "users") for v in n.args[1]) for n in ops)
        equations.append([n.args[0] for n in ops])
    assert equations[0] == equations[1] and "bclhn,bcshn->bclsh" in equations[0]
