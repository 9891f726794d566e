"""`layerc simulate --dump` on every graph format layerc writes: gen-dump (plain, --symbolic,
--piecewise), what `layerc opt` prints, export-hf's dump and its fx_graph.txt (torch only).
Symbolic sizes get values (the token dims a decode step's, --batch, --sym), a symbol that has none
is named, a graph without shapes says so; never an internal error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.layerc_cli import run_layerc

RULE = "=" * 80


def simulate(*args) -> tuple[int, str, str]:
    return run_layerc("simulate", *args)


def report(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    """gen-dump's llama dump in each form, two layers, 8 decode tokens (batch 8, one token each)."""
    from layerc.backends.synth.dump import write

    root = tmp_path_factory.mktemp("dumps")
    forms = {"plain": {}, "symbolic": {"symbolic": True}, "piecewise": {"piecewise": True},
             "symbolic-piecewise": {"symbolic": True, "piecewise": True}}
    out = {}
    for name, kw in forms.items():
        write("llama", root / name, layers=2, **kw)
        out[name] = root / name
    return out


@pytest.mark.parametrize("form", ["plain", "symbolic", "piecewise", "symbolic-piecewise"])
def test_gen_dump_forms_cost_alike(dumps, form, tmp_path):
    """A symbolic dump with its batch symbol given the plain dump's batch costs exactly as the plain one."""
    rc, _, err = simulate("--dump", dumps["plain"], "--layer", 1, "--json", tmp_path / "plain.json")
    assert rc == 0, err
    extra = ["--batch", 8] if "symbolic" in form else []
    rc, out, err = simulate("--dump", dumps[form], "--layer", 1, *extra, "--json", tmp_path / "r.json")
    assert rc == 0, err
    assert "internal error" not in err
    got, want = report(tmp_path / "r.json"), report(tmp_path / "plain.json")
    assert got["totals"] == want["totals"]
    assert [(r["op"], r["flops"], r["bytes"]) for r in got["ops"]] == [(r["op"], r["flops"], r["bytes"]) for r in want["ops"]]
    if "symbolic" in form:
        assert got["layer"]["symbols"].split() == ["s72=8", "s70=1"]
        assert "s72=8, s70=1" in out


@pytest.mark.parametrize("arch", ["deepseek_v3", "nemotron_h", "qwen3_next"])
def test_symbolic_dumps_of_other_architectures(arch, tmp_path):
    """MoE, MLA, Mamba and linear-attention layers; nemotron_h's MoE layer has only flattened
    token dims (s70*s72): the layer's [B, S, H] input names the batch symbol."""
    from layerc.backends.synth.dump import write

    write(arch, tmp_path / "plain", layers=2)
    write(arch, tmp_path / "symbolic", layers=2, symbolic=True)
    got = []
    for form, extra in (("plain", []), ("symbolic", ["--batch", 8])):
        rc, _, err = simulate("--dump", tmp_path / form, "--layer", 1, *extra, "--json", tmp_path / f"{form}.json")
        assert rc == 0, err
        got.append(report(tmp_path / f"{form}.json"))
    assert got[0]["totals"]["flops"] == got[1]["totals"]["flops"]
    assert got[0]["totals"]["kernels"] == got[1]["totals"]["kernels"]


def test_symbolic_defaults_are_a_decode_step_of_one_sequence(dumps, tmp_path):
    rc, out, err = simulate("--dump", dumps["symbolic"], "--layer", 0, "--json", tmp_path / "r.json")
    assert rc == 0, err
    doc = report(tmp_path / "r.json")
    assert doc["layer"]["symbols"].split() == ["s72=1", "s70=1"]
    q = next(r for r in doc["ops"] if r["type"] == "gemm")
    assert q["shape"].startswith("1x1x")
    # the page-table size s43 is no token dim: named, counted as nothing where only read
    assert "no value for s43" in err


def test_batch_on_a_concrete_dump_is_a_usage_error(dumps):
    rc, _, err = simulate("--dump", dumps["plain"], "--batch", 4)
    assert rc == 2 and "this dump's shapes say the batch" in err


def test_layerc_opt_output_reads_back(dumps, tmp_path):
    """`layerc opt` prints (the whole module, and a sliced layer) simulate as the dumps they came from."""
    rc, _, err = simulate("--dump", dumps["symbolic"], "--layer", 1, "--json", tmp_path / "dir.json")
    assert rc == 0, err
    whole, sliced = tmp_path / "opt.txt", tmp_path / "sliced.txt"
    assert run_layerc("opt", dumps["symbolic"], "-o", whole)[0] == 0
    assert run_layerc("opt", dumps["symbolic"], "-p", "select-graph,tag-weights,slice-layer{layer=1}", "-o", sliced)[0] == 0
    for printed in (whole, sliced):
        rc, _, err = simulate("--dump", printed, "--layer", 1, "--json", tmp_path / "r.json")
        assert rc == 0, err
        assert report(tmp_path / "r.json")["totals"] == report(tmp_path / "dir.json")["totals"]


def test_opt_fx_print_has_no_shapes(dumps, tmp_path):
    printed = tmp_path / "fx.txt"
    assert run_layerc("opt", dumps["plain"], "--emit", "fx", "-o", printed)[0] == 0
    rc, _, err = simulate("--dump", printed, "--layer", 1)
    assert rc == 1
    assert err.startswith(f"{printed}: error: graph '(root)' has no tensor shapes")


def hand_dump(path: Path) -> Path:
    """A one-layer AutoDeploy dump whose MLP width is a symbol (s9) no token dim explains."""
    path.write_text(
        f"# Transform: export_to_gm\n# Stage: export\n# GraphModules found: 1\n\n\n{RULE}\n# GraphModule: (root)\n{RULE}\n\n"
        "%hidden : s0xs1x64 : torch.bfloat16\n"
        "%linear = aten.linear.default(%hidden : s0xs1x64 : torch.bfloat16, %model_layers_0_up_weight : s9x64 : torch.bfloat16)"
        " : s0xs1xs9 : torch.bfloat16\n"
        "%relu = aten.relu.default(%linear : s0xs1xs9 : torch.bfloat16) : s0xs1xs9 : torch.bfloat16\n"
        "%linear_1 = aten.linear.default(%relu : s0xs1xs9 : torch.bfloat16, %model_layers_0_down_weight : 64xs9 : torch.bfloat16)"
        " : s0xs1x64 : torch.bfloat16\n"
        "%add = aten.add.Tensor(%hidden : s0xs1x64 : torch.bfloat16, %linear_1 : s0xs1x64 : torch.bfloat16) : s0xs1x64 : torch.bfloat16\n"
        "output %add\n")
    return path


def test_a_symbol_without_a_value_is_named_at_its_op(tmp_path):
    dump = hand_dump(tmp_path / "001_export_export_to_gm.txt")
    rc, _, err = simulate("--dump", dump)
    assert rc == 1
    assert err.startswith(f"{dump}:11:1: error: '%linear' has size 1x1xs9: the cost pass needs a value for s9")
    rc, _, err = simulate("--dump", dump, "--sym", "s9=128", "--batch", 4, "--json", tmp_path / "r.json")
    assert rc == 0, err
    ops = {r["op"]: r for r in report(tmp_path / "r.json")["ops"]}
    assert ops["linear"]["shape"] == "4x1x128" and ops["linear"]["flops"] == 2 * 4 * 64 * 128
    assert ops["linear_1"]["flops"] == 2 * 4 * 128 * 64
    rc, _, err = simulate("--dump", dump, "--sym", "s9")
    assert rc == 2 and "argument --sym: takes NAME=N" in err


# -- export-hf (torch) ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("hf") / "llama"
    rc, _, err = run_layerc("export-hf", "--arch", "llama", out)
    assert rc == 0, err
    return out


def test_export_hf_dump(exported, tmp_path):
    for target in (exported, exported / "001_export_export_to_gm.txt"):
        rc, out, err = simulate("--dump", target, "--layer", 1, "--engines", "auto", "--json", tmp_path / "r.json")
        assert rc == 0, err
        doc = report(tmp_path / "r.json")
        linears = [r for r in doc["ops"] if r["target"] == "aten.linear.default"]
        assert len(linears) == 7 and all(r["shape"].startswith("2x8x") for r in linears)  # batch 2, 8 tokens
        assert doc["schedule"]["makespan_us"] == doc["schedule"]["critical_path_us"]


def test_export_hf_fx_graph_says_it_has_no_shapes(exported):
    fx = exported / "fx_graph.txt"
    rc, _, err = simulate("--dump", fx, "--layer", 1)
    assert rc == 1
    assert err.startswith(f"{fx}: error: graph '(root)' has no tensor shapes (a torch.fx print carries none)")
