"""layerc.tools.fidelity: grammars and slicer against nn_module_stack, per architecture."""

from __future__ import annotations

import pytest

from layerc.ir.diagnostics import LayercError
from layerc.backends import fidelity

# --------------------------------------------------------------------------
# Counting (no torch needed)
# --------------------------------------------------------------------------


def test_agreement_counts_a_recall_miss_and_a_precision_miss():
    rows = [
        ("a", 0, 0),
        ("b", 1, 1),
        ("c", None, 1),  # inside layer 1, given no layer: a recall miss
        ("d", 0, None),  # outside every layer, put in layer 0: a precision miss
        ("e", None, None),  # outside, left outside: right, and in neither count
    ]
    got = fidelity.agreement(rows, "all")
    assert got == {
        "all_recall": round(2 / 3, 4),  # a, b of a, b, c
        "all_precision": round(2 / 3, 4),  # a, b of a, b, d
        "all_misses": 2,
        "all_examples": ["c: None not 1", "d: 0 not None"],
    }


def test_agreement_a_wrong_layer_misses_both_ways():
    got = fidelity.agreement([("a", 0, 0), ("b", 0, 1)], "weights")
    assert (got["weights_recall"], got["weights_precision"], got["weights_misses"]) == (0.5, 0.5, 1)
    assert got["weights_examples"] == ["b: 0 not 1"]


def test_agreement_with_nothing_to_count():
    assert fidelity.agreement([], "all") == {"all_recall": None, "all_precision": None, "all_misses": 0, "all_examples": []}
    outside = fidelity.agreement([("a", None, None)], "all")
    assert (outside["all_recall"], outside["all_precision"], outside["all_misses"]) == (None, None, 0)


def test_agreement_keeps_eight_examples():
    got = fidelity.agreement([(f"n{i}", 0, 1) for i in range(20)], "all")
    assert got["all_misses"] == 20 and len(got["all_examples"]) == 8


def test_summary_and_table():
    records = [
        {"arch": "good", "layers": 3, "nodes": 10, "dump_round_trip": True, "fx_round_trip": True,
         "all_recall": 1.0, "all_precision": 1.0, "weights_recall": 1.0, "weights_precision": 1.0},
        {"arch": "unread", "layers": 3, "dump_round_trip": False, "fx_round_trip": False,
         "parse_error": "001_export_export_to_gm.txt:1:2: error: x | y"},
        {"arch": "broken", "layers": 3, "export_error": "RuntimeError: no"},
        # the slicer found no layer: nothing placed, so no precision; counts as 0
        {"arch": "unplaced", "layers": 3, "nodes": 7, "dump_round_trip": True, "fx_round_trip": True,
         "all_recall": 0.0, "all_precision": None, "weights_recall": 0.0, "weights_precision": None},
    ]
    assert [fidelity.score(r) for r in records] == [1.0, None, None, 0.0]
    assert fidelity.summary(records) == (
        "4 architectures, 3 export, 2 round-trip in both syntaxes, 2 sliced: 1 at >= 0.995 recall and precision, "
        "1 exact on weight ops, mean min(recall, precision) 0.500")
    text = fidelity.table(records, {"whisper": "an encoder-decoder"})
    assert "| good | 10 | yes | yes | 1.000 | 1.000 | 1.000 | 1.000 |  |" in text
    assert "| unread |  | **no** | **no** |" in text and "error: x / y |" in text  # no stray column
    assert "| broken |" in text and "RuntimeError: no |" in text
    assert "| unplaced | 7 | yes | yes | 0.000 |  | 0.000 |  |  |" in text
    assert text.endswith("Left out:\n\n- whisper: an encoder-decoder\n")


def test_spliced_between_the_markers():
    readme = f"# x\n{fidelity.BEGIN}\nold\n{fidelity.END}\ntail\n"
    assert fidelity.spliced(readme, "new\n") == f"# x\n{fidelity.BEGIN}\nnew\n{fidelity.END}\ntail\n"
    with pytest.raises(LayercError, match="no fidelity markers"):
        fidelity.spliced("# x\n", "new\n")


# --------------------------------------------------------------------------
# Real exports (torch and transformers)
# --------------------------------------------------------------------------

FIELDS = {"arch", "layers", "export_seconds", "dump_round_trip", "fx_round_trip", "nodes"} | {
    f"{prefix}_{what}" for prefix in ("all", "weights") for what in ("recall", "precision", "misses", "examples")}


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")


@pytest.mark.parametrize("arch", ["llama", "jamba"])  # dense; Mamba layers beside attention and MoE ones
def test_measure_record(hf, arch):
    r = fidelity.measure(arch, 3)
    assert FIELDS <= set(r), FIELDS - set(r)
    assert not {"export_error", "parse_error", "fx_parse_error", "slice_error"} & set(r), r
    assert (r["arch"], r["layers"]) == (arch, 3)
    assert r["dump_round_trip"] is True and r["fx_round_trip"] is True
    assert r["nodes"] > 100 and r["export_seconds"] >= 0
    for prefix in ("all", "weights"):
        for what in ("recall", "precision"):
            assert 0.0 <= r[f"{prefix}_{what}"] <= 1.0
        assert len(r[f"{prefix}_examples"]) == min(r[f"{prefix}_misses"], 8)
        if r[f"{prefix}_misses"] == 0:
            assert r[f"{prefix}_recall"] == r[f"{prefix}_precision"] == 1.0
    if arch == "llama":  # plain decoder layers: every op placed right
        assert r["all_misses"] == r["weights_misses"] == 0


def test_an_architecture_not_exported_is_a_record(hf):
    r = fidelity.measure("dbrx", 3)
    assert r == {"arch": "dbrx", "layers": 3, "export_error": r["export_error"]}
    assert "not exported" in r["export_error"] and "nonzero" in r["export_error"]


def test_run_child_brings_the_record_back(hf):
    r = fidelity.run_child("dbrx", 2)
    assert r["arch"] == "dbrx" and r["layers"] == 2 and "not exported" in r["export_error"]


def test_decoder_architectures(hf):
    from layerc.backends.synth.hf_export import ARCHES, NOT_EXPORTED

    keep, left_out = fidelity.decoder_architectures()
    assert set(ARCHES) <= set(keep)
    assert {"mamba", "jamba", "qwen3_next", "nemotron_h", "mllama"} <= set(keep)
    assert not set(keep) & set(left_out)
    for arch, why in NOT_EXPORTED.items():
        assert left_out[arch] == why
    assert left_out["bert"] == "an encoder (masked LM) with a causal-LM head"
    assert left_out["whisper"] == "an encoder-decoder"


def test_keep_must_be_a_directory(tmp_path):
    """Checked before any export: a file where the directory should be is an error, left as it is."""
    from tests.layerc_cli import run_layerc

    blocker = tmp_path / "exports"
    blocker.write_text("not a directory\n")
    rc, _, err = run_layerc("fidelity", "--keep", blocker)
    assert rc == 1 and err.startswith(f"{blocker}: error: ") and blocker.read_text() == "not a directory\n"
