"""Which calls in model source are kernel calls: the table in ``data/kernel_calls.toml``.

Kept as data so a new kernel library is a new ``[[family]]`` entry, not code. ``classify`` maps a
resolved callee (``sgl_kernel.bmm_fp8``, ``torch.nn.functional.linear``, ``torch.nn.Linear``) to a
``KernelKind``; Triton launches and ``torch.Tensor`` methods have their own constructors.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from layerc.ir.diagnostics import LayercError

_FAMILY_KEYS = {"name", "match", "short", "node", "skip", "aten", "platforms"}
#: Longer qualified names are no kernel calls: real ones are under 100 characters, and a table
#: pattern such as ``\w*ep\w*`` costs time quadratic in the name it is matched against.
MAX_QUALNAME = 1000


@dataclass(frozen=True)
class KernelKind:
    name: str  #: display name
    target: str  #: qualified callee
    family: str
    category: str
    node: bool  #: a custom kernel: an op of its own when model code calls it
    aten: tuple[str, ...] = ()
    platforms: tuple[str, ...] = ()  #: the only platforms it runs on (empty: any)

    def runs_on(self, platform: str | None) -> bool:
        return not platform or not self.platforms or platform in self.platforms


@dataclass(frozen=True)
class _Family:
    name: str
    match: re.Pattern[str]
    short: re.Pattern[str] | None
    node: bool
    skip: frozenset[str]
    aten: dict[str, str]
    platforms: tuple[str, ...]


class KernelCalls:
    def __init__(self, doc: dict[str, Any], source: str):
        self.families: list[_Family] = []
        for i, f in enumerate(doc.get("family", [])):
            unknown = set(f) - _FAMILY_KEYS
            if unknown or "name" not in f or "match" not in f:
                raise LayercError(f"{source}: family {i + 1}: needs name and match; unknown keys {sorted(unknown)}")
            self.families.append(_Family(
                f["name"], re.compile(f["match"]), re.compile(f["short"]) if "short" in f else None,
                bool(f.get("node", False)), frozenset(f.get("skip", ())), dict(f.get("aten", {})),
                tuple(f.get("platforms", ()))))
        self.jit_loaders = frozenset(doc.get("jit", {}).get("loaders", ()))
        self.compilers = frozenset(doc.get("jit", {}).get("compilers", ()))
        tensor = doc.get("tensor", {})
        self.tensor_methods = frozenset(tensor.get("methods", ()))
        self.no_aten = frozenset(tensor.get("no_aten", ()))
        self.categories: list[tuple[str, re.Pattern[str]]] = [(c["name"], re.compile(c["match"])) for c in doc.get("category", [])]

    def category(self, name: str) -> str:
        low = name.lower().replace(".", " ").replace("tensor ", "")
        for cat, rx in self.categories:
            if rx.search(low):
                return cat
        return "Other"

    def classify(self, qual: str) -> KernelKind | None:
        """The kernel a call of ``qual`` is, or None when it is no kernel call."""
        if len(qual) > MAX_QUALNAME:
            return None
        for fam in self.families:
            if not fam.match.fullmatch(qual):
                continue
            m = fam.short.fullmatch(qual) if fam.short else None
            short = m.group(1) if m else qual.rsplit(".", 1)[-1]
            if short in fam.skip or short.split(".")[0] in fam.skip:
                return None
            if fam.name == "torch":
                aten_name = fam.aten.get(short, short.lower() if short[:1].isupper() else short)
                aten = (f"aten::{aten_name}",) if aten_name else ()
                display = (f"nn.{short}" if short[:1].isupper()
                           else f"F.{short}" if ".functional." in qual else f"torch.{short}")
                return KernelKind(display, qual, fam.name, self.category(short), fam.node, aten)
            if short[:1].isupper():
                return None  # a class or type of the library (``deep_ep.Buffer``), not a launch
            return KernelKind(short, qual, fam.name, self.category(short), fam.node, (), fam.platforms)
        return None

    def tensor_method(self, method: str) -> KernelKind | None:
        if method not in self.tensor_methods:
            return None
        aten = () if method in self.no_aten else (f"aten::{method}",)
        return KernelKind(f"Tensor.{method}", f"torch.Tensor.{method}", "torch", self.category(method), False, aten)

    def jit(self, name: str, qual: str) -> KernelKind:
        """A function of a module compiled at run time (see ``[jit]``)."""
        return KernelKind(name, qual, "jit", self.category(name), True)

    def cute(self, name: str, qual: str) -> KernelKind:
        """A CuTe DSL function called from host code (``@cute.jit``, ``@cute.kernel``)."""
        return KernelKind(name, qual, "cute-dsl", self.category(name), True, (), ("cuda",))

    def triton(self, name: str, qual: str) -> KernelKind:
        return KernelKind(name, qual, "triton", self.category(name), True)


@lru_cache(maxsize=1)
def kernel_calls() -> KernelCalls:
    ref = resources.files("layerc.passes").joinpath("data/kernel_calls.toml")
    text = ref.read_text(encoding="utf-8")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise LayercError(f"kernel_calls.toml: {e}") from None
    return KernelCalls(doc, "kernel_calls.toml")
