"""Which implementation a named choice selects: registries keyed by the name the user gives.

Engines pick an attention backend or a quantization method by name, through a registry: a
function registered by decorator (``@register_attention_backend("flashinfer")``, returning the
backend it builds) or a dict literal (``{"fp8": Fp8Config, ...}``). Model code then calls a
declared base (``forward_batch.attn_backend.forward`` on an ``AttentionBackend``), which may be
any subclass. Given ``--attention-backend flashinfer``, the classes the ``"flashinfer"`` entries
build are the only subclasses of their bases that can run; other bases are left alone.

Registries are found by structure: a decorator call or a dict literal whose constant key is the
chosen name; modules are read only where their text holds that name as a string.

The same search finds what ``torch.ops.<ns>.<op>`` runs where the package registers it: a
function decorated with the op's name (``@torch.library.custom_op("ns::op")``) or passed to a
call that names it (``direct_register_custom_op(op_name="op", op_func=fn)``,
``lib.impl("op", fn, "CUDA")``); fake (meta, abstract) implementations are left out.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from layerc.passes.pyresolve import ClassInfo, Fn, Resolver, Value


def registry_entries(r: "Resolver", key: str) -> list["Value"]:
    """Every value registered under ``key``: decorated functions and dict-literal entries."""
    from layerc.passes.pyresolve import Fn, frame_for_module

    quoted = re.compile(r"""(["'])""" + re.escape(key) + r"\1")
    out: list[Value] = []
    for top in r.packages:
        for modname in r.sources.package_modules(top):
            src = r.sources.module(modname)
            if src is None or not quoted.search(src.text):
                continue
            tree = r.tree(src)
            if tree is None:
                continue
            frame = frame_for_module(src)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if any(isinstance(d, ast.Call) and d.args and _is_key(d.args[0], key) for d in node.decorator_list):
                        out.append(Fn(r.func_info(node, src, None)))
            for stmt in tree.body:  # registries are module-level dict literals
                value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
                if isinstance(value, ast.Dict):
                    for k, v in zip(value.keys, value.values):
                        if k is not None and _is_key(k, key):
                            out += r.eval(v, frame)
    return out


def selected_classes(r: "Resolver", base: "ClassInfo") -> list["ClassInfo"] | None:
    """The subclasses of ``base`` that the user's choices select (the classes their registry
    entries build), or None where no choice bears on ``base``."""
    from layerc.passes.pyresolve import ClsRef, Fn, Obj

    built = r.chosen_classes_cache
    if built is None:
        r.chosen_classes_cache = built = []  # recursion guard: the entries' returns may ask again
        for key in r.knowns.selections:
            for v in registry_entries(r, key):
                values = r.returns(v, None, None, 0) if isinstance(v, Fn) else [v]
                built += [x.cls for x in values if isinstance(x, (ClsRef, Obj))]
        r.chosen_classes_cache = built = list(dict.fromkeys(built))
    chosen = [c for c in built if base in r.mro(c)]
    return chosen or None


_FAKE = re.compile(r"fake|abstract|meta", re.I)


def torch_op_impls(r: "Resolver", qual: str) -> list["Fn"]:
    """The package functions registered as the implementation of ``torch.ops.<ns>.<op>``
    (``qual``), or [] where the package registers none (the op stays an opaque kernel)."""
    from layerc.passes.pyresolve import Fn, Frame, dedupe

    parts = qual.split(".")
    if len(parts) < 4 or parts[2] in ("aten", "prim"):
        return []
    ns, op = parts[2], parts[3]
    key = (ns, op)
    if key in r.torch_op_cache:
        return r.torch_op_cache[key]
    r.torch_op_cache[key] = []
    names = {op, f"{ns}::{op}"}
    out: list[Fn] = []
    for modname in _quoted_names(r).get(op, ()):
        src = r.sources.module(modname)
        if src is not None:
            tree = r.tree(src)
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for d in node.decorator_list:
                        if isinstance(d, ast.Call) and _names_op(d, names) and not _FAKE.search(_callee(d)):
                            out.append(Fn(r.func_info(node, src, None)))
                elif isinstance(node, ast.Call) and _names_op(node, names) and not _fake_call(node, names):
                    frame = Frame(None, src)
                    args = list(node.args) + [k.value for k in node.keywords if not _FAKE.search(k.arg or "")]
                    for a in args:
                        if isinstance(a, (ast.Name, ast.Attribute)):
                            out += [v for v in r.eval(a, frame) if isinstance(v, Fn)]
    out = dedupe(out)
    r.torch_op_cache[key] = out
    return out


_QUOTED_OP = re.compile(r"""["'](?:\w+::)?(\w+)["'(]""")


def _quoted_names(r: "Resolver") -> dict[str, list[str]]:
    """Name → the package modules whose text quotes it (``"op"``, ``"ns::op"``, ``"op(``): where a
    custom op can be registered. Made once, by one scan of each module's text."""
    index = r.quoted_names_cache
    if index is None:
        index = {}
        for top in r.packages:
            for modname in r.sources.package_modules(top):
                src = r.sources.module(modname)
                if src is None:
                    continue
                for name in set(_QUOTED_OP.findall(src.text)):
                    index.setdefault(name, []).append(modname)
        r.quoted_names_cache = index
    return index


def _names_op(call: ast.Call, names: set[str]) -> bool:
    """A call given the op's name as a constant (``"ns::op"``, ``"op"``, or a schema ``"op(...)"``)."""
    for a in list(call.args) + [k.value for k in call.keywords]:
        if isinstance(a, ast.Constant) and isinstance(a.value, str):
            if a.value in names or a.value.split("(", 1)[0] in names:
                return True
    return False


def _fake_call(call: ast.Call, names: set[str]) -> bool:
    """A registration of a fake implementation: by its callee (``register_fake``) or a dispatch
    key argument (``lib.impl("op", fn, "Meta")``)."""
    if _FAKE.search(_callee(call)):
        return True
    return any(isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.split("(", 1)[0] not in names
               and _FAKE.search(a.value) for a in list(call.args) + [k.value for k in call.keywords])


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _is_key(e: ast.expr, key: str) -> bool:
    return isinstance(e, ast.Constant) and e.value == key

