"""`layerc profile` on CPU with tiny configs: the graph that the simulation costs computes what the
transformers decoder layer computes (every supported architecture, decode and prefill, fused and
eager attention), and a profiled run comes back through the trace IR as per-op measured times beside
the simulated ones, in JSON, a table and a layer-annotated Perfetto trace."""

from __future__ import annotations

import json
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from layerc.passes.runtime.torch_run import GraphRunner, layer_inputs, layer_weights, transformers_layer, transformers_output  # noqa: E402
from layerc.grammar.decoder_layer import LayerShape, build_layer  # noqa: E402
from layerc.grammar.hf_config import spec_from_dict  # noqa: E402
from layerc.backends.synth.hf_export import tiny_config  # noqa: E402

from tests.layerc_cli import run_layerc  # noqa: E402
from tests.backends.test_perfetto import replay, track_paths  # noqa: E402


def tiny(arch: str):
    return spec_from_dict({**tiny_config(arch), "model_type": arch, "num_hidden_layers": 2, "torch_dtype": "float32"},
                          f"tiny {arch}")


@pytest.mark.parametrize("arch,phase,attention", [
    ("llama", "decode", "eager"), ("llama", "prefill", "fused"), ("qwen2", "decode", "fused"),
    ("qwen3", "prefill", "eager"), ("mixtral", "decode", "fused"), ("mixtral", "prefill", "eager"),
    ("deepseek_v3", "decode", "fused"), ("deepseek_v3", "decode", "eager"), ("deepseek_v3", "prefill", "fused"),
])
def test_graph_computes_what_transformers_computes(arch, phase, attention):
    spec = tiny(arch)
    layer = spec.default_layer()
    graph = build_layer(spec, phase, 5, 2, layer, attention).graphs[0]
    block, rotary, config = transformers_layer(spec, layer, "float32", "cpu")
    shape = LayerShape(phase, 5, 2)
    inputs = layer_inputs(graph, spec, shape, rotary, "float32", "cpu")
    with torch.no_grad():
        ours = GraphRunner(graph, layer_weights(graph, block)).run({k: v.clone() for k, v in inputs.items()})
    ref = transformers_output(block, config, spec, shape, {k: v.clone() for k, v in inputs.items()}, layer)
    assert ours.shape == ref.shape == (2, 1 if phase == "decode" else 5, spec.hidden)
    assert torch.allclose(ours, ref, atol=1e-4 * float(ref.abs().max()), rtol=0)


def cli(*args) -> tuple[int, str, str]:
    return run_layerc("profile", *args)


def test_profile_on_cpu(tmp_path, record_property):
    out, js = tmp_path / "real.pftrace", tmp_path / "real.json"
    rc, stdout, err = cli("--arch", "llama", "--n-tokens", 16, "--repeat", 2, "--warmup", 1, "--threads", 1,
                          "-o", out, "--json", js)
    assert rc == 0, err
    doc = json.loads(js.read_text())
    assert doc["check"]["ok"] and doc["device"] == "cpu" and doc["hardware"]["key"] == "host"
    graph = build_layer(tiny("llama"), "prefill", 16, 1, attention="fused").graphs[0]
    kernels = [n.meta["label"] for n in graph.ops if "label" in n.meta]
    rows = {r["op"]: r for r in doc["ops"]}
    assert [r for r in rows if rows[r]["kernel"]] == kernels  # every op timed, in program order
    assert all(rows[k]["measured_us"] > 0 and rows[k]["simulated_us"] > 0 for k in kernels)
    s = doc["summary"]
    assert s["ops"] == len(kernels) and s["median_abs_error_us"] >= 0
    assert s["measured_layer_us"] >= s["measured_ops_us"] > 0
    assert "matches transformers" in stdout and "median absolute error" in stdout
    record_property("profile tiny llama CPU median abs % error", s["median_abs_pct_error"])

    trace = replay(out)
    paths = track_paths(trace["tracks"])
    per_track = Counter(paths[x["track"]][1] for x in trace["slices"])
    assert per_track["layer"] == 2
    assert per_track["ops (measured)"] == 2 * len(rows) and per_track["ops (simulated)"] == 2 * len(kernels)
    q = next(x for x in trace["slices"] if paths[x["track"]][1] == "ops (measured)" and x["name"] == "q_proj")
    assert q["args"]["FLOPs"] == 2 * 16 * 64 * 64 and q["args"]["measured (us)"] == pytest.approx(q["dur"] / 1e3, abs=1e-3)
    assert "simulated (us)" in q["args"]
    layer = next(x for x in trace["slices"] if paths[x["track"]][1] == "layer")
    inside = [x for x in trace["slices"] if paths[x["track"]][1] == "ops (measured)"
              and layer["ts"] <= x["ts"] and x["ts"] + x["dur"] <= layer["ts"] + layer["dur"]]
    assert len(inside) == len(rows)  # each run's ops lie inside its layer span
    assert any(p[0].startswith("host process") for p in paths.values())  # the profiler's own CPU ops
    layer_process = paths[layer["track"]][0]
    assert layer_process.startswith("CPU 0: ") and not any(p[0].startswith("GPU") for p in paths.values())


def test_profile_decode_moe_mla_against_a_preset(tmp_path):
    js = tmp_path / "ds.json"
    rc, stdout, err = cli("--arch", "deepseek_v3", "--phase", "decode", "--n-tokens", 32, "--attention", "eager",
                          "--repeat", 1, "--warmup", 0, "--threads", 1, "--hw", "h100", "--json", js)
    assert rc == 0, err
    doc = json.loads(js.read_text())
    assert doc["check"]["ok"] and doc["hardware"]["key"] == "h100"
    ops = {r["op"] for r in doc["ops"]}
    assert {"q_absorb", "attn_qk", "attn_pv", "o_absorb", "kv_cache_write", "router_topk", "experts"} <= ops


def test_profile_usage_and_device_errors():
    for args in (["--n-tokens", "8"], ["--arch", "gpt_oss"], ["--arch", "mixtral", "--preset", "llama-3.2-1b"],
                 ["--arch", "llama", "--device", "tpu"], ["--preset", "nope"]):
        rc, _, err = cli(*args)
        assert rc == 2, args
    if not torch.cuda.is_available():
        rc, _, err = cli("--arch", "llama", "--device", "cuda", "--n-tokens", 4)
        assert rc == 1 and "no CUDA device" in err


def test_gpu_ops_are_measured_by_the_kernels_they_launched(tmp_path):
    """On a GPU an op's time is its kernels' (a launch-bound run's GPU projection of the range
    would hold the idle gaps between them), and a run's layer range is the span of its kernels:
    a Kineto profile of one run whose ``q_proj`` launches two kernels 30 µs apart."""
    from types import SimpleNamespace

    from layerc.grammar.traces import read_trace
    from layerc.passes.runtime.profiling import _measure

    events, corr = [], 100

    def op(name, ts, dur, kernels):  # a record_function range, each kernel's launch inside it, the kernels
        nonlocal corr
        events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur})
        for k_ts, k_dur in kernels:
            corr += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": ts + 1, "dur": 2, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": 0, "tid": 7, "ts": k_ts, "dur": k_dur,
                           "args": {"correlation": corr, "device": 0, "stream": 7}})

    events.append({"ph": "X", "cat": "user_annotation", "name": "layer 0 (decode) run 0", "pid": 1, "tid": 1, "ts": 0, "dur": 200})
    op("q_proj", 10, 50, [(20, 5), (55, 4)])
    op("o_proj", 100, 20, [(110, 6)])
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"traceEvents": events}))
    graph = SimpleNamespace(ops=[SimpleNamespace(meta={"label": "q_proj"}, name="q"), SimpleNamespace(meta={}, name="o_proj")])
    measured, layer_ranges, op_ranges = _measure(read_trace(path), graph, 0, "decode", "cuda")
    assert measured == {"q_proj": [9000], "o_proj": [6000]}  # ns of kernel time, not the 50 µs range
    assert layer_ranges == [(20000, 116000)]  # first kernel start to last kernel end
    assert op_ranges[0] == ("q_proj", 20000, 59000)
    cpu, cpu_layers, _ = _measure(read_trace(path), graph, 0, "decode", "cpu")
    assert cpu == {"q_proj": [50000], "o_proj": [20000]} and cpu_layers == [(0, 200000)]
