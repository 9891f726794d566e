"""The graph IR with what the passes found, one line per node (``layerc opt --emit meta``): the
facts a pass writes to ``meta`` (layer, role, region, group, cost, schedule...) beside each op, so
that a pipeline's effect reads at a glance and text checks (FileCheck) can match it."""

from __future__ import annotations

import dataclasses
from typing import Any

from layerc.ir.graph import OP, Module, Node

#: meta keys not shown: links to other objects, the unbound remainder of a binding
_HIDDEN = {"sliced_from", "trace_unbound"}


def print_meta(module: Module) -> str:
    lines = []
    for g in module.graphs:
        lines.append(f'graph "{g.name}"{_facts(g.meta)} {{')
        for w in g.weights.values():
            lines.append(f"  weight %{w.name}{_facts(w.meta)}")
        for n in g.nodes:
            lines.append(f"  {n.kind} %{n.name}{_target(n)}{_facts(n.meta)}")
        lines.append("}")
    return "\n".join(lines) + "\n"


def _target(n: Node) -> str:
    return f" = {n.target}" if n.kind == OP and n.target else ""


def _facts(meta: dict[str, Any]) -> str:
    parts = []
    for key in sorted(meta):
        if key in _HIDDEN:
            continue
        text = _value(meta[key])
        if text is not None:
            parts.append(f"{key}={text}")
    return ("  " + " ".join(parts)) if parts else ""


def _value(v: Any) -> str | None:
    if isinstance(v, list) and v and all(isinstance(e, dict) and "kernel" in e for e in v):  # bound kernels
        return "[" + ",".join(f"{e['kernel']}({e.get('evidence', '?')} {e.get('confidence', '?')})" for e in v) + "]"
    if v is None or isinstance(v, (bool, int, float)):
        return str(v).lower() if isinstance(v, bool) or v is None else str(round(v, 3) if isinstance(v, float) else v)
    if isinstance(v, str):
        return f'"{v}"' if (" " in v or not v) else v
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float, str)) for x in v):
        return "[" + ",".join(str(x) for x in v) + "]"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        shown = ((f.name, _value(getattr(v, f.name))) for f in dataclasses.fields(v))
        return "{" + ",".join(f"{name}:{text}" for name, text in shown if text is not None) + "}"
    if isinstance(v, dict) and all(isinstance(x, (int, float, str, bool)) or x is None for x in v.values()):
        return "{" + ",".join(f"{k}:{_value(x)}" for k, x in v.items()) + "}"
    return None
