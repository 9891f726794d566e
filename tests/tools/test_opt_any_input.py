"""``layerc opt INPUT -p PIPELINE`` on every input kind: the reader is chosen from the content,
every registered pass runs on its IR, and the passes a pass requires run first, visibly."""

from __future__ import annotations

import gzip
from importlib.util import find_spec
from pathlib import Path

import pytest

from layerc.grammar.input_kinds import input_kind
from layerc.ir.diagnostics import LayercError
from layerc.passes.registry import BUILTIN_PASSES, get_all_passes, pass_ir
from tests.conftest import SHARED, TESTS
from tests.layerc_cli import run_layerc

PKG = TESTS / "optrace_pkg" / "tinyllm"
TRACE = SHARED / "data" / "traces" / "torch" / "hf_bert-small_h100.json.gz"
NSYS = SHARED / "data" / "traces" / "nsys" / "pipit_saxpy_schema2.9.1.sqlite"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("inputs")
    for argv in (("gen-dump", "llama", d / "dump", "--layers", "3"), ("gen-kernels", d / "dump", "-o", d / "replay.json.gz"),
                 ("gen-mem", d / "ws"), ("gen-mem", d / "ws.log", "--log")):
        rc, _, err = run_layerc(*argv)
        assert rc == 0, err
    return {"graph": d / "dump", "trace": TRACE, "mem": d / "ws", "optree": PKG, "replay": d / "replay.json.gz",
            "log": d / "ws.log"}


#: the options a pass cannot run without, as pipeline text (the rest run with their defaults)
NEEDS = {
    "bind-kernels": "bind-kernels{trace=$REPLAY phase=decode}",
    "cost": "cost{kv-len=256}",
    "schedule": "cost{kv-len=256},schedule",
    "profile-ops": "profile-ops{arch=llama layers=1}",
}


def test_every_pass_has_a_case_here():
    assert set(get_all_passes()) == set(BUILTIN_PASSES)  # no plugin passes installed in the test environment


@pytest.mark.parametrize("name", sorted(BUILTIN_PASSES))
def test_every_registered_pass_runs_from_opt_on_its_ir(name, inputs):
    ir = pass_ir(name)
    source, extra = inputs[ir], []
    if ir == "optree":
        extra = ["--entry", "TinyForCausalLM"]
    if name == "profile-ops":
        if find_spec("transformers") is None:
            pytest.skip("profile-ops needs the [torch] extra")
        import transformers

        source = Path(transformers.__file__).parent / "models" / "llama" / "modeling_llama.py"
        extra = ["--entry", "LlamaForCausalLM"]
    pipeline = NEEDS.get(name, name).replace("$REPLAY", str(inputs["replay"]))
    rc, out, err = run_layerc("opt", source, "-p", pipeline, *extra)
    assert rc == 0, err
    assert out.strip(), f"{name}: no module printed"


@pytest.mark.parametrize("kind", ["graph", "trace", "mem", "optree"])
def test_the_reader_is_chosen_from_the_content(kind, inputs, tmp_path):
    assert input_kind(inputs[kind]) == kind
    # names say nothing: a trace, a log and a dump under misleading names are still told apart
    for src, expected in ((TRACE, "trace"), (NSYS, "trace"), (inputs["log"], "mem"),
                          (sorted(inputs["graph"].glob("*.txt"))[-1], "graph")):
        renamed = tmp_path / f"input_{expected}.py.txt"
        renamed.write_bytes(src.read_bytes())
        assert input_kind(renamed) == expected, src


def test_a_compressed_log_is_a_memory_plan(inputs, tmp_path):
    packed = tmp_path / "ws.log.gz"
    packed.write_bytes(gzip.compress(inputs["log"].read_bytes()))
    assert input_kind(packed) == "mem"
    rc, out, err = run_layerc("opt", packed, "-p", "mem-liveness")
    assert rc == 0, err
    assert out.startswith('kernel "')


def test_inputs_of_no_kind_are_clear_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(LayercError, match="no input layerc reads in this directory"):
        input_kind(tmp_path / "empty")
    (tmp_path / "nothing.txt").write_bytes(b"")
    rc, _, err = run_layerc("opt", tmp_path / "nothing.txt", "-p", "dce")
    assert rc == 1 and "the file is empty" in err


def test_a_pass_of_another_ir_is_a_located_error(inputs):
    rc, _, err = run_layerc("opt", TRACE, "-p", "classify-kernels,slice-layers")
    assert rc == 1
    assert "<pipeline>:1:18: error: pass 'slice-layers' runs on the graph IR" in err
    assert "classify-kernels,slice-layers\n                 ^" in err


def test_dump_options_on_other_inputs_are_usage_errors(inputs):
    rc, _, err = run_layerc("opt", TRACE, "--section", "x")
    assert rc == 2 and "--section applies to a dump" in err
    rc, _, err = run_layerc("opt", inputs["optree"], "-p", "trace-ops")
    assert rc == 1 and "--entry CLASS" in err
    rc, _, err = run_layerc("opt", TRACE, "--emit", "ad")
    assert rc == 2 and "--emit ad: the trace IR is written as text, json, csv, table, pftrace, chrome-json" in err
    rc, _, err = run_layerc("opt", TRACE, "--emit", "bogus")
    assert rc == 2 and "--emit bogus: no such format" in err


def test_required_passes_show_in_print_ir_after_all_and_timing(inputs):
    rc, out, err = run_layerc("opt", inputs["graph"], "-p", "slice-layer{layer=1}", "--print-ir-after-all", "--timing")
    assert rc == 0, err
    dumps = [line for line in err.splitlines() if line.startswith("// -----// IR Dump After")]
    assert dumps == [f"// -----// IR Dump After {p} //----- //" for p in ("tag-weights", "slice-layers", "slice-layer{layer=1}")]
    timed = [line.split()[-1] for line in err.splitlines() if line.strip().endswith(("tag-weights", "slice-layers", "slice-layer"))]
    assert timed == ["tag-weights", "slice-layers", "slice-layer"]
    # the same on a trace: type-layers requires detect-layers, which requires classify-kernels
    rc, out, err = run_layerc("opt", TRACE, "-p", "type-layers", "--print-ir-after-all")
    assert rc == 0, err
    assert [line.split()[5] for line in err.splitlines() if "IR Dump After" in line] == \
        ["classify-kernels", "detect-layers", "type-layers"]
    assert "layers strategy=ground-truth" in out and " LINEAR pass=0 layer=0 stage=" in out


def test_a_trace_pipeline_gives_the_layers_trace_finds(inputs):
    rc, out, _ = run_layerc("opt", TRACE, "-p", "classify-kernels,detect-layers{strategy=ground-truth}")
    assert rc == 0
    header = out.splitlines()[1]
    assert header.startswith("  layers strategy=ground-truth") and header.endswith("per_pass=[4]")  # BERT-small: 4 layers
    kernels = [line for line in out.splitlines()[2:]]
    assert len(kernels) == 60  # every kernel, one line each (MANIFEST: 60 kernels)


@pytest.mark.parametrize("ir,argv", [
    ("trace", ("trace", TRACE, "--strategy", "motif", "--split-half-layers")),
    ("graph", ("layer", "$GRAPH", "1", "--pattern", "layers_(\\d+)_")),
    ("mem", ("mem", "$MEM", "--arch", "sm100")),
    ("optree", ("optrace", PKG, "--entry", "TinyForCausalLM")),
    ("graph", ("simulate", "--preset", "llama-3.1-8b", "--engines", "2", "--hw", "b200")),
])
def test_each_command_is_a_named_pipeline_that_opt_runs(ir, argv, inputs):
    """``--print-pipeline`` gives the command's pipeline as text that ``opt -p`` builds and runs on
    the same input."""
    from layerc.passes.pipeline import build_pipeline

    argv = [str(a).replace("$GRAPH", str(inputs["graph"])).replace("$MEM", str(inputs["mem"])) for a in argv]
    rc, out, err = run_layerc(*argv, "--print-pipeline")
    assert rc == 0, err
    text = out.strip()
    assert ",".join(p.pipeline_text() for p in build_pipeline(text, get_all_passes(ir))) == text
    if argv[0] in ("trace", "layer", "mem", "optrace"):
        extra = ["--entry", "TinyForCausalLM"] if ir == "optree" else []
        rc, out, err = run_layerc("opt", argv[1], "-p", text, *extra)
        assert rc == 0, err


def test_opt_on_a_trace_finds_the_layers_the_trace_command_reports(tmp_path):
    import orjson

    rc, _, err = run_layerc("trace", TRACE, "--json", tmp_path / "t.json")
    assert rc == 0, err
    found = orjson.loads((tmp_path / "t.json").read_bytes())
    rc, piped, _ = run_layerc("trace", TRACE, "--print-pipeline")
    rc, out, err = run_layerc("opt", TRACE, "-p", piped.strip())
    assert rc == 0, err
    layers = {int(w.split("=")[1]) for line in out.splitlines()[2:] for w in line.split() if w.startswith("layer=")}
    assert len(layers - {-1}) == found["num_layers"] == 4


#: (IR, format, the command that writes the same file, the file it writes, the pipeline opt runs)
SAME_FILE = [
    ("trace", "json", ("trace", TRACE, "--json", "$OUT/t.json"), "t.json", ""),
    ("trace", "csv", ("trace", TRACE, "--csv", "$OUT/t.csv"), "t.csv", ""),
    ("trace", "pftrace", ("trace", TRACE, "--perfetto", "$OUT/t.pftrace"), "t.pftrace", ""),
    ("trace", "chrome-json", ("perfetto", TRACE, "-o", "$OUT/t.json"), "t.json", ""),
    ("trace", "roofline-png", ("trace", TRACE, "--roofline", "$OUT/t.png"), "t.png", ""),
    ("graph", "layer-json", ("layer", "$IN", "1", "--format", "json", "-o", "$OUT"), "*_layer1.json", "slice-layer{layer=1}"),
    ("graph", "dot", ("layer", "$IN", "1", "--format", "dot", "-o", "$OUT"), "*_layer1.dot", "slice-layer{layer=1}"),
    ("graph", "png", ("layer", "$IN", "1", "--format", "png", "-o", "$OUT"), "*_layer1.png", "slice-layer{layer=1}"),
    ("graph", "svg", ("layer", "$IN", "1", "--format", "svg", "-o", "$OUT"), "*_layer1.svg", "slice-layer{layer=1}"),
    ("mem", "json", ("mem", "$IN", "-o", "$OUT", "--no-render", "--arch", "sm100"), "memory.json", "mem-liveness{arch=sm100}"),
    ("mem", "pftrace", ("mem", "$IN", "-o", "$OUT", "--no-render", "--arch", "sm100"), "memory.pftrace", "mem-liveness{arch=sm100}"),
]


@pytest.mark.parametrize("ir,fmt,argv,name,pipeline", SAME_FILE, ids=[f"{ir}-{fmt}" for ir, fmt, *_ in SAME_FILE])
def test_opt_emits_the_commands_files(ir, fmt, argv, name, pipeline, inputs, tmp_path):
    """Each command's files are emitters of its IR: ``opt --emit FORMAT`` writes them byte for
    byte, with the passes the output reads added to the pipeline."""
    if fmt in ("png", "svg"):
        from layerc.backends import graphviz

        if not graphviz.available():
            pytest.skip("Graphviz dot is missing")
    (tmp_path / "cmd").mkdir()
    rc, _, err = run_layerc(*[str(a).replace("$OUT", str(tmp_path / "cmd")).replace("$IN", str(inputs[ir])) for a in argv])
    assert rc == 0, err
    pipe = ("-p", pipeline) if pipeline else ()
    rc, out, err = run_layerc("opt", inputs[ir], *pipe, "--emit", fmt, "-o", tmp_path / f"opt.{fmt}")
    assert rc == 0, err
    [written] = (tmp_path / "cmd").glob(name)
    assert (tmp_path / f"opt.{fmt}").read_bytes() == written.read_bytes()


def test_every_file_output_is_checked_against_its_command():
    from layerc.backends.registry import EMITTERS

    printed = {("graph", "ad"), ("graph", "fx"), ("graph", "json"), ("graph", "meta"), ("trace", "text"), ("trace", "table"),
               ("mem", "text"), ("optree", "text")}  # what opt prints; covered elsewhere
    folders = {("trace", "parquet")}  # a directory of files: tests/backends/test_trace_parquet.py
    assert {(e.ir, e.format) for e in EMITTERS} == printed | folders | {(ir, fmt) for ir, fmt, *_ in SAME_FILE}


def test_the_table_output_is_the_trace_commands_terminal_report():
    import os
    import subprocess
    import sys

    env = {**os.environ, "COLUMNS": "120"}
    shown = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "trace", str(TRACE)], capture_output=True, text=True, env=env)
    emitted = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "opt", str(TRACE), "--emit", "table"],
                             capture_output=True, text=True, env=env)
    assert shown.returncode == emitted.returncode == 0, emitted.stderr
    assert emitted.stdout == shown.stdout and "layers per pass" in shown.stdout


@pytest.mark.parametrize("fmt", ["png", "pftrace"])
def test_binary_outputs_are_refused_on_a_terminal(fmt, inputs):
    """Bytes on a terminal garble it: a binary format needs -o (as mlir-opt refuses bitcode)."""
    import os
    import pty
    import subprocess
    import sys

    given = inputs["graph"] if fmt == "png" else TRACE
    master, slave = pty.openpty()
    try:
        rc = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "opt", str(given), "--emit", fmt],
                            stdout=slave, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(slave)
        os.close(master)
    assert rc.returncode == 1 and "refusing to write" in rc.stderr and "to a terminal" in rc.stderr
    assert "Traceback" not in rc.stderr


def test_a_binary_output_streams_into_a_fifo(tmp_path):
    """A FIFO is written in place (never replaced), and asking whether it is a terminal must not
    open it: that would end its reader's input before the output comes."""
    import os
    import subprocess
    import sys
    import threading

    fifo = tmp_path / "out.pftrace"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    rc = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "opt", str(TRACE), "--emit", "pftrace", "-o", str(fifo)],
                        capture_output=True, text=True, timeout=120)
    reader.join(timeout=60)
    assert rc.returncode == 0, rc.stderr
    assert fifo.is_fifo() and len(got[0]) > 1000
    rc = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "opt", str(TRACE), "--emit", "pftrace", "-o", str(tmp_path / "f.pftrace")],
                        capture_output=True, timeout=120)
    assert got[0] == (tmp_path / "f.pftrace").read_bytes()


def test_opt_says_what_the_reader_and_the_layer_search_warn(tmp_path):
    """A trace's warnings reach opt's diagnostics as they reach `layerc trace`'s: the reader's (a
    CUDA graph traced as a whole) and the layer search's ("no layer structure found")."""
    single = SHARED / "data" / "traces" / "torch" / "hta_triton_a100.json.gz"
    rc, _, err = run_layerc("opt", single, "--emit", "csv")
    assert rc == 0 and "warning: no layer structure found" in err
    rc, _, err = run_layerc("opt", single, "--emit", "csv", "--werror")
    assert rc == 1 and "error: no layer structure found" in err
    graphs = tmp_path / "graphs.sqlite"
    rc, _, err = run_layerc("gen-nsys", "--mode", "graph", graphs)
    assert rc == 0, err
    rc, _, err = run_layerc("opt", graphs, "-p", "classify-kernels")
    assert rc == 0 and "warning: this export was captured with CUDA graphs traced as a whole" in err
