"""Kernel families as data: one TOML file per family (``passes/data/kernels/*.toml``), each a list
of ``[[kernel]]`` entries with a ``match`` regex, a ``short`` display name and a ``type``.

Users add a family without touching code: a directory of such files named by
``LAYERC_KERNEL_TABLES`` (``os.pathsep``-separated) is read after the built-in ones, and its
entries are tried first. A kernel takes the first entry whose regex matches its full name.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np

from layerc.ir.diagnostics import LayercError
from layerc.ir.trace import Trace, distinct

TYPES = ("ATTENTION", "MOE", "LINEAR", "NORM", "COMMUNICATION", "QUANTIZATION", "MEMORY", "ELEMENTWISE", "OTHER")


@dataclass(frozen=True)
class KernelKind:
    short: str
    type: str
    family: str


@dataclass(frozen=True)
class _Entry:
    pattern: re.Pattern
    kind: KernelKind


class KernelTable:
    def __init__(self, entries: list[_Entry]):
        self.entries = entries

    def lookup(self, name: str) -> KernelKind | None:
        for e in self.entries:
            if e.pattern.search(name):
                return e.kind
        return None

    def kinds(self, trace: Trace) -> tuple[np.ndarray, np.ndarray]:
        """Per kernel: the short-name string id (table, else the trace's own short name) and the
        type index into ``TYPES`` (OTHER when no entry matches); decided once per distinct name."""
        k = trace.kernels
        if not len(k):
            return np.empty(0, np.int32), np.empty(0, np.int8)
        names = distinct(k.name)
        slot = np.zeros(names[-1] + 1, np.int64)
        slot[names] = np.arange(len(names))
        inverse = slot[k.name]
        short = np.empty(len(names), np.int32)
        kind = np.empty(len(names), np.int8)
        first = np.zeros(len(names), np.int64)
        first[inverse[::-1]] = np.arange(len(k))[::-1]  # one kernel per distinct name
        for j, name_id in enumerate(names):
            found = self.lookup(trace.strings[int(name_id)] or "")
            short[j] = trace.strings.intern(found.short) if found else k.short[first[j]]
            kind[j] = TYPES.index(found.type) if found else TYPES.index("OTHER")
        return short[inverse], kind[inverse]


def _load(path: Path, text: str) -> list[_Entry]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise LayercError(f"bad kernel table: {e}", str(path)) from None
    family = str(doc.get("family", path.stem))
    out = []
    for i, entry in enumerate(doc.get("kernel", [])):
        try:
            kind = KernelKind(str(entry["short"]), str(entry.get("type", "OTHER")).upper(), family)
            pattern = re.compile(entry["match"])
        except (KeyError, re.error) as e:
            raise LayercError(f"bad kernel table entry {i + 1}: {e}", str(path)) from None
        if kind.type not in TYPES:
            raise LayercError(f"bad kernel table entry {i + 1}: type must be one of {', '.join(TYPES)}", str(path))
        out.append(_Entry(pattern, kind))
    return out


@lru_cache(maxsize=4)
def kernel_table(extra: str | None = None) -> KernelTable:
    """The built-in families, after the user's (``extra`` or ``LAYERC_KERNEL_TABLES``)."""
    entries: list[_Entry] = []
    for directory in filter(None, (extra or os.environ.get("LAYERC_KERNEL_TABLES", "")).split(os.pathsep)):
        for path in sorted(Path(directory).glob("*.toml")):
            entries += _load(path, path.read_text(encoding="utf-8"))
    root = resources.files("layerc.passes").joinpath("data/kernels")
    for item in sorted(root.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".toml"):
            entries += _load(Path(item.name), item.read_text(encoding="utf-8"))
    return KernelTable(entries)
