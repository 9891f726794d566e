"""``layerc diff`` of two graph dumps: the changes (largest first) as a terminal table, the whole
comparison as JSON, and one layer of each dump side by side as a picture (Graphviz), its changed
nodes coloured by what happened to them and linked to what they became."""

from __future__ import annotations


import pydot

from layerc.backends.layer_dot import FONT, PNG_DPI, PNG_MAX_PX, friendly, short_weight
from layerc.backends.trace_report import _console, _rows
from layerc.ir.graph import OP, Node, Weight
from layerc.passes.graph_diff import GraphDiff, Region, layer_span, to_dict

#: fill colour of a node by what happened to it (matched nodes that kept their op stay white)
COLOURS = {"removed": "#f4a6a6", "added": "#a6e3a1", "replaced": "#f9e79f", "fused": "#f8c471", "split": "#f8c471",
           "rewritten": "#d7bde2", "rewired": "#aed6f1", "constants": "#d6eaf8"}


def show(d: GraphDiff, con=None) -> None:
    """The comparison as tables (rich on a terminal, plain text elsewhere)."""
    con, Table = _console(con)
    con.print(f"[bold]A[/] {d.a}: {d.nodes_a:,} ops, {len(d.layers_a)} layers\n"
              f"[bold]B[/] {d.b}: {d.nodes_b:,} ops, {len(d.layers_b)} layers\n"
              f"matched one to one: {d.matched:,} ops")
    if d.nodes_a and d.nodes_b and d.matched < max(d.nodes_a, d.nodes_b) / 2:
        con.print(f"warning: the graphs share few ops ({d.matched} of {max(d.nodes_a, d.nodes_b)}): they may not be "
                  "two stages of one model, and the changes below are then most of each graph")
    if d.inputs_added or d.inputs_removed:
        con.print(f"inputs: +{len(d.inputs_added)} {_few(d.inputs_added)}  -{len(d.inputs_removed)} {_few(d.inputs_removed)}")
    if not d.changes:
        con.print("no change: every op of A has its op in B, reading the same weights and the same dataflow")
        return
    tab = Table(title=f"changes, largest first ({len(d.changes)})")
    for header, justify in (("what", "left"), ("where", "left"), ("times", "right"), ("A ops", "left"), ("B ops", "left"),
                            ("detail", "left")):
        tab.add_column(header, justify=justify)
    _rows(tab, [(c.kind, _where(c.layers, c.outside, d.layers_a), str(len(c.regions)), _ops(c.before), _ops(c.after),
                 _detail(c.detail or c.regions[0].detail)) for c in d.changes], "changes")
    con.print(tab)


def _detail(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _few(names: list[str]) -> str:
    return "" if not names else "(" + ", ".join(names[:3]) + (", …)" if len(names) > 3 else ")")


def _where(layers: list[int], outside: list[str], every: list[int]) -> str:
    return ", ".join(x for x in (layer_span(layers, every), *outside) if x)


def _ops(names: tuple[str, ...]) -> str:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    text = " + ".join(f"{n}×{k}" if k > 1 else n for n, k in counts.items()) or "-"
    return text if len(text) <= 70 else text[:67] + "..."


def json_text(d: GraphDiff) -> str:
    import orjson

    return (orjson.dumps(to_dict(d), option=orjson.OPT_INDENT_2) + b"\n").decode()


def busiest_layer(d: GraphDiff) -> int | None:
    """The layer with the most changed nodes (the lowest of equals); None when no layer changed."""
    count: dict[int, int] = {}
    for r in d.regions:
        if r.layer is not None:
            count[r.layer] = count.get(r.layer, 0) + len(r.a) + len(r.b)
    return min(count, key=lambda k: (-count[k], k)) if count else None


def side_by_side(d: GraphDiff, layer: int) -> pydot.Dot:
    """Layer ``layer`` of A and of B as two columns; what changed coloured, each change linked
    from its A nodes to its B nodes by a dashed edge."""
    status: dict[Node, str] = {}
    for r in d.regions:
        for n in (*r.a, *r.b):
            status[n] = r.kind
    dot = pydot.Dot("LayerDiff", graph_type="digraph", rankdir="TB", fontname=FONT, newrank="true", nodesep="0.25",
                    ranksep="0.3", label=f"layer {layer}: A (left) and B (right)", labelloc="t")
    dot.set_node_defaults(shape="box", style="rounded,filled", fontname=FONT, fontsize="10", fillcolor="white")
    for side, graph, title in (("a", d.matching.a, d.a), ("b", d.matching.b, d.b)):
        cluster = pydot.Subgraph(f"cluster_side_{side}", label=f"{side.upper()}: {_short_path(title)}", fontname=FONT, style="dashed")
        members = [n for n in graph.nodes if n.kind == OP and n.meta.get("layer") == layer]
        inside = set(members)
        for n in members:
            cluster.add_node(pydot.Node(_id(side, n), label=_label(n),
                                        fillcolor=COLOURS.get(status.get(n, ""), "white")))
        for n in members:
            for v in dict.fromkeys(n.inputs):
                if v in inside:
                    cluster.add_edge(pydot.Edge(_id(side, v), _id(side, n), color="#555555"))
        dot.add_subgraph(cluster)
    for r in d.regions:
        if r.layer == layer and r.a and r.b:
            dot.add_edge(pydot.Edge(_id("a", r.a[-1]), _id("b", r.b[0]), style="dashed", color="#c0392b", constraint="false",
                                    label=r.kind, fontsize="9", fontcolor="#c0392b"))
    dot.add_subgraph(_legend())
    return dot


def _short_path(path: str) -> str:
    """A dump's folder and name (``after/085_compile_compile_model.txt``): what tells two dumps apart."""
    parts = path.replace("\\", "/").rstrip("/").split("/")
    return "/".join(parts[-2:])


def _legend() -> pydot.Subgraph:
    legend = pydot.Subgraph("cluster_legend", label="", style="invis")
    for kind, colour in COLOURS.items():
        legend.add_node(pydot.Node(f"legend_{kind}", label=kind, fillcolor=colour, fontsize="9"))
    legend.add_node(pydot.Node("legend_same", label="same op", fillcolor="white", fontsize="9"))
    return legend


def _id(side: str, n: Node) -> str:
    return f'"{side}:{n.name}"'


def _label(n: Node) -> str:
    weights = [short_weight(w.name) for w in n.inputs if isinstance(w, Weight)]
    text = friendly(n.target or "")
    if weights:
        text += "\n" + ", ".join(weights[:2]) + (" …" if len(weights) > 2 else "")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(d: GraphDiff, layer: int, fmt: str = "png") -> bytes:
    from layerc.backends.graphviz import render_dot

    return render_dot(side_by_side(d, layer).to_string(), fmt, dpi=PNG_DPI, max_px=PNG_MAX_PX)


__all__ = ["show", "json_text", "side_by_side", "render", "busiest_layer", "Region"]
