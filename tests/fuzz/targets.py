"""Every reader as a fuzz target: a valid sample made once, and the command lines that read it.

A target's sample is one file (``file``) or a directory with one file to mutate in it
(``member``). Command lines name the mutated input ``{in}``, an output directory ``{out}``, and
for pipelines the mutated text ``{text}``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.mutators import SQLITE_CLASSES, TEXT_CLASSES

ROOT = Path(__file__).resolve().parents[2]
LAYERC = (sys.executable, "-m", "layerc.tools.driver")


@dataclass(frozen=True)
class Target:
    name: str
    commands: tuple[tuple[str, ...], ...]
    classes: tuple[str, ...] = TEXT_CLASSES
    member: str | None = None  #: in a directory sample, the file that is mutated (a glob)
    sqlite: bool = False
    argument: bool = False  #: the mutated text is a command-line argument, not a file


TARGETS = (
    Target("autodeploy_dump", (("opt", "{in}"), ("layer", "{in}", "0", "-o", "{out}", "--format", "json,dot"))),
    Target("autodeploy_symbolic", (("opt", "{in}"), ("simulate", "--dump", "{in}", "--json", "{out}/s.json"))),
    Target("fx_print", (("opt", "{in}", "--syntax", "fx"), ("layer", "{in}", "0", "-o", "{out}", "--format", "json"))),
    Target("kineto_json", (("trace", "{in}", "--json", "{out}/t.json"), ("perfetto", "{in}", "-o", "{out}/t.pftrace"),
                           ("replay", "{in}", "-o", "{out}/r.json"))),
    Target("kineto_gz", (("trace", "{in}", "--json", "{out}/t.json", "--csv", "{out}/t.csv"),)),
    Target("nsys_sqlite", (("trace", "{in}", "--json", "{out}/t.json"), ("perfetto", "{in}", "-o", "{out}/t.pftrace")),
           classes=SQLITE_CLASSES, sqlite=True),
    Target("mem_dot", (("mem", "{in}", "-o", "{out}", "--no-render"),), member="smem_liveness_*.dot"),
    Target("mem_log", (("mem", "{in}", "-o", "{out}", "--no-render"),)),
    Target("optrace_source", (("optrace", "{in}", "--entry", "TinyForCausalLM", "-o", "{out}/o.md", "--json", "{out}/o.json"),),
           member="tinyllm/models/tiny.py"),
    Target("simulate_dump", (("simulate", "--dump", "{in}", "--json", "{out}/s.json", "--engines", "2"),)),
    Target("simulate_config", (("simulate", "--config", "{in}", "--json", "{out}/s.json", "-o", "{out}/s.pftrace"),)),
    Target("seed_trace", (("simulate", "--preset", "llama-3.2-1b", "--compare-seed", "{in}", "--json", "{out}/s.json"),)),
    Target("pipeline", (("opt", "{dump}", "-p", "{text}"),), classes=("flip", "truncate", "splice", "extreme", "nesting",
                                                                    "huge_token", "type_swap"), argument=True),
)
BY_NAME = {t.name: t for t in TARGETS}

PIPELINE = b"select-graph{section=monolithic.model},tag-weights{pattern=''},slice-layers,dce,infer-groups"
CONFIG = b"""{
  "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
  "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "head_dim": 16,
  "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "max_position_embeddings": 512, "torch_dtype": "bfloat16"
}
"""


def _layerc(*args) -> None:
    r = subprocess.run([*LAYERC, *map(str, args)], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"making a fuzz sample failed: layerc {' '.join(map(str, args))}\n{r.stderr}")


def make_samples(work: Path) -> dict[str, Path]:
    """A valid sample of every target under ``work`` (made once; reused when present)."""
    work.mkdir(parents=True, exist_ok=True)
    done = work / ".complete"
    out = {
        "autodeploy_dump": work / "dump" / "llama.txt", "autodeploy_symbolic": work / "dump" / "llama_sym.txt",
        "fx_print": work / "dump" / "llama_fx.txt", "kineto_json": work / "trace.json", "kineto_gz": work / "trace.json.gz",
        "nsys_sqlite": work / "nsys.sqlite", "mem_dot": work / "ws", "mem_log": work / "ws.log",
        "optrace_source": work / "optrace", "simulate_dump": work / "dump" / "llama.txt",
        "simulate_config": work / "config.json", "seed_trace": work / "seed.json", "pipeline": work / "pipeline.txt",
    }
    if done.exists():
        return out
    (work / "dump").mkdir(exist_ok=True)
    for symbolic, name in ((False, "llama.txt"), (True, "llama_sym.txt")):
        gen = work / ("gen_sym" if symbolic else "gen")
        _layerc("gen-dump", "llama", gen, "--layers", "2", *(["--symbolic"] if symbolic else []))
        shutil.copy(next(p for p in gen.glob("*.txt")), work / "dump" / name)
    _layerc("opt", work / "dump" / "llama.txt", "--emit", "fx", "-o", work / "dump" / "llama_fx.txt")
    _layerc("gen-trace", work / "trace.json", "--layers", "2", "--decode", "1")
    _layerc("gen-trace", work / "trace.json.gz", "--layers", "2", "--decode", "1", "--seed", "1")
    _layerc("gen-nsys", work / "nsys.sqlite", "--layers", "2", "--replays", "1")
    _layerc("gen-mem", work / "ws")
    _layerc("gen-mem", work / "ws.log", "--log")
    shutil.copytree(ROOT / "tests" / "optrace_pkg", work / "optrace", dirs_exist_ok=True)
    (work / "config.json").write_bytes(CONFIG)
    _layerc("simulate", "--preset", "llama-3.2-1b", "-o", work / "seed.json", "--engines", "2")
    (work / "pipeline.txt").write_bytes(PIPELINE)
    done.touch()
    return out
