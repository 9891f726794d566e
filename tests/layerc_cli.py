"""Running a ``layerc`` subcommand in-process, the way the CLI tests of simulate and profile do."""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout

from layerc.tools.driver import main


def run_layerc(*argv) -> tuple[int, str, str]:
    """``layerc ARGV``: (exit status, stdout, stderr), with a wide console (rich tables one row per
    line) and argparse's SystemExit turned into the status."""
    out, err = io.StringIO(), io.StringIO()
    saved_argv, columns = sys.argv, os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "250"
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                rc = main([str(a) for a in argv])
            except SystemExit as e:
                rc = e.code
    finally:
        sys.argv = saved_argv
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    return rc, out.getvalue(), err.getvalue()
