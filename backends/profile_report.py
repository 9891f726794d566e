"""The report of ``layerc profile``: measured against simulated per op, as a terminal table and
as a Perfetto timeline with the measured and the simulated runs side by side."""

from __future__ import annotations

import sys

from layerc.passes.runtime.profiling import Result


# -- outputs ------------------------------------------------------------------------------------
def write_trace(result: Result, path: str) -> None:
    """The profile with layer spans (one per run), the measured op spans with both times, and the
    simulated schedule of each run laid from the run's start, on one device track group."""
    from layerc.backends.perfetto import Span, write_chrome_json, write_pftrace
    from layerc.backends.sim_trace import op_args, op_label

    g, hw = result.graph, result.hardware
    by_label = {op_label(n): n for n in g.ops}
    device = 0
    trace = result.trace
    if not trace.devices:
        trace.devices[device] = f"{hw.name}, profiled"
    if result.device == "cpu":
        trace.device_kinds[device] = "CPU"
    spans = []
    errors = result.errors()
    for r, (start, end) in enumerate(result.layer_ranges):
        spans.append(Span(f"layer {g.meta['layer']} ({g.meta['phase']}) run {r}", start, end, "layer", device,
                          {"model": g.meta["model"], "run": r, "measured (us)": round((end - start) / 1e3, 3),
                           "simulated serial (us)": errors.get("simulated_layer_us", 0.0)}))
    for name, start, end in result.op_ranges:
        n = by_label[name]
        args = {"measured (us)": round((end - start) / 1e3, 3), **op_args(n)}
        args["simulated (us)"] = args.pop("time (us)")
        spans.append(Span(name, start, end, "ops (measured)", device, args))
    for start, _ in result.layer_ranges:
        at = start
        for n in g.ops:
            c = n.meta["cost"]
            if c.is_kernel:
                spans.append(Span(op_label(n), at, at + max(1, round(c.time_ns)), "ops (simulated)", device, op_args(n)))
                at += max(1, round(c.time_ns))
    write = write_chrome_json if path.endswith((".json", ".json.gz")) else write_pftrace
    write(trace, path, spans=spans)


def show(result: Result) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)  # a file or pipe gets whole cells
    g, hw = result.graph, result.hardware
    con.print(f"[bold]{result.spec.name}[/] layer {g.meta['layer']}, {g.meta['phase']} ({g.meta['seq_len']} tokens, "
              f"batch {g.meta['batch']}, attention {g.meta['attention']}, {result.dtype}) on {result.device}; "
              f"simulated on [bold]{hw.name}[/] ({', '.join(f'{k} {v:.3g}' for k, v in hw.matrix_tflops.items())} TFLOP/s, "
              f"{hw.hbm_gbps:.3g} GB/s, {hw.launch_overhead_us:.3g} µs per op)")
    if result.check is not None:
        c = result.check
        mark = "[green]matches[/]" if c["ok"] else "[red]DIFFERS FROM[/]"
        con.print(f"the graph {mark} transformers' layer: max |Δ| {c['max_abs_diff']:.3g} (max |output| {c['max_abs_ref']:.3g})")
    tab = Table(title=f"measured (median of {result.args.repeat}) vs simulated", title_justify="left")
    for col in ("op", "type", "shape", "bound", "measured µs", "simulated µs", "measured/sim"):
        tab.add_column(col, justify="left" if col in ("op", "type", "shape", "bound") else "right")
    for r in result.rows():
        style = "" if r["kernel"] else "dim"
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        tab.add_row(r["op"], r["type"], r["shape"], r["bound"], f"{r['measured_us']:,.2f}", f"{r['simulated_us']:,.2f}", ratio,
                    style=style)
    con.print(tab)
    e = result.errors()
    if e:
        con.print(f"{e['ops']} ops: median absolute error {e['median_abs_error_us']:,.2f} µs "
                  f"({e['median_abs_pct_error']:.1f}%); layer {e['measured_layer_us']:,.2f} µs measured "
                  f"(ops {e['measured_ops_us']:,.2f} µs), {e['simulated_layer_us']:,.2f} µs simulated serially")
