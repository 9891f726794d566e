"""Module spans: a layer is an instance of the outermost layer class. vLLM's gpt-oss names its
decoder layer TransformerBlock and the MLP inside it MLPBlock; both end in Block, and counting
the inner one would split every layer in two."""

from __future__ import annotations

import gzip
import json

from layerc.backends.synth.kineto import generate
from tests.layerc_cli import run_layerc


def test_a_block_inside_a_layer_is_not_a_layer(tmp_path):
    plain = tmp_path / "plain.json.gz"
    generate(plain, model="llama", layers=4, prefill=2, decode=1, ground_truth_spans=True)
    doc = json.loads(gzip.decompress(plain.read_bytes()))
    extra = []
    for e in doc["traceEvents"]:
        name = e.get("name", "")
        if e.get("cat") == "python_function" and name.startswith("nn.Module: ") and "DecoderLayer_" in name:
            n = name.rsplit("_", 1)[1]
            e["name"] = f"nn.Module: TransformerBlock_{n}"
            half = e["dur"] / 2
            extra.append({**e, "name": f"nn.Module: MLPBlock_{n}", "ts": e["ts"] + half, "dur": half - 0.001})
    assert extra
    doc["traceEvents"] += extra
    nested = tmp_path / "nested.json.gz"
    nested.write_bytes(gzip.compress(json.dumps(doc).encode()))
    docs = []
    for path in (plain, nested):
        rc, _, err = run_layerc("trace", path, "--strategy", "ground-truth", "--json", tmp_path / f"{path.stem}.json")
        assert rc == 0, err
        docs.append(json.loads((tmp_path / f"{path.stem}.json").read_text()))
    assert docs[1]["layers_per_pass"] == docs[0]["layers_per_pass"]
    assert docs[1]["num_layers"] == docs[0]["num_layers"] and docs[0]["strategy"].startswith("ground-truth")
