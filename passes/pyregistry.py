"""Which implementation a named choice selects: registries keyed by the name the user gives.

Engines pick an attention backend or a quantization method by name, through a registry: a
function registered by decorator (``@register_attention_backend("flashinfer")``, returning the
backend it builds) or a dict literal (``{"fp8": Fp8Config, ...}``). Model code then calls a
declared base (``forward_batch.attn_backend.forward`` on an ``AttentionBackend``), which may be
any subclass. Given ``--attention-backend flashinfer``, the classes the ``"flashinfer"`` entries
build are the only subclasses of their bases that can run; other bases are left alone.

Registries are found by structure: a decorator call or a dict literal whose constant key is the
chosen name; modules are read only where their text holds that name as a string.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from layerc.passes.pyresolve import ClassInfo, Resolver, Value


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


def _is_key(e: ast.expr, key: str) -> bool:
    return isinstance(e, ast.Constant) and e.value == key

