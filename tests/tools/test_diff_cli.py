"""``layerc diff`` as a command: a run against itself has no change; its outputs appear together
(JSON and a PNG), or none where an input is broken; a bad option is a usage error."""

from __future__ import annotations

import json

from tests.conftest import SHARED
from tests.layerc_cli import run_layerc

TRACE = SHARED / "data" / "traces" / "torch" / "sglang_qwen3-8b_extend_mi300x.json.gz"


def test_a_run_against_itself_has_no_change(tmp_path, shared):
    rc, out, err = run_layerc("diff", TRACE, TRACE, "--json", tmp_path / "d.json", "--png", tmp_path / "d.png")
    assert rc == 0, err
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["changes"] == [] and all(b["delta_ns"] == 0 for b in doc["blocks"]) and doc["blocks"]
    assert "no change above the noise" in out
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_broken_input_writes_nothing(tmp_path, shared):
    broken = tmp_path / "b.json"
    broken.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    rc, _, err = run_layerc("diff", TRACE, broken, "--json", tmp_path / "d.json", "--png", tmp_path / "d.png")
    assert rc == 1 and "error:" in err and "Traceback" not in err
    assert not (tmp_path / "d.json").exists() and not (tmp_path / "d.png").exists()


def test_a_bad_threshold_is_a_usage_error(shared):
    rc, _, err = run_layerc("diff", TRACE, TRACE, "--threshold", "lots")
    assert rc == 2 and "--threshold" in err


# -- two graph dumps --------------------------------------------------------------------------------
def _stages(tmp_path):
    from layerc.backends.synth.dump import write

    before = write("deepseek_v3_prefusion", tmp_path / "before", 4, seed=1)
    after = write("deepseek_v3", tmp_path / "after", 4, seed=2, shuffle=True)
    return before, after


def test_two_dumps_compared_with_their_picture(tmp_path):
    before, after = _stages(tmp_path)
    rc, out, err = run_layerc("diff", before, after, "--json", tmp_path / "d.json", "--png", tmp_path / "d.png")
    assert rc == 0, err
    doc = json.loads((tmp_path / "d.json").read_text())
    kinds = {c["kind"] for c in doc["changes"]}
    assert {"fused", "replaced", "added"} <= kinds and doc["ops"]["matched"] > 0
    assert "fused_swiglu_mlp" in out and "changes, largest first" in out
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_dump_against_itself_has_no_change(tmp_path):
    before, _ = _stages(tmp_path)
    rc, out, err = run_layerc("diff", before, before, "--json", tmp_path / "d.json")
    assert rc == 0, err
    assert json.loads((tmp_path / "d.json").read_text())["changes"] == [] and "no change" in out


def test_options_of_the_other_kind_are_usage_errors(tmp_path, shared):
    before, after = _stages(tmp_path)
    for argv in ((before, after, "--threshold", "5"), (TRACE, TRACE, "--layer", "1"), (TRACE, before),
                 (before, after, "--png", tmp_path / "d.png", "--layer", "99")):
        rc, _, err = run_layerc("diff", *argv)
        assert rc == 2 and "Traceback" not in err, argv
    assert not (tmp_path / "d.png").exists()


def test_two_dump_directories_are_dumps_whatever_else_they_hold(tmp_path):
    """gen-dump writes a _truth.json beside each dump: two dump directories are still two graphs,
    not two jobs of per-rank traces."""
    before, after = _stages(tmp_path)
    rc, out, err = run_layerc("diff", before.parent, after.parent, "--json", tmp_path / "d.json")
    assert rc == 0, err
    assert json.loads((tmp_path / "d.json").read_text())["changes"] and "fused_swiglu_mlp" in out


def test_two_outputs_on_one_path_are_refused_and_a_layer_without_a_picture_is_a_usage_error(tmp_path):
    before, after = _stages(tmp_path)
    for argv in (("--json", tmp_path / "o", "--png", tmp_path / "o"), ("--json", "-", "--png", "-")):
        rc, out, err = run_layerc("diff", before, after, *argv)
        assert rc == 1 and "two outputs name the same file" in err and "Traceback" not in err, argv
    rc, out, err = run_layerc("diff", before, after, "--layer", "1")
    assert rc == 2 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_what_a_kept_op_reads_is_compared(tmp_path):
    """An op that keeps its kind but reads another weight, another input or another constant is
    a change (``rewired``, ``constants``), not 'no change'."""
    from layerc.backends.synth.dump import write

    dump = write("llama", tmp_path / "a", 3, seed=1)
    text = dump.read_text()
    cases = {"constants": text.replace(", 1e-05)", ", 1e-06)"),
             "rewired": text.replace("%lm_head_weight", "%model_embed_tokens_weight")}
    for kind, changed in cases.items():
        b = tmp_path / kind / dump.name
        b.parent.mkdir()
        b.write_text(changed)
        rc, out, err = run_layerc("diff", dump, b, "--json", tmp_path / f"{kind}.json")
        assert rc == 0, err
        found = json.loads((tmp_path / f"{kind}.json").read_text())["changes"]
        assert [c["kind"] for c in found] == [kind] and "no change" not in out
    assert found[0]["regions"][0]["detail"] == "argument 1: lm_head_weight → model_embed_tokens_weight"
