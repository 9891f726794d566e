"""A profiler writes events in the order its buffers fill, not in time order (Kineto: per activity
buffer; a kernel of a CUDA graph replay may come after the events of the steps that followed it).
The file's order must change nothing: the same trace with its events in any order gives the same
report, layer for layer. (Before the IR was put in start order at reading, four decode replays of
a Llama with an all-reduce written last split into eight passes, three of them without layers.)"""

from __future__ import annotations

import gzip
import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.layerc_cli import run_layerc


def _report(path, tmp) -> dict:
    out = tmp / "r.json"
    rc, _, err = run_layerc("trace", path, "--json", out)
    assert rc == 0, err
    doc = json.loads(out.read_text())
    doc.pop("trace")
    return doc


@settings(max_examples=6, deadline=None)
@given(st.sampled_from(["llama", "deepseek_v3", "qwen3_next", "gpt_oss"]), st.sampled_from([1, 2, 8]),
       st.sampled_from(["full", "piecewise", "none"]), st.integers(0, 2**16), st.sampled_from(["shuffle", "reverse", "kernels last"]))
def test_the_files_event_order_changes_nothing(tmp_path_factory, model, tp, graphs, seed, how):
    tmp = tmp_path_factory.mktemp("order")
    path = tmp / "t.json.gz"
    rc, _, err = run_layerc("gen-trace", path, "--model", model, "--tp", str(tp), "--layers", "4", "--graphs", graphs,
                            "--prefill", "1", "--decode", "3", "--seed", str(seed % 1000))
    assert rc == 0, err
    doc = json.loads(gzip.open(path).read())
    events = doc["traceEvents"]
    if how == "shuffle":
        random.Random(seed).shuffle(events)
    elif how == "reverse":
        events.reverse()
    else:
        doc["traceEvents"] = [e for e in events if e.get("cat") != "kernel"] + [e for e in events if e.get("cat") == "kernel"][::-1]
    moved = tmp / "moved.json.gz"
    moved.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert _report(moved, tmp) == _report(path, tmp)
