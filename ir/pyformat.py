"""Constants printed as Python prints them: the AutoDeploy writer calls ``str(arg)``, and
``str`` of a container is ``repr`` of its items, where a torch.fx Node shows its bare name."""

from __future__ import annotations

from layerc.ir.constants import Device
from layerc.ir.graph import Value


def python_str(value: object, nested: bool = False) -> str:
    """``str(value)`` (``repr`` when ``nested``), with IR values printed as their names."""
    if isinstance(value, Value):
        return value.name
    if isinstance(value, str):
        return repr(value) if nested else value
    if isinstance(value, list):
        return "[" + ", ".join(python_str(v, True) for v in value) + "]"
    if isinstance(value, tuple):
        if len(value) == 1:
            return "(" + python_str(value[0], True) + ",)"
        return "(" + ", ".join(python_str(v, True) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_str(k, True)}: {python_str(v, True)}" for k, v in value.items()) + "}"
    if isinstance(value, slice):
        parts = (value.start, value.stop, value.step)
        return "slice(" + ", ".join(python_str(v, True) for v in parts) + ")"
    if isinstance(value, Device):
        return repr(value) if nested else str(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)
