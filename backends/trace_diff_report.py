"""``layerc diff``'s outputs: the changes (largest first), the stages and the layers side by side
as terminal tables; the whole comparison as JSON; a picture of each layer's change per stage."""

from __future__ import annotations

import os
from typing import Any

from layerc.backends.trace_report import TABLE_ROWS, _console, _rows


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.1f}"


def _signed(ns: float, pct: float | None) -> str:
    return f"{ns / 1e3:+,.1f}" + (f" ({pct:+.1f}%)" if pct is not None else "")


def show(diff: dict[str, Any], con=None) -> None:
    """The comparison as tables (rich on a terminal, plain text elsewhere)."""
    con, Table = _console(con)
    con.print(f"[bold]A[/] {diff['a']}\n[bold]B[/] {diff['b']}")
    changes = diff["changes"]
    if not changes:
        con.print(f"no change above the noise (more than {diff['threshold_pct']:g}% and {diff['sigmas']:g} standard errors): "
                  "the runs do the same work in the same time, layer by layer")
    else:
        tab = Table(title=f"changes, largest first ({len(changes)}; per pass, µs)")
        for header, justify in (("what", "left"), ("where", "left"), ("A kernels", "left"), ("B kernels", "left"),
                                ("A", "right"), ("B", "right"), ("Δ", "right")):
            tab.add_column(header, justify=justify)
        _rows(tab, [(c["what"], _where(c["where"]), _kernels(c["kernels_a"]), _kernels(c["kernels_b"]), _us(c["a_ns"]),
                     _us(c["b_ns"]), _signed(c["delta_ns"], c["delta_pct"])) for c in changes], "changes")
        con.print(tab)
    tab = Table(title="stages (median pass, µs of kernel time)")
    for header, justify in (("stage", "left"), ("A", "right"), ("B", "right"), ("Δ", "right"), ("", "left")):
        tab.add_column(header, justify=justify)
    for stage, s in diff["stages"].items():
        tab.add_row(stage, _us(s["a_ns"]), _us(s["b_ns"]), _signed(s["delta_ns"], s["delta_pct"]), "changed" if s["significant"] else "")
    con.print(tab)
    blocks = [b for b in diff["blocks"] if b["significant"]]
    tab = Table(title=f"layers that changed ({len(blocks)} of {len(diff['blocks'])}; median pass, µs)")
    for header, justify in (("layer", "left"), ("A", "right"), ("B", "right"), ("Δ", "right"), ("kernels A → B", "right")):
        tab.add_column(header, justify=justify)
    _rows(tab, [(b["block"], _us(b["a_ns"]), _us(b["b_ns"]), _signed(b["delta_ns"], b["delta_pct"]),
                 f"{b['kernels_a']} → {b['kernels_b']}") for b in blocks], "layers")
    con.print(tab)


def show_jobs(diff: dict[str, Any], con=None) -> None:
    """Two runs of a job: the stragglers that came and went, then the changes with their ranks."""
    con, Table = _console(con)
    ranks = diff["ranks"]
    con.print(f"[bold]{len(ranks)} ranks[/], rank by rank: A {os.path.dirname(diff['a'][0]) or '.'}, "
              f"B {os.path.dirname(diff['b'][0]) or '.'}")
    s = diff["stragglers"]
    for key, title in (("new", "stragglers B has and A had not"), ("gone", "stragglers A had and B has not")):
        if s[key]:
            con.print(f"{title}: " + ", ".join(f"rank {x['rank']} in {x['stage']} layer {x['layer']}"
                                               + (f" (stack {x['stack']})" if x["stack"] else "") for x in s[key]))
    if not s["new"] and not s["gone"]:
        con.print(f"the same stragglers in both runs ({len(s['a'])})")
    changes = diff["changes"]
    if not changes:
        con.print(f"no change above the noise on any rank (more than {diff['threshold_pct']:g}% and {diff['sigmas']:g} "
                  "standard errors)")
        return
    tab = Table(title=f"changes, largest first ({len(changes)}; median over the ranks that have it, per pass, µs)")
    for header, justify in (("what", "left"), ("ranks", "left"), ("where", "left"), ("A kernels", "left"),
                            ("B kernels", "left"), ("A", "right"), ("B", "right"), ("Δ", "right")):
        tab.add_column(header, justify=justify)
    _rows(tab, [(c["what"], "all" if c["ranks"] == ranks else ", ".join(map(str, c["ranks"])), _where(c["where"]),
                 _kernels(c["kernels_a"]), _kernels(c["kernels_b"]), _us(c["a_ns"]), _us(c["b_ns"]),
                 _signed(c["delta_ns"], c["delta_pct"])) for c in changes], "changes")
    con.print(tab)


def _where(blocks: list[str]) -> str:
    if len(blocks) <= 3:
        return ", ".join(blocks)
    return f"{blocks[0]} … {blocks[-1]} ({len(blocks)} blocks)"


def _kernels(names: list[str]) -> str:
    text = " + ".join(names) or "-"
    return text if len(text) <= 60 else text[:57] + "..."


def json_text(diff: dict[str, Any]) -> str:
    import orjson

    return (orjson.dumps(diff, option=orjson.OPT_INDENT_2) + b"\n").decode()


def write_png(diff: dict[str, Any], path: str | os.PathLike) -> None:
    """Each block's change per stage as bars (B - A, µs per pass), the changes above the noise in
    colour and the rest grey; the largest changes named under the chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from layerc.backends.outputs import atomic_path

    stages = sorted({b["stage"] for b in diff["blocks"]}, key=lambda s: [b["stage"] for b in diff["blocks"]].index(s))
    fig, axes = plt.subplots(len(stages) or 1, 1, figsize=(11, 2.6 * max(len(stages), 1) + 1.4), squeeze=False)
    for ax, stage in zip(axes[:, 0], stages):
        rows = [b for b in diff["blocks"] if b["stage"] == stage]
        delta = [b["delta_ns"] / 1e3 for b in rows]
        colour = ["#c0392b" if b["significant"] and d > 0 else "#2e86c1" if b["significant"] else "#bbbbbb"
                  for b, d in zip(rows, delta)]
        ax.bar(range(len(rows)), delta, color=colour)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([_short_label(b["block"], stage) for b in rows], rotation=90 if len(rows) > 24 else 0, fontsize=7)
        ax.set_ylabel("B − A, µs / pass")
        ax.set_title(f"{stage}: slower in red, faster in blue, within the noise in grey", fontsize=9, loc="left")
    top = diff["changes"][:4]
    note = "\n".join(f"{c['what']}: {_kernels(c['kernels_b'] or c['kernels_a'])} in {_where(c['where'])}: "
                     f"{_signed(c['delta_ns'], c['delta_pct'])} µs" for c in top) or "no change above the noise"
    fig.text(0.01, 0.01, note, fontsize=8, va="bottom", family="monospace")
    fig.suptitle(f"A: {os.path.basename(diff['a'])}   B: {os.path.basename(diff['b'])}", fontsize=10)
    fig.tight_layout(rect=(0, 0.03 + 0.025 * len(top), 1, 0.96))
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def _short_label(block: str, stage: str) -> str:
    text = block.removeprefix(stage + " ")
    return text.replace("layer ", "") if text.startswith("layer ") else text[:4]


__all__ = ["show", "show_jobs", "json_text", "write_png", "TABLE_ROWS"]
