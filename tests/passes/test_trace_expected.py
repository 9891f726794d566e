"""``trace --num-layers N`` cross-checks the layers found: a mismatch is a warning and a JSON
field, and the layers found are reported as found, never reconciled to N."""

from __future__ import annotations

import json

from layerc.backends.synth.kineto import generate
from tests.layerc_cli import run_layerc


def test_num_layers_is_a_check_not_a_correction(tmp_path):
    trace = tmp_path / "llama.json.gz"
    generate(trace, model="llama", layers=4, prefill=1, decode=2)
    docs = {}
    for n in (4, 5):
        rc, _, err = run_layerc("trace", trace, "--num-layers", str(n), "--json", tmp_path / f"{n}.json")
        assert rc == 0, err
        docs[n] = (json.loads((tmp_path / f"{n}.json").read_text()), err)
    right, wrong = docs[4], docs[5]
    assert right[0]["expected_layers"] == {"num_layers": 4, "mismatched_passes": []} and "warning" not in right[1]
    assert wrong[0]["expected_layers"] == {"num_layers": 5, "mismatched_passes": [0, 1, 2]}
    assert f"{trace}: warning: --num-layers 5, but 3 complete pass(es) have another count" in wrong[1]
    assert wrong[0]["layers_per_pass"] == right[0]["layers_per_pass"] == [4, 4, 4]
    rc, _, _ = run_layerc("trace", trace, "--json", tmp_path / "none.json")
    assert "expected_layers" not in json.loads((tmp_path / "none.json").read_text())


def test_a_model_config_gives_the_count_to_check(tmp_path):
    trace = tmp_path / "vlm.json.gz"
    generate(trace, model="vlm", layers=4, prefill=0, decode=2)
    for name, config, mismatched in (("top", {"num_hidden_layers": 4}, []), ("vlm", {"text_config": {"num_hidden_layers": 5}}, [0, 1])):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"model_type": "x", **config}))
        out = tmp_path / f"{name}.out.json"
        rc, _, err = run_layerc("trace", trace, "--model-config", path, "--json", out)
        assert rc == 0, err
        assert json.loads(out.read_text())["expected_layers"]["mismatched_passes"] == mismatched
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "x",\n "num_hidden_layers": -2}')
    rc, _, err = run_layerc("trace", trace, "--model-config", bad)
    assert rc == 1 and f"{bad}:2:" in err and "num_hidden_layers must be a whole number" in err
    bad.write_text('{"model_type": "x"}')
    rc, _, err = run_layerc("trace", trace, "--model-config", bad)
    assert rc == 1 and "no num_hidden_layers" in err
