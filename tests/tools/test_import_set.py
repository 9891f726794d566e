"""Each command imports what its path needs and nothing more: start-up time is import time on a
small input (numpy is the one heavy import a trace path may pay)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import SHARED

KINETO = SHARED / "data" / "traces" / "torch" / "hf_bert-small_h100.json.gz"
NSYS = SHARED / "data" / "traces" / "nsys" / "pipit_saxpy_schema2.9.1.sqlite"

#: modules a command's path has no use for, unless it is listed as allowed
HEAVY = ("numpy", "lark", "rich", "importlib.metadata", "pydot", "orjson", "perfetto", "google.protobuf", "torch",
         "matplotlib", "PIL", "pyarrow", "pandas", "layerc.ir.graph")
#: lighter ones that the report of a small Kineto trace, timed against the floor, has no use for
#: either: 9, 2 and 3 ms of its 170 (numpy.ma comes with np.unique without indices, np.median...);
#: shutil (with bz2 and lzma, 3 ms: argparse's own help formatter asks it the terminal's width),
#: ISA-L (1 ms, for a file it inflates in less), the registry of file formats (no file is
#: written), gzip (nothing is compressed), the expected-diagnostics check
REPORT_ONLY = ("numpy.ma", "tempfile", "importlib.resources", "shutil", "bz2", "lzma", "isal", "gzip",
               "layerc.backends.registry", "layerc.ir.expected_diagnostics")

CASES = [
    # (name, argv, what it may import)
    ("help", ["--help"], ()),
    ("command help", ["trace", "--help"], ()),
    ("trace kineto", ["trace", str(KINETO)], ("numpy",)),  # (on a pipe: plain tables, no rich)
    ("trace nsys", ["trace", str(NSYS)], ("numpy", "pyarrow")),  # an export's columns come as Arrow batches
    ("trace files", ["trace", str(KINETO), "--json", "$OUT/t.json", "--csv", "$OUT/t.csv"], ("numpy", "orjson")),
    ("perfetto", ["perfetto", str(KINETO), "-o", "$OUT/t.pftrace"], ("numpy", "perfetto", "google.protobuf")),
    ("replay", ["replay", str(KINETO)], ("numpy",)),
    ("gen-dump", ["gen-dump", "llama", "$OUT/dump", "--layers", "2"], ("numpy", "layerc.ir.graph")),
]

def test_every_commands_help_loads_no_reader(tmp_path):
    """``layerc CMD --help`` configures one parser: numpy only where the options' choices come
    from data that needs it (the generators' models, the memory planner's architectures)."""
    from layerc.tools.driver import COMMANDS

    choices_from_data = {"gen-trace": ("numpy", "orjson"), "mem": ("numpy",),
                         "gen-dump": ("layerc.ir.graph",), "simulate": ("layerc.ir.graph",)}  # (simulate: its cost pass's options)
    for command in COMMANDS:
        test_a_command_imports_only_what_its_path_needs(f"{command} --help", [command, "--help"],
                                                        choices_from_data.get(command, ()), tmp_path)


#: a command run in-process, its output dropped: the probes below then look at what it loaded
RUN = """
import sys, io, contextlib
from layerc.tools.driver import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
"""
PROBE = RUN + """print(" ".join(sorted(sys.modules)))
"""


@pytest.mark.parametrize("name,argv,allowed", CASES, ids=[c[0] for c in CASES])
def test_a_command_imports_only_what_its_path_needs(name, argv, allowed, tmp_path):
    argv = [a.replace("$OUT", str(tmp_path)) for a in argv]
    run = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    loaded = set(run.stdout.split())
    assert "layerc.tools.driver" in loaded, run.stderr
    extra = sorted(m for m in HEAVY + (REPORT_ONLY if name == "trace kineto" else ()) if m in loaded and m not in allowed)
    assert not extra, f"layerc {' '.join(argv)} imports {extra}"
    if name == "help":  # the driver alone: no IR, no reader
        assert not [m for m in loaded if m.startswith(("layerc.ir", "layerc.grammar", "layerc.passes"))]


AUTODOC = RUN + """import dataclasses
for name, module in sorted(sys.modules.items()):
    for value in vars(module).values() if name.startswith("layerc") else ():
        if dataclasses.is_dataclass(value) and isinstance(value, type) and value.__module__ == name \\
                and (value.__doc__ or "").startswith(value.__name__ + "("):
            print(name + "." + value.__name__)
"""


def test_the_trace_paths_dataclasses_say_what_they_are():
    """A dataclass without a docstring gets one made from its signature, by ``inspect`` (a tenth
    of a millisecond and more each, at every start): those a trace's run loads each have one."""
    run = subprocess.run([sys.executable, "-c", AUTODOC, "trace", str(KINETO)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == []
