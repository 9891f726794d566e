"""Every reader as a fuzz target: valid samples made once, and the command lines that read them.

A sample is one file, or a directory in which one member (drawn from ``member``, a glob) is
mutated. Command lines name the mutated input ``{in}``, an output directory ``{out}``, a valid
companion input ``{with}`` (a copy of another target's first sample: the dump a pipeline runs
on, the trace kernel tables classify, the config a hardware file serves) and, for a target whose
input is a command-line argument, the mutated text ``{text}``.

Samples come from layerc's generators (gen-dump, gen-trace, gen-nsys, gen-mem, gen-kernels,
simulate), from ``layerc export-hf`` when torch is installed (a real torch.fx print and the
AutoDeploy dump of the same model), from tests/ (real AutoDeploy dumps, the optrace package) and
from the real traces in ../shared/data when it is there (the small ones: a case copies and
mutates its input whole).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.mutators import ARGUMENT_CLASSES, PACKED_CLASSES, SQLITE_CLASSES, TEXT_CLASSES

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
LAYERC = (sys.executable, "-m", "layerc.tools.driver")
#: Real compressed traces at most this size are samples (they are inflated and mutated per case).
SHARED_TRACE_LIMIT = 128 << 10


@dataclass(frozen=True)
class Target:
    name: str
    commands: tuple[tuple[str, ...], ...]
    classes: tuple[str, ...] = TEXT_CLASSES
    member: str | None = None  #: in a directory sample, the files one of which is mutated (a glob)
    sqlite: bool = False
    packed: bool = False  #: gzip samples, mutated inside (and their compressed bytes damaged)
    argument: bool = False  #: the mutated text is a command-line argument, not a file
    companion: str | None = None  #: the target whose first sample is ``{with}``


TARGETS = (
    Target("autodeploy_dump", (("opt", "{in}"), ("layer", "{in}", "0", "-o", "{out}", "--format", "json,dot"),
                               ("opt", "{in}", "--emit", "fx", "-o", "{out}/fx.txt"))),
    Target("autodeploy_symbolic", (("opt", "{in}", "--emit", "json", "-o", "{out}/ir.json"),
                                   ("simulate", "--dump", "{in}", "--json", "{out}/s.json"))),
    Target("fx_print", (("opt", "{in}", "--syntax", "fx"),
                        ("layer", "{in}", "0", "-o", "{out}", "--format", "json,dot", "--syntax", "fx"))),
    Target("kineto_json", (("trace", "{in}", "--json", "{out}/t.json"), ("perfetto", "{in}", "-o", "{out}/t.pftrace"),
                           ("replay", "{in}", "-o", "{out}/r.json"))),
    Target("kineto_gz", (("trace", "{in}", "--json", "{out}/t.json", "--csv", "{out}/t.csv"),
                         ("perfetto", "{in}", "-o", "{out}/t.json")), classes=PACKED_CLASSES, packed=True),
    Target("bound_trace", (("layer", "{with}", "0", "--trace", "{in}", "-o", "{out}", "--format", "json"),),
           classes=PACKED_CLASSES, packed=True, companion="autodeploy_dump"),
    Target("nsys_sqlite", (("trace", "{in}", "--json", "{out}/t.json"), ("perfetto", "{in}", "-o", "{out}/t.pftrace"),
                           ("replay", "{in}", "-o", "{out}/r.json")), classes=SQLITE_CLASSES, sqlite=True),
    Target("kernel_tables", (("trace", "{with}", "--kernel-tables", "{in}", "--json", "{out}/t.json"),),
           member="*.toml", companion="kineto_json"),
    Target("mem_dot", (("mem", "{in}", "-o", "{out}", "--no-render"),), member="*.dot"),
    Target("mem_log", (("mem", "{in}", "-o", "{out}", "--no-render"),)),
    Target("optrace_entry", (("optrace", "{in}", "--entry", "TinyForCausalLM", "-o", "{out}/o.md", "--json", "{out}/o.json"),),
           member="tinyllm/models/tiny.py"),  # the module that defines the entry class: always read whole
    Target("optrace_package", (("optrace", "{in}", "--entry", "TinyForCausalLM", "-o", "{out}/o.md"),), member="**/*.py"),
    Target("simulate_dump", (("simulate", "--dump", "{in}", "--json", "{out}/s.json", "--engines", "2"),)),
    Target("simulate_config", (("simulate", "--config", "{in}", "--json", "{out}/s.json", "-o", "{out}/s.pftrace"),)),
    Target("simulate_hw", (("simulate", "--config", "{with}", "--hw", "{in}", "--json", "{out}/s.json"),),
           companion="simulate_config"),
    Target("seed_trace", (("simulate", "--preset", "llama-3.2-1b", "--compare-seed", "{in}", "--json", "{out}/s.json"),)),
    Target("pipeline", (("opt", "{with}", "-p", "{text}"),), classes=ARGUMENT_CLASSES, argument=True,
           companion="autodeploy_dump"),
)
BY_NAME = {t.name: t for t in TARGETS}

PIPELINE = b"select-graph{section=monolithic.model},tag-weights{pattern=''},slice-layers,dce,infer-groups"
CONFIG = b"""{
  "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
  "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "head_dim": 16,
  "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "max_position_embeddings": 512, "torch_dtype": "bfloat16"
}
"""
HARDWARE = b"""# one accelerator, in the format of passes/data/hardware.toml
[defaults]
launch_overhead_us = 2.5

[my_gpu]
name = "My GPU 80GB"
matrix_tflops = { bfloat16 = 989.4, float16 = 989.4, float8 = 1978.9, float32 = 494.7 }
vector_tflops = 66.9
hbm_gbps = 3352.0
interconnect_gbps = 450.0
matrix_efficiency = [[0, 0.1], [1, 0.6], [16, 0.9], [128, 0.95]]
"""
#: Built-in kernel tables copied as a directory of extra tables (their regexes are inputs too).
KERNEL_TABLES = ("triton.toml", "nccl.toml", "moe.toml")


def layerc(*args, cwd: Path = ROOT) -> None:
    """Run a generator; a failure here is a broken campaign, not a finding."""
    r = subprocess.run([*LAYERC, *map(str, args)], capture_output=True, text=True, cwd=cwd)
    if r.returncode != 0:
        raise RuntimeError(f"making a fuzz sample failed: layerc {' '.join(map(str, args))}\n{r.stderr}")


def make_samples(work: Path) -> dict[str, list[Path]]:
    """Valid samples of every target under ``work`` (made once; reused when present)."""
    work.mkdir(parents=True, exist_ok=True)
    done = work / ".complete"
    if not done.exists():
        _generate(work)
        done.touch()
    return _collect(work)


def _generate(work: Path) -> None:
    for d in ("dump", "fx", "kineto", "nsys", "mem", "seed", "hw", "tables"):
        (work / d).mkdir(exist_ok=True)
    jobs = [
        ("gen-dump", "llama", work / "gen", "--layers", "2"),
        ("gen-dump", "llama", work / "gen_sym", "--layers", "2", "--symbolic"),
        ("gen-dump", "llama", work / "gen_const", "--layers", "2", "--symbolic", "--constants"),
        ("gen-trace", work / "kineto" / "gen.json", "--layers", "2", "--decode", "1"),
        ("gen-trace", work / "kineto" / "gen.json.gz", "--layers", "2", "--decode", "1", "--seed", "1", "--spans"),
        ("gen-nsys", work / "nsys" / "gen.sqlite", "--layers", "2", "--replays", "1"),
        ("gen-mem", work / "mem" / "fa_bwd"),
        ("gen-mem", work / "mem" / "random", "--example", "random", "--kernels", "3", "--seed", "1"),
        ("gen-mem", work / "mem" / "fa_bwd.log", "--log"),
        ("simulate", "--preset", "llama-3.2-1b", "-o", work / "seed" / "gen.json", "--engines", "2"),
    ]
    if _has_torch():
        jobs.append(("export-hf", "--arch", "llama", "--layers", "2", work / "hf"))
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda args: layerc(*args), jobs))
    for name, gen in (("gen.txt", work / "gen"), ("gen_sym.txt", work / "gen_sym"), ("gen_const.txt", work / "gen_const")):
        shutil.copy(sorted(gen.glob("*.txt"))[0], work / "dump" / name)
    layerc("opt", work / "dump" / "gen.txt", "--emit", "fx", "-o", work / "fx" / "emitted.txt")
    # every constant class, strings split by op schemas, in both syntaxes
    layerc("opt", work / "dump" / "gen_const.txt", "--emit", "fx", "-o", work / "fx" / "emitted_constants.txt")
    layerc("gen-kernels", work / "dump" / "gen.txt", "-o", work / "kineto" / "bound.json.gz")
    if (work / "hf").is_dir():
        shutil.copy(work / "hf" / "fx_graph.txt", work / "fx" / "torch_fx.txt")
        shutil.copy(sorted((work / "hf").glob("0*.txt"))[0], work / "dump" / "export_hf.txt")
    for real in sorted((ROOT / "tests" / "data").glob("*.txt")):
        shutil.copy(real, work / "dump" / f"real_{real.name}")
    shutil.copytree(ROOT / "tests" / "optrace_pkg", work / "optrace", dirs_exist_ok=True)
    (work / "config.json").write_bytes(CONFIG)
    (work / "hw" / "my_gpu.toml").write_bytes(HARDWARE)
    for name in KERNEL_TABLES:
        shutil.copy(ROOT / "passes" / "data" / "kernels" / name, work / "tables" / name)
    (work / "pipeline.txt").write_bytes(PIPELINE)
    _copy_shared(work)


def _has_torch() -> bool:
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


def _copy_shared(work: Path) -> None:
    """The real traces beside the checkout: small Kineto traces, both nsys exports, the seed's."""
    if not SHARED.is_dir():
        return
    for p in sorted((SHARED / "traces" / "torch").glob("*.json.gz")):
        if p.stat().st_size <= SHARED_TRACE_LIMIT:
            shutil.copy(p, work / "kineto" / f"real_{p.name}")
    for p in sorted((SHARED / "traces" / "nsys").glob("*.sqlite")):
        shutil.copy(p, work / "nsys" / f"real_{p.name}")
    for p in sorted((SHARED / "seed004").glob("*.json")):
        shutil.copy(p, work / "seed" / f"real_{p.name}")
    for p in (work / "nsys", work / "seed", work / "kineto"):
        for f in p.iterdir():
            f.chmod(0o644)  # shared/ is read-only; the copies are mutated and removed


def _collect(work: Path) -> dict[str, list[Path]]:
    gen = work / "dump" / "gen.txt"  # first: the companion of pipeline and bound_trace (its kernels)
    plain = [gen] + [p for p in sorted((work / "dump").glob("*.txt")) if p.name not in ("gen.txt", "gen_sym.txt")]
    kineto_gz = sorted((work / "kineto").glob("*.json.gz"))
    return {
        "autodeploy_dump": plain, "autodeploy_symbolic": [work / "dump" / "gen_sym.txt"],
        "fx_print": sorted((work / "fx").glob("*.txt")),
        "kineto_json": [work / "kineto" / "gen.json"], "kineto_gz": [p for p in kineto_gz if p.name != "bound.json.gz"],
        "bound_trace": [work / "kineto" / "bound.json.gz"],
        "nsys_sqlite": sorted((work / "nsys").glob("*.sqlite")), "kernel_tables": [work / "tables"],
        "mem_dot": [work / "mem" / "fa_bwd", work / "mem" / "random"], "mem_log": [work / "mem" / "fa_bwd.log"],
        "optrace_entry": [work / "optrace"], "optrace_package": [work / "optrace"],
        "simulate_dump": [work / "dump" / "gen.txt", work / "dump" / "gen_sym.txt"],
        "simulate_config": [work / "config.json"], "simulate_hw": [work / "hw" / "my_gpu.toml"],
        "seed_trace": sorted((work / "seed").glob("*.json")), "pipeline": [work / "pipeline.txt"],
    }
