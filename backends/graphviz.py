"""Graphviz ``dot`` run on a DOT text: PNG or SVG bytes, or a LayercError that says what failed."""

from __future__ import annotations

import resource
import shutil
import subprocess

from layerc.ir.diagnostics import LayercError

#: Graphviz gets this long per graph ...
RENDER_TIMEOUT_S = 120.0
#: ... and this much address space: a graph that asks for a huge drawing (a node 10**5 inches
#: wide) makes cairo allocate gigabytes; past the limit ``dot`` fails, and that is reported.
RENDER_MEMORY = 2 << 30


#: What a user without Graphviz is told once, when pictures are skipped.
MISSING = ("Graphviz 'dot' is not installed: PNG/SVG pictures are skipped, the JSON and DOT are written "
           "(install it: apt-get install graphviz, brew install graphviz, or conda install graphviz)")


def available() -> bool:
    """Whether pictures can be drawn here: commands write their other outputs either way."""
    return shutil.which("dot") is not None


def render_dot(text: str, fmt: str = "png", *, dpi: int | None = None, timeout: float = RENDER_TIMEOUT_S,
               max_px: int | None = None) -> bytes:
    """PNG or SVG bytes of ``text``; ``dpi`` sets a PNG's resolution (Graphviz's default 96);
    ``max_px``: a PNG drawing larger than this on either side is scaled down to fit (Graphviz's
    ``size``), an SVG is drawn full size (it zooms)."""
    if fmt not in ("png", "svg"):
        raise LayercError(f"unsupported render format '{fmt}' (choose png or svg)")
    exe = shutil.which("dot")
    if exe is None:
        raise LayercError("Graphviz 'dot' is not installed (apt-get install graphviz)")
    cmd = [exe, f"-T{fmt}"] + ([f"-Gdpi={int(dpi)}"] if dpi and fmt == "png" else [])
    if max_px and fmt == "png":
        inches = max_px / (dpi or 96)
        cmd.append(f"-Gsize={inches:.2f},{inches:.2f}")
    try:
        proc = subprocess.run(cmd, input=text.encode("utf-8"), capture_output=True, timeout=timeout, check=False,
                              preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        raise LayercError(f"Graphviz 'dot' timed out after {timeout:g}s rendering {fmt}") from None
    if proc.returncode != 0 or not proc.stdout:
        err = proc.stderr.decode("utf-8", "replace").strip() or f"exit status {proc.returncode}"
        raise LayercError(f"Graphviz 'dot' failed rendering {fmt}: {err}")
    return proc.stdout


def _limit_memory() -> None:
    """In the child, before ``dot`` runs: lower its address-space limit to RENDER_MEMORY."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = RENDER_MEMORY if soft == resource.RLIM_INFINITY else min(soft, RENDER_MEMORY)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):  # a platform that does not limit address space: the timeout still holds
        pass
