"""The report of ``layerc simulate``: per-op costs and the schedule of a simulated decoder layer,
as a terminal table and as JSON (with the seed's simulation beside it, when compared)."""

from __future__ import annotations

import sys


# -- outputs ------------------------------------------------------------------------------------
def op_rows(graph) -> list[dict]:
    """One dict per kernel op: its cost and where the schedule put it."""
    from layerc.backends.sim_trace import op_label

    rows = []
    for n in graph.nodes:
        c = n.meta.get("cost")
        if c is None or not c.is_kernel:
            continue
        sch = n.meta.get("schedule", {})
        rows.append({"op": op_label(n), "type": c.kind, "target": n.target,
                     "shape": n.type.shape_text() if n.type.is_known else "?",
                     "flops": c.flops, "bytes": c.bytes, "intensity": round(c.intensity, 4), "bound": c.bound,
                     "time_us": round(c.time_ns / 1e3, 4), "compute_us": round(c.compute_ns / 1e3, 4),
                     "memory_us": round(c.memory_ns / 1e3, 4), "launch_us": round(c.overhead_ns / 1e3, 4),
                     "engine": sch.get("engine"), "start_us": round(sch.get("start", 0) / 1e3, 4),
                     "end_us": round(sch.get("end", 0) / 1e3, 4), "critical": sch.get("critical")})
    return rows


def report(graph, hardware, comparison=None) -> dict:
    s = graph.meta["schedule"]
    totals = graph.meta["cost"]
    doc = {
        "layer": {k: v for k, v in graph.meta.items() if isinstance(v, (str, int, float)) and k not in ("cost",)},
        "hardware": {"key": hardware.key, "name": hardware.name, "hbm_gbps": hardware.hbm_gbps,
                     "matrix_tflops": hardware.matrix_tflops, "launch_overhead_us": hardware.launch_overhead_us},
        "totals": {"kernels": totals["kernels"], "flops": totals["flops"], "bytes": totals["bytes"],
                   "serial_us": round(totals["time_ns"] / 1e3, 4)},
        "schedule": {"engines": s.engines, "makespan_us": round(s.makespan / 1e3, 4),
                     "critical_path_us": round(s.critical_path / 1e3, 4), "utilization": round(s.utilization, 4),
                     "sweep": [{"engines": n, "makespan_us": round(m / 1e3, 4), "utilization": round(u, 4)} for n, m, u in s.sweep]},
        "ops": op_rows(graph),
    }
    if comparison is not None:
        doc["seed_comparison"] = {
            "seed_makespan_us": comparison.seed_makespan, "seed_engines": comparison.seed_engines,
            "rows": [{"seed": r.seed, "seed_us": r.seed_us, "layerc": list(r.labels), "layerc_us": round(r.layerc_ns / 1e3, 4),
                      "flops": r.flops, "bytes": r.bytes, "bound": r.bound} for r in comparison.rows],
            "violations": [vars(v) for v in comparison.violations],
        }
    return doc


def _si(x: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} "


def show(graph, hardware, comparison=None) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)  # a file or pipe gets whole cells
    meta, s, totals = graph.meta, graph.meta["schedule"], graph.meta["cost"]
    if meta.get("phase") == "dump":
        symbols = f"; symbols {', '.join(meta['symbols'].split())}" if meta.get("symbols") else ""
        step = f"as dumped (KV length {meta.get('seq_len')} for paged attention{symbols})"
    else:
        step = (f"{meta.get('phase')} (seq {meta.get('seq_len')}, batch {meta.get('batch')}, attention {meta.get('attention')}, "
                f"{str(meta.get('weight_dtype')).removeprefix('torch.')})")
    con.print(f"[bold]{meta.get('model')}[/] layer {meta.get('layer')}, {step} on [bold]{hardware.name}[/]: "
              f"{totals['kernels']} kernels, {_si(totals['flops'])}FLOP, {_si(totals['bytes'])}B")
    tab = Table(title="ops (roofline + launch overhead)", title_justify="left")
    for col in ("op", "type", "shape", "FLOPs", "bytes", "FLOP/B", "bound", "µs", "launch", "engine", "start µs", ""):
        tab.add_column(col, justify="left" if col in ("op", "type", "shape", "bound", "") else "right")
    for r in op_rows(graph):
        tab.add_row(r["op"], r["type"], r["shape"], _si(r["flops"]), _si(r["bytes"]), f"{r['intensity']:.1f}", r["bound"],
                    f"{r['time_us']:.2f}", f"{100 * r['launch_us'] / r['time_us']:.0f}%" if r["time_us"] else "-",
                    str(r["engine"]), f"{r['start_us']:.2f}", "[red]●[/]" if r["critical"] else "")
    con.print(tab)
    con.print(f"serial {totals['time_ns'] / 1e3:,.2f} µs; on {s.engines} engine{'s' if s.engines > 1 else ''}: makespan "
              f"{s.makespan / 1e3:,.2f} µs, critical path {s.critical_path / 1e3:,.2f} µs (● ops), utilization "
              f"{100 * s.utilization:.1f}%" + ("" if s.reaches_bound else " — more engines would help"))
    if s.sweep:
        sweep = Table(title="engines sweep", title_justify="left")
        for col in ("engines", "makespan µs", "speedup", "utilization", "reaches critical path"):
            sweep.add_column(col, justify="right")
        serial = s.sweep[0][1]
        for n, m, u in s.sweep:
            sweep.add_row(str(n), f"{m / 1e3:,.2f}", f"{serial / m:.2f}x" if m else "-", f"{100 * u:.1f}%",
                          "yes" if m == s.critical_path else "")
        con.print(sweep)
        con.print(f"smallest N reaching the critical-path bound: [bold]{s.engines}[/]")
    if comparison is not None:
        _show_comparison(con, comparison, s)


def _show_comparison(con, cmp, s) -> None:
    from rich.table import Table

    tab = Table(title="against seed 004's simulated trace", title_justify="left")
    for col in ("seed op", "seed (nominal µs)", "layerc op", "layerc µs", "FLOPs", "bytes", "bound"):
        tab.add_column(col, justify="left" if col in ("seed op", "layerc op", "bound") else "right")
    for r in cmp.rows:
        seed = r.seed[0] if len(r.seed) == 1 else f"{r.seed[0].split(' - ')[0]} ×{len(r.seed)}"
        tab.add_row(seed, f"{r.seed_us:,.0f}", ", ".join(r.labels), f"{r.layerc_ns / 1e3:,.2f}", _si(r.flops), _si(r.bytes), r.bound)
    tab.add_row("[bold]layer[/]", f"[bold]{cmp.seed_makespan:,.0f}[/] on {cmp.seed_engines}", "makespan",
                f"[bold]{s.makespan / 1e3:,.2f}[/] on {s.engines}", "", "", "")
    con.print(tab)
    for v in cmp.violations:
        con.print(f"[red]seed dependency violation[/]: '{v.op}' starts at +{v.start:,.0f} but reads '{v.reads}', "
                  f"which ends at +{v.end:,.0f}")
    if cmp.unmatched:
        con.print(f"seed ops with no layerc op: {', '.join(sorted(set(cmp.unmatched)))}")


def list_presets() -> int:
    """``--list-presets``: the model and hardware presets, one line each."""
    from layerc.grammar.hf_config import load_preset, preset_names
    from layerc.passes.cost import hardware_presets, load_hardware

    for name in preset_names():
        s = load_preset(name)
        extra = ", MLA" if s.mla else ""
        extra += f", {s.moe.experts} experts top-{s.moe.top_k}" if s.moe else ""
        sys.stdout.write(f"{name:16s} {s.model_type}: hidden {s.hidden}, {s.heads} heads / {s.kv_heads} KV, "
                         f"{s.num_layers} layers{extra}\n")
    for key in hardware_presets():
        hw = load_hardware(key)
        peaks = ", ".join(f"{k} {v:g}" for k, v in hw.matrix_tflops.items())
        sys.stdout.write(f"{key:16s} {hw.name}: {peaks} TFLOP/s; HBM {hw.hbm_gbps:g} GB/s; launch {hw.launch_overhead_us:g} µs\n")
    return 0
