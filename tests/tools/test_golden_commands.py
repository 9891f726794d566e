"""Every command's outputs, byte for byte, on every real sample in ../shared/data and on generator
outputs: the guard that a restructuring changes no behaviour.

Each case runs one ``layerc`` command line in process and compares its stdout and every file it
writes with ``tests/golden/commands/<case>/``. Paths are written as ``$OUT``/``$DATA``/``$PKG`` so
the goldens do not depend on where the checkout lives. A file over ``INLINE_LIMIT`` is kept as its
size and SHA-256 (``<name>.sha256``). Pictures (PNG/SVG) depend on the renderer's version and are
checked elsewhere. ``LAYERC_UPDATE_GOLDEN=1`` rewrites the goldens after a deliberate change.
"""

from __future__ import annotations

import hashlib
import re
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import SHARED, TESTS
from tests.layerc_cli import run_layerc

GOLDEN = TESTS / "golden" / "commands"
PKG = TESTS / "optrace_pkg"
INLINE_LIMIT = 96 * 1024
UPDATE = os.environ.get("LAYERC_UPDATE_GOLDEN") == "1"
SKIP_SUFFIXES = (".png", ".svg")

TRACES = sorted(p.name for p in (SHARED / "data" / "traces" / "torch").glob("*.json.gz")) if SHARED.is_dir() else []
NSYS = sorted(p.name for p in (SHARED / "data" / "traces" / "nsys").glob("*.sqlite")) if SHARED.is_dir() else []

#: inputs the generators make once per session: name → generator command lines ($GEN is the folder)
GENERATED = [
    ("gen-dump", "deepseek_v3", "$GEN/ds", "--layers", "4"),
    ("gen-dump", "llama", "$GEN/llama", "--layers", "3", "--symbolic"),
    ("gen-dump", "qwen3_next", "$GEN/qnext", "--layers", "4"),
    ("gen-dump", "nemotron_h", "$GEN/nemo", "--layers", "6"),
    ("gen-kernels", "$GEN/ds", "-o", "$GEN/ds_replay.json.gz", "--replays", "2"),
    ("gen-trace", "$GEN/serving.json.gz", "--model", "deepseek_v3", "--tp", "8", "--layers", "4"),
    ("gen-trace", "$GEN/vllm.json.gz", "--model", "llama", "--layers", "3", "--modules", "tree",
     "--graphs", "full_and_piecewise"),
    ("gen-trace", "$GEN/rocm.json.gz", "--model", "qwen3", "--vendor", "rocm", "--layers", "3"),
    ("gen-nsys", "$GEN/node.sqlite", "--layers", "4", "--replays", "2"),
    ("gen-nsys", "$GEN/graph.sqlite", "--mode", "graph", "--schema", "3.13", "--layers", "3"),
    ("gen-mem", "$GEN/ws"),
    ("gen-mem", "$GEN/ws_random", "--example", "random", "--kernels", "3", "--seed", "7"),
]


def _cases() -> list[tuple[str, tuple[str, ...]]]:
    cases: list[tuple[str, tuple[str, ...]]] = []
    for name in TRACES + NSYS:
        src = f"$DATA/traces/{'torch' if name in TRACES else 'nsys'}/{name}"
        stem = name.removesuffix(".json.gz").removesuffix(".sqlite")
        cases.append((f"trace-{stem}", ("trace", src, "--json", "$OUT/t.json", "--csv", "$OUT/t.csv")))
        cases.append((f"perfetto-{stem}", ("perfetto", src, "-o", "$OUT/p.json", "--format", "json")))
    cases += [
        ("trace-motif-qwen-h100", ("trace", "$DATA/traces/torch/hf_qwen1.5-0.5b_h100.json.gz", "--strategy", "motif",
                                   "--stage", "all", "--top-n", "5", "--json", "$OUT/t.json")),
        ("trace-serving", ("trace", "$GEN/serving.json.gz", "--num-layers", "4", "--json", "$OUT/t.json",
                           "--perfetto", "$OUT/t.pftrace")),
        ("trace-vllm", ("trace", "$GEN/vllm.json.gz", "--json", "$OUT/t.json")),
        ("trace-rocm", ("trace", "$GEN/rocm.json.gz", "--json", "$OUT/t.json", "--csv", "$OUT/t.csv")),
        ("trace-nsys-node", ("trace", "$GEN/node.sqlite", "--json", "$OUT/t.json")),
        ("trace-nsys-graph", ("trace", "$GEN/graph.sqlite", "--json", "$OUT/t.json")),
        ("replay-serving", ("replay", "$GEN/serving.json.gz", "-o", "$OUT/r.json")),
        ("replay-nsys-node", ("replay", "$GEN/node.sqlite", "--replay", "1", "-o", "$OUT/r.json")),
        ("perfetto-serving", ("perfetto", "$GEN/serving.json.gz", "-o", "$OUT/p.pftrace")),
        ("layer-ds", ("layer", "$GEN/ds", "2", "-o", "$OUT", "--format", "json,dot", "--trace", "$GEN/ds_replay.json.gz")),
        ("layer-llama", ("layer", "$GEN/llama", "1", "-o", "$OUT", "--format", "json,dot")),
        ("layer-qnext", ("layer", "$GEN/qnext", "3", "-o", "$OUT", "--format", "json,dot")),
        ("layer-nemo", ("layer", "$GEN/nemo", "4", "-o", "$OUT", "--format", "json")),
        ("opt-ds", ("opt", "$GEN/ds", "-p", "tag-weights,slice-layers,infer-groups")),
        ("opt-ds-json", ("opt", "$GEN/ds", "-p", "dce,slice-layer{layer=1}", "--emit", "json", "-o", "$OUT/m.json")),
        ("opt-llama-fx", ("opt", "$GEN/llama", "-p", "dce,tag-weights", "--emit", "fx")),
        ("opt-llama-cost-unbound", ("opt", "$GEN/llama", "-p", "specialize-shapes,cost")),
        ("opt-ds-cost", ("opt", "$GEN/ds", "-p", "cost{kv-len=2048 hw=h100},schedule{engines=2}", "--emit", "json", "-o", "$OUT/m.json")),
        ("opt-unknown-pass", ("opt", "$GEN/ds", "-p", "dce,detect-layers")),
        ("mem-ws", ("mem", "$GEN/ws", "-o", "$OUT", "--no-render")),
        ("mem-random", ("mem", "$GEN/ws_random", "-o", "$OUT", "--no-render", "--combine")),
        ("optrace-tinyllm", ("optrace", "$PKG/tinyllm", "--entry", "TinyForCausalLM", "-o", "$OUT/ops.md", "--json", "$OUT/ops.json",
                             "--kernel-traces", "$OUT/kernels.md", "--link-prefix", "src/")),
        ("optrace-tinyllm-configured", ("optrace", "$PKG/tinyllm", "--entry", "TinyForCausalLM", "--platform", "rocm",
                                        "--phase", "decode", "--json", "$OUT/ops.json")),
        ("simulate-llama", ("simulate", "--preset", "llama-3.1-8b", "--hw", "h100", "--engines", "4",
                            "-o", "$OUT/sim.json", "--json", "$OUT/sim_report.json")),
        ("simulate-ds-prefill", ("simulate", "--preset", "deepseek-v3", "--phase", "prefill", "--seq-len", "512",
                                 "--tp", "8", "--json", "$OUT/sim_report.json", "-o", "$OUT/sim.pftrace")),
        ("simulate-dump", ("simulate", "--dump", "$GEN/ds", "--layer", "2", "--json", "$OUT/sim_report.json",
                           "-o", "$OUT/sim.json")),
    ]
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    gen = tmp_path_factory.mktemp("gen")
    for argv in GENERATED:
        rc, _, err = run_layerc(*(a.replace("$GEN", str(gen)) for a in argv))
        assert rc == 0, f"{argv}: {err}"
    return gen


def _expand(argv: tuple[str, ...], out: Path, gen: Path) -> list[str]:
    subs = {"$OUT": str(out), "$DATA": str(SHARED / "data"), "$GEN": str(gen), "$PKG": str(PKG)}
    expanded = []
    for a in argv:
        for key, value in subs.items():
            a = a.replace(key, value)
        expanded.append(a)
    return expanded


def _normalize(data: bytes, out: Path, gen: Path) -> bytes:
    for path, key in ((out, "$OUT"), (gen, "$GEN"), (SHARED / "data", "$DATA"), (PKG, "$PKG")):
        data = data.replace(str(path).encode(), key.encode())
    return data


def _sizes(text: bytes) -> bytes:
    """A report's byte counts depend on the length of the paths a file embeds (the checkout's
    place): the files themselves are compared, the counts are not."""
    return re.sub(rb"\b[\d,]+ bytes\b", b"N bytes", text)


def _outputs(rc: int, stdout: str, stderr: str, out: Path, gen: Path) -> dict[str, bytes]:
    found = {"status": f"{rc}\n".encode(), "stdout": _sizes(_normalize(stdout.encode(), out, gen)),
             "stderr": _sizes(_normalize(stderr.encode(), out, gen))}
    for path in sorted(out.rglob("*")):
        if path.is_file() and not path.name.endswith(SKIP_SUFFIXES):
            found["out/" + path.relative_to(out).as_posix()] = _normalize(path.read_bytes(), out, gen)
    return found


def _stored(data: bytes) -> tuple[str, bytes]:
    """How one output is kept: inline when small, else its size and digest."""
    if len(data) <= INLINE_LIMIT:
        return "", data
    return ".sha256", f"{len(data)} {hashlib.sha256(data).hexdigest()}\n".encode()


def _diff(golden: bytes, found: bytes) -> str:
    """The first lines of a unified diff (text), or the sizes (a digest or binary)."""
    import difflib

    try:
        lines = difflib.unified_diff(golden.decode().splitlines(), found.decode().splitlines(), "golden", "now", lineterm="")
        return "\n".join(list(lines)[:40])
    except UnicodeDecodeError:
        return f"{len(golden)} bytes before, {len(found)} now"


@pytest.mark.parametrize("case,argv", CASES, ids=[c for c, _ in CASES])
def test_command_outputs_match_golden(case, argv, generated, tmp_path, shared):
    out = tmp_path / "out"
    out.mkdir()
    rc, stdout, stderr = run_layerc(*_expand(argv, out, generated))
    found = _outputs(rc, stdout, stderr, out, generated)
    folder = GOLDEN / case
    if UPDATE:
        shutil.rmtree(folder, ignore_errors=True)
        for name, data in found.items():
            suffix, kept = _stored(data)
            target = folder / (name + suffix)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(kept)
        return
    assert folder.is_dir(), f"no golden for {case}: run with LAYERC_UPDATE_GOLDEN=1"
    expected = {p.relative_to(folder).as_posix().removesuffix(".sha256") for p in folder.rglob("*") if p.is_file()}
    assert set(found) == expected, f"{case}: outputs differ in name"
    for name, data in found.items():
        suffix, kept = _stored(data)
        golden = (folder / (name + suffix)).read_bytes()
        assert kept == golden, f"{case}: {name} differs from the golden:\n{_diff(golden, kept)}"
