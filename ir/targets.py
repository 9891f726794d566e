"""Op targets: the IR keeps the AutoDeploy writer's form, ``str(node.target)``.

torch.fx prints the same targets differently (``torch.ops.aten.add.Tensor`` for
``aten.add.Tensor``, ``operator.getitem`` for ``<built-in function getitem>``); the two maps
below are the one place that knows both forms. ``op_name`` gives the short name passes match on.
"""

from __future__ import annotations

import re

#: First components of fx targets that are Python modules, not torch.ops namespaces.
_PYTHON_ROOTS = frozenset({"torch", "operator", "builtins", "_operator", "math", "numpy", "typing"})
_BUILTIN = re.compile(r"<built-in (?:function|method) ([A-Za-z_][A-Za-z0-9_]*)")
_FUNCTION = re.compile(r"<function ([A-Za-z_][A-Za-z0-9_.<>]*) at 0x[0-9a-fA-F]+>")
_OPERATOR_NAMES = frozenset(
    """getitem setitem add sub mul truediv floordiv mod pow neg pos abs invert and_ or_ xor lshift rshift
    eq ne lt le gt ge not_ contains matmul iadd isub imul itruediv""".split()
)


def from_fx_target(text: str) -> str:
    """``torch.ops.aten.add.Tensor`` → ``aten.add.Tensor``; ``operator.getitem`` → ``<built-in function getitem>``."""
    if text.startswith("torch.ops."):
        return text[len("torch.ops.") :]
    for prefix in ("operator.", "_operator.", "builtins."):
        if text.startswith(prefix) and text[len(prefix) :].isidentifier():
            return f"<built-in function {text[len(prefix):]}>"
    return text


def to_fx_target(target: str, opcode: str | None = "call_function") -> str:
    """The inverse of ``from_fx_target``, for printing torch.fx text."""
    if opcode in ("call_method", "call_module"):
        return target
    m = _BUILTIN.match(target)
    if m:
        name = m.group(1)
        return f"operator.{name}" if name in _OPERATOR_NAMES else f"builtins.{name}"
    m = _FUNCTION.fullmatch(target)
    if m:
        return m.group(1)
    head = target.split(".", 1)[0]
    if "." in target and head not in _PYTHON_ROOTS and re.fullmatch(r"[A-Za-z_][\w.]*", target):
        return "torch.ops." + target
    return target


_OVERLOADS = re.compile(r"\.(default|Tensor|Scalar|int|dtype|float|out|self|dim|dim_IntList|using_ints|Tensor_mode|correction)$")


def op_name(target: str) -> str:
    """The op's own name: ``aten.add.Tensor`` → ``add``, ``auto_deploy.trtllm_moe_fused`` →
    ``trtllm_moe_fused``, ``<built-in function getitem>`` → ``getitem``,
    ``<function begin_aux_stream_passthrough at 0x7f>`` → ``begin_aux_stream_passthrough``."""
    m = _BUILTIN.match(target) or _FUNCTION.match(target)
    if m:
        return m.group(1).rsplit(".", 1)[-1]
    if target.startswith("torch.ops."):
        target = target[len("torch.ops.") :]
    parts = target.split(".")
    if len(parts) >= 3:
        return parts[1]
    if len(parts) == 2:
        # ``ns.op`` (an OpOverloadPacket) or ``op.overload`` cannot be told apart by shape alone;
        # a known overload suffix decides.
        return parts[0] if _OVERLOADS.search(target) else parts[1]
    return target


def op_namespace(target: str) -> str | None:
    """``aten`` for ``aten.add.Tensor``; None for Python functions and methods."""
    if target.startswith("<") or "." not in target:
        return None
    if target.startswith("torch.ops."):
        target = target[len("torch.ops.") :]
    return target.split(".", 1)[0]


#: Casts: the input's value in another dtype. A norm casts its input first, so a cast on the
#: way into a layer is the layer's first op (``type_as``, the cast back to another value's dtype,
#: ends a norm instead).
CASTS = frozenset({"to", "_to_copy"})
#: Aliases: the same value under a new name, where export hands a value from one module to
#: another (into the layer stack, out of it).
ALIASES = frozenset({"alias", "detach", "detach_"})
