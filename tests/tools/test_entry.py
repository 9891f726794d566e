"""The ``layerc`` process's own end (``driver.entry``): it skips the interpreter's teardown, and
must still hand over all its output, its exit status, its errors writing the standard output,
and run the exit handlers (staged outputs removed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SHARED

TRACE = SHARED / "data" / "traces" / "torch" / "hf_bert-small_h100.json.gz"


def layerc(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "layerc.tools.driver", *args], capture_output=True, **kw)


def test_all_output_reaches_a_pipe_and_the_status_is_kept(tmp_path):
    """A JSON document smaller than the stream's buffer, written to a pipe, arrives whole (the
    buffer is flushed before the process ends); the status of an error is the command's, and
    argparse's are kept."""
    r = layerc("trace", str(TRACE), "--json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["layers"] and 1000 < len(r.stdout) < 8192
    assert layerc("trace", str(tmp_path / "missing.json")).returncode == 1
    assert layerc("trace").returncode == 2
    helped = layerc("--help")
    assert helped.returncode == 0 and helped.stdout.startswith(b"usage: layerc")


def test_a_pipe_closed_early_is_not_an_error():
    """``layerc trace T --json - | head -c 100``: exit 0, and no traceback of the last flush."""
    p = subprocess.Popen([sys.executable, "-m", "layerc.tools.driver", "trace", str(TRACE), "--json", "-"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.read(100)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "Exception ignored" not in err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", [False, True])
def test_a_full_disk_behind_stdout_is_an_error(unbuffered):
    """The report written to a device that is always full: the lost output is said, as the
    system's refusal, never as an internal error; exit 1. (Buffered, the report fails at the
    last flush, after the run; unbuffered, while the command writes it.)"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full", "wb") as full:
        r = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "trace", str(TRACE)], stdout=full,
                           stderr=subprocess.PIPE, text=True, env=env)
    assert r.returncode == 1, r.stderr
    assert "layerc: error: " in r.stderr and "No space left on device" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_closed_standard_stream_is_no_error(tmp_path, closed):
    """Started with stdout or stderr closed (``>&-``; Python makes it None): the command runs,
    writes its file and exits 0, as it did before the process ended itself."""
    out = tmp_path / "g.json.gz"
    shell = f"{sys.executable} -m layerc.tools.driver gen-trace {out} --layers 2 {'>&-' if closed == 'stdout' else '2>&-'}"
    r = subprocess.run(["sh", "-c", shell], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0 and "Traceback" not in r.stderr + r.stdout


def test_exit_handlers_run(tmp_path):
    """An exit handler registered during the run (as ``outputs`` registers the removal of staged
    files) runs before the process ends, and what it prints reaches stdout (the streams are
    flushed after the handlers, as the interpreter's own exit does)."""
    marker = tmp_path / "ran"
    code = ("import atexit, pathlib, sys\n"
            f"atexit.register(pathlib.Path({str(marker)!r}).write_text, 'yes')\n"
            "atexit.register(print, 'EXIT-HANDLER-OUTPUT')\n"
            "from layerc.tools.driver import entry\n"
            f"sys.argv = ['layerc', 'trace', {str(TRACE)!r}]\n"
            "entry()\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert marker.read_text() == "yes" and r.stdout.rstrip().endswith("EXIT-HANDLER-OUTPUT")


@pytest.mark.parametrize("given", [None, "1"])
def test_the_process_runs_numpy_without_huge_pages_unless_told(given):
    """The command turns numpy's transparent huge pages off before numpy loads (a trace's
    analysis would fault in and compact a huge page per fresh column); an explicit
    ``NUMPY_MADVISE_HUGEPAGE`` in the environment wins."""
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if given is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = given
    script = ("import atexit, os, sys\n"
              "def said():\n"
              "    import numpy\n"
              "    print((getattr(numpy, '_core', None) or numpy.core).multiarray._get_madvise_hugepage())\n"
              "atexit.register(said)\n"
              f"sys.argv = ['layerc', 'trace', {str(TRACE)!r}]\n"
              "from layerc.tools.driver import entry\n"
              "assert 'numpy' not in sys.modules\n"
              "entry()\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == str(given == "1")  # numpy's own word on its huge pages
