"""The files ``layerc mem -o DIR`` writes: each kernel's DOT graphs and their pictures, the
liveness chart, the stacked pages (``--combine``), ``memory.json`` and ``memory.pftrace``."""

from __future__ import annotations

import argparse
import re
import sys

from layerc.ir.diagnostics import warn


#: PNG resolution of the planner's graphs: their 9 pt node and 7 pt edge labels need more than
#: Graphviz's 96 dpi to stay legible once the pictures are stacked.
PNG_DPI = 130


TITLES = {"smem": "SMEM buffer liveness", "tmem": "TMEM buffer liveness", "combined": "key ops and channels by partition"}


FILE_NAMES = {"smem": "smem_liveness", "tmem": "tmem_liveness", "combined": "combined_graph"}


#: Characters of a kernel's name in its file names (a name may be longer than a file name can be).
MAX_STEM = 100


def kernel_stems(module) -> list[str]:
    """A file-name stem per kernel: its name made safe and cut to MAX_STEM characters, with the
    index where stems repeat."""
    from collections import Counter

    stems = [re.sub(r"[^\w.\-]+", "_", k.name[: 4 * MAX_STEM])[:MAX_STEM].strip(".") or f"kernel_{k.index}" for k in module.kernels]
    seen = Counter(stems)
    return [s if seen[s] == 1 else f"{s}_{k.index}" for s, k in zip(stems, module.kernels)]


def _render(module, g, fmt: str) -> bytes:
    """Graphviz's picture of graph ``g``: a graph that ``dot`` fails on (one it cannot draw, or
    too large to draw within its limits) is an error at the graph's ``digraph`` line."""
    from layerc.backends.graphviz import render_dot
    from layerc.ir.diagnostics import LayercError, Location

    try:
        return render_dot(g.dot, fmt, dpi=PNG_DPI)
    except LayercError as e:
        message = e.message if len(e.message) <= 500 else e.message[:497] + "..."
        raise LayercError(message, module.files[g.file], Location(g.line, g.column), module.source_line(g.file, g.line)) from None


def write_outputs(module, args: argparse.Namespace) -> list[str]:
    """Every output file, each written atomically; returns their paths."""
    from layerc.backends import graphviz
    from layerc.backends.outputs import output_dir, write_atomic

    out = output_dir(args.output)
    written: list[str] = []
    draw_graphs = not args.no_render and graphviz.available()
    if not args.no_render and not draw_graphs:  # the DOT, JSON, trace and chart are written all the same
        warn(args, graphviz.MISSING)

    def put(name: str, data: str | bytes) -> None:
        write_atomic(out / name, data)
        written.append(str(out / name))

    every: list[tuple[str, bytes]] = []  # all kernels' pictures, for --combine's one page
    for k, stem in zip(module.kernels, kernel_stems(module)):
        pictures: list[tuple[str, bytes]] = []
        for kind in ("smem", "tmem", "combined"):
            g = k.graphs.get(kind)
            if g is None:
                continue
            base = f"{stem}.{FILE_NAMES[kind]}"
            put(base + ".dot", g.dot)
            if not draw_graphs:
                continue
            _progress(f"rendering {base}")
            for fmt in args.format:
                data = _render(module, g, fmt)
                put(f"{base}.{fmt}", data)
                if fmt == "png":
                    pictures.append((f"{k.name}: {TITLES[kind]} ({module.files[g.file].rsplit('/', 1)[-1]})", data))
            if "png" not in args.format and args.combine:
                pictures.append((f"{k.name}: {TITLES[kind]}", _render(module, g, "png")))
        if not args.no_render and k.liveness:
            from layerc.backends.mem_chart import liveness_chart

            _progress(f"charting {stem}")
            for fmt in args.format:
                data = liveness_chart(module, k, fmt)
                put(f"{stem}.liveness.{fmt}", data)
                if fmt == "png":
                    pictures.insert(0, (f"{k.name}: liveness, peaks and capacity ({module.arch})", data))
            if "png" not in args.format and args.combine:
                pictures.insert(0, (f"{k.name}: liveness", liveness_chart(module, k, "png")))
        if args.combine and pictures:
            from layerc.backends.mem_combine import stack

            put(f"{stem}.all.png", stack(pictures))
            every += pictures
    if len(module.kernels) > 1 and every:
        from layerc.backends.mem_combine import stack

        put("all.png", stack(every))
    from layerc.backends.registry import emitter

    for fmt, name in (("json", "memory.json"), ("pftrace", "memory.pftrace")):
        emitter("mem", fmt).write(module, out / name)
        written.append(str(out / name))
    return written


def _progress(message: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write(f"layerc mem: {message}\n")
