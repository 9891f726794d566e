"""`layerc simulate`: the Perfetto trace (a track per engine, op slices with type, FLOPs, bytes,
bound), the JSON and the table against seed 004's simulated trace of Llama-3.2-1B (read from
../shared), a layer sliced from a dump, and the errors a user meets (exit 1 with
``file:line:col: error:``, exit 2 for usage, no partial output)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

from tests.layerc_cli import run_layerc
from tests.backends.test_perfetto import replay, track_paths

SEED_SIM = "data/seed004/llama-3.2-1b_layer0_simulated.json"


def cli(*args) -> tuple[int, str, str]:
    return run_layerc("simulate", *args)


def test_perfetto_trace_has_engine_tracks_and_op_facts(tmp_path):
    out = tmp_path / "layer.pftrace"
    rc, stdout, err = cli("--preset", "llama-3.2-1b", "--phase", "decode", "--seq-len", 256, "--batch", 1,
                          "--engines", 3, "--hw", "h100", "-o", out, "--json", tmp_path / "layer.json")
    assert rc == 0, err
    doc = replay(out)
    paths = track_paths(doc["tracks"])
    per_track = Counter(paths[s["track"]][1] for s in doc["slices"])
    report = json.loads((tmp_path / "layer.json").read_text())
    ops = report["ops"]
    assert {paths[s["track"]][0] for s in doc["slices"]} == {"GPU 0: NVIDIA H100 SXM5 80GB (simulated, 3 engines)"}
    assert per_track["layer"] == 1
    engines = {k: v for k, v in per_track.items() if k.startswith("engine ")}
    assert sum(engines.values()) == len(ops) == 18  # fused attention: 18 kernels
    assert set(engines) <= {"engine 0", "engine 1", "engine 2"} and len(engines) >= 2
    by_name = {s["name"]: s for s in doc["slices"] if paths[s["track"]][1].startswith("engine")}
    q = by_name["q_proj"]["args"]
    assert q["op type"] == "gemm" and q["FLOPs"] == 2 * 2048 * 2048 and q["bytes"] == (2048 + 2048 * 2048 + 2048) * 2
    assert q["bound"] == "memory"
    att = by_name["attention"]
    assert att["args"]["op type"] == "attention" and att["args"]["bytes"] == (2 * 32 * 64 + 2 * 8 * 257 * 64) * 2
    for s in by_name.values():  # slices are the schedule: start and duration in ns
        row = next(r for r in ops if r["op"] == s["name"])
        assert s["ts"] == round(row["start_us"] * 1e3) and s["dur"] == round(row["time_us"] * 1e3)
    sched = report["schedule"]
    assert sched["engines"] == 3 and sched["makespan_us"] >= sched["critical_path_us"] > 0
    assert "q_proj" in stdout and "makespan" in stdout


def test_engines_auto_sweeps(tmp_path):
    rc, stdout, err = cli("--preset", "qwen3-8b", "--engines", "auto", "--json", tmp_path / "r.json", "--attention", "eager")
    assert rc == 0, err
    s = json.loads((tmp_path / "r.json").read_text())["schedule"]
    assert [r["engines"] for r in s["sweep"]] == list(range(1, s["engines"] + 1))
    assert s["sweep"][-1]["makespan_us"] == s["critical_path_us"] == s["makespan_us"]
    assert all(r["makespan_us"] > s["critical_path_us"] for r in s["sweep"][:-1])
    assert "engines sweep" in stdout and f"critical-path bound: {s['engines']}" in stdout


def test_comparison_with_the_seed(shared, tmp_path, record_property):
    rc, stdout, err = cli("--preset", "llama-3.2-1b", "--seq-len", 256, "--engines", 3, "--attention", "eager",
                          "--compare-seed", shared / SEED_SIM, "--json", tmp_path / "c.json", "--png", tmp_path / "c.png")
    assert rc == 0, err
    doc = json.loads((tmp_path / "c.json").read_text())
    cmp = doc["seed_comparison"]
    assert cmp["seed_makespan_us"] == 566110 and cmp["seed_engines"] == 3
    rows = {tuple(r["seed"]): r for r in cmp["rows"]}
    assert rows[("Q Projection",)]["seed_us"] == 52428 and rows[("Q Projection",)]["layerc"] == ["q_proj"]
    assert rows[("Softmax - Find Max", "Softmax - Exponentiation", "Softmax - Normalize")]["layerc"] == ["attn_softmax"]
    assert rows[("SiLU & Mult",)]["layerc"] == ["act", "act_mul"]
    assert len(cmp["rows"]) == 19  # 21 seed events: the three softmax stages are one op
    # the seed starts the post-attention norm before the residual add it reads has ended
    assert cmp["violations"] == [{"op": "RMSNorm (post)", "start": 145513.0, "reads": "Residual Connection", "end": 145564.0}]
    assert "seed dependency violation" in stdout
    # the seed's QK^T and attention-output costs do not follow seq_len; ours do, in bytes of the cache
    assert rows[("Attention Weights (QK^T)",)]["bytes"] == (32 * 64 + 8 * 257 * 64 + 32 * 257) * 2
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    record_property("llama-3.2-1b decode layer (H100, 3 engines) makespan us", doc["schedule"]["makespan_us"])


def test_dump_layer(tmp_path):
    from layerc.backends.synth.dump import write

    write("llama", tmp_path, layers=2)
    rc, stdout, err = cli("--dump", tmp_path, "--layer", 1, "--seq-len", 1000, "--json", tmp_path / "d.json")
    assert rc == 0, err
    ops = {r["op"]: r for r in json.loads((tmp_path / "d.json").read_text())["ops"]}
    att = next(r for name, r in ops.items() if "attention" in name)
    assert att["type"] == "attention" and att["flops"] == 2 * 8 * 32 * 1001 * 2 * 128
    rc, _, err = cli("--dump", tmp_path, "--phase", "prefill")
    assert rc == 2 and "--phase describe a layer built from a config" in err


def test_pipeline_through_opt(tmp_path):
    """The passes run on a dump through ``layerc opt`` too (registered, options parsed)."""
    from layerc.backends.synth.dump import write

    write("llama", tmp_path, layers=2)
    rc, out, err = run_layerc("opt", tmp_path, "-p", "slice-layer{layer=0},cost{kv-len=512 hw=b200},schedule{engines=2}")
    assert rc == 0, err


def test_usage_errors_exit_2(tmp_path):
    for args in ([], ["--preset", "llama-3.2-1b", "--config", "x.json"], ["--preset", "gpt-5"],
                 ["--preset", "llama-3.2-1b", "--engines", "0"], ["--preset", "llama-3.2-1b", "--seq-len", "-3"]):
        rc, _, err = cli(*args)
        assert rc == 2, args
        assert "error:" in err


def test_bad_config_is_reported_at_its_line(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{\n  "model_type": "llama",\n  "hidden_size": 2048,\n  "intermediate_size": 0,\n'
                   '  "num_attention_heads": 32\n}\n')
    out = tmp_path / "never.pftrace"
    proc = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "simulate", "--config", str(cfg), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[0] == f"{cfg}:4:24: error: 'intermediate_size' must be an integer >= 1, not 0"
    assert lines[1:] == ['  "intermediate_size": 0,', " " * 23 + "^"]
    assert not out.exists() and list(tmp_path.iterdir()) == [cfg]


def test_bad_hardware_file_and_seed_trace(tmp_path):
    hw = tmp_path / "gpu.toml"
    hw.write_text('[gpu]\nmatrix_tflops = { bfloat16 = "fast" }\nvector_tflops = 1\nhbm_gbps = 1\n')
    rc, _, err = cli("--preset", "llama-3.2-1b", "--hw", hw)
    assert rc == 1 and err.startswith(f"{hw}:2:17: error: 'matrix_tflops' must be a table")
    seed = tmp_path / "seed.json"
    seed.write_text('{"traceEvents": [\n{"ph": "X", "name": "a", "ts": 1, "dur": 2},\n]}')
    rc, _, err = cli("--preset", "llama-3.2-1b", "--compare-seed", seed)
    assert rc == 1 and err.startswith(f"{seed}:3:1: error: invalid JSON")
