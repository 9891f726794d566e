"""Reader of Nsight Systems SQLite exports (schema 2.9.1 through 3.28) → Trace.

Tables and columns are probed (``sqlite_master``, ``PRAGMA table_info``), never assumed:
``EXPORT_META_DATA`` (2.9.1) vs ``META_DATA_EXPORT``, optional ``greenContextId``/``graphId``,
missing ENUM tables. Joins and selections run in SQLite (its automatic indexes serve the
joins; the file is opened read-only and never changed). The event tables' columns come as Arrow
batches from ADBC's SQLite driver (``inputs.sqlite_columns``), never a Python object per value;
a value of another storage class is then found by SQL and named. ``StringIds`` ids are used as the
trace's string ids directly, so no kernel name is touched per row. Runtime API names lose their
``_v7000`` suffixes. Environment tables (``TARGET_INFO_SYSTEM_ENV``, ``ProcessStreams``) are never
read. A ``.nsys-rep`` is first exported with ``nsys export --type sqlite`` when ``nsys`` is on PATH.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np

from layerc.grammar.kineto import short_name
from layerc.grammar import inputs
from layerc.ir.diagnostics import LayercError, ParseError
from layerc.ir.trace import (
    ANNOTATION_NVTX,
    LAUNCH_DRIVER,
    LAUNCH_RUNTIME,
    MEMCPY,
    MEMSET,
    Annotations,
    Kernels,
    Launches,
    MemOps,
    Strings,
    Trace,
    ascending,
    distinct,
    isin,
    unique_inverse,
)

GRAPH_MODE_WARNING = (
    "this export was captured with CUDA graphs traced as a whole (--cuda-graph-trace=graph): kernels "
    "replayed from CUDA graphs have no rows. Re-capture with 'nsys profile --cuda-graph-trace=node' "
    "to see every kernel of a replay"
)

_SUFFIX = re.compile(r"_v\d+$")
#: ENUM_NSYS_EVENT_CLASS where the export has no ENUM tables (schema 2.9.1).
_DEFAULT_CLASSES = {0: "CUDA_RUNTIME", 1: "CUDA_DRIVER", 67: "CUDABACKTRACE", 68: "CUDABACKTRACE_START", 69: "CUDABACKTRACE_FINISH"}

#: kernel column → (nsys column, default when the export lacks it)
_KERNEL_COLUMNS = {
    "start": ("start", None), "end": ("end", None), "device": ("deviceId", -1), "stream": ("streamId", -1),
    "correlation": ("correlationId", -1), "graph_id": ("graphId", -1), "graph_node_id": ("graphNodeId", -1),
    "grid_x": ("gridX", -1), "grid_y": ("gridY", -1), "grid_z": ("gridZ", -1),
    "block_x": ("blockX", -1), "block_y": ("blockY", -1), "block_z": ("blockZ", -1),
    "registers": ("registersPerThread", -1), "shared_static": ("staticSharedMemory", -1),
    "shared_dynamic": ("dynamicSharedMemory", -1), "name": ("demangledName", -1), "short": ("shortName", -1),
}


#: What the reader uses of each table and what it expects there. A required column missing is an
#: error naming it; a value of another storage class is an error naming the table, column, class
#: and row. Values are checked where they fail to convert (a typeof() scan of every row costs a
#: third of a large load), then SQL finds the first bad row; grid and block sizes, which are
#: packed in SQL where text would read as 0, are checked where they are 0.
INTEGER, TEXT, ANY = "integer", "text", "any"


class Column(NamedTuple):
    kind: str  #: INTEGER, TEXT or ANY (SQLite storage classes)
    required: bool = False  #: an export without this column cannot be read
    null: bool = True  #: NULL allowed (read as absent)


_KEY = Column(INTEGER, required=True, null=False)
_EVENT = {"start": _KEY, "end": _KEY}
SCHEMA: dict[str, dict[str, Column]] = {
    "StringIds": {"id": _KEY, "value": Column(TEXT, required=True)},
    "CUPTI_ACTIVITY_KIND_KERNEL": {
        **_EVENT, "globalPid": Column(INTEGER),
        **{nsys: Column(INTEGER) for nsys, _ in _KERNEL_COLUMNS.values() if nsys not in _EVENT},
    },
    "CUPTI_ACTIVITY_KIND_RUNTIME": {**_EVENT, "nameId": _KEY, "globalTid": Column(INTEGER),
                                    "correlationId": Column(INTEGER), "eventClass": Column(INTEGER)},
    "NVTX_EVENTS": {"start": _KEY, "end": Column(INTEGER), "globalTid": Column(INTEGER),
                    "text": Column(TEXT), "textId": Column(INTEGER)},
    **{table: {**_EVENT, **{c: Column(INTEGER) for c in ("deviceId", "streamId", "correlationId", "bytes", "graphNodeId", "copyKind")}}
       for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")},
    **{table: {"id": _KEY, "label": Column(TEXT), "name": Column(TEXT)}
       for table in ("ENUM_NSYS_EVENT_CLASS", "ENUM_CUDA_MEMCPY_OPER")},
    **{table: {"name": Column(TEXT, required=True), "value": Column(ANY, required=True)}
       for table in ("META_DATA_EXPORT", "EXPORT_META_DATA", "META_DATA_CAPTURE")},
    "TARGET_INFO_GPU": {"id": _KEY, "name": Column(TEXT, required=True)},
}


def read_nsys(path: str | Path, geometry: bool = True) -> Trace:
    """Read an Nsight Systems export (or report, through ``nsys export``); ``geometry=False``
    leaves out the kernels' grid, block, registers and shared memory (neither read nor checked)."""
    path = Path(path)
    if not path.exists():
        raise LayercError(f"no such file: {path}", str(path))
    if path.suffix == ".nsys-rep":
        with tempfile.TemporaryDirectory(prefix="layerc-nsys-") as tmp:
            return _read_sqlite(_export(path, Path(tmp)), source=str(path), geometry=geometry)
    return _read_sqlite(path, source=str(path), geometry=geometry)


def _export(rep: Path, tmp: Path) -> Path:
    nsys = shutil.which("nsys")
    if nsys is None:
        raise LayercError(
            f"{rep.name} is an Nsight Systems report: reading it needs 'nsys' on PATH to export it "
            "(or export it yourself: nsys export --type sqlite --output trace.sqlite report.nsys-rep)",
            str(rep),
        )
    out = tmp / (rep.stem + ".sqlite")
    r = subprocess.run([nsys, "export", "--type", "sqlite", "--output", str(out), str(rep)], capture_output=True, text=True)
    if r.returncode != 0 or not out.exists():
        raise LayercError(f"nsys export failed: {(r.stderr or r.stdout).strip()[:500]}", str(rep))
    return out


def _read_sqlite(path: Path, source: str, geometry: bool = True) -> Trace:
    with inputs.open_raw(path) as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise ParseError("not an SQLite file (an Nsight Systems export is 'nsys export --type sqlite' output)", source)
    db = inputs.sqlite_connect(path)  # exactly this file, whatever its name holds
    try:
        return _Reader(db, source, path, geometry).read()
    except sqlite3.DatabaseError as e:
        raise ParseError(f"unreadable SQLite database: {e}", source) from None
    finally:
        db.close()


class _Reader:
    def __init__(self, db: sqlite3.Connection, source: str, path: Path, geometry: bool = True):
        self.db, self.geometry = db, geometry
        self.source = source
        self.path = path
        self.tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        if "StringIds" not in self.tables or not ({"CUPTI_ACTIVITY_KIND_KERNEL", "META_DATA_EXPORT", "EXPORT_META_DATA"} & self.tables):
            raise ParseError("an SQLite database, but not an Nsight Systems export (no StringIds or CUPTI tables)", source)
        self._have: dict[str, set[str]] = {}

    def columns(self, table: str) -> set[str]:
        """The table's columns; an error naming a column SCHEMA requires that it lacks."""
        if table not in self._have:
            have = {r[1] for r in self.db.execute(f'PRAGMA table_info("{table}")')}
            for name, column in SCHEMA[table].items():
                if column.required and name not in have:
                    raise ParseError(f"{table}: no column '{name}' (every Nsight Systems export has it)", self.source)
            self._have[table] = have
        return self._have[table]

    def col(self, table: str, name: str, absent: int = -1) -> str:
        """SQL for a column whose NULL (or absence) reads as ``absent``."""
        return f'COALESCE("{name}", {absent})' if name in self.columns(table) else str(absent)

    @contextmanager
    def values_of(self, table: str):
        """Around the conversion of the table's rows: a value that does not convert is found by SQL
        and named (table, column, class, row)."""
        try:
            yield
        except (TypeError, ValueError, OverflowError) as e:
            error = self.bad_value(table)
            if error is None and isinstance(e, inputs.ColumnsError):
                error = ParseError(f"{table}: {e}", self.source)
            if error is None:
                raise
            raise error from None

    def fetch(self, table: str, select: list[str], where: str = "") -> list[np.ndarray]:
        """The int64 columns of ``SELECT select FROM table where``, in rowid order."""
        n = self.db.execute(f"SELECT COUNT(*) FROM {table} {where}").fetchone()[0]
        with self.values_of(table):
            return inputs.sqlite_columns(self.path, select, f"FROM {table} {where}", n)

    def require(self, table: str, ok: bool) -> None:
        """Where rows read as Python values were checked (``ok``): the first value of another
        storage class, as an error."""
        if not ok:
            raise self.bad_value(table) or ParseError(f"{table}: values of another type than its schema's", self.source)

    def bad_value(self, table: str, rows: np.ndarray | None = None) -> ParseError | None:
        """The first value of ``table`` (among ``rows``, rowids, when given) whose storage class
        SCHEMA does not allow, as an error; None when every value is what it should be."""
        have = self.columns(table)
        checked = [(name, c) for name, c in SCHEMA[table].items() if name in have and c.kind != ANY]
        if not checked:
            return None
        allowed = {name: (c.kind, "null") if c.null else (c.kind,) for name, c in checked}
        where = " OR ".join(f'typeof("{name}") NOT IN ({", ".join(map(repr, allowed[name]))})' for name, _ in checked)
        if rows is not None:
            where = f"({where}) AND rowid IN ({', '.join(str(int(r)) for r in rows[:1000])})"
        kinds = ", ".join(f'typeof("{name}")' for name, _ in checked)
        found = self.db.execute(f'SELECT rowid, {kinds} FROM "{table}" WHERE {where} ORDER BY rowid LIMIT 1').fetchone()
        if found is None:
            return None
        row, *kinds = found
        for (name, column), kind in zip(checked, kinds):
            if kind not in allowed[name]:
                expected = column.kind.upper() + (" or NULL" if column.null else "")
                return ParseError(f"{table}.{name}: expected {expected}, got {kind.upper()} (row {row})", self.source)
        return None

    def read(self) -> Trace:
        strings = self._strings()
        trace = Trace(source=self.source, format="nsys", strings=strings, kernels=self._kernels(strings))
        trace.launches = self._launches(strings)
        trace.annotations = self._nvtx(strings)
        trace.memops = self._memops(strings)
        trace.meta.update(self._export_meta())
        trace.devices = self._devices()
        mode = self._graph_mode(trace)
        trace.meta["cuda_graph_mode"] = mode
        if mode == "graph":
            trace.warnings.append(GRAPH_MODE_WARNING)
        return trace

    # -- strings ---------------------------------------------------------------------------------
    def _strings(self) -> Strings:
        """StringIds in id order (the first row of an id repeated); ``ids`` keeps the nsys ids, so
        that :meth:`string_ids` maps a column of them to ours by position, however sparse."""
        self.columns("StringIds")
        rows = self.db.execute("SELECT id, value FROM StringIds").fetchall()
        with self.values_of("StringIds"):
            ids = np.fromiter((i for i, _ in rows), np.int64, len(rows))
            if any(v is not None and type(v) is not str for _, v in rows):
                raise TypeError("StringIds.value")
        order = np.argsort(ids, kind="stable")
        first = np.ones(len(order), bool)
        first[1:] = ids[order][1:] != ids[order][:-1]
        order = order[first]
        self.ids = ids[order]
        s = Strings.__new__(Strings)
        s.values = [rows[i][1] or "" for i in order.tolist()]
        s.ids = {}
        for i, v in enumerate(s.values):  # first id wins, as intern would
            s.ids.setdefault(v, i)
        return s

    def string_ids(self, ids: np.ndarray, table: str, column: str, rows: np.ndarray) -> np.ndarray:
        """A column of nsys string ids as ours (-1, an absent one, stays -1); an id StringIds
        lacks is an error naming the first row that holds it."""
        known, n = self.ids, len(self.ids)
        if n and known[-1] - known[0] == n - 1:  # contiguous ids (every export seen): an offset
            pos = ids - known[0]
            if not len(pos) or (int(pos.min()) >= 0 and int(pos.max()) < n):  # each one of them (the usual column)
                return pos
            found = (pos >= 0) & (pos < n)
        else:
            pos = np.searchsorted(known, ids)
            found = (pos < n) & (known[np.minimum(pos, max(n - 1, 0))] == ids) if n else np.zeros(len(ids), bool)
        dangling = ~found & (ids != -1)
        if dangling.any():
            at = np.flatnonzero(dangling)
            first = at[np.argmin(rows[at])]
            raise ParseError(f"{table}.{column}: string id {ids[first]} is not in StringIds (row {rows[first]})", self.source)
        return np.where(found, pos, -1)

    # -- kernels ---------------------------------------------------------------------------------
    def _kernels(self, strings: Strings) -> Kernels:
        table = "CUPTI_ACTIVITY_KIND_KERNEL"
        if table not in self.tables:
            return Kernels.empty()
        have = self.columns(table)

        def col(name: str) -> str:  # a column, NULL and absent ones as -1
            return self.col(table, _KERNEL_COLUMNS.get(name, (name, -1))[0])

        # Small fields travel packed in one integer (grid x,y,z in 31+16+16 bits; block x,y,z 11
        # bits each, registers 9, dynamic shared memory 20); rows come unsorted (numpy sorts faster
        # than SQLite's temp B-tree).
        select = [
            "start", "end", col("device"), col("stream"), col("correlation"),
            col("graph_id"), col("graph_node_id"), col("name"), col("short"), self.col(table, "globalPid"), "rowid",
        ]
        names = ["start", "end", "device", "stream", "correlation", "graph_id", "graph_node_id", "name", "short", "gpid", "row"]
        if self.geometry:
            select += [
                # (SQLite's <<, & and | share one precedence level, left to right: parenthesize.)
                f"({col('grid_x')} & 2147483647) | (({col('grid_y')} & 65535) << 31) | (({col('grid_z')} & 65535) << 47)",
                f"({col('block_x')} & 2047) | (({col('block_y')} & 2047) << 11) | (({col('block_z')} & 2047) << 22)"
                f" | (({col('registers')} & 511) << 33) | (({col('shared_dynamic')} & 1048575) << 42)",
                col("shared_static"),
            ]
            names += ["grid", "block", "shared_static"]
        data = dict(zip(names, self.fetch(table, select)))
        _sort_in_place(data.values(), data["start"])
        cols = {x: data[x] for x in ("start", "end", "device", "stream", "correlation", "graph_id", "graph_node_id", "row")}
        cols.update(
            pid=np.where(data["gpid"] >= 0, (data["gpid"] >> 24) & 0xFFFFFF, -1),
            name=self.string_ids(data["name"], table, "demangledName", data["row"]),
            short=self.string_ids(data["short"], table, "shortName", data["row"]),
        )
        if self.geometry:
            grid, block = data["grid"], data["block"]
            i32 = lambda x: x.astype(np.int32)  # noqa: E731 (the IR's type for these: converted once)
            cols.update(
                grid_x=i32(grid & 2147483647), grid_y=i32((grid >> 31) & 65535), grid_z=i32((grid >> 47) & 65535),
                block_x=i32(block & 2047), block_y=i32((block >> 11) & 2047), block_z=i32((block >> 22) & 2047),
                registers=i32((block >> 33) & 511), shared_dynamic=i32((block >> 42) & 1048575), shared_static=data["shared_static"],
            )
        sizes = [cols[c] for c, (nsys, _) in _KERNEL_COLUMNS.items() if c.startswith(("grid_", "block_")) and nsys in have and c in cols]
        if sizes:  # text reads as 0 where SQL packs it: a size of 0 is checked
            zero = np.logical_or.reduce([v == 0 for v in sizes])
            if zero.any() and (error := self.bad_value(table, cols["row"][zero])) is not None:
                raise error
        k = Kernels.from_columns(cols)
        if "shortName" not in have and len(k):  # derive, once per distinct name
            names_ = distinct(k.name)
            names_ = names_[names_ >= 0]
            lut = np.full(len(strings), -1, np.int32)
            for i in names_:
                lut[i] = strings.intern(short_name(strings.values[i]))
            k.short = np.where(k.name >= 0, lut[k.name], -1)
        return k

    # -- host API calls --------------------------------------------------------------------------
    def _launches(self, strings: Strings) -> Launches:
        table = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if table not in self.tables:
            return Launches.empty()
        have = self.columns(table)
        where = ""
        if "eventClass" in have:  # CUDA backtrace rows repeat each call with the same correlation
            classes = {k: v.upper() for k, v in self._enum("ENUM_NSYS_EVENT_CLASS", "name").items()} or _DEFAULT_CLASSES
            skip = [k for k, v in classes.items() if "BACKTRACE" in v]
            if skip:
                where = f"WHERE eventClass IS NULL OR eventClass NOT IN ({', '.join(map(str, skip))})"
        cols = self.fetch(table, ["start", "end", self.col(table, "globalTid"), self.col(table, "correlationId"), "nameId", "rowid",
                                  self.col(table, "eventClass")], where)  # (eventClass read for its check)
        if not len(cols[0]):
            return Launches.empty()
        _sort_in_place(cols, cols[0])
        start, end, gtid, correlation, name_id, row, _ = cols
        name = self.string_ids(name_id, table, "nameId", row)
        # API names without version suffixes; the driver API is the cu* family.
        names = distinct(name)
        names = names[names >= 0]
        lut = np.full(len(strings) + 1, -1, np.int64)  # [-1]: an absent name stays absent
        driver = np.zeros(len(strings) + 1, bool)
        for i in names:
            text = _SUFFIX.sub("", strings[int(i)] or "")
            lut[i] = strings.intern(text)
            driver[i] = text.startswith("cu") and not text.startswith("cuda")
        return Launches.from_columns({
            "start": start, "end": end,
            "pid": np.where(gtid >= 0, (gtid >> 24) & 0xFFFFFF, -1), "tid": np.where(gtid >= 0, gtid & 0xFFFFFF, -1),
            "correlation": correlation, "name": lut[name],
            "kind": np.where(driver[name], LAUNCH_DRIVER, LAUNCH_RUNTIME), "row": row,
        })

    # -- NVTX ------------------------------------------------------------------------------------
    def _nvtx(self, strings: Strings) -> Annotations:
        table = "NVTX_EVENTS"
        if table not in self.tables:
            return Annotations.empty()
        have = self.columns(table)
        text = "text" if "text" in have else "NULL"
        text_id = "textId" if "textId" in have else "NULL"
        rows = self.db.execute(
            f"SELECT start, COALESCE(end, start), {self.col(table, 'globalTid')}, {text}, {text_id}, rowid FROM {table} "
            f"WHERE {text} IS NOT NULL OR {text_id} IS NOT NULL ORDER BY start"
        ).fetchall()
        if not rows:
            return Annotations.empty()
        with self.values_of(table):
            a = np.array([(r[0], r[1], r[2], r[5]) for r in rows], dtype=np.int64)
            tid = np.array([-1 if r[4] is None else r[4] for r in rows], np.int64)
            if any(r[3] is not None and type(r[3]) is not str for r in rows):
                raise TypeError(f"{table}.text")
        tid = self.string_ids(tid, table, "textId", a[:, 3])
        name = np.array([strings.intern(r[3]) if r[3] is not None else t for r, t in zip(rows, tid.tolist())], np.int64)
        gtid = a[:, 2]
        return Annotations.from_columns({
            "start": a[:, 0], "end": a[:, 1],
            "pid": np.where(gtid >= 0, (gtid >> 24) & 0xFFFFFF, -1), "tid": np.where(gtid >= 0, gtid & 0xFFFFFF, -1),
            "name": name, "kind": np.full(len(rows), ANNOTATION_NVTX, np.int8), "row": a[:, 3],
        })

    # -- memcpy / memset -------------------------------------------------------------------------
    def _memops(self, strings: Strings) -> MemOps:
        parts = []
        for table, kind, label in (("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY, "Memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", MEMSET, "Memset")):
            if table not in self.tables:
                continue
            col = lambda name: self.col(table, name)  # noqa: E731
            cols = self.fetch(table, ["start", "end", *map(col, ("deviceId", "streamId", "correlationId", "bytes", "graphNodeId", "copyKind")), "rowid"])
            if not len(cols[0]):
                continue
            start, end, device, stream, correlation, nbytes, node, copy_kind, row = cols
            kinds = self._enum("ENUM_CUDA_MEMCPY_OPER") if kind == MEMCPY else {}
            codes, which = unique_inverse(copy_kind)  # a name per kind of copy, not per row
            name = np.array([strings.intern(f"{label} {kinds.get(c, '')}".strip()) for c in codes.tolist()], np.int64)[which]
            parts.append(MemOps.from_columns({
                "start": start, "end": end, "device": device, "stream": stream, "correlation": correlation,
                "bytes": nbytes, "kind": np.full(len(start), kind, np.int8), "name": name, "graph_node_id": node, "row": row,
            }))
        out = MemOps.empty()
        for p in parts:
            out = out.concat(p)
        return out

    def _enum(self, table: str, column: str = "label") -> dict[int, str]:
        if table not in self.tables:
            return {}
        have = self.columns(table)
        text = column if column in have else "name"
        if text not in have:
            return {}
        rows = self.db.execute(f'SELECT id, "{text}" FROM {table} WHERE "{text}" IS NOT NULL').fetchall()
        self.require(table, all(type(i) is int and type(v) is str for i, v in rows))
        return dict(rows)

    # -- facts about the capture -------------------------------------------------------------------
    def _export_meta(self) -> dict:
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if table in self.tables:
                self.columns(table)
                rows = dict(self._names(table))
                return {
                    "schema_version": _text(rows.get("EXPORT_SCHEMA_VERSION")),
                    "nsys_version": _text(rows.get("EXPORT_PRODUCT_VERSION")),
                }
        return {}

    def _names(self, table: str) -> list[tuple[str, object]]:
        """A metadata table's (name, value) rows; a name that is not text is an error."""
        rows = self.db.execute(f"SELECT name, value FROM {table}").fetchall()
        self.require(table, all(type(n) is str for n, _ in rows))
        return rows

    def _devices(self) -> dict[int, str]:
        table = "TARGET_INFO_GPU"
        if table not in self.tables or not {"id", "name"} <= {r[1] for r in self.db.execute(f"PRAGMA table_info({table})")}:
            return {}
        rows = self.db.execute(f"SELECT id, name FROM {table}").fetchall()
        self.require(table, all(type(i) is int and (n is None or type(n) is str) for i, n in rows))
        return {i: n or "" for i, n in rows}

    def _graph_mode(self, trace: Trace) -> str | None:
        """``node``, ``graph``, or None when the capture used no CUDA graph we can see."""
        if "META_DATA_CAPTURE" in self.tables and {"name", "value"} <= {r[1] for r in self.db.execute("PRAGMA table_info(META_DATA_CAPTURE)")}:
            row = dict(self._names("META_DATA_CAPTURE")).get("CUDA_GRAPH_TRACE_OPTIONS:MODE")
            mode = (_text(row) or "").lower() if row is not None else None
            if mode in ("node", "graph"):
                return mode
        if (trace.kernels.graph_node_id >= 0).any():
            return "node"
        launches = trace.launches.correlation[trace.graph_launch_mask()]
        if len(launches) and not isin(launches, trace.kernels.correlation).any():
            return "graph"  # graphs were launched, yet no kernel row belongs to a launch
        if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in self.tables and self.db.execute(
            "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
        ).fetchone()[0]:
            return "graph"
        return None


def _sort_in_place(columns, key: np.ndarray) -> None:
    """Rows in ``key`` order (stable), moving only the rows out of place: an export's rows come
    almost in time order (a row a few places early or late), where a whole gather per column
    would cost more than the sort."""
    if ascending(key):
        return
    order = np.argsort(key, kind="stable")
    moved = np.flatnonzero(order != np.arange(len(order)))
    source = order[moved]
    for column in list(columns):
        column[moved] = column[source]


def _text(value) -> str | None:
    """A metadata value as text, whatever class it was stored as."""
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
