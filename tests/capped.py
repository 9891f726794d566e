"""Running ``layerc`` on hostile input: in a child whose address space is capped (RLIMIT_AS), in a
session of its own so that a run past its time limit is killed with every process it started.
One uncapped run on a bomb could take the machine's memory; one hang would stall the suite."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

LAYERC = (sys.executable, "-m", "layerc.tools.driver")
MEMORY, TIMEOUT = 1 << 30, 60


def start(argv, *, memory: int = MEMORY, cwd: str | Path | None = None, program=LAYERC,
          stdout=subprocess.PIPE) -> subprocess.Popen:
    """``layerc ARGV`` started in a capped child (``LAYERC_TRACEBACK`` unset: what a user sees)."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    env.pop("LAYERC_TRACEBACK", None)
    return subprocess.Popen([*program, *map(str, argv)], cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE,
                            preexec_fn=cap, start_new_session=True)


def finish(proc: subprocess.Popen, argv, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """The child's exit status, stdout and stderr (text); past ``timeout`` its process group is
    killed and the test fails."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"layerc {' '.join(map(str, argv))[:200]} ran past {timeout} s")
    text = lambda b: (b or b"").decode("utf-8", "replace")  # noqa: E731
    return subprocess.CompletedProcess(list(argv), proc.returncode, text(out), text(err))


def run(argv, *, memory: int = MEMORY, timeout: float = TIMEOUT, cwd: str | Path | None = None,
        program=LAYERC) -> subprocess.CompletedProcess:
    """``layerc ARGV`` in a capped child, to its end."""
    return finish(start(argv, memory=memory, cwd=cwd, program=program), argv, timeout)
