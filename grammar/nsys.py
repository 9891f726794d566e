"""Reader of Nsight Systems SQLite exports (schema 2.9.1 through 3.28) → Trace.

Tables and columns are probed (``sqlite_master``, ``PRAGMA table_info``), never assumed:
``EXPORT_META_DATA`` (2.9.1) vs ``META_DATA_EXPORT``, optional ``greenContextId``/``graphId``,
missing ENUM tables. Joins and selections run in SQLite (its automatic indexes serve the
joins; the file is opened read-only and never changed). ``StringIds`` ids are used as the
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
from pathlib import Path

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
    distinct,
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


def read_nsys(path: str | Path) -> Trace:
    path = Path(path)
    if not path.exists():
        raise LayercError(f"no such file: {path}", str(path))
    if path.suffix == ".nsys-rep":
        with tempfile.TemporaryDirectory(prefix="layerc-nsys-") as tmp:
            return _read_sqlite(_export(path, Path(tmp)), source=str(path))
    return _read_sqlite(path, source=str(path))


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


def _read_sqlite(path: Path, source: str) -> Trace:
    with inputs.open_raw(path) as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise ParseError("not an SQLite file (an Nsight Systems export is 'nsys export --type sqlite' output)", source)
    db = inputs.sqlite_connect(path)  # exactly this file, whatever its name holds
    try:
        return _Reader(db, source).read()
    except sqlite3.DatabaseError as e:
        raise ParseError(f"unreadable SQLite database: {e}", source) from None
    finally:
        db.close()


class _Reader:
    def __init__(self, db: sqlite3.Connection, source: str):
        self.db = db
        self.source = source
        self.tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        if "StringIds" not in self.tables or not ({"CUPTI_ACTIVITY_KIND_KERNEL", "META_DATA_EXPORT", "EXPORT_META_DATA"} & self.tables):
            raise ParseError("an SQLite database, but not an Nsight Systems export (no StringIds or CUPTI tables)", source)

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.db.execute(f"PRAGMA table_info({table})")}

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
        """StringIds, placed so that an nsys string id is our string id."""
        rows = self.db.execute("SELECT id, value FROM StringIds ORDER BY id").fetchall()
        size = rows[-1][0] + 1 if rows else 0
        values = [""] * size
        for i, v in rows:
            values[i] = v if v is not None else ""
        s = Strings.__new__(Strings)
        s.values = values
        s.ids = {}
        for i, v in rows:  # first id wins, as intern would
            s.ids.setdefault(values[i], i)
        return s

    # -- kernels ---------------------------------------------------------------------------------
    def _kernels(self, strings: Strings) -> Kernels:
        table = "CUPTI_ACTIVITY_KIND_KERNEL"
        if table not in self.tables:
            return Kernels.empty()
        have = self.columns(table)

        def col(name: str) -> str:  # a column, NULL and absent ones as -1
            nsys = _KERNEL_COLUMNS.get(name, (name, -1))[0]
            return f"COALESCE({nsys}, -1)" if nsys in have else "-1"

        # SQLite makes one Python int per value: small fields travel packed in one integer
        # (grid x,y,z in 31+16+16 bits; block x,y,z 11 bits each, registers 9, dynamic shared
        # memory 20), and rows come unsorted (numpy sorts faster than SQLite's temp B-tree).
        select = [
            "start", "end", f"(({col('device')} + 1) << 48) | ({col('stream')} + 1)", col("correlation"),
            col("graph_id"), col("graph_node_id"),
            # (SQLite's <<, & and | share one precedence level, left to right: parenthesize.)
            f"({col('grid_x')} & 2147483647) | (({col('grid_y')} & 65535) << 31) | (({col('grid_z')} & 65535) << 47)",
            f"({col('block_x')} & 2047) | (({col('block_y')} & 2047) << 11) | (({col('block_z')} & 2047) << 22)"
            f" | (({col('registers')} & 511) << 33) | (({col('shared_dynamic')} & 1048575) << 42)",
            col("shared_static"), col("name"), col("short"), col("globalPid"), "rowid",
        ]
        names = ["start", "end", "devstream", "correlation", "graph_id", "graph_node_id", "grid", "block", "shared_static", "name", "short", "gpid", "row"]
        n = self.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        data = np.fromiter(self.db.execute(f"SELECT {', '.join(select)} FROM {table}"), dtype=[(x, "i8") for x in names], count=n)
        data = data[np.argsort(data["start"], kind="stable")]
        ds, grid, block = data["devstream"], data["grid"], data["block"]
        cols = {x: data[x] for x in ("start", "end", "correlation", "graph_id", "graph_node_id", "shared_static", "name", "short", "row")}
        cols.update(
            device=(ds >> 48) - 1, stream=(ds & ((1 << 48) - 1)) - 1,
            grid_x=grid & 2147483647, grid_y=(grid >> 31) & 65535, grid_z=(grid >> 47) & 65535,
            block_x=block & 2047, block_y=(block >> 11) & 2047, block_z=(block >> 22) & 2047,
            registers=(block >> 33) & 511, shared_dynamic=(block >> 42) & 1048575,
            pid=np.where(data["gpid"] >= 0, (data["gpid"] >> 24) & 0xFFFFFF, -1),
        )
        k = Kernels.from_columns(cols)
        if "shortName" not in have and len(k):  # derive, once per distinct name
            names_ = distinct(k.name)
            lut = np.full(names_.max() + 1, -1, np.int32)
            for i in names_:
                lut[i] = strings.intern(short_name(strings.values[i]))
            k.short = lut[k.name]
        return k

    # -- host API calls --------------------------------------------------------------------------
    def _launches(self, strings: Strings) -> Launches:
        table = "CUPTI_ACTIVITY_KIND_RUNTIME"
        if table not in self.tables:
            return Launches.empty()
        have = self.columns(table)
        corr = "COALESCE(correlationId, -1)" if "correlationId" in have else "-1"
        cls = "COALESCE(eventClass, -1)" if "eventClass" in have else "-1"
        where = ""
        if "eventClass" in have:  # CUDA backtrace rows repeat each call with the same correlation
            classes = {k: v.upper() for k, v in self._enum("ENUM_NSYS_EVENT_CLASS", "name").items()} or _DEFAULT_CLASSES
            skip = [k for k, v in classes.items() if "BACKTRACE" in v]
            if skip:
                where = f"WHERE eventClass NOT IN ({', '.join(map(str, skip))})"
        rows = self.db.execute(f"SELECT start, end, globalTid, {corr}, nameId, {cls}, rowid FROM {table} {where} ORDER BY start").fetchall()
        if not rows:
            return Launches.empty()
        a = np.array(rows, dtype=np.int64)
        gtid = a[:, 2]
        # API names without version suffixes; the driver API is the cu* family.
        names = distinct(a[:, 4])
        lut = np.zeros(names.max() + 1, np.int64)
        driver = np.zeros(names.max() + 1, bool)
        for i in names:
            text = _SUFFIX.sub("", strings[int(i)] or "")
            lut[i] = strings.intern(text)
            driver[i] = text.startswith("cu") and not text.startswith("cuda")
        return Launches.from_columns({
            "start": a[:, 0], "end": a[:, 1], "pid": (gtid >> 24) & 0xFFFFFF, "tid": gtid & 0xFFFFFF,
            "correlation": a[:, 3], "name": lut[a[:, 4]],
            "kind": np.where(driver[a[:, 4]], LAUNCH_DRIVER, LAUNCH_RUNTIME), "row": a[:, 6],
        })

    # -- NVTX ------------------------------------------------------------------------------------
    def _nvtx(self, strings: Strings) -> Annotations:
        table = "NVTX_EVENTS"
        if table not in self.tables:
            return Annotations.empty()
        have = self.columns(table)
        text_id = "textId" if "textId" in have else "NULL"
        rows = self.db.execute(
            f"SELECT start, COALESCE(end, start), COALESCE(globalTid, -1), text, {text_id}, rowid FROM {table} "
            "WHERE text IS NOT NULL OR " + ("textId IS NOT NULL" if "textId" in have else "0") + " ORDER BY start"
        ).fetchall()
        if not rows:
            return Annotations.empty()
        name = np.array([strings.intern(t) if t is not None else tid for _, _, _, t, tid, _ in rows], np.int64)
        a = np.array([(r[0], r[1], r[2], r[5]) for r in rows], dtype=np.int64)
        return Annotations.from_columns({
            "start": a[:, 0], "end": a[:, 1], "pid": (a[:, 2] >> 24) & 0xFFFFFF, "tid": a[:, 2] & 0xFFFFFF,
            "name": name, "kind": np.full(len(rows), ANNOTATION_NVTX, np.int8), "row": a[:, 3],
        })

    # -- memcpy / memset -------------------------------------------------------------------------
    def _memops(self, strings: Strings) -> MemOps:
        parts = []
        for table, kind, label in (("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY, "Memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", MEMSET, "Memset")):
            if table not in self.tables:
                continue
            have = self.columns(table)
            node = "COALESCE(graphNodeId, -1)" if "graphNodeId" in have else "-1"
            copy = "COALESCE(copyKind, -1)" if "copyKind" in have else "-1"
            rows = self.db.execute(
                f"SELECT start, end, deviceId, streamId, COALESCE(correlationId, -1), COALESCE(bytes, -1), {node}, {copy}, rowid FROM {table}"
            ).fetchall()
            if not rows:
                continue
            a = np.array(rows, dtype=np.int64)
            kinds = self._enum("ENUM_CUDA_MEMCPY_OPER") if kind == MEMCPY else {}
            name = np.array([strings.intern(f"{label} {kinds.get(int(c), '')}".strip()) for c in a[:, 7]], np.int64)
            parts.append(MemOps.from_columns({
                "start": a[:, 0], "end": a[:, 1], "device": a[:, 2], "stream": a[:, 3], "correlation": a[:, 4],
                "bytes": a[:, 5], "kind": np.full(len(a), kind, np.int8), "name": name, "graph_node_id": a[:, 6], "row": a[:, 8],
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
        return {i: v for i, v in self.db.execute(f"SELECT id, {text} FROM {table}")}

    # -- facts about the capture -------------------------------------------------------------------
    def _export_meta(self) -> dict:
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if table in self.tables:
                rows = dict(self.db.execute(f"SELECT name, value FROM {table}").fetchall())
                return {
                    "schema_version": rows.get("EXPORT_SCHEMA_VERSION"),
                    "nsys_version": rows.get("EXPORT_PRODUCT_VERSION"),
                }
        return {}

    def _devices(self) -> dict[int, str]:
        if "TARGET_INFO_GPU" in self.tables and {"id", "name"} <= self.columns("TARGET_INFO_GPU"):
            return {int(i): str(n) for i, n in self.db.execute("SELECT id, name FROM TARGET_INFO_GPU")}
        return {}

    def _graph_mode(self, trace: Trace) -> str | None:
        """``node``, ``graph``, or None when the capture used no CUDA graph we can see."""
        if "META_DATA_CAPTURE" in self.tables:
            row = self.db.execute(
                "SELECT value FROM META_DATA_CAPTURE WHERE name = 'CUDA_GRAPH_TRACE_OPTIONS:MODE'"
            ).fetchone()
            if row is not None:
                return str(row[0]).lower()
        if (trace.kernels.graph_node_id >= 0).any():
            return "node"
        launches = trace.launches.correlation[trace.graph_launch_mask()]
        if len(launches) and not np.isin(launches, trace.kernels.correlation).any():
            return "graph"  # graphs were launched, yet no kernel row belongs to a launch
        if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in self.tables and self.db.execute(
            "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
        ).fetchone()[0]:
            return "graph"
        return None
