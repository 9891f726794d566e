"""``make pictures``: the README's pictures, each made by the command the README shows, on
generated inputs (planted differences, a planted straggler) or a shared trace; PNG into this
folder. Run from the repository root: ``python -m tests.pictures.make``."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from tests.conftest import SHARED
from tests.layerc_cli import run_layerc
from tests.passes.test_trace_diff import _pair
from tests.tools.test_trace_ranks import _job

HERE = Path(__file__).parent


def _layerc(*argv) -> str:
    rc, out, err = run_layerc(*argv)
    if rc:
        raise SystemExit(f"layerc {' '.join(map(str, argv))}: {err}")
    return out


def main() -> None:
    from layerc.backends.synth.dump import write

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        # layer 5 of a generated DeepSeek-V3 dump, bound to its kernels (the demo's picture)
        dump = write("deepseek_v3", t / "dsv3", 8, seed=1)
        _layerc("gen-kernels", dump.parent, "-o", t / "replay.json.gz")
        _layerc("layer", dump.parent, "5", "--trace", t / "replay.json.gz", "--format", "png", "-o", t)
        shutil.copy(next(t.glob("*_layer5.png")), HERE / "layer.png")
        # two traces: layer 7's o_proj 1.6x, the gate-up GEMM fused with its activation, one more all-reduce per layer
        a, b = _pair(t, 5, slower=7, fuse=True, extra_allreduce=True)
        _layerc("diff", a, b, "--png", HERE / "diff-traces.png")
        # two AutoDeploy stages of DeepSeek-V3: before and after the fusions
        before = write("deepseek_v3_prefusion", t / "before", 4, seed=1)
        after = write("deepseek_v3", t / "after", 4, seed=2, shuffle=True)
        _layerc("diff", before, after, "--png", HERE / "diff-graphs.png", "--layer", "3")
        # four ranks, rank 2 straggling in decode layer 5
        (t / "ranks").mkdir()
        _layerc("trace", _job(t / "ranks", 1), "--png", HERE / "ranks.png")
        # the measured roofline of HF Qwen on an H100
        _layerc("trace", SHARED / "data" / "traces" / "torch" / "hf_qwen1.5-0.5b_h100.json.gz", "--roofline",
                HERE / "roofline.png")
    for picture in HERE.glob("*.png"):
        _palette(picture)
    print(json.dumps({p.name: p.stat().st_size for p in sorted(HERE.glob("*.png"))}))


def _palette(path: Path) -> None:
    """The picture in 256 colours (flat fills and text lose nothing; the file is a third)."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


if __name__ == "__main__":
    main()
