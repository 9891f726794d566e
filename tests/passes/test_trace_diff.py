"""``layerc diff``: on pairs of generated runs with known planted differences (a kernel made slower
in one layer, a fused pair in every layer, an extra all-reduce in every layer), the diff reports
exactly those, first, and nothing else above the noise; two runs of one workload that differ only
by their noise (every kernel's time drawn again, a few percent apart) show no change. (Another
seed of the generator is another workload: other prompt lengths, another interconnect speed.)"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.layerc_cli import run_layerc

LAYERS = 8


def _generate(path: Path, seed: int, model: str = "llama", tp: int = 2, decode: int = 4) -> tuple[dict, dict]:
    rc, _, err = run_layerc("gen-trace", path, "--model", model, "--layers", str(LAYERS), "--tp", str(tp), "--prefill", "1",
                            "--decode", str(decode), "--seed", str(seed))
    assert rc == 0, err
    truth = json.loads(path.with_name(path.name.replace(".json.gz", "_truth.json")).read_text())
    return json.loads(gzip.open(path).read()), truth


def _kernels(doc: dict, truth: dict) -> list[tuple[dict, dict]]:
    """Each kernel event with its truth (layer, stage, op), in time order."""
    events = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    by_start = {k["start"]: k for k in truth["kernels"]}
    return [(e, by_start[round(e["ts"] * 1000)]) for e in events]


def plant(doc: dict, truth: dict, slower: int | None = None, fuse: bool = False, extra_allreduce: bool = False) -> dict:
    """B: ``doc`` with the differences planted in every decode pass: the first GEMM after the
    attention of layer ``slower`` 1.6 times as long; each layer's gate-up GEMM and its activation
    fused into one kernel; one more all-reduce (the pass's own kind, as long as its first) after
    each layer's attention, the pass's later kernels moved on by its time."""
    kernels = _kernels(doc, truth)
    drop, add = set(), []
    shift, current = 0.0, None
    for i, (e, k) in enumerate(kernels):
        if k["pass"] != current:
            shift, current = 0.0, k["pass"]
        e["ts"] = round(e["ts"] + shift, 3)
        if k["stage"] != "decode" or k["layer"] is None:
            continue
        after = kernels[i - 1][1] if i else None
        if slower is not None and k["layer"] == slower and k["kernel_type"] == "LINEAR" and after and after["kernel_type"] == "ATTENTION" \
                and after["layer"] == slower:
            e["dur"] = round(e["dur"] * 1.6, 3)
        if fuse and k["kernel_type"] == "ELEMENTWISE" and after and after["kernel_type"] == "LINEAR" and after["layer"] == k["layer"]:
            prev = kernels[i - 1][0]
            prev["name"] = "fused_gemm_swiglu_kernel_bf16"
            prev["dur"] = round(e["ts"] + e["dur"] - prev["ts"], 3)
            drop.add(id(e))
        if extra_allreduce and k["kernel_type"] == "ATTENTION" and i + 1 < len(kernels) and kernels[i + 1][1]["layer"] == k["layer"] \
                and kernels[i + 1][1]["kernel_type"] == "LINEAR":
            reduce = next(x for x, y in kernels if y["pass"] == k["pass"] and y["kernel_type"] == "COMMUNICATION")
            extra = {**e, "name": reduce["name"], "ts": round(e["ts"] + e["dur"] + 0.5, 3), "dur": reduce["dur"],
                     "args": dict(e.get("args", {}))}
            add.append(extra)
            shift += reduce["dur"] + 0.5
    doc["traceEvents"] = [e for e in doc["traceEvents"] if id(e) not in drop] + add
    return doc


def jitter(doc: dict, seed: int, sigma: float = 0.05) -> dict:
    """Every kernel's time drawn again around its own (log-normal, ``sigma``): a rerun's noise."""
    import random

    rng = random.Random(seed)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["dur"] = round(e["dur"] * rng.lognormvariate(0.0, sigma), 3)
    return doc


def _write(doc: dict, path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _diff(a: Path, b: Path, tmp: Path) -> dict:
    rc, _, err = run_layerc("diff", a, b, "--json", tmp / "diff.json")
    assert rc == 0, err
    return json.loads((tmp / "diff.json").read_text())


def _pair(tmp: Path, seed: int, model: str = "llama", **planted) -> tuple[Path, Path]:
    """A and B: one workload, each rerun with its own noise; B with ``planted``."""
    doc, truth = _generate(tmp / "run.json.gz", seed, model)
    a = _write(jitter(json.loads(json.dumps(doc)), 2 * seed), tmp / "a.json.gz")
    b = _write(plant(jitter(doc, 2 * seed + 1), truth, **planted), tmp / "b.json.gz")
    return a, b


@pytest.mark.parametrize("model", ["llama", "qwen3"])  # (gpt_oss: its MoE layers have no activation after a GEMM to fuse)
@pytest.mark.parametrize("seed", [1, 5, 9])
def test_noise_alone_is_no_change(seed, model, tmp_path):
    diff = _diff(*_pair(tmp_path, seed, model), tmp_path)
    assert diff["changes"] == []
    assert not any(s["significant"] for s in diff["stages"].values())


@pytest.mark.parametrize("model", ["llama", "qwen3"])  # (gpt_oss: its MoE layers have no activation after a GEMM to fuse)
@pytest.mark.parametrize("seed", [1, 5, 9])
def test_planted_differences_are_reported_exactly_and_first(seed, model, tmp_path):
    diff = _diff(*_pair(tmp_path, seed, model, slower=7, fuse=True, extra_allreduce=True), tmp_path)
    diff = _diff(tmp_path / "a.json.gz", tmp_path / "b.json.gz", tmp_path)
    found = {(c["what"], tuple(c["where"])) for c in diff["changes"]}
    every = tuple(f"decode layer {i}" for i in range(LAYERS))
    assert ("slower", ("decode layer 7",)) in found
    assert ("fused", every) in found
    assert ("added", every) in found
    assert len(diff["changes"]) == 3, diff["changes"]
    slower = next(c for c in diff["changes"] if c["what"] == "slower")
    assert slower["kernels_a"] == slower["kernels_b"] and "LINEAR" in slower["kernels_a"][0]
    assert slower["delta_pct"] == pytest.approx(60, abs=15)
    fused = next(c for c in diff["changes"] if c["what"] == "fused")
    assert len(fused["kernels_a"]) == 2 and fused["kernels_b"] == ["fused_gemm_swiglu_kernel_bf16 (OTHER)"] or len(fused["kernels_b"]) == 1
    added = next(c for c in diff["changes"] if c["what"] == "added")
    assert added["kernels_a"] == [] and "COMMUNICATION" in added["kernels_b"][0]
