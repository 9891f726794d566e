"""Kernel families as data: one TOML file per family (``passes/data/kernels/*.toml``), each a list
of ``[[kernel]]`` entries. An entry::

    [[kernel]]
    match = 'paged_attention_ll4mi\\w*'   # regex, searched in the (demangled or mangled) name
    short = "paged_attention"             # display name; may use the match's groups: 'aten_\\1'
    type = "ATTENTION"                    # one of TYPES (default OTHER)
    stage = "decode"                      # optional vote the name gives: "prefill" | "decode"
    layer_start = true                    # optional: the kernel starts a decoder layer (fused norm)
    marks = ["mha"]                       # optional: what it says of its layer: mla moe fc gdn mha
    examples = ["paged_attention_ll4mi_QKV_mfma16_kernel<...>"]   # names it must match (tested)

A file may set ``family`` (default: its stem) and ``order`` (default 50): files are tried in
(order, name) order, so specific families (library tables, 50) win over generic ones (cross-library
attention 60, common norms/activations 80, Triton 90, PyTorch native 95).

Users add a family without touching code: a directory of such files named by
``LAYERC_KERNEL_TABLES`` (``os.pathsep``-separated) is read after the built-in ones, and its
entries are tried first. A kernel takes the first entry whose regex matches its name.

Patterns run on every name of a trace, hostile ones too, so the built-in ones run in time linear
in the name: no pattern scans the same characters again from each of many starts. The idioms:

- no leading ``\\w*`` (a search tries every start anyway): ``decode\\w*attention``, not
  ``\\w*decode\\w*attention\\w*``;
- ``A\\w*B`` where ``A`` can recur inside one word (``nccl\\w*AllReduce`` on ``ncclnccl...``) is
  ``(?<!\\w)(?>\\w*?A)\\w*B``: one start per word, committed to the word's first ``A``;
- ``A.*?B`` is ``(?m:^)(?>.*?A).*?B``: one start per line, committed to the line's first ``A``.

``tests/grammar/test_kernel_names_hostile.py`` checks every entry on adversarial names. Whatever a
pattern does (a user's too), it sees at most the first ``NAME_LIMIT`` characters of a name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Iterable, cast

import numpy as np

from layerc.grammar import inputs
from layerc.ir.diagnostics import LayercError
from layerc.ir.trace import Trace, first_rows
from layerc.passes import data_cache
from layerc.passes.regex_code import Parts, compiled_parts, from_parts
from layerc.passes.regex_literals import Literals, literals
from layerc.passes.user_regex import compile_user_regex

TYPES = ("ATTENTION", "MOE", "LINEAR", "NORM", "COMMUNICATION", "QUANTIZATION", "MEMORY", "ELEMENTWISE", "OTHER")
STAGES = ("prefill", "decode")  #: ``Classification.stage`` 0 / 1; -1 is unknown
MARKS = ("mla", "moe", "fc", "gdn", "mha")  #: bit ``1 << i`` of ``Classification.marks``
MARK = {m: 1 << i for i, m in enumerate(MARKS)}
UNKNOWN_STAGE = -1
_OTHER = TYPES.index("OTHER")
_KEYS = {"match", "short", "type", "stage", "layer_start", "marks", "examples"}
_GROUP_REF = re.compile(r"\\(?:g<(\w+)>|(\d+))")
#: Characters of a kernel name the patterns see. A C++ template name carries its identity (the
#: kernel template and its leading arguments: the functor, the copy or reduce op) within its first
#: few hundred characters; the rest repeats argument types. The cap, well above that, bounds
#: what any pattern (a user's too) can cost on a name, however long.
NAME_LIMIT = 4096


@dataclass(frozen=True)
class KernelKind:
    """What a kernel-table entry says of the kernels it matches."""

    short: str
    type: str
    family: str
    stage: str | None = None
    layer_start: bool = False
    marks: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Entry:
    """One ``[[kernel]]`` entry of a table."""

    match: str  #: the regex (checked when its table was read)
    kind: KernelKind
    examples: tuple[str, ...] = ()
    source: str = ""  #: "file: entry N" for messages
    templated: bool = False  #: ``short`` refers to the match's groups
    #: the regex's compiled form, where the tables came from the cache
    code: Parts | None = field(default=None, compare=False, repr=False)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        """Made where first searched: from its kept compiled form (no parse), else compiled (a
        trace of a few names, whose literals rule most entries out, compiles a few of the 139;
        ``re``'s own cache holds those a table's check compiled)."""
        made = from_parts(self.match, self.code) if self.code is not None else None
        return made if made is not None else compile_user_regex(self.match)

    @property
    def type_index(self) -> int:
        return TYPES.index(self.kind.type)

    @property
    def stage_index(self) -> int:
        return STAGES.index(self.kind.stage) if self.kind.stage else UNKNOWN_STAGE

    @property
    def mark_bits(self) -> int:
        bits = 0
        for m in self.kind.marks:
            bits |= MARK[m]
        return bits


@dataclass(frozen=True, eq=False)
class Classification:
    """Per kernel of a trace (all arrays as long as ``trace.kernels``)."""

    type: np.ndarray  #: int8 index into ``TYPES`` (OTHER when no entry matches)
    short: np.ndarray  #: int32 string id (the entry's short, else the trace's own short name)
    stage: np.ndarray  #: int8: -1 unknown, 0 prefill, 1 decode (the name's vote)
    layer_start: np.ndarray  #: bool: a kernel that starts a decoder layer
    marks: np.ndarray  #: uint8 bitmask over ``MARKS``
    entry: np.ndarray = field(repr=False)  #: int32 index into ``KernelTable.entries``, -1 none
    #: the tables that classified the kernels (``entry`` indexes its entries)
    table: KernelTable | None = field(default=None, repr=False, compare=False)

    def has(self, mark: str) -> np.ndarray:
        return cast(np.ndarray, (self.marks & MARK[mark]) != 0)

    def __len__(self) -> int:
        return len(self.type)


#: distinct names from which a trace's classification first finds each pattern's literals (their
#: parse costs about what 8 names' searches do)
FILTER_FROM = 16


class KernelTable:
    def __init__(self, entries: list[_Entry], filters: list[Literals | None] | None = None):
        self.entries = entries
        self._memo: dict[str, tuple[int, str | None]] = {}
        # per entry, what a name must hold to match it: given (the cached tables'), or found
        # from FILTER_FROM names on
        self._filters: list[Literals | None] = filters or []
        n = len(entries) + 1  # the last slot is "no entry"
        self._type = np.array([e.type_index for e in entries] + [_OTHER], np.int8)
        self._stage = np.array([e.stage_index for e in entries] + [UNKNOWN_STAGE], np.int8)
        self._start = np.array([e.kind.layer_start for e in entries] + [False], bool)
        self._marks = np.array([e.mark_bits for e in entries] + [0], np.uint8)
        assert len(self._type) == n

    def match(self, name: str) -> tuple[int, str | None]:
        """The index of the first entry matching ``name`` (-1 none) and the short name it gives."""
        hit = self._memo.get(name)
        if hit is None:
            hit = (-1, None)
            seen = name[:NAME_LIMIT]
            filters = self._filters
            lowered = seen.lower() if filters and seen.isascii() else None
            for i, e in enumerate(self.entries):
                if lowered is not None and (f := filters[i]) is not None:  # a needle in the name, else no match
                    text = lowered if f.fold else seen
                    for needle in f.needles:
                        if needle in text:
                            break
                    else:
                        continue
                m = e.pattern.search(seen)
                if m:
                    hit = (i, m.expand(e.kind.short) if e.templated else e.kind.short)
                    break
            self._memo[name] = hit
        return hit

    def lookup(self, name: str) -> KernelKind | None:
        i, short = self.match(name)
        if i < 0:
            return None
        kind = self.entries[i].kind
        # an entry matched (``i >= 0``): it gave a short name
        return kind if short == kind.short else KernelKind(cast(str, short), kind.type, kind.family, kind.stage, kind.layer_start,
                                                           kind.marks)

    def classify(self, trace: Trace) -> Classification:
        """Classify every kernel; regexes run once per distinct name, the rest is array gathers."""
        k = trace.kernels
        n = len(k)
        if not n:
            e: np.ndarray = np.empty(0, np.int8)
            return Classification(e, np.empty(0, np.int32), e.copy(), np.empty(0, bool), np.empty(0, np.uint8), np.empty(0, np.int32), self)
        ids = k.name.astype(np.int64) + 1  # 0 is "no name"
        names = np.flatnonzero(np.bincount(ids))
        slot = np.zeros(int(names[-1]) + 1, np.int32)
        slot[names] = np.arange(len(names), dtype=np.int32)
        inverse = slot[ids]
        if len(names) >= FILTER_FROM and not self._filters:
            self._filters = _literals(self.entries)
        first = first_rows(inverse, len(names))  # one kernel per distinct name (for its own short)
        entry = np.empty(len(names), np.int32)
        short = np.empty(len(names), np.int32)
        strings = trace.strings
        for j, name_id in enumerate(names.tolist()):
            i, s = self.match(strings[name_id - 1] or "")
            entry[j] = i
            short[j] = strings.intern(s) if i >= 0 else k.short[first[j]]
        e = entry[inverse]
        return Classification(self._type[e], short[inverse], self._stage[e], self._start[e], self._marks[e], e, self)

    def kinds(self, trace: Trace) -> tuple[np.ndarray, np.ndarray]:
        """Per kernel: the short-name string id and the type index into ``TYPES``."""
        c = self.classify(trace)
        return c.short, c.type


def _literals(entries: list[_Entry]) -> list[Literals | None]:
    return [literals(e.pattern.pattern, e.pattern.flags) for e in entries]


def _load(path: Path, text: str) -> tuple[int, list[_Entry]]:
    import tomllib  # not where the tables come from the cache

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise LayercError(f"bad kernel table: {e}", str(path)) from None
    family = str(doc.get("family", path.stem))
    order = doc.get("order", 50)
    if not isinstance(order, int):
        raise LayercError("bad kernel table: order must be an integer", str(path))
    kernels = doc.get("kernel", [])
    if not isinstance(kernels, list):
        raise LayercError("bad kernel table: 'kernel' must be an array of tables ([[kernel]])", str(path))
    return order, [_entry(path, family, i, entry) for i, entry in enumerate(kernels)]


def _entry(path: Path, family: str, i: int, entry: dict[str, Any]) -> _Entry:
    where = f"entry {i + 1}" + (f" ({entry.get('short')})" if isinstance(entry, dict) and "short" in entry else "")

    def bad(msg: str) -> LayercError:
        return LayercError(f"bad kernel table {where}: {msg}", str(path))

    if not isinstance(entry, dict):
        raise bad("not a table")
    unknown = set(entry) - _KEYS
    if unknown:
        raise bad(f"unknown key(s) {', '.join(sorted(unknown))}; expected {', '.join(sorted(_KEYS))}")
    for key in ("match", "short"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise bad(f"'{key}' must be a non-empty string")
    try:
        pattern = compile_user_regex(entry["match"])
    except LayercError as e:
        raise bad(f"match regex: {e.message}") from None
    type_ = str(entry.get("type", "OTHER")).upper()
    if type_ not in TYPES:
        raise bad(f"type must be one of {', '.join(TYPES)}")
    stage = entry.get("stage")
    if stage is not None and stage not in STAGES:
        raise bad(f"stage must be one of {', '.join(STAGES)}")
    layer_start = entry.get("layer_start", False)
    if not isinstance(layer_start, bool):
        raise bad("layer_start must be true or false")
    marks = entry.get("marks", ())
    marks = (marks,) if isinstance(marks, str) else marks
    if not isinstance(marks, (list, tuple)) or any(m not in MARKS for m in marks):
        raise bad(f"marks must be one or a list of {', '.join(MARKS)}")
    examples = entry.get("examples", [])
    if not isinstance(examples, list) or not all(isinstance(x, str) for x in examples):
        raise bad("examples must be a list of strings")
    short = entry["short"]
    refs = _GROUP_REF.findall(short)
    for named, number in refs:
        if (named and named not in pattern.groupindex and not named.isdigit()) or (
            (number or named).isdigit() and int(number or named) > pattern.groups
        ):
            raise bad(f"short refers to group {named or number}, which match does not have")
    kind = KernelKind(short, type_, family, stage, layer_start, tuple(marks))
    return _Entry(entry["match"], kind, tuple(examples), f"{path}: {where}", bool(refs))


def _read_dir(files: Iterable[tuple[Path, str]]) -> list[_Entry]:
    tables = []
    for path, text in files:
        order, entries = _load(path, text)
        tables.append((order, path.name, entries))
    return [e for _, _, entries in sorted(tables, key=lambda t: (t[0], t[1])) for e in entries]


def builtin_files() -> list[tuple[Path, str]]:
    root = Path(__file__).parent / "data" / "kernels"  # (a file beside this module: importlib.resources costs a small run 3 ms)
    return [(item, item.read_text(encoding="utf-8")) for item in root.iterdir() if item.name.endswith(".toml")]


def kernel_table(extra: str | None = None) -> KernelTable:
    """The built-in families, after the user's (``extra`` or ``LAYERC_KERNEL_TABLES``)."""
    return _tables(extra or os.environ.get("LAYERC_KERNEL_TABLES", ""))


@lru_cache(maxsize=4)
def _tables(user_dirs: str) -> KernelTable:
    entries: list[_Entry] = []
    for directory in filter(None, user_dirs.split(os.pathsep)):
        if not Path(directory).is_dir():
            raise LayercError(f"kernel tables: no directory {directory}")
        entries += _read_dir((p, inputs.read_text(p)) for p in sorted(Path(directory).glob("*.toml")))
    if entries:
        return KernelTable(entries + _read_dir(builtin_files()))
    return builtin_table(data_cache.beside(__file__, "tables"))


def builtin_table(cache: Path | None) -> KernelTable:
    """The built-in families, from ``cache`` where it holds them as they are now (their entries
    and each one's literals: no TOML, no regex parsed), else read, and kept there."""
    files = builtin_files()
    key = cache_key(files)
    rows = data_cache.read(cache, key)
    if rows is not None:
        return KernelTable([_Entry(match, KernelKind(*kind), examples, source, templated, code)
                            for match, kind, examples, source, templated, code, _ in rows], [f and Literals(*f) for *_, f in rows])
    entries = _read_dir(files)
    if not data_cache.writable(cache):
        return KernelTable(entries)
    filters = _literals(entries)
    data_cache.write(cache, key, [(e.match, _kind_row(e.kind), e.examples, e.source, e.templated, compiled_parts(e.match),
                                   f and (f.needles, f.fold)) for e, f in zip(entries, filters)])
    return KernelTable(entries, filters)


def cache_key(files: list[tuple[Path, str]]) -> tuple[Any, ...]:
    """What the cached tables are derived from: the tables' files, and the code that reads them,
    finds their literals and compiles their regexes."""
    code = (__file__, literals.__code__.co_filename, compiled_parts.__code__.co_filename)
    return sorted((str(p), text) for p, text in files), [data_cache.stamp(m) for m in code]


def _kind_row(k: KernelKind) -> tuple[Any, ...]:
    return k.short, k.type, k.family, k.stage, k.layer_start, k.marks
