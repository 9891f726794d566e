"""Generate realistic Nsight Systems SQLite exports of LLM inference, with their ground truth.

No public nsys export of LLM decode captured with ``--cuda-graph-trace=node`` exists (reference
notes §1.6, §5.3), yet the trace reader must handle one: per-kernel rows that all share the
``correlationId`` of one ``cudaGraphLaunch_v10000`` call, a ``graphNodeId`` that repeats in every
replay, kernels on two or three streams, eager prefill steps with one launch per kernel and NVTX
ranges per layer, and the graph-mode variant where replayed kernels have no rows at all (only
``CUPTI_ACTIVITY_KIND_GRAPH_TRACE``). This module writes such a file for one of four export schema
versions, with the tables and column layouts of that version:

* ``2.9.1`` (nsys 2022.2, verified on the pipit export): ``EXPORT_META_DATA``, no ``ENUM_*`` tables,
  no ``META_DATA_CAPTURE``, a 27-column kernel table (no ``greenContextId``/``graphId``), graph nodes
  in ``CUDA_GRAPH_EVENTS(graphNodeId, originalGraphNodeId)``, and no ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE``
  table at all (the ``--lazy=false`` export lacks it), so a graph-mode 2.9.1 file has graph launches
  with no GPU rows behind them.
* ``3.13`` (3.13.2): adds ``greenContextId``, ``META_DATA_EXPORT``, ``META_DATA_CAPTURE``, the
  ``ENUM_*`` tables, ``CUDA_GRAPH_NODE_EVENTS``/``CUDA_GRAPH_EVENTS(graphId, graphExecId)`` and
  ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE``.
* ``3.25`` (3.25.0, verified on the nsys-ai export): 40-column kernel table (``qmd*``, ``graphId``,
  ``cluster*``, ``tensorSizeMinusOneElements``), ``copyCount`` in ``CUPTI_ACTIVITY_KIND_MEMCPY``,
  ``binaryData`` in ``NVTX_EVENTS``, ``systemClockNs`` in ``TARGET_INFO_SESSION_START_TIME``.
* ``3.28`` (3.28.1, the 2026.4 schema reference): as 3.25, plus ``NVTX_EVENTS.eventId INTEGER PRIMARY KEY``.

Layouts of 2.9.1 and 3.25 are copied from the real exports; those of 3.13 and 3.28 follow the
deltas in the reference notes, and where the notes are silent (3.13's ``binaryData``, the graph
tables' columns before 3.25) from the schema reference text. Like ``nsys export`` (lazy mode) a
file holds only the tables it has data for, plus the ``ENUM_*`` tables from 3.13 on. Environment
tables (``TARGET_INFO_SYSTEM_ENV``, ``ProcessStreams``) are never written.

Workload, per device (one process per device, as a tensor-parallel server runs one rank per GPU):

1. capture of two CUDA graphs (decode at batch 1 and batch 8; the batch-1 graph has more nodes,
   as its small GEMMs use split-K plus ``splitKreduce_kernel``): runtime rows of the captured
   launches (no GPU rows), NVTX ranges per layer, graph/node creation events;
2. ``eager_steps`` prefill steps: one ``cudaLaunchKernel_v7000`` (or ``cudaLaunchKernelExC_v11060`` /
   driver ``cuLaunchKernelEx``) per kernel, ``graphNodeId`` NULL, NVTX push/pop per step and per layer;
3. ``replays`` decode steps, each one ``cudaGraphLaunch_v10000`` (replay ``i`` uses the batch-8 graph
   when ``i % 3 == 2``, else the batch-1 graph) between an input ``cudaMemcpyAsync_v3020`` HtoD and an
   output DtoH plus ``cudaStreamSynchronize_v3020``. In node mode every kernel, memset and memcpy node
   of the replay has a row with the launch's ``correlationId``, a stable ``graphNodeId`` and (>=3.25)
   ``graphId``; in graph mode the replay is one ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` row.

Correlation ids are per process (CUPTI), so with ``devices > 1`` their ranges overlap between
processes: a reader must key launches by process (``globalTid >> 24 & 0xFFFFFF``) as well.
``globalTid = vmId << 48 | pid << 24 | tid`` (``vmId`` 1, as in both real exports).

``generate`` writes the ``.sqlite`` atomically and returns the ground truth, also written beside it
as ``<stem>_truth.json``. ``kernels=N`` scales layers (up to the model's depth) and replays so that
about N kernels execute in total; in graph mode the replayed ones have no rows, so the same
arguments describe the same run in both modes.

Usage (wired as ``layerc gen-nsys``): ``gen_nsys OUT.sqlite [--schema V] [--mode node|graph]
[--model deepseek_v3|llama] [--layers N] [--replays R] [--eager-steps E] [--kernels N]
[--devices D] [--seed S]``.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from layerc.backends.outputs import atomic_path, companion, output_dir, write_atomic

SCHEMAS = ("2.9.1", "3.13", "3.25", "3.28")
MODES = ("node", "graph")
MODELS = ("deepseek_v3", "llama")
#: full EXPORT_SCHEMA_VERSION and the nsys release that writes it
SCHEMA_FULL = {"2.9.1": "2.9.1", "3.13": "3.13.2", "3.25": "3.25.0", "3.28": "3.28.1"}
PRODUCT = {
    "2.9.1": ("2022.2.1.31", "2022.2"),
    "3.13": ("2024.6.1.90", "2024.6"),
    "3.25": ("2026.2.1.210", "2026.2"),
    "3.28": ("2026.4.1.191", "2026.4"),
}
FULL_LAYERS = {"deepseek_v3": 61, "llama": 32}
FIRST_DENSE = 3  # DeepSeek-V3 first_k_dense_replace

VM_ID = 1
GLOBAL_VID = VM_ID << 48

# ENUM_NSYS_EVENT_CLASS / ENUM_NSYS_EVENT_TYPE ids used below (same in 2.9.1, which has no ENUM tables)
EC_RUNTIME, EC_DRIVER = 0, 1
EC_GRAPH_NODE_CREATION, EC_GRAPHEXEC_CREATION, EC_GRAPH_CREATION = 77, 94, 95
ET_PUSHPOP = 59
# ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND
COPY_HTOD, COPY_DTOH, COPY_DTOD = 1, 2, 8
MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE = 0, 1, 2


def _v(schema: str) -> tuple[int, int]:
    major, minor = schema.split(".")[:2]
    return int(major), int(minor)


# =================================================================================================
# Schema: column specs per table and version
# =================================================================================================
# (name, type, not_null, references, comment)
Col = tuple[str, str, bool, "str | None", str]

_TS = [("start", "INTEGER", True, None, "Event start timestamp (ns)."),
       ("end", "INTEGER", True, None, "Event end timestamp (ns).")]


def _kernel_cols(schema: str) -> list[Col]:
    v = _v(schema)
    cols: list[Col] = [*_TS,
        ("deviceId", "INTEGER", True, None, "Device ID."),
        ("contextId", "INTEGER", True, None, "Context ID.")]
    if v >= (3, 13):
        cols.append(("greenContextId", "INTEGER", False, None, "Green context ID."))
    cols += [
        ("streamId", "INTEGER", True, None, "Stream ID."),
        ("correlationId", "INTEGER", False, "CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)",
         "ID used to identify the API call that launched the event."),
        ("globalPid", "INTEGER", False, None, "Serialized GlobalId."),
        ("demangledName", "INTEGER", True, "StringIds(id)", "Kernel function name w/ templates"),
        ("shortName", "INTEGER", True, "StringIds(id)", "Base kernel function name"),
        ("mangledName", "INTEGER", False, "StringIds(id)", "Raw C++ mangled kernel function name"),
        ("launchType", "INTEGER", False, "ENUM_CUDA_KERNEL_LAUNCH_TYPE(id)", "Launch type of the kernel."),
        ("cacheConfig", "INTEGER", False, "ENUM_CUDA_FUNC_CACHE_CONFIG(id)", "Cache configuration used for the kernel."),
        ("registersPerThread", "INTEGER", True, None, "Number of registers required for each thread executing the kernel."),
        ("gridX", "INTEGER", True, None, "X-dimension grid size."),
        ("gridY", "INTEGER", True, None, "Y-dimension grid size."),
        ("gridZ", "INTEGER", True, None, "Z-dimension grid size."),
        ("blockX", "INTEGER", True, None, "X-dimension block size."),
        ("blockY", "INTEGER", True, None, "Y-dimension block size."),
        ("blockZ", "INTEGER", True, None, "Z-dimension block size."),
        ("staticSharedMemory", "INTEGER", True, None, "Static shared memory allocated for the kernel (B)."),
        ("dynamicSharedMemory", "INTEGER", True, None, "Dynamic shared memory reserved for the kernel (B)."),
        ("localMemoryPerThread", "INTEGER", True, None, "Amount of local memory reserved for each thread (B)."),
        ("localMemoryTotal", "INTEGER", True, None, "Total amount of local memory reserved for the kernel (B)."),
        ("gridId", "INTEGER", True, None, "Unique grid ID of the kernel assigned at runtime."),
        ("sharedMemoryExecuted", "INTEGER", False, None, "Shared memory size set by the driver."),
        ("graphNodeId", "INTEGER", False, _node_ref(schema), "CUDA graph node creation ID."),
        ("sharedMemoryLimitConfig", "INTEGER", False, "ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG(id)",
         "Shared memory limit per block config."),
    ]
    if v >= (3, 25):
        cols += [
            ("qmdBulkReleaseDone", "INTEGER", False, None, "QMD bulk release done timestamp from CWD events."),
            ("qmdPreexitDone", "INTEGER", False, None, "QMD pre-exit done timestamp from CWD events."),
            ("qmdLastCtaDone", "INTEGER", False, None, "QMD last CTA done timestamp from CWD events."),
            ("graphId", "INTEGER", False, None, "Kernel graph ID."),
            ("clusterX", "INTEGER", False, None, "Cluster X dimension."),
            ("clusterY", "INTEGER", False, None, "Cluster Y dimension."),
            ("clusterZ", "INTEGER", False, None, "Cluster Z dimension."),
            ("clusterSchedulingPolicy", "INTEGER", False, None, "Cluster scheduling policy."),
            ("maxPotentialClusterSize", "INTEGER", False, None, "Maximum potential cluster size."),
            ("maxActiveClusters", "INTEGER", False, None, "Maximum active clusters."),
            ("sharedMemoryRequestedPercentage", "INTEGER", False, None, "Shared memory requested percentage."),
            ("tensorSizeMinusOneElements", "TEXT", True, None, "TMA descriptor tensor size minus one elements array."),
        ]
    return cols


def _node_ref(schema: str) -> str:
    return "CUDA_GRAPH_EVENTS(graphNodeId)" if schema == "2.9.1" else "CUDA_GRAPH_NODE_EVENTS(graphNodeId)"


def _runtime_cols(schema: str) -> list[Col]:
    return [*_TS,
        ("eventClass", "INTEGER", True, "ENUM_NSYS_EVENT_CLASS(id)", "CUDA event class enum value."),
        ("globalTid", "INTEGER", False, None, "Serialized GlobalId."),
        ("correlationId", "INTEGER", False, None, "ID used to identify events that this function call has triggered."),
        ("nameId", "INTEGER", True, "StringIds(id)", "Function name"),
        ("returnValue", "INTEGER", True, None, "Return value of the function call."),
        ("callchainId", "INTEGER", False, "CUDA_CALLCHAINS(id)", "ID of the attached callchain."),
    ]


def _dev_head(schema: str) -> list[Col]:
    cols: list[Col] = [*_TS, ("deviceId", "INTEGER", True, None, "Device ID."),
                       ("contextId", "INTEGER", True, None, "Context ID.")]
    if _v(schema) >= (3, 13):
        cols.append(("greenContextId", "INTEGER", False, None, "Green context ID."))
    cols += [("streamId", "INTEGER", True, None, "Stream ID."),
             ("correlationId", "INTEGER", False, "CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)",
              "ID used to identify the API call that launched the event."),
             ("globalPid", "INTEGER", False, None, "Serialized GlobalId.")]
    return cols


def _memcpy_cols(schema: str) -> list[Col]:
    cols = _dev_head(schema) + [
        ("bytes", "INTEGER", True, None, "Number of bytes transferred (B)."),
        ("copyKind", "INTEGER", True, "ENUM_CUDA_MEMCPY_OPER(id)", "Type of the memory copy."),
        ("deprecatedSrcId", "INTEGER", False, None, "Deprecated, use srcDeviceId instead."),
        ("srcKind", "INTEGER", False, "ENUM_CUDA_MEM_KIND(id)", "Source memory kind."),
        ("dstKind", "INTEGER", False, "ENUM_CUDA_MEM_KIND(id)", "Destination memory kind."),
        ("srcDeviceId", "INTEGER", False, None, "Source device ID."),
        ("srcContextId", "INTEGER", False, None, "Source context ID."),
        ("dstDeviceId", "INTEGER", False, None, "Destination device ID."),
        ("dstContextId", "INTEGER", False, None, "Destination context ID."),
        ("migrationCause", "INTEGER", False, "ENUM_CUDA_UNIF_MEM_MIGRATION(id)", "UVM migration cause ID."),
        ("graphNodeId", "INTEGER", False, _node_ref(schema), "CUDA graph node creation ID."),
        ("virtualAddress", "INTEGER", False, None, "Virtual base address of the page/s being transferred."),
    ]
    if _v(schema) >= (3, 25):
        cols.append(("copyCount", "INTEGER", False, None, "The total number of memcopy operations traced in this record."))
    return cols


def _memset_cols(schema: str) -> list[Col]:
    return _dev_head(schema) + [
        ("value", "INTEGER", True, None, "Value assigned to memory."),
        ("bytes", "INTEGER", True, None, "Number of bytes set (B)."),
        ("graphNodeId", "INTEGER", False, _node_ref(schema), "CUDA graph node creation ID."),
        ("memKind", "INTEGER", False, "ENUM_CUDA_MEM_KIND(id)", "Type of memory being set."),
    ]


def _graph_trace_cols(schema: str) -> list[Col]:
    return _dev_head(schema) + [
        ("graphId", "INTEGER", True, "CUDA_GRAPH_EVENTS(graphId)", "Graph ID."),
        ("graphExecId", "INTEGER", True, "CUDA_GRAPH_EVENTS(graphExecId)", "Executable graph ID."),
    ]


def _nvtx_cols(schema: str) -> list[Col]:
    v = _v(schema)
    cols: list[Col] = [
        ("start", "INTEGER", True, None, "Event start timestamp (ns)."),
        ("end", "INTEGER", False, None, "Event end timestamp (ns)."),
        ("eventType", "INTEGER", True, "ENUM_NSYS_EVENT_TYPE(id)", "NVTX event type enum value."),
        ("rangeId", "INTEGER", False, None, "Correlation ID returned from a nvtxRangeStart call."),
        ("category", "INTEGER", False, None, "User-controlled ID that can be used to group events."),
        ("color", "INTEGER", False, None, "Encoded ARGB color value."),
        ("text", "TEXT", False, None, "Explicit name/text (non-registered string)"),
        ("globalTid", "INTEGER", False, None, "Serialized GlobalId."),
        ("endGlobalTid", "INTEGER", False, None, "Serialized GlobalId."),
        ("textId", "INTEGER", False, "StringIds(id)", "Registered NVTX domain/string"),
        ("domainId", "INTEGER", False, None, "User-controlled ID that can be used to group events."),
        ("uint64Value", "INTEGER", False, None, "One of possible payload value union members."),
        ("int64Value", "INTEGER", False, None, "One of possible payload value union members."),
        ("doubleValue", "REAL", False, None, "One of possible payload value union members."),
        ("uint32Value", "INTEGER", False, None, "One of possible payload value union members."),
        ("int32Value", "INTEGER", False, None, "One of possible payload value union members."),
        ("floatValue", "REAL", False, None, "One of possible payload value union members."),
        ("jsonTextId", "INTEGER", False, None, "One of possible payload value union members."),
        ("jsonText", "TEXT", False, None, "One of possible payload value union members."),
    ]
    if v >= (3, 13):
        cols.append(("binaryData", "TEXT", False, None, "Binary payload. See docs for format."))
    if v >= (3, 28):
        cols.append(("eventId", "INTEGER", True, "PRIMARY KEY", "Event ID."))
    return cols


def _graph_events_cols(schema: str) -> list[Col]:
    head: list[Col] = [*_TS,
        ("eventClass", "INTEGER", True, "ENUM_NSYS_EVENT_CLASS(id)", "CUDA event class enum value."),
        ("globalTid", "INTEGER", False, None, "Serialized GlobalId."),
        ("nameId", "INTEGER", True, "StringIds(id)", "Function name")]
    if schema == "2.9.1":  # node creation records lived here before CUDA_GRAPH_NODE_EVENTS
        return head + [
            ("graphNodeId", "INTEGER", True, "CUDA_GRAPH_EVENTS(graphNodeId)", "CUDA graph node creation ID."),
            ("originalGraphNodeId", "INTEGER", False, None, "Reference to the original graph node ID, if cloned node."),
        ]
    return head + [
        ("graphId", "INTEGER", False, None, "Graph ID."),
        ("originalGraphId", "INTEGER", False, None, "Reference to the original graph ID, if cloned."),
        ("graphExecId", "INTEGER", False, None, "Executable graph ID."),
    ]


def _graph_node_events_cols(schema: str) -> list[Col]:
    return [*_TS,
        ("eventClass", "INTEGER", True, "ENUM_NSYS_EVENT_CLASS(id)", "CUDA event class enum value."),
        ("globalTid", "INTEGER", False, None, "Serialized GlobalId."),
        ("nameId", "INTEGER", True, "StringIds(id)", "Function name"),
        ("graphNodeId", "INTEGER", True, "CUDA_GRAPH_NODE_EVENTS(graphNodeId)", "CUDA graph node creation ID."),
        ("originalGraphNodeId", "INTEGER", False, None, "Reference to the original graph node ID, if cloned node."),
    ]


_GPU_COLS: list[Col] = [
    ("vmId", "INTEGER", True, None, "Serialized GlobalId."), ("id", "INTEGER", True, None, "Device ID."),
    ("name", "TEXT", False, None, "Device name."), ("busLocation", "TEXT", False, None, "PCI bus location."),
    ("isDiscrete", "INTEGER", False, None, "True if discrete, false if integrated."),
    ("l2CacheSize", "INTEGER", False, None, "Size of L2 cache (B)."),
    ("totalMemory", "INTEGER", False, None, "Total amount of memory on the device (B)."),
    ("memoryBandwidth", "INTEGER", False, None, "Amount of memory transferred (B)."),
    ("clockRate", "INTEGER", False, None, "Clock frequency (Hz)."),
    ("smCount", "INTEGER", False, None, "Number of multiprocessors on the device."),
    ("pwGpuId", "INTEGER", False, None, "PerfWorks GPU ID."), ("uuid", "TEXT", False, None, "Device UUID."),
    ("luid", "INTEGER", False, None, "Device LUID."), ("chipName", "TEXT", False, None, "Chip name."),
    ("cuDevice", "INTEGER", False, None, "CUDA device ID."),
    ("ctxswDevPath", "TEXT", False, None, "GPU context switch device node path."),
    ("ctrlDevPath", "TEXT", False, None, "GPU control device node path."),
    ("revision", "INTEGER", False, None, "Revision number."), ("nodeMask", "INTEGER", False, None, "Device node mask."),
    ("constantMemory", "INTEGER", False, None, "Memory available on device for __constant__ variables (B)."),
    ("maxIPC", "INTEGER", False, None, "Maximum instructions per count."),
    ("maxRegistersPerBlock", "INTEGER", False, None, "Maximum number of 32-bit registers available per block."),
    ("maxShmemPerBlock", "INTEGER", False, None, "Maximum optin shared memory per block."),
    ("maxShmemPerBlockOptin", "INTEGER", False, None, "Maximum optin shared memory per block."),
    ("maxShmemPerSm", "INTEGER", False, None, "Maximum shared memory available per multiprocessor (B)."),
    ("maxRegistersPerSm", "INTEGER", False, None, "Maximum number of 32-bit registers available per multiprocessor."),
    ("threadsPerWarp", "INTEGER", False, None, "Warp size in threads."),
    ("asyncEngines", "INTEGER", False, None, "Number of asynchronous engines."),
    ("maxWarpsPerSm", "INTEGER", False, None, "Maximum number of warps per multiprocessor."),
    ("maxBlocksPerSm", "INTEGER", False, None, "Maximum number of blocks per multiprocessor."),
    ("maxThreadsPerBlock", "INTEGER", False, None, "Maximum number of threads per block."),
    ("maxBlockDimX", "INTEGER", False, None, "Maximum X-dimension of a block."),
    ("maxBlockDimY", "INTEGER", False, None, "Maximum Y-dimension of a block."),
    ("maxBlockDimZ", "INTEGER", False, None, "Maximum Z-dimension of a block."),
    ("maxGridDimX", "INTEGER", False, None, "Maximum X-dimension of a grid."),
    ("maxGridDimY", "INTEGER", False, None, "Maximum Y-dimension of a grid."),
    ("maxGridDimZ", "INTEGER", False, None, "Maximum Z-dimension of a grid."),
    ("computeMajor", "INTEGER", False, None, "Major compute capability version number."),
    ("computeMinor", "INTEGER", False, None, "Minor compute capability version number."),
    ("smMajor", "INTEGER", False, None, "Major multiprocessor version number."),
    ("smMinor", "INTEGER", False, None, "Minor multiprocessor version number."),
]


def _simple(*cols: tuple[str, str, bool]) -> list[Col]:
    return [(n, t, nn, None, "") for n, t, nn in cols]


def _enum_cols() -> list[Col]:
    return [("id", "INTEGER", True, "PRIMARY KEY", "Enum numerical value."),
            ("name", "TEXT", False, None, "Enum symbol name."), ("label", "TEXT", False, None, "Enum human name.")]


#: table → (header comment or None, column function of the schema)
def table_columns(table: str, schema: str) -> list[Col]:
    """The columns ``table`` has in an export of ``schema`` (as far as this generator writes it)."""
    meta_name = "Name of export meta-data record" if schema == "2.9.1" else "Name of meta-data record"
    specs: dict[str, Callable[[str], list[Col]]] = {
        "StringIds": lambda s: [("id", "INTEGER", True, "PRIMARY KEY", "ID reference value."),
                                ("value", "TEXT", True, None, "String value.")],
        "CUPTI_ACTIVITY_KIND_KERNEL": _kernel_cols,
        "CUPTI_ACTIVITY_KIND_RUNTIME": _runtime_cols,
        "CUPTI_ACTIVITY_KIND_MEMCPY": _memcpy_cols,
        "CUPTI_ACTIVITY_KIND_MEMSET": _memset_cols,
        "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": _graph_trace_cols,
        "NVTX_EVENTS": _nvtx_cols,
        "CUDA_GRAPH_EVENTS": _graph_events_cols,
        "CUDA_GRAPH_NODE_EVENTS": _graph_node_events_cols,
        "TARGET_INFO_GPU": lambda s: _GPU_COLS,
        "TARGET_INFO_CUDA_STREAM": lambda s: [
            ("streamId", "INTEGER", True, None, "Stream ID."), ("hwId", "INTEGER", True, None, "Hardware ID."),
            ("vmId", "INTEGER", True, None, "VM ID."), ("processId", "INTEGER", True, None, "Process ID."),
            ("contextId", "INTEGER", True, None, "Context ID."), ("priority", "INTEGER", True, None, "Priority of the stream."),
            ("flag", "INTEGER", True, "ENUM_CUPTI_STREAM_TYPE(id)", "Flags for stream creation.")],
        "TARGET_INFO_CUDA_NULL_STREAM": lambda s: [
            ("streamId", "INTEGER", True, None, "Stream ID."), ("hwId", "INTEGER", True, None, "Hardware ID."),
            ("vmId", "INTEGER", True, None, "VM ID."), ("processId", "INTEGER", True, None, "Process ID."),
            ("deviceId", "INTEGER", True, None, "Device ID."), ("contextId", "INTEGER", True, None, "Context ID.")],
        "TARGET_INFO_SESSION_START_TIME": lambda s: [
            ("utcEpochNs", "INTEGER", False, None, "UTC Epoch timestamp at start of the capture (ns)."),
            ("utcTime", "TEXT", False, None, "Start of the capture in UTC."),
            ("localTime", "TEXT", False, None, "Start of the capture in local time of target."),
            *([("systemClockNs", "INTEGER", False, None, "Target system clock timestamp at start of the capture (ns).")]
              if _v(s) >= (3, 25) else [])],
        "ANALYSIS_DETAILS": lambda s: [
            ("globalVid", "INTEGER", True, None, "Serialized GlobalId."),
            ("duration", "INTEGER", True, None, "The total time span of the entire trace (ns)."),
            ("startTime", "INTEGER", True, None, "Trace start timestamp in nanoseconds."),
            ("stopTime", "INTEGER", True, None, "Trace stop timestamp in nanoseconds.")],
        "ThreadNames": lambda s: [("nameId", "INTEGER", True, "StringIds(id)", "Thread name"),
                                  ("priority", "INTEGER", False, None, "Priority of the thread."),
                                  ("globalTid", "INTEGER", False, None, "Serialized GlobalId.")],
        "PROCESSES": lambda s: [("globalPid", "INTEGER", False, None, "Serialized GlobalId."),
                                ("pid", "INTEGER", False, None, "The process ID."),
                                ("name", "TEXT", False, None, "The process name.")],
        "EXPORT_META_DATA": lambda s: [("name", "TEXT", True, None, meta_name),
                                       ("value", "TEXT", False, None, "Value of export meta-data record")],
        "META_DATA_EXPORT": lambda s: [("name", "TEXT", True, None, meta_name),
                                       ("value", "TEXT", False, None, "Value of meta-data record")],
        "META_DATA_CAPTURE": lambda s: [("name", "TEXT", True, None, meta_name),
                                        ("value", "TEXT", False, None, "Value of meta-data record")],
    }
    if table.startswith("ENUM_"):
        return _enum_cols()
    return specs[table](schema)


_HEADERS = {
    "StringIds": "Consolidation of repetitive string values.",
    "PROCESSES": "Names and identifiers of processes captured in the report.",
    "ANALYSIS_DETAILS": "Details about the analysis session.",
    "EXPORT_META_DATA": "information about nsys export process",
    "META_DATA_EXPORT": "information about nsys export process",
    "META_DATA_CAPTURE": "information about nsys capture parameters",
}


def ddl(table: str, schema: str) -> str:
    """``CREATE TABLE`` in nsys's layout: 2.9.1 puts ``REFERENCES`` inline, 3.x in the comment."""
    cols = table_columns(table, schema)
    old = schema == "2.9.1"
    lines = []
    header = _HEADERS.get(table) or (ENUM_HEADERS.get(table) if table.startswith("ENUM_") else None)
    if header:
        lines += [f"    -- {header}", ""]
    for i, (name, typ, notnull, ref, comment) in enumerate(cols):
        parts = [f"{name:<28}" if len(name) < 28 else name + "   ", f"{typ:<10}"]
        if notnull:
            parts.append("NOT NULL   ")
        if ref and ref.startswith("ENUM_") and old:  # 2.9.1 has no ENUM tables: "See docs" instead
            ref, comment = None, f"{comment} See docs for specifics."
        if ref == "PRIMARY KEY":
            parts.append("PRIMARY KEY")
        elif ref and old:
            parts.append(f"REFERENCES {ref}")
        body = "".join(parts).rstrip() + ("," if i < len(cols) - 1 else "")
        note = comment if (old or not ref or ref == "PRIMARY KEY") else f"REFERENCES {ref} -- {comment}"
        lines.append(f"    {body:<66} -- {note}" if note else f"    {body}")
    return f"CREATE TABLE {table} (\n" + "\n".join(lines) + "\n)"


# =================================================================================================
# ENUM tables (ids and names as in the 3.25 export)
# =================================================================================================
ENUM_HEADERS = {
    "ENUM_NSYS_EVENT_TYPE": "Nsys event type labels",
    "ENUM_NSYS_EVENT_CLASS": "Nsys event class labels",
    "ENUM_NSYS_GENERIC_EVENT_SOURCE": "Nsys generic event source labels",
    "ENUM_NSYS_GENERIC_EVENT_GROUP": "Nsys generic event group labels",
    "ENUM_NSYS_GENERIC_EVENT_FIELD_TYPE": "Nsys generic event field type labels",
    "ENUM_NSYS_GENERIC_EVENT_FIELD_ETW_PROPERTY": "Nsys generic event field ETW property flag labels",
    "ENUM_NSYS_GENERIC_EVENT_FIELD_ETW_TYPE": "Nsys generic event field ETW type labels",
    "ENUM_NSYS_GENERIC_EVENT_FIELD_ETW_FLAGS": "Nsys generic event field ETW map info flag labels",
    "ENUM_CUDA_MEMCPY_OPER": "CUDA memcpy operation labels",
    "ENUM_CUDA_MEM_KIND": "CUDA memory kind labels",
    "ENUM_CUDA_MEMPOOL_TYPE": "CUDA mempool type labels",
    "ENUM_CUDA_MEMPOOL_OPER": "CUDA mempool operation labels",
    "ENUM_CUDA_DEV_MEM_EVENT_OPER": "CUDA device mem event operation labels",
    "ENUM_CUDA_KERNEL_LAUNCH_TYPE": "CUDA kernel launch type labels",
    "ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG": "CUDA shared memory limit config labels",
    "ENUM_CUDA_UNIF_MEM_MIGRATION": "CUDA unified memory migration cause labels",
    "ENUM_CUDA_UNIF_MEM_ACCESS_TYPE": "CUDA unified memory access type labels",
    "ENUM_CUDA_FUNC_CACHE_CONFIG": "CUDA function cache config labels",
    "ENUM_CUPTI_STREAM_TYPE": "CUPTI stream type labels",
    "ENUM_CUPTI_SYNC_TYPE": "CUPTI synchronization type labels",
    "ENUM_CUPTI_OVERHEAD_TYPE": "CUPTI overhead type labels",
    "ENUM_DIAGNOSTIC_SEVERITY_LEVEL": "Diagnostic message severity level labels",
    "ENUM_DIAGNOSTIC_SOURCE_TYPE": "Diagnostic message source type labels",
    "ENUM_DIAGNOSTIC_TIMESTAMP_SOURCE": "Diagnostic message timestamp source lables",
}

_EVENT_TYPES = (
    "Unknown CpuCycles Instructions CacheReferences L1CacheDataWriteMisses L1CacheDataReadMisses "
    "L1CacheInstructionMisses L2CacheDataWriteMisses L2CacheDataReadMisses L2CacheInstructionMisses "
    "BranchInstructions BranchMisses BusCycles CpuClock TaskClock PageFault ContextSwitches CpuMigrations "
    "PageFaultsMin PageFaultsMax AlignmentFaults EmulationFaults ThreadState Frames Annotations SchedSwitch "
    "SchedWakeup Command Mmap MemUsage Emc Composite NvtxEvents NvtxCategory NvtxMark NvtxPushRange NvtxPopRange "
    "NvtxStartRange NvtxEndRange NvtxThread PowerRate Sched CpuCyclesSelf CpuCyclesTotal CpuCyclesSelfPlus Cuda "
    "CudaDevice TraceProcess TraceFunctions Diagnostic GlWorkload BandwidthUsage KhrDebugMark KhrDebugPushRange "
    "KhrDebugPopRange KhrDebugGpuMark KhrDebugGpuPushRange KhrDebugGpuPopRange GpuCtxsw NvtxPushPopRange "
    "NvtxStartEndRange ProfTime KhrDebugPushPopRange KhrDebugGpuPushPopRange NvtxtCategory NvtxtMark "
    "NvtxtPushRange NvtxtPopRange NvtxtStartRange NvtxtEndRange NvtxtPushPopRange NvtxtStartEndRange "
    "NvtxtMetaThread NvtxtMetaProcess NvtxtMetaFileDisplay NvtxDomainCreate NvtxDomainDestroy NvnGpuCmdBuf "
    "TraceVSync CudaDeviceKernel CudaDeviceMemory Pmu NvnGpuDraw NvnGpuCompute NvnGpuDebug "
    "OS_runtime_libraries CuDNN CuBLAS NvMedia OpenACC Correlation DX12 DX12Workload PmuRawEvent GraphicsFrame "
    "Vulkan VulkanWorkload NvtxNameCudaDevice NvtxNameCudaContext NvtxNameCudaStream SystemEvent GpuMemoryEvent "
    "DX12CreateObject VulkanCreateObject UnitTraceEvent CustomETWEvent CudaSyncEvent SLIEvent_(DEPRECATED) "
    "CudaBacktrace WddmEvent DX11 DX11CreateObject DXGI CudaGraphNodeCreation OpenMP UncorePmuEvent "
    "UncorePmuCarmel CudaDeviceMemoryUsage ETWDxgKrnlEvent CudaUvmCpuPageFaultEvent CudaUvmGpuPageFaultEvent "
    "NICMetricsValuesEvent NICMetricsListEvent InterruptHandler NvEncode NVDecode nvJPEG CudaEventRecord "
    "PerfEventCountEvent CudaDeviceMemoryPool CudaDeviceGraph CudaGraphExecCreation CudaGraphCreation "
    "CudaGraphClone GpuMemoryTransferEvent GlTrace GpuVideoEngineWorkload IBSwitchMetricsValuesEvent GenericEvent "
    "UncorePmuT23xScf UncorePmuT23xDsu IBSwitchCongestionEvent CudaDeviceMemcpy PerfMetricValueEvent OpenXREvent "
    "TegraInternalEvent TraceStartFinish Syscall CudaConfidentialComputeKeyRotation CudaGraphExecNodeSetParams "
    "NvApi CudaHostFunc CudaApi Overhead CudaOverhead"
).split()

_EVENT_CLASSES = [
    (0, "CUDA_RUNTIME", "CUDA runtime"), (1, "CUDA_DRIVER", "CUDA driver"), (2, "GL", "GL"),
    (3, "TSP_OVERHEAD", "TSP overhead"), (4, "GL_DEBUG", "GL debug"), (5, "GL_WORKLOAD", "GL workload"),
    (6, "NVTX_START", "NVTX start"), (7, "NVTX_FINISH", "NVTX finish"), (8, "GL_START", "GL start"),
    (9, "GL_FINISH", "GL finish"), (10, "CUDA_START", "CUDA start"), (11, "CUDA_FINISH", "CUDA finish"),
    (12, "CUDA_INIT_ERROR", "CUDA init error"), (13, "CUDA_EGL_DRIVER", "CUDA EGL driver"), (18, "VSYNC", "Vsync"),
    (26, "CUDA_API", "CUDA API"), (27, "OS_RUNTIME", "OSRT runtime"), (28, "CUDNN", "cuDNN"), (29, "CUBLAS", "cuBLAS"),
    (31, "OS_RUNTIME_START", "OSRT start"), (32, "OS_RUNTIME_FINISH", "OSRT finish"),
    (33, "CUDNN_START", "cuDNN start"), (34, "CUDNN_FINISH", "cuDNN finish"), (35, "CUBLAS_START", "cuBLAS start"),
    (36, "CUBLAS_FINISH", "cuBLAS finish"), (37, "THREAD_BLOCK", "Thread block"), (38, "NVMEDIA", "NVmedia"),
    (39, "NVMEDIA_START", "NVmedia start"), (40, "NVMEDIA_FINISH", "NVmedia finish"), (41, "DX12_API", "DX12 API"),
    (42, "DX12_WORKLOAD", "DX12 workload"), (43, "DX12_START", "DX12 start"), (44, "DX12_FINISH", "DX12 finish"),
    (45, "OPENACC_START", "OpenACC start"), (46, "OPENACC_FINISH", "OpenACC finish"),
    (47, "OPENACC_INIT_ERROR", "OpenACC init error"), (48, "OPENACC", "OpenACC"), (49, "CPU_FPS", "CPU FPS"),
    (50, "GPU_FPS", "GPU FPS"), (51, "GL_MULTI_ERROR", "GL multi-error"), (52, "DX12_DISPLAY", "DX12 display"),
    (53, "VULKAN_API", "Vulkan API"), (54, "VULKAN_WORKLOAD", "Vulkan workload"),
    (55, "VULKAN_START", "Vulkan start"), (56, "VULKAN_FINISH", "Vulkan finish"),
    (57, "SYSTEM_EVENT", "System event"), (58, "GPU_MEMORY", "GPU memory"),
    (59, "DX12_CREATE_OBJECT", "DX12 create object"), (60, "VULKAN_CREATE_OBJECT", "Vulkan create object"),
    (61, "CUSTOM_ETW_TRACE", "Custom ETW trace"), (62, "SLI_DEPRECATED", "SLI (Deprecated)"),
    (63, "SLI_START_DEPRECATED", "SLI start (Deprecated)"), (64, "SLI_FINISH_DEPRECATED", "SLI finish (Deprecated)"),
    (65, "DX12_DEBUG_API", "DX12 debug API"), (66, "VULKAN_DEBUG_API", "Vulkan debug API"),
    (67, "CUDABACKTRACE", "CUDA backtrace"), (68, "CUDABACKTRACE_START", "CUDA backtrace start"),
    (69, "CUDABACKTRACE_FINISH", "CUDA backtrace finish"), (70, "WDDM", "WDDM"), (71, "DX11_API", "DX11 API"),
    (72, "DX11_START", "DX11 start"), (73, "DX11_FINISH", "DX11 finish"),
    (74, "DX11_CREATE_OBJECT", "DX11 create object"), (75, "DX11_DEBUG_API", "DX11 debug API"),
    (76, "DXCOMMON_API", "DX common API"), (77, "CUDA_GRAPH_NODE_CREATION", "CUDA graph node creation"),
    (78, "OPENMP", "OpenMP"), (79, "OPENMP_START", "OpenMP start"), (80, "OPENMP_FINISH", "OpenMP finish"),
    (81, "NVAPI", "NV API"), (82, "ETWDXGKRNL", "ETW DXG KRNL"), (83, "NVENCODE", "NVENCODE"),
    (84, "NVENCODE_START", "NVENCODE start"), (85, "NVENCODE_FINISH", "NVENCODE finish"),
    (86, "NVDECODE", "NVDECODE"), (87, "NVDECODE_START", "NVDECODE start"), (88, "NVDECODE_FINISH", "NVDECODE finish"),
    (89, "NVJPEG", "nvJPEG"), (90, "NVJPEG_START", "nvJPEG start"), (91, "NVJPEG_FINISH", "nvJPEG finish"),
    (92, "DX12_BATCH_WORKLOAD", "DX12 batch workload"), (93, "VULKAN_BATCH_WORKLOAD", "Vulkan batch workload"),
    (94, "CUDA_GRAPHEXEC_CREATION", "CUDA graph exec creation"), (95, "CUDA_GRAPH_CREATION", "CUDA graph creation"),
    (96, "CUDA_GRAPH_CLONE", "CUDA graph clone"), (98, "OPENCL", "OpenCL event"), (99, "OPENCL_START", "OpenCL start"),
    (100, "OPENCL_FINISH", "OpenCL finish"), (101, "OPENCL_INIT_ERROR", "OpenCL Init error"),
    (102, "CUDA_JIT", "CUDA JIT"), (103, "CUDA_OVERHEAD", "CUDA overhead"), (104, "OPENXR", "OpenXR event"),
    (105, "OPENXR_START", "OpenXR start"), (106, "OPENXR_FINISH", "OpenXR finish"), (107, "SYSCALL", "Syscall"),
    (108, "TEGRA_INTERNAL", "Tegra Internal API"), (109, "TEGRA_INTERNAL_START", "Tegra Internal API start"),
    (110, "TEGRA_INTERNAL_FINISH", "Tegra Internal API finish"),
    (111, "CUDA_GRAPH_EXEC_NODE_SET_PARAMS", "CUDA graph exec-node set params"),
]


def _labelled(prefix: str, rows: str) -> list[tuple[int, str, str]]:
    """``"0 NAME Label;1 ..."`` → rows; ``prefix`` is prepended to each symbol name."""
    out = []
    for item in rows.split(";"):
        num, name, label = item.strip().split(" ", 2)
        out.append((int(num), prefix + name, label))
    return out


def _enum_rows() -> dict[str, list[tuple[int, str, str]]]:
    etype = [(i, n.replace("_", " ") if n in ("OS_runtime_libraries", "SLIEvent_(DEPRECATED)") else n,
              n.replace("_", " ") if n in ("OS_runtime_libraries", "SLIEvent_(DEPRECATED)") else n)
             for i, n in enumerate(_EVENT_TYPES)]
    return {
        "ENUM_NSYS_EVENT_TYPE": etype,
        "ENUM_NSYS_EVENT_CLASS": [(i, "TRACE_PROCESS_EVENT_" + n, label) for i, n, label in _EVENT_CLASSES],
        "ENUM_NSYS_GENERIC_EVENT_SOURCE": _labelled("", "0 NotSpecified Not Specified;1 ClockMonotonicRaw Clock Monotoic Raw;"
                                                        "2 CntVct Counter-Timer Virtual Count Register;3 SessionNs Session Nanoseconds"),
        "ENUM_NSYS_GENERIC_EVENT_GROUP": _labelled("", "0 Unknown Unknown;1 FTrace FTrace;2 NvMedia NV Media;"
                                                       "3 Hypervisor Hypervisor;4 ETW ETW"),
        "ENUM_NSYS_GENERIC_EVENT_FIELD_TYPE": _labelled("", "0 Signed Signed Integer;1 Unsigned Unsigned Integer;"
                                                            "2 Float Float;3 Double Double"),
        "ENUM_NSYS_GENERIC_EVENT_FIELD_ETW_PROPERTY": _labelled("Property", "1 Struct Struct;2 ParamLength Param Length;"
            "4 ParamCount Param Count;8 WBEMXmlFragment WBEM XML Fragment;16 ParamFixedLength Param Fixed Length;"
            "32 ParamFixedCount Param Fixed Count;64 HasTags Has tags;128 HasCustomSchema Has Custom Schema"),
        "ENUM_NSYS_GENERIC_EVENT_FIELD_ETW_TYPE": _labelled("TDH_INTYPE_", "0 NULL NULL;1 UNICODESTRING Unicode String;"
            "2 ANSISTRING ANSI String;3 INT8 int8;4 UINT8 uint8;5 INT16 int16;6 UINT16 uint16;7 INT32 int32;"
            "8 UINT32 uint32;9 INT64 int64;10 UINT64 uint64;11 FLOAT float;12 DOUBLE double;13 BOOLEAN boolean;"
            "14 BINARY binary data;15 GUID GUID;16 POINTER Pointer;17 FILETIME File-time;18 SYSTEMTIME System-time;"
            "19 SID SID;20 HEXINT32 Hex int32;21 HEXINT64 Hex int64"),
        "ENUM_NSYS_GENERIC_EVENT_FIELD_ETW_FLAGS": _labelled("EVENTMAP_INFO_FLAG_", "1 MANIFEST_VALUEMAP Manifest Value Map;"
            "2 MANIFEST_BITMAP Manifest Bitmap;4 MANIFEST_PATTERNMAP Manifest Pattern Map;8 WBEM_VALUEMAP WBEM Value Map;"
            "16 WBEM_BITMAP WBEM Bitmap;32 WBEM_FLAG WBEM Flag;64 WBEM_NO_MAP WBEM No Map"),
        "ENUM_CUDA_MEMCPY_OPER": _labelled("CUDA_MEMCPY_KIND_", "0 UNKNOWN Unknown;1 HTOD Host-to-Device;2 DTOH Device-to-Host;"
            "3 HTOA Host-to-Array;4 ATOH Array-to-Host;5 ATOA Array-to-Array;6 ATOD Array-to-Device;7 DTOA Device-to-Array;"
            "8 DTOD Device-to-Device;9 HTOH Host-to-Host;10 PTOP Peer-to-Peer;11 UVM_HTOD Unified Host-to-Device;"
            "12 UVM_DTOH Unified Device-to-Host;13 UVM_DTOD Unified Device-to-Device"),
        "ENUM_CUDA_MEM_KIND": _labelled("CUDA_MEMOPR_MEMORY_KIND_", "0 PAGEABLE Pageable;1 PINNED Pinned;2 DEVICE Device;"
            "3 ARRAY Array;4 MANAGED Managed;5 DEVICE_STATIC Device Static;6 MANAGED_STATIC Managed Static;7 UNKNOWN Unknown"),
        "ENUM_CUDA_MEMPOOL_TYPE": _labelled("CUPTI_ACTIVITY_MEMORY_POOL_TYPE_", "0 INVALID Invalid;1 LOCAL Local;2 IMPORTED Imported"),
        "ENUM_CUDA_MEMPOOL_OPER": _labelled("CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_", "0 INVALID Invalid;1 CREATED Created;"
                                                                                          "2 DESTROYED Destroyed;3 TRIMMED Trimmed"),
        "ENUM_CUDA_DEV_MEM_EVENT_OPER": _labelled("CUDA_DEV_MEM_EVENT_OPR_", "0 ALLOCATION Allocation;1 DEALLOCATION Deallocation"),
        "ENUM_CUDA_KERNEL_LAUNCH_TYPE": _labelled("CUDA_KERNEL_LAUNCH_TYPE_", "0 UNKNOWN Unknown;1 REGULAR Regular;"
            "2 COOPERATIVE_SINGLE_DEVICE Coop Single Device;3 COOPERATIVE_MULTI_DEVICE Coop Multi Device"),
        "ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG": _labelled("CUDA_SHARED_MEM_LIMIT_", "0 DEFAULT Default;1 OPTIN Opt in"),
        "ENUM_CUDA_UNIF_MEM_MIGRATION": _labelled("CUDA_UNIFIED_MEMORY_MIGRATION_CAUSE_", "0 UNKNOWN Unknown;1 USER User prefetch;"
            "2 COHERENCE Page fault;3 PREFETCH Speculative prefecth;4 EVICTION Eviction;5 ACCESS_COUNTERS Access counters"),
        "ENUM_CUDA_UNIF_MEM_ACCESS_TYPE": _labelled("CUPTI_ACTIVITY_UNIFIED_MEMORY_ACCESS_TYPE_", "0 UNKNOWN Unknown;1 READ Read;"
                                                                                                 "2 WRITE Write;3 ATOMIC Atomic;4 PREFETCH Prefetch"),
        "ENUM_CUDA_FUNC_CACHE_CONFIG": _labelled("CU_FUNC_CACHE_PREFER_", "0 NONE None;1 SHARED Shared;2 L1 L1;3 EQUAL Equal"),
        "ENUM_CUPTI_STREAM_TYPE": _labelled("CUPTI_ACTIVITY_STREAM_CREATE_FLAG_", "0 UNKNOWN Unknown stream type;"
            "1 DEFAULT Default stream;2 NON_BLOCKING Non-blocking stream;3 NULL Null stream"),
        "ENUM_CUPTI_SYNC_TYPE": _labelled("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_", "0 UNKNOWN Unknown;1 EVENT_SYNCHRONIZE Event sync;"
            "2 STREAM_WAIT_EVENT Stream wait sync;3 STREAM_SYNCHRONIZE Stream sync;4 CONTEXT_SYNCHRONIZE Context sync"),
        "ENUM_CUPTI_OVERHEAD_TYPE": _labelled("OVERHEAD_", "0 UNDEFINED Undefined;1 UNKNOWN Unknown;"
            "2 DRIVER_COMPILER Driver JIT compiler (CUDA);3 CUPTI_BUFFER_FLUSH Buffer flush (Profiler);"
            "4 CUPTI_INSTRUMENTATION Instrumentation (Profiler);5 CUPTI_RESOURCE Resource creation/destruction (Profiler);"
            "6 RUNTIME_TRIGGERED_MODULE_LOADING Runtime module loading (CUDA);7 LAZY_FUNCTION_LOADING Lazy function loading (CUDA);"
            "8 COMMAND_BUFFER_FULL Command buffer full (CUDA)"),
        "ENUM_DIAGNOSTIC_SEVERITY_LEVEL": _labelled("", "0 UnknownLevel Unknown;1 Info Info;2 Warning Warning;3 Error Error;"
                                                        "4 Verbose Verbose"),
        "ENUM_DIAGNOSTIC_SOURCE_TYPE": _labelled("", "0 UnknownSource Unknown source;1 Injection Injection;2 Daemon Daemon;"
                                                     "3 Analysis Analysis"),
        "ENUM_DIAGNOSTIC_TIMESTAMP_SOURCE": _labelled("", "0 UnknownTimestamp Unknown timestamp;1 TargetTimestamp Target timestamp;"
                                                          "2 HostTimestamp Host timestamp"),
    }


# =================================================================================================
# GPUs
# =================================================================================================
_GPUS = {
    # name, chip, l2, totalMemory, bandwidth, clock, sms, cc, shmem optin/sm, localMemoryTotal
    "B200": ("NVIDIA B200", "GB100", 132120576, 191553388544, 7672512000000, 1965000000, 148, (10, 0), 232448, 233472,
             283115520),
    "H100": ("NVIDIA H100 80GB HBM3", "GH100", 52428800, 85520809984, 3352320000000, 1980000000, 132, (9, 0), 232448, 233472,
             250871808),
}


def _gpu_row(gpu: str, dev: int, rng: random.Random) -> tuple:
    name, chip, l2, mem, bw, clock, sms, (ccmaj, ccmin), optin, per_sm, _ = _GPUS[gpu]
    uuid = "-".join(f"{rng.getrandbits(b):0{b // 4}x}" for b in (32, 16, 16, 16, 48))
    return (GLOBAL_VID, dev, name, f"0000:{0x18 + 0x11 * dev:02x}:00.0", 1, l2, mem, bw, clock, sms, dev, uuid, 0, chip,
            dev, "", "", 161, 0, 65536, 4, 65536, 49152, optin, per_sm, 65536, 32, 4, 64, 32, 1024, 1024, 1024, 64,
            2147483647, 65535, 65535, ccmaj, ccmin, ccmaj, ccmin)


# =================================================================================================
# Kernel catalog and model workloads
# =================================================================================================
@dataclass(frozen=True)
class Kernel:
    short: str
    demangled: str
    mangled: str | None
    api: str                       # launching API (runtime or driver)
    regs: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dsmem: int                     # dynamic shared memory (B)
    dur: int                       # decode-size duration (ns)
    cluster: tuple[int, int, int] = (0, 0, 0)
    ssmem: int = 0


def _mangle(qualified: str) -> str:
    """A plausible Itanium name for ``ns::fn`` taking a pointer (the true signature is not modelled)."""
    parts = qualified.split("::")
    enc = "".join(f"{len(p)}{p}" for p in parts)
    return f"_ZN{enc}EPv" if len(parts) > 1 else f"_Z{enc}Pv"


def _cpp(qualified: str, targs: str, args: str, api: str = "cudaLaunchKernel_v7000", **kw) -> Kernel:
    short = qualified.split("::")[-1]
    return Kernel(short, f"void {qualified}<{targs}>({args})", _mangle(qualified), api, **kw)


def _extc(name: str, api: str = "cuLaunchKernelEx", **kw) -> Kernel:
    """extern "C" kernels (cuBLAS nvjet, trtllm-gen cubins): demangled == short == mangled name."""
    return Kernel(name, name, name, api, **kw)


RT, RTX, DRV = "cudaLaunchKernel_v7000", "cudaLaunchKernelExC_v11060", "cuLaunchKernelEx"


def _catalog(model: str, rng: random.Random) -> dict[str, Kernel]:
    k: dict[str, Kernel] = {}
    splitk = _cpp("cublasLt::splitKreduce_kernel", "32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false",
                  "cublasLt::cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, "
                  "float const*, __nv_bfloat16 const*, float const*, __nv_bfloat16*, void*, long, float*, int*",
                  api=RT, regs=30, grid=(56, 1, 1), block=(128, 1, 1), dsmem=0, dur=1900)
    k["splitk"] = splitk
    k["embed"] = _cpp("at::native::(anonymous namespace)::indexSelectLargeIndex",
                      "c10::BFloat16, long, unsigned int, 2, 2, -2, true",
                      "at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 "
                      "const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, "
                      "unsigned int, long", regs=22, grid=(148, 1, 1), block=(128, 1, 1), dsmem=0, dur=2400)
    k["argmax"] = _cpp("at::native::reduce_kernel", "512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
                       "unsigned int, long, 4, 4>", "at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, "
                       "long, 4, 4>", regs=40, grid=(1, 64, 1), block=(32, 16, 1), dsmem=0, dur=5200, ssmem=16)
    if model == "deepseek_v3":
        k["rms"] = _cpp("tensorrt_llm::kernels::rms_norm_kernel", "__nv_bfloat16, float, false",
                        "__nv_bfloat16*, __nv_bfloat16 const*, __nv_bfloat16 const*, float, int, int", regs=32,
                        grid=(8, 1, 1), block=(256, 1, 1), dsmem=0, dur=2300)
        k["add_rms"] = _cpp("tensorrt_llm::kernels::fused_add_rms_norm_kernel", "__nv_bfloat16, float, 8",
                            "__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16 const*, float, int, int", regs=40,
                            grid=(8, 1, 1), block=(896, 1, 1), dsmem=0, dur=2800)
        k["ar_fusion"] = _cpp("tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport",
                              "tensorrt_llm::kernels::ar_fusion::AllReduceFusionPattern, __nv_bfloat16, 8, true, false",
                              "tensorrt_llm::kernels::ar_fusion::AllReduceFusionParams<__nv_bfloat16>", api=RTX, regs=56,
                              grid=(8, 1, 1), block=(896, 1, 1), dsmem=0, dur=6100, cluster=(8, 1, 1))
        k["nccl_ar"] = _extc("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", api=RTX, regs=96, grid=(24, 1, 1),
                             block=(512, 1, 1), dsmem=0, dur=21000)
        k.update({
            "gemm_sk": _extc("nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT", api=RTX, regs=168, grid=(33, 1, 4), block=(384, 1, 1),
                             dsmem=215040, dur=5600, cluster=(1, 1, 1)),
            "gemm_s": _extc("nvjet_tst_64x8_64x16_2x1_v_bz_TNT", api=RTX, regs=168, grid=(72, 1, 1), block=(384, 1, 1),
                            dsmem=196608, dur=6200, cluster=(2, 1, 1)),
            "gemm_m": _extc("nvjet_tst_128x16_64x8_1x1_v_bz_TNT", api=RTX, regs=168, grid=(112, 1, 1), block=(384, 1, 1),
                            dsmem=213504, dur=7400, cluster=(1, 1, 1)),
            "gemm_lm": _extc("nvjet_tst_256x8_64x8_2x1_v_bz_TNN", api=RTX, regs=168, grid=(148, 1, 1), block=(384, 1, 1),
                             dsmem=221184, dur=24000, cluster=(2, 1, 1)),
            "gemm_pf": _extc("nvjet_tst_256x128_64x4_2x1_v_bz_coopB_TNT", api=RTX, regs=168, grid=(148, 1, 1), block=(384, 1, 1),
                             dsmem=229376, dur=52000, cluster=(2, 1, 1)),
            "bmm_uk": _extc("bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f",
                            regs=168, grid=(1, 16, 128), block=(384, 1, 1), dsmem=179200, dur=4800, cluster=(1, 1, 1)),
            "bmm_uv": _extc("bmm_Bfloat16_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_transOut_schedS_sm100f",
                            regs=168, grid=(1, 4, 128), block=(384, 1, 1), dsmem=179200, dur=4300, cluster=(1, 1, 1)),
            "rope_gen": _cpp("tensorrt_llm::kernels::applyMLARopeAndAssignQKVKernelGeneration", "__nv_bfloat16, __nv_fp8_e4m3",
                             "tensorrt_llm::kernels::KVBlockArray, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16 const*, "
                             "float2 const*, int, int, int, int, int, int const*, int const*, float const*, __nv_fp8_e4m3*",
                             api=RTX, regs=64, grid=(1, 129, 1), block=(256, 1, 1), dsmem=0, dur=3100),
            "rope_ctx": _cpp("tensorrt_llm::kernels::applyMLARopeAndAssignQKVKernelOptContext", "__nv_bfloat16, __nv_bfloat16",
                             "__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, tensorrt_llm::kernels::KVBlockArray, "
                             "float2 const*, int, int, int, int, int const*, float const*", api=RTX, regs=72,
                             grid=(64, 128, 1), block=(128, 1, 1), dsmem=0, dur=9800),
            "fmha_gen": _extc("fmhaSm100fKernel_QkvE4m3OBfloat16HQk576HV512HVPerCta256PagedKvDenseP64MultiCtasKvCgaVarSeqQ8Kv128"
                              "StaticSwapsAbForGen", regs=128, grid=(2, 128, 1), block=(512, 1, 1), dsmem=225280,
                              dur=9200, cluster=(2, 1, 1)),
            "fmha_ctx": _extc("fmhaSm100fKernel_QkvBfloat16OBfloat16H192HV128PagedKvCausalP64VarSeqQ128Kv128PersistentContext",
                              regs=128, grid=(148, 1, 1), block=(512, 1, 1), dsmem=229376, dur=61000, cluster=(1, 1, 1)),
            "topk": _cpp("tensorrt_llm::kernels::deepseek_v3_topk_kernel", "__nv_bfloat16, float, 256, 8, 4",
                         "float const*, __nv_bfloat16 const*, float*, int*, long, long, long, long, double", api=RTX,
                         regs=48, grid=(8, 1, 1), block=(256, 1, 1), dsmem=0, dur=3400),
            "routing": _cpp("moe::dev::routing::routingDeepSeek::routingIndicesClusterKernel",
                            "moe::dev::routing::routingDeepSeek::KernelParams<__nv_fp8_e4m3, float, __nv_bfloat16, true>",
                            "moe::dev::routing::routingDeepSeek::KernelParams<__nv_fp8_e4m3, float, __nv_bfloat16, true>",
                            api=RTX, regs=80, grid=(8, 1, 1), block=(384, 1, 1), dsmem=0, dur=4100, cluster=(8, 1, 1)),
            "fc1": _extc("bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_rM_BN_transOut_schedS_"
                         "biasFp32_sm100f", regs=168, grid=(1, 32, 24), block=(384, 1, 1), dsmem=188416, dur=11800,
                         cluster=(1, 1, 1)),
            "fc2": _extc("bmm_Bfloat16_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_rM_BN_transOut_schedS_"
                         "sm100f", regs=168, grid=(1, 56, 24), block=(384, 1, 1), dsmem=188416, dur=9100, cluster=(1, 1, 1)),
            "fc1_pf": _extc("bmm_E4m3_E4m3E4m3_Fp32_t128x128x128u2_s4_et128x128_m128x128x32_cga2x1x1_16dp256b_rM_BN_transOut_"
                            "schedP_biasFp32_sm100f", regs=168, grid=(2, 32, 64), block=(384, 1, 1), dsmem=229376,
                            dur=88000, cluster=(2, 1, 1)),
            "fc2_pf": _extc("bmm_Bfloat16_E4m3E4m3_Fp32_t128x128x128u2_s4_et128x128_m128x128x32_cga2x1x1_16dp256b_rM_BN_"
                            "transOut_schedP_sm100f", regs=168, grid=(2, 56, 64), block=(384, 1, 1), dsmem=229376,
                            dur=64000, cluster=(2, 1, 1)),
            "moe_act": _cpp("tensorrt_llm::kernels::moe_activation_kernel", "__nv_fp8_e4m3, __nv_bfloat16, "
                            "tensorrt_llm::kernels::SwiGLUAdaptor", "__nv_bfloat16 const*, __nv_fp8_e4m3*, float*, int const*, "
                            "long, int, int", api=RTX, regs=40, grid=(64, 1, 1), block=(256, 1, 1), dsmem=0, dur=2600),
            "finalize": _cpp("moe::dev::finalize::finalizeKernelVecLoad",
                             "moe::dev::finalize::KernelParams<__nv_bfloat16, __nv_bfloat16, false>",
                             "moe::dev::finalize::KernelParams<__nv_bfloat16, __nv_bfloat16, false>", api=RTX, regs=48,
                             grid=(8, 1, 1), block=(512, 1, 1), dsmem=0, dur=3000),
        })
        for tag in ("dense", "shared"):  # torch.compile'd SwiGLU of the dense MLP / shared expert
            name = f"fused_kernel_{rng.getrandbits(48):012x}"
            k[f"act_{tag}"] = _extc(name, api=DRV, regs=26, grid=(144, 1, 1), block=(128, 1, 1), dsmem=0, dur=2100)
    else:  # llama on H100: cuBLAS (nvjet, sm90 xmma), flashinfer attention, vLLM elementwise kernels
        k["rms"] = _cpp("flashinfer::norm::RMSNormKernel", "8u, __nv_bfloat16", "__nv_bfloat16*, __nv_bfloat16*, "
                        "__nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float", regs=32, grid=(8, 1, 1),
                        block=(32, 16, 1), dsmem=32, dur=2300)
        k["add_rms"] = _cpp("flashinfer::norm::FusedAddRMSNormKernel", "8u, __nv_bfloat16", "__nv_bfloat16*, "
                            "__nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float",
                            regs=40, grid=(8, 1, 1), block=(32, 16, 1), dsmem=16416, dur=2700)
        k["nccl_ar"] = _extc("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", api=RTX, regs=96, grid=(24, 1, 1),
                             block=(512, 1, 1), dsmem=0, dur=14000)
        k.update({
            "gemm_sk": _extc("nvjet_hsh_64x16_64x12_4x1_v_bz_splitK_TNT", api=RTX, regs=168, grid=(48, 1, 3), block=(384, 1, 1),
                             dsmem=200704, dur=6900),
            "gemm_s": _extc("nvjet_hsh_64x32_64x12_2x1_v_bz_TNT", api=RTX, regs=168, grid=(96, 1, 1), block=(384, 1, 1),
                            dsmem=211968, dur=7800, cluster=(2, 1, 1)),
            "gemm_m": _extc("nvjet_hsh_128x32_64x8_1x1_v_bz_TNT", api=RTX, regs=168, grid=(112, 1, 1), block=(384, 1, 1),
                            dsmem=215040, dur=9100),
            "gemm_up": _extc("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_"
                             "segment_k_off_kernel__5x_cublas", api=RTX, regs=168, grid=(224, 1, 1), block=(128, 1, 1),
                             dsmem=213248, dur=14500, cluster=(1, 1, 1)),
            "gemm_lm": _extc("nvjet_hsh_256x16_64x4_2x1_v_bz_TNN", api=RTX, regs=168, grid=(132, 1, 1), block=(384, 1, 1),
                             dsmem=221184, dur=31000, cluster=(2, 1, 1)),
            "gemm_pf": _extc("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_"
                             "segment_k_off_kernel__5x_cublas", api=RTX, regs=168, grid=(132, 1, 1), block=(384, 1, 1),
                             dsmem=227328, dur=61000, cluster=(2, 1, 1)),
            "rope": _cpp("vllm::rotary_embedding_kernel", "c10::BFloat16, true", "long const*, c10::BFloat16*, "
                         "c10::BFloat16*, c10::BFloat16 const*, int, long, long, long, int, int, int", regs=32,
                         grid=(8, 1, 1), block=(512, 1, 1), dsmem=0, dur=2400),
            "cache": _cpp("vllm::reshape_and_cache_flash_kernel", "__nv_bfloat16, __nv_bfloat16, "
                          "(vllm::Fp8KVCacheDataType)0", "__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, "
                          "__nv_bfloat16*, long const*, long, long, long, long, int, int, int, float const*, float const*",
                          regs=28, grid=(8, 1, 1), block=(512, 1, 1), dsmem=0, dur=2200),
            "attn_dec": _cpp("flashinfer::BatchDecodeWithPagedKVCacheKernel", "(flashinfer::PosEncodingMode)0, 2u, 4u, 8u, "
                             "16u, 1u, 8u, flashinfer::DefaultAttention<false, false, false, false>, "
                             "flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>",
                             "flashinfer::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>", regs=64,
                             grid=(8, 8, 1), block=(16, 8, 1), dsmem=33280, dur=8700),
            "attn_pf": _cpp("flashinfer::BatchPrefillWithPagedKVCacheKernel", "flashinfer::KernelTraits<"
                            "(flashinfer::MaskMode)1, 128u, 4u, 8u, 2u, 4u, 1u, (flashinfer::PosEncodingMode)0, "
                            "__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, flashinfer::DefaultAttention<false, "
                            "false, false, false>>, flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, "
                            "__nv_bfloat16, int>", "flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, "
                            "__nv_bfloat16, int>", regs=128, grid=(132, 1, 1), block=(32, 4, 1), dsmem=98304,
                            dur=48000),
            "act": _cpp("vllm::act_and_mul_kernel", "c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true",
                        "c10::BFloat16*, c10::BFloat16 const*, int", regs=24, grid=(8, 1, 1), block=(1024, 1, 1),
                        dsmem=0, dur=2500),
        })
    return k


@dataclass
class Node:
    kind: str                 # "k" kernel, "memset", "memcpy"
    key: str                  # catalog key (kernels); role for copies
    stream: int               # 0 main, 1 aux1, 2 aux2
    layer: int | None
    role: str
    join: bool = False        # waits for the aux streams (event wait before it)
    fork: bool = False        # first node of an aux segment (event record/wait before it)
    nbytes: int = 0
    scale: float = 1.0


def _dsv3_nodes(layers: int, bs: int, prefill: bool, tp: int) -> list[Node]:
    n: list[Node] = []
    big = prefill

    def gemm(layer, role, stream=0, small_key="gemm_sk", mid_key="gemm_s", **kw):
        if big:
            n.append(Node("k", "gemm_pf", stream, layer, role, **kw))
        elif bs == 1 and small_key == "gemm_sk":
            n.append(Node("k", "gemm_sk", stream, layer, role, **kw))
            n.append(Node("k", "splitk", stream, layer, role + ".splitk"))
        else:
            n.append(Node("k", mid_key if bs == 1 else "gemm_m", stream, layer, role, **kw))

    def allreduce(layer, role):
        if tp > 1:
            n.append(Node("k", "nccl_ar" if prefill else "ar_fusion", 0, layer, role))
            if prefill:
                n.append(Node("k", "add_rms", 0, layer, role + ".norm"))
        else:
            n.append(Node("k", "add_rms", 0, layer, role))

    dense = min(FIRST_DENSE, layers // 4)  # DeepSeek-V3: the first 3 of 61 layers have a dense MLP
    if not prefill:
        n.append(Node("memcpy", "positions", 0, None, "prepare.copy", nbytes=8 * bs))
    n.append(Node("k", "embed", 0, None, "embed"))
    for i in range(layers):
        if i == 0:
            n.append(Node("k", "rms", 0, i, "input_layernorm"))
        gemm(i, "self_attn.fused_a")
        n.append(Node("k", "rms", 1, i, "self_attn.kv_a_layernorm", fork=True))
        n.append(Node("k", "rms", 0, i, "self_attn.q_a_layernorm"))
        gemm(i, "self_attn.q_b_proj", small_key="gemm_s")
        if prefill:
            n.append(Node("k", "gemm_pf", 0, i, "self_attn.kv_b_proj"))
            n.append(Node("k", "rope_ctx", 0, i, "self_attn.rope", join=True))
            n.append(Node("k", "fmha_ctx", 0, i, "self_attn.attn"))
        else:
            n.append(Node("k", "bmm_uk", 0, i, "self_attn.absorb_k"))
            n.append(Node("k", "rope_gen", 0, i, "self_attn.rope", join=True))
            n.append(Node("k", "fmha_gen", 0, i, "self_attn.attn"))
            n.append(Node("k", "bmm_uv", 0, i, "self_attn.absorb_v"))
        gemm(i, "self_attn.o_proj")
        allreduce(i, "post_attention_layernorm")
        if i < dense:
            gemm(i, "mlp.gate_up_proj", small_key="gemm_s")
            n.append(Node("k", "act_dense", 0, i, "mlp.act"))
            gemm(i, "mlp.down_proj")
        else:
            n.append(Node("memset", "moe_counters", 0, i, "mlp.memset", nbytes=4 * 256))
            gemm(i, "mlp.gate")
            n.append(Node("k", "topk", 0, i, "mlp.topk"))
            gemm(i, "mlp.shared_experts.gate_up_proj", stream=2, small_key="gemm_s", fork=True)
            n.append(Node("k", "act_shared", 2, i, "mlp.shared_experts.act"))
            gemm(i, "mlp.shared_experts.down_proj", stream=2, small_key="gemm_s")
            n.append(Node("k", "routing", 0, i, "mlp.experts.routing"))
            n.append(Node("k", "fc1_pf" if prefill else "fc1", 0, i, "mlp.experts.fc1"))
            n.append(Node("k", "moe_act", 0, i, "mlp.experts.act"))
            n.append(Node("k", "fc2_pf" if prefill else "fc2", 0, i, "mlp.experts.fc2"))
            n.append(Node("k", "finalize", 0, i, "mlp.experts.finalize", join=True))
        if i < layers - 1:
            allreduce(i, "next.input_layernorm")
    if tp > 1:
        n.append(Node("k", "nccl_ar" if prefill else "ar_fusion", 0, None, "norm.allreduce"))
    n.append(Node("k", "add_rms", 0, None, "norm"))
    n.append(Node("k", "gemm_lm", 0, None, "lm_head"))
    n.append(Node("k", "argmax", 0, None, "sampler.argmax"))
    if not prefill:
        n.append(Node("memcpy", "new_tokens", 0, None, "sampler.copy", nbytes=8 * bs))
    return n


def _llama_nodes(layers: int, bs: int, prefill: bool, tp: int) -> list[Node]:
    n: list[Node] = []

    def gemm(layer, role, key="gemm_s"):
        if prefill:
            n.append(Node("k", "gemm_pf", 0, layer, role))
        elif bs == 1 and key == "gemm_sk":
            n.append(Node("k", "gemm_sk", 0, layer, role))
            n.append(Node("k", "splitk", 0, layer, role + ".splitk"))
        elif key == "gemm_up":
            n.append(Node("k", "gemm_up", 0, layer, role))
        else:
            n.append(Node("k", "gemm_s" if bs == 1 else "gemm_m", 0, layer, role))

    if not prefill:
        n.append(Node("memcpy", "positions", 0, None, "prepare.copy", nbytes=8 * bs))
        n.append(Node("memset", "workspace", 0, None, "prepare.memset", nbytes=4096))
    n.append(Node("k", "embed", 0, None, "embed"))
    for i in range(layers):
        if i == 0:
            n.append(Node("k", "rms", 0, i, "input_layernorm"))
        gemm(i, "self_attn.qkv_proj")
        n.append(Node("k", "cache", 1, i, "self_attn.kv_cache_write", fork=True))
        n.append(Node("k", "rope", 0, i, "self_attn.rotary_emb"))
        n.append(Node("k", "attn_pf" if prefill else "attn_dec", 0, i, "self_attn.attn", join=True))
        gemm(i, "self_attn.o_proj", key="gemm_sk")
        if tp > 1:
            n.append(Node("k", "nccl_ar", 0, i, "self_attn.allreduce"))
        n.append(Node("k", "add_rms", 0, i, "post_attention_layernorm"))
        gemm(i, "mlp.gate_up_proj", key="gemm_up")
        n.append(Node("k", "act", 0, i, "mlp.act"))
        gemm(i, "mlp.down_proj", key="gemm_sk")
        if tp > 1:
            n.append(Node("k", "nccl_ar", 0, i, "mlp.allreduce"))
        if i < layers - 1:
            n.append(Node("k", "add_rms", 0, i, "next.input_layernorm"))
    n.append(Node("k", "add_rms", 0, None, "norm"))
    n.append(Node("k", "gemm_lm", 0, None, "lm_head"))
    n.append(Node("k", "argmax", 0, None, "sampler.argmax"))
    if not prefill:
        n.append(Node("memcpy", "new_tokens", 0, None, "sampler.copy", nbytes=8 * bs))
    return n


def _nodes(model: str, layers: int, bs: int, prefill: bool, tp: int) -> list[Node]:
    nodes = (_dsv3_nodes if model == "deepseek_v3" else _llama_nodes)(layers, bs, prefill, tp)
    if prefill:
        for nd in nodes:  # elementwise work grows with the tokens less than GEMMs/attention, whose prefill kernels differ
            nd.scale = 6.0
    elif bs > 1:
        for nd in nodes:
            nd.scale = 1.25
    return nodes


GRAPH_BATCHES = (1, 8)  # captured decode batch sizes; replay i uses batch 8 when i % 3 == 2


def _graph_of_replay(i: int) -> int:
    return 1 if i % 3 == 2 else 0


def _kernels_per_step(model: str, layers: int, tp: int) -> tuple[list[int], int]:
    graphs = [sum(nd.kind == "k" for nd in _nodes(model, layers, bs, False, tp)) for bs in GRAPH_BATCHES]
    prefill = sum(nd.kind == "k" for nd in _nodes(model, layers, 64, True, tp))
    return graphs, prefill


# =================================================================================================
# Simulation
# =================================================================================================
@dataclass
class Proc:
    dev: int
    pid: int
    gpid: int
    gtid: int
    ctx: int
    streams: tuple[int, int, int]     # main, aux1, aux2
    null_stream: int
    corr: int
    grid: int
    node_id: int
    h: int = 0                        # host clock
    gpu: list[int] = field(default_factory=lambda: [0, 0, 0])  # stream ready times

    def next_corr(self) -> int:
        self.corr += 1
        return self.corr


def _align(t: int, stream: int) -> int:
    """Start times on different streams never coincide: stream s starts at t ≡ s (mod 4)."""
    return ((t + 3) // 4) * 4 + stream


class _Writer:
    """Collects rows (in insertion order) and string ids."""

    def __init__(self, schema: str):
        self.schema = schema
        self.strings: dict[str, int] = {}
        self.rows: dict[str, list[tuple]] = defaultdict(list)

    def sid(self, s: str) -> int:
        i = self.strings.get(s)
        if i is None:
            i = self.strings[s] = len(self.strings)
        return i


def _compute_layers_replays(model: str, layers: int, replays: int, eager_steps: int, kernels: int | None,
                            devices: int) -> tuple[int, int]:
    if kernels is None:
        return layers, replays
    if kernels < 1:
        raise ValueError("--kernels must be positive")
    per_dev = kernels / devices
    layers = min(FULL_LAYERS[model], max(layers, int(per_dev) // 200))
    graphs, prefill = _kernels_per_step(model, layers, devices)
    rest = per_dev - eager_steps * prefill
    cycle = 2 * graphs[0] + graphs[1]
    replays = max(1, round(3 * rest / cycle)) if rest > 0 else 1
    # exact correction at the end of the cycle
    def total(r):
        return sum(graphs[_graph_of_replay(i)] for i in range(r % 3)) + (r // 3) * cycle
    while replays > 1 and abs(total(replays - 1) - rest) < abs(total(replays) - rest):
        replays -= 1
    while abs(total(replays + 1) - rest) < abs(total(replays) - rest):
        replays += 1
    return layers, replays


def generate(path: str | os.PathLike, *, schema: str = "3.25", mode: str = "node", model: str = "deepseek_v3",
             layers: int = 4, replays: int = 3, eager_steps: int = 1, kernels: int | None = None, devices: int = 1,
             seed: int = 0) -> dict:
    """Write a synthetic nsys export to ``path`` (atomically) and ``<stem>_truth.json``; return the truth."""
    if schema not in SCHEMAS:
        raise ValueError(f"schema must be one of {', '.join(SCHEMAS)}, not {schema!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be 'node' or 'graph', not {mode!r}")
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, not {model!r}")
    if layers < 1 or replays < 0 or eager_steps < 0 or devices < 1:
        raise ValueError("layers and devices must be >= 1, replays and eager_steps >= 0")
    layers, replays = _compute_layers_replays(model, layers, replays, eager_steps, kernels, devices)
    t_wall = time.perf_counter()
    path = Path(path)
    output_dir(path.parent)
    sim = _Sim(schema, mode, model, layers, replays, eager_steps, devices, seed)
    with atomic_path(path) as tmp:
        truth = sim.write(str(tmp))
        truth["bytes"] = tmp.stat().st_size
    truth["path"] = str(path)
    truth["seconds"] = round(time.perf_counter() - t_wall, 3)
    if (beside := companion(path, path.stem + "_truth.json")) is not None:
        write_atomic(beside, json.dumps(truth, indent=1) + "\n")
    return truth


@dataclass
class _Graph:
    index: int
    bs: int
    graph_id: int
    exec_id: int
    nodes: list[Node]
    node_ids: list[int]               # exec (instantiated) node ids, stable across replays
    variants: list[tuple[list[int], list[int], int]] = field(default_factory=list)  # (starts, ends, total)


class _Sim:
    def __init__(self, schema, mode, model, layers, replays, eager_steps, devices, seed):
        self.schema, self.mode, self.model = schema, mode, model
        self.layers, self.replays, self.eager_steps, self.devices, self.seed = layers, replays, eager_steps, devices, seed
        self.v = _v(schema)
        self.rng = random.Random(f"gen_nsys:{seed}")
        self.cat = _catalog(model, random.Random(f"gen_nsys:names:{seed}"))
        self.gpu = "B200" if model == "deepseek_v3" else "H100"
        self.w = _Writer(schema)
        self.node_mode = mode == "node"
        self.has_graph_trace = self.v >= (3, 13)

    # -- helpers ---------------------------------------------------------------------------------
    def _api(self, p: Proc, name: str, dur: int, cls: int | None = None) -> tuple[int, int, int]:
        """One RUNTIME row at the host clock; returns (start, end, correlationId)."""
        if cls is None:
            cls = EC_DRIVER if name.startswith("cu") and not name.startswith("cuda") else EC_RUNTIME
        c = p.next_corr()
        s = p.h
        e = s + dur
        self.w.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append((s, e, cls, p.gtid, c, self.w.sid(name), 0, None))
        p.h = e + self.rng.randint(150, 900)
        return s, e, c

    def _nvtx(self, p: Proc, start: int, end: int, text: str | None, registered: str | None = None,
              color: int | None = None) -> None:
        row = [start, end, ET_PUSHPOP, None, None, color, text, p.gtid, None,
               self.w.sid(registered) if registered else None, 0, None, None, None, None, None, None, None, None]
        if self.v >= (3, 13):
            row.append(None)
        if self.v >= (3, 28):
            row.append(len(self.w.rows["NVTX_EVENTS"]) + 1)
        self.w.rows["NVTX_EVENTS"].append(tuple(row))

    def _dur(self, nd: Node, rng: random.Random) -> int:
        base = self.cat[nd.key].dur if nd.kind == "k" else (1300 if nd.kind == "memset" else 1800)
        return max(700, int(base * nd.scale * rng.uniform(0.9, 1.12)))

    def _kernel_static(self, p: Proc, nd: Node, graph_node: int | None, graph_id: int | None) -> tuple:
        """Kernel columns after (start, end, correlationId, gridId), in table order."""
        k = self.cat[nd.key]
        lmt = _GPUS[self.gpu][10]
        smexec = 233472 if k.dsmem > 100000 else (135168 if k.dsmem > 32768 else 32768)
        vals: list[int | str | None] = [p.dev, p.ctx]
        if self.v >= (3, 13):
            vals.append(0)
        vals += [p.streams[nd.stream], p.gpid, self.w.sid(k.demangled), self.w.sid(k.short),
                 self.w.sid(k.mangled) if k.mangled else None, 1, 1, k.regs, *k.grid, *k.block, k.ssmem, k.dsmem, 0, lmt,
                 smexec, graph_node, 1 if k.dsmem > 49152 else 0]
        if self.v >= (3, 25):
            cx, cy, cz = k.cluster
            vals += [None, None, None, graph_id, cx, cy, cz, 1, 0, 0, None, "[]"]
        return tuple(vals)

    def _kernel_cols(self) -> list[str]:
        cols = [c[0] for c in _kernel_cols(self.schema)]
        rest = [c for c in cols if c not in ("start", "end", "correlationId", "gridId")]
        return ["start", "end", "correlationId", "gridId", *rest]

    def _memcpy_row(self, p: Proc, s: int, e: int, corr: int, nbytes: int, kind: int, graph_node: int | None) -> tuple:
        src, dst = {COPY_HTOD: (MEM_PINNED, MEM_DEVICE), COPY_DTOH: (MEM_DEVICE, MEM_PINNED),
                    COPY_DTOD: (MEM_DEVICE, MEM_DEVICE)}[kind]
        row = [s, e, p.dev, p.ctx] + ([0] if self.v >= (3, 13) else []) + [
            p.streams[0], corr, p.gpid, nbytes, kind, None, src, dst, None, None, None, None, None, graph_node, None]
        if self.v >= (3, 25):
            row.append(1)
        return tuple(row)

    def _memset_row(self, p: Proc, s: int, e: int, corr: int, nbytes: int, graph_node: int | None) -> tuple:
        return tuple([s, e, p.dev, p.ctx] + ([0] if self.v >= (3, 13) else []) + [
            p.streams[0], corr, p.gpid, 0, nbytes, graph_node, MEM_DEVICE])

    def _schedule(self, nodes: list[Node], t0: int, rng: random.Random, ready: list[int],
                  launch_end: list[int] | None = None) -> tuple[list[int], list[int]]:
        """GPU start/end of each node: in order per stream, aux segments start after the main stream's
        fork point, join nodes wait for the aux streams, eager nodes after their launch call."""
        ready = [max(r, t0) for r in ready]
        starts, ends = [], []
        fork_at = ready[0]
        for i, nd in enumerate(nodes):
            s_ = nd.stream
            if nd.fork:
                fork_at = ready[0]
            t = ready[s_]
            if s_:
                t = max(t, fork_at)
            if nd.join:
                t = max(t, ready[1], ready[2])
            gap = rng.randint(600, 1500) if launch_end is None else rng.randint(1500, 3500)
            t = max(t + gap, t0) if launch_end is None else max(t + gap, launch_end[i] + rng.randint(2500, 6000))
            st = _align(t, s_)
            en = st + self._dur(nd, rng)
            starts.append(st)
            ends.append(en)
            ready[s_] = en
        return starts, ends

    # -- phases ----------------------------------------------------------------------------------
    def _capture(self, p: Proc, g: _Graph, capture_ids: list[int]) -> None:
        w, rng = self.w, self.rng
        r0 = p.h
        self._api(p, "cudaStreamBeginCapture_v10000", rng.randint(3000, 6000))
        layer_open: tuple[int, int] | None = None
        node_events = w.rows["CUDA_GRAPH_NODE_EVENTS" if self.v >= (3, 13) else "CUDA_GRAPH_EVENTS"]
        for nd, cid in zip(g.nodes, capture_ids):
            layer_open = self._before_launch(p, nd, layer_open)
            name = self._launch_api(nd)
            s, e, _ = self._api(p, name, rng.randint(2500, 5000))
            if self.node_mode:
                node_events.append((s, e, EC_GRAPH_NODE_CREATION, p.gtid, w.sid(name), cid, None))
        if layer_open:
            self._nvtx(p, layer_open[1], p.h - 200, f"model.layers.{layer_open[0]}")
        s, e, _ = self._api(p, "cudaStreamEndCapture_v10000", rng.randint(20000, 60000))
        if self.v >= (3, 13):
            w.rows["CUDA_GRAPH_EVENTS"].append((s, e, EC_GRAPH_CREATION, p.gtid, w.sid("cudaStreamEndCapture_v10000"),
                                                g.graph_id, None, None))
        s, e, _ = self._api(p, "cudaGraphInstantiateWithFlags_v11040", rng.randint(300000, 900000))
        if self.v >= (3, 13):
            w.rows["CUDA_GRAPH_EVENTS"].append((s, e, EC_GRAPHEXEC_CREATION, p.gtid,
                                                w.sid("cudaGraphInstantiateWithFlags_v11040"), g.graph_id, None, g.exec_id))
        if self.node_mode:
            inst = w.sid("cudaGraphInstantiateWithFlags_v11040")
            for cid, xid in zip(capture_ids, g.node_ids):
                node_events.append((s, e, EC_GRAPH_NODE_CREATION, p.gtid, inst, xid, cid))
        self._nvtx(p, r0, p.h, None, registered=f"cuda_graph_capture bs={g.bs}", color=0xFF76B900)
        p.h += rng.randint(50000, 150000)

    def _before_launch(self, p, nd, layer_open: tuple[int, int] | None) -> tuple[int, int] | None:
        """The host side of launching ``nd``: close the previous layer's NVTX range, open this
        node's, and record/wait events where the node forks to or joins from an aux stream."""
        if layer_open and layer_open[0] != nd.layer:
            self._nvtx(p, layer_open[1], p.h - 200, f"model.layers.{layer_open[0]}")
            layer_open = None
        if nd.layer is not None and layer_open is None:
            layer_open = (nd.layer, p.h)
            p.h += 300
        if nd.fork or nd.join:
            self._api(p, "cudaEventRecord_v3020", self.rng.randint(1500, 2500))
            self._api(p, "cudaStreamWaitEvent_v3020", self.rng.randint(1500, 2500))
        return layer_open

    def _launch_api(self, nd: Node) -> str:
        if nd.kind == "memset":
            return "cudaMemsetAsync_v3020"
        if nd.kind == "memcpy":
            return "cudaMemcpyAsync_v3020"
        return self.cat[nd.key].api

    def _copy(self, p: Proc, nbytes: int, kind: int) -> int:
        """An eager cudaMemcpyAsync on the main stream; returns the GPU end."""
        s, e, c = self._api(p, "cudaMemcpyAsync_v3020", self.rng.randint(3500, 7000))
        st = _align(max(p.gpu[0], e + self.rng.randint(800, 2500)), 0)
        en = st + max(1200, int(nbytes / 20) + self.rng.randint(900, 1600))
        self.w.rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(self._memcpy_row(p, st, en, c, nbytes, kind, None))
        p.gpu[0] = en
        return en

    def _sync(self, p: Proc) -> None:
        s = p.h
        done = max(p.gpu)
        e = max(s + self.rng.randint(1500, 3000), done + self.rng.randint(800, 2000))
        self.w.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
            (s, e, EC_RUNTIME, p.gtid, p.next_corr(), self.w.sid("cudaStreamSynchronize_v3020"), 0, None))
        p.h = e + self.rng.randint(500, 2000)

    def _eager_step(self, p: Proc, step: int, counts: Counter) -> None:
        w, rng = self.w, self.rng
        nodes = _nodes(self.model, self.layers, 64, True, self.devices)
        r0 = p.h
        self._copy(p, 64 * 8, COPY_HTOD)
        # host: launches in order (NVTX per layer), then GPU schedule against the launch times
        launch_ends, corrs = [], []
        layer_open: tuple[int, int] | None = None
        for nd in nodes:
            layer_open = self._before_launch(p, nd, layer_open)
            s, e, c = self._api(p, self._launch_api(nd), rng.randint(3000, 6500))
            launch_ends.append(e)
            corrs.append(c)
        if layer_open:
            self._nvtx(p, layer_open[1], p.h - 200, f"model.layers.{layer_open[0]}")
        starts, ends = self._schedule(nodes, 0, rng, p.gpu, launch_ends)
        rows = w.rows["CUPTI_ACTIVITY_KIND_KERNEL"]
        for nd, st, en, c in zip(nodes, starts, ends, corrs):
            if nd.kind == "k":
                p.grid += 1
                rows.append((st, en, c, p.grid) + self._kernel_static(p, nd, None, None))
                counts[(p.dev, p.streams[nd.stream])] += 1
            elif nd.kind == "memset":
                w.rows["CUPTI_ACTIVITY_KIND_MEMSET"].append(self._memset_row(p, st, en, c, nd.nbytes, None))
            p.gpu[nd.stream] = max(p.gpu[nd.stream], en)
        self._copy(p, 64 * 8, COPY_DTOH)
        self._sync(p)
        self._nvtx(p, r0, p.h, None, registered=f"prefill step {step}", color=0xFF0070C0)
        p.h += rng.randint(30000, 90000)

    def _variants(self, g: _Graph) -> None:
        rng = random.Random(f"gen_nsys:variants:{self.seed}:{g.index}")
        for _ in range(4):
            starts, ends = self._schedule(g.nodes, 0, rng, [0, 0, 0])
            base = min(starts)
            starts = [s - base for s in starts]
            ends = [e - base for e in ends]
            g.variants.append((starts, ends, max(ends)))

    # -- the whole file --------------------------------------------------------------------------
    def write(self, tmp: str) -> dict:
        w, rng = self.w, self.rng
        schema, v = self.schema, self.v
        graphs: list[_Graph] = []
        for gi, bs in enumerate(GRAPH_BATCHES):
            nodes = _nodes(self.model, self.layers, bs, False, self.devices)
            graphs.append(_Graph(gi, bs, graph_id=gi + 1, exec_id=gi + 1, nodes=nodes, node_ids=[]))
        for g in graphs:
            self._variants(g)
        procs: list[Proc] = []
        t0 = 4_800_000_000 + rng.randint(0, 10**8)
        for d in range(self.devices):
            pid = 41000 + 37 * d + rng.randint(0, 30)
            gpid = (VM_ID << 48) | (pid << 24)
            off = 8 * d
            procs.append(Proc(d, pid, gpid, gpid | pid, d + 1, (13 + off, 17 + off, 18 + off), 7 + off,
                              corr=1200 + rng.randint(0, 400), grid=900 + rng.randint(0, 200),
                              node_id=rng.randint(1, 50) * 1000, h=t0 + rng.randint(0, 2_000_000)))
        kcounts: Counter = Counter()
        truth_graphs = []
        replay_info = []            # (dev, i, corr, graph index, base, variant)
        graph_launch_rows = 0
        graph_node_ids: dict[int, dict[int, list[int]]] = {}
        for p in procs:
            p.gpu = [p.h, p.h, p.h]
            w.rows["ThreadNames"].append((w.sid("python3"), 20, p.gtid))
            w.rows["ThreadNames"].append((w.sid("cuda-EvtHandlr"), 20, p.gtid + 5))
            # capture: capture-time node ids, then the exec node ids (stable across replays)
            graph_node_ids[p.dev] = {}
            for g in graphs:
                capture_ids = list(range(p.node_id + 1, p.node_id + 1 + len(g.nodes)))
                p.node_id += len(g.nodes)
                exec_ids = list(range(p.node_id + 1, p.node_id + 1 + len(g.nodes)))
                p.node_id += len(g.nodes) + 1000
                graph_node_ids[p.dev][g.index] = exec_ids
                g.node_ids = exec_ids
                self._capture(p, g, capture_ids)
            p.gpu = [max(p.gpu[0], p.h)] * 3
            for step in range(self.eager_steps):
                self._eager_step(p, step, kcounts)
            # decode replays: only their launch info now; kernel rows stream out at insert time
            for i in range(self.replays):
                g = graphs[_graph_of_replay(i)]
                r0 = p.h
                self._copy(p, 8 * g.bs, COPY_HTOD)
                dur = rng.randint(18000, 40000) if self.node_mode else rng.randint(8000, 16000)
                s, e, c = self._api(p, "cudaGraphLaunch_v10000", dur)
                graph_launch_rows += 1
                var = rng.randrange(len(g.variants))
                starts, ends, total = g.variants[var]
                base = _align(max(max(p.gpu), s + rng.randint(6000, 12000)), 0)
                replay_info.append((p, i, c, g.index, base, var))
                p.gpu = [base + total] * 3
                if self.has_graph_trace and not self.node_mode:
                    w.rows["CUPTI_ACTIVITY_KIND_GRAPH_TRACE"].append(
                        tuple([base, base + total, p.dev, p.ctx] + [0] + [p.streams[0], c, p.gpid, g.graph_id, g.exec_id]))
                self._copy(p, 8 * g.bs, COPY_DTOH)
                self._sync(p)
                self._nvtx(p, r0, p.h, f"decode_step {i} bs={g.bs}")
                p.h += rng.randint(20000, 60000)
        # graph memset/memcpy node rows (node mode), small enough to keep in lists
        if self.node_mode:
            for p, i, c, gi, base, var in replay_info:
                g = graphs[gi]
                starts, ends, _ = g.variants[var]
                ids = graph_node_ids[p.dev][gi]
                for j, nd in enumerate(g.nodes):
                    if nd.kind == "memset":
                        w.rows["CUPTI_ACTIVITY_KIND_MEMSET"].append(
                            self._memset_row(p, base + starts[j], base + ends[j], c, nd.nbytes, ids[j]))
                    elif nd.kind == "memcpy":
                        w.rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(
                            self._memcpy_row(p, base + starts[j], base + ends[j], c, nd.nbytes, COPY_DTOD, ids[j]))
        # static kernel columns per (device, graph, node)
        statics: dict[tuple[int, int], list[tuple[int, tuple]]] = {}
        per_replay_kernels = {}
        for p in procs:
            for g in graphs:
                ids = graph_node_ids[p.dev][g.index]
                lst = []
                for j, nd in enumerate(g.nodes):
                    if nd.kind == "k":
                        gid_col = g.graph_id if v >= (3, 25) else None
                        lst.append((j, self._kernel_static(p, nd, ids[j], gid_col)))
                statics[(p.dev, g.index)] = lst
                per_replay_kernels[g.index] = len(lst)
        # process / target tables
        for p in procs:
            w.rows["PROCESSES"].append((p.gpid, p.pid, "python3"))
            w.rows["TARGET_INFO_GPU"].append(_gpu_row(self.gpu, p.dev, random.Random(f"gen_nsys:gpu:{self.seed}:{p.dev}")))
            w.rows["TARGET_INFO_CUDA_STREAM"] += [
                (p.null_stream, 0, VM_ID, p.pid, p.ctx, 0, 3), (p.streams[0], 0, VM_ID, p.pid, p.ctx, 0, 2),
                (p.streams[1], 0, VM_ID, p.pid, p.ctx, 0, 2), (p.streams[2], 0, VM_ID, p.pid, p.ctx, 0, 2)]
            if schema == "2.9.1":
                w.rows["TARGET_INFO_CUDA_NULL_STREAM"].append((p.null_stream, 0, VM_ID, p.pid, p.dev, p.ctx))
        launcher_pid = 40000 + rng.randint(0, 900)
        w.rows["PROCESSES"].insert(0, (((VM_ID << 48) | (launcher_pid << 24)), launcher_pid, "trtllm-serve"
                                       if self.model == "deepseek_v3" else "vllm"))
        all_times = [r[0] for r in w.rows["CUPTI_ACTIVITY_KIND_RUNTIME"]] + [r[1] for r in w.rows["CUPTI_ACTIVITY_KIND_RUNTIME"]]
        t_start = t0 - 250_000_000
        t_stop = max(max(all_times), max(max(p_.gpu) for p_ in procs)) + 50_000_000
        w.rows["ANALYSIS_DETAILS"].append((GLOBAL_VID, t_stop - t_start, t_start, t_stop))
        utc = 1767225600_000_000_000 + self.seed * 1_000_000_000
        utc_s = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(utc // 10**9))
        w.rows["TARGET_INFO_SESSION_START_TIME"].append(
            (utc, utc_s, utc_s) + ((t_start,) if v >= (3, 25) else ()))
        self._meta()

        # -- kernel rows of the replays, streamed --------------------------------------------------
        kernel_cols = self._kernel_cols()
        replay_kernel_rows = 0
        if self.node_mode:
            for p, i, c, gi, base, var in replay_info:
                for j, _st in statics[(p.dev, gi)]:
                    kcounts[(p.dev, p.streams[graphs[gi].nodes[j].stream])] += 1
                replay_kernel_rows += per_replay_kernels[gi]
        grid_state = {p.dev: p.grid for p in procs}

        def replay_rows() -> Iterator[tuple]:
            for p, i, c, gi, base, var in replay_info:
                starts, ends, _ = graphs[gi].variants[var]
                gid = grid_state[p.dev]
                for j, st in statics[(p.dev, gi)]:
                    gid += 1
                    yield (base + starts[j], base + ends[j], c, gid) + st
                grid_state[p.dev] = gid

        # -- write ---------------------------------------------------------------------------------
        tables = self._tables()
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=OFF")
            con.execute("PRAGMA synchronous=OFF")
            con.execute("PRAGMA cache_size=-200000")
            con.execute("BEGIN")
            for t in tables:
                con.execute(ddl(t, schema))
            if v >= (3, 13):
                for t, rows in _enum_rows().items():
                    con.executemany(f"INSERT INTO {t} VALUES (?,?,?)", rows)
            for t in tables:
                if t == "CUPTI_ACTIVITY_KIND_KERNEL":
                    q = f"INSERT INTO {t} ({','.join(kernel_cols)}) VALUES ({','.join('?' * len(kernel_cols))})"
                    con.executemany(q, w.rows[t])
                    if self.node_mode:
                        con.executemany(q, replay_rows())
                elif t == "StringIds":
                    con.executemany("INSERT INTO StringIds VALUES (?,?)", ((i, s) for s, i in w.strings.items()))
                elif not t.startswith("ENUM_"):
                    rows = w.rows[t]
                    if rows:
                        con.executemany(f"INSERT INTO {t} VALUES ({','.join('?' * len(rows[0]))})", rows)
            con.execute("COMMIT")
        finally:
            con.close()

        # -- truth ---------------------------------------------------------------------------------
        eager_rows = len(w.rows["CUPTI_ACTIVITY_KIND_KERNEL"])
        executed = eager_rows + sum(per_replay_kernels[gi] for _, _, _, gi, _, _ in replay_info)
        per_graph_total: Counter[int] = Counter()
        per_graph_replays: Counter[int] = Counter()
        for _, _, _, gi, _, _ in replay_info:
            per_graph_total[graphs[gi].graph_id] += per_replay_kernels[gi]
            per_graph_replays[graphs[gi].graph_id] += 1
        for g in graphs:
            truth_graphs.append({
                "graphId": g.graph_id, "graphExecId": g.exec_id, "batch": g.bs,
                "kernels_per_replay": per_replay_kernels[g.index],
                "memsets_per_replay": sum(nd.kind == "memset" for nd in g.nodes),
                "memcpys_per_replay": sum(nd.kind == "memcpy" for nd in g.nodes),
                "streams_used": sorted({nd.stream for nd in g.nodes if nd.kind == "k"}),
                "replays_per_device": per_graph_replays[g.graph_id] // self.devices,
                "kernels_executed": per_graph_total[g.graph_id],
            })
        most = max(graphs, key=lambda g: (per_graph_total[g.graph_id], per_replay_kernels[g.index]))
        per_stream: dict[str, dict[str, int]] = {}
        for (dev, stream), n in sorted(kcounts.items()):
            per_stream.setdefault(str(dev), {})[str(stream)] = n
        truth = {
            "generator": "layerc.backends.synth.nsys",
            "schema": SCHEMA_FULL[schema], "mode": self.mode, "model": self.model, "gpu": _GPUS[self.gpu][0],
            "layers": self.layers, "replays": self.replays, "eager_steps": self.eager_steps, "devices": self.devices,
            "seed": self.seed,
            "tables": sorted(tables),
            "kernel_rows": eager_rows + replay_kernel_rows,
            "eager_kernel_rows": eager_rows,
            "graph_kernel_rows": replay_kernel_rows,
            "kernels_executed": executed,
            "memcpy_rows": len(w.rows["CUPTI_ACTIVITY_KIND_MEMCPY"]),
            "memset_rows": len(w.rows["CUPTI_ACTIVITY_KIND_MEMSET"]),
            "runtime_rows": len(w.rows["CUPTI_ACTIVITY_KIND_RUNTIME"]),
            "nvtx_rows": len(w.rows["NVTX_EVENTS"]),
            "graph_trace_rows": len(w.rows["CUPTI_ACTIVITY_KIND_GRAPH_TRACE"]),
            "graph_node_event_rows": len(w.rows["CUDA_GRAPH_NODE_EVENTS"]) + (
                len(w.rows["CUDA_GRAPH_EVENTS"]) if schema == "2.9.1" else 0),
            "graph_event_rows": len(w.rows["CUDA_GRAPH_EVENTS"]) if schema != "2.9.1" else 0,
            "string_ids": len(w.strings),
            "graph_launches": graph_launch_rows,
            "graphs": truth_graphs,
            "kernels_per_replay": {str(g.graph_id): per_replay_kernels[g.index] for g in graphs},
            "graph_with_most_kernels": most.graph_id,
            "kernel_rows_per_stream": per_stream,
            "processes": [{"deviceId": p.dev, "pid": p.pid, "globalPid": p.gpid, "globalTid": p.gtid,
                           "contextId": p.ctx, "streams": {"null": p.null_stream, "main": p.streams[0],
                                                           "aux": list(p.streams[1:])}}
                          for p in procs],
            "correlation_ids_overlap_across_processes": self.devices > 1,
        }
        truth["chosen_replay"] = self._chosen(replay_info, graphs, graph_node_ids)
        return truth

    def _chosen(self, replay_info, graphs, graph_node_ids) -> dict | None:
        dev0 = [r for r in replay_info if r[0].dev == 0]
        if not dev0:
            return None
        mid = len(dev0) // 2
        cands = sorted(dev0, key=lambda r: (r[3] != 0, abs(r[1] - mid)))
        p, i, c, gi, base, var = cands[0]
        g = graphs[gi]
        starts, ends, total = g.variants[var]
        ids = graph_node_ids[p.dev][gi]
        out = {"deviceId": p.dev, "globalPid": p.gpid, "replay": i, "correlationId": c, "graphId": g.graph_id,
               "graphExecId": g.exec_id, "start": base, "end": base + total}
        if self.node_mode:
            ks = []
            for j, nd in enumerate(g.nodes):
                if nd.kind != "k":
                    continue
                k = self.cat[nd.key]
                ks.append({"start": base + starts[j], "end": base + ends[j], "streamId": p.streams[nd.stream],
                           "graphNodeId": ids[j], "shortName": k.short, "demangledName": k.demangled,
                           "layer": nd.layer, "role": nd.role})
            ks.sort(key=lambda r: r["start"])
            out["kernels"] = ks
        return out

    def _tables(self) -> list[str]:
        v, w = self.v, self.w
        t = ["StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
             "NVTX_EVENTS", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_STREAM", "ThreadNames", "PROCESSES",
             "TARGET_INFO_SESSION_START_TIME", "ANALYSIS_DETAILS"]
        if w.rows["CUPTI_ACTIVITY_KIND_MEMSET"]:
            t.append("CUPTI_ACTIVITY_KIND_MEMSET")
        if v >= (3, 13):
            t += ["META_DATA_EXPORT", "META_DATA_CAPTURE", *ENUM_HEADERS]
            if w.rows["CUDA_GRAPH_EVENTS"]:
                t.append("CUDA_GRAPH_EVENTS")
            if w.rows["CUDA_GRAPH_NODE_EVENTS"]:
                t.append("CUDA_GRAPH_NODE_EVENTS")
            if w.rows["CUPTI_ACTIVITY_KIND_GRAPH_TRACE"]:
                t.append("CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
        else:
            t += ["EXPORT_META_DATA", "TARGET_INFO_CUDA_NULL_STREAM"]
            if w.rows["CUDA_GRAPH_EVENTS"]:
                t.append("CUDA_GRAPH_EVENTS")
        return t

    def _meta(self) -> None:
        schema, w = self.schema, self.w
        full = SCHEMA_FULL[schema]
        major, minor, micro = full.split(".")
        prod, date = PRODUCT[schema]
        rep = "report.nsys-rep"
        if schema == "2.9.1":
            w.rows["EXPORT_META_DATA"] += [
                ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", prod),
                ("EXPORT_PRODUCT_DATE", date), ("EXPORT_SCHEMA_VERSION", full), ("EXPORT_SCHEMA_VERSION_MAJOR", major),
                ("EXPORT_SCHEMA_VERSION_MINOR", minor), ("EXPORT_SCHEMA_VERSION_MICRO", micro),
                ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"), ("EXPORT_TIME", "0.52"),
                ("EXPORT_HOST", "layerc-gen"), ("EXPORT_USER", "layerc"),
                # sic: nsys 2022.2 spells these OUTUPT
                ("EXPORT_INPUT_FILE", rep), ("EXPORT_OUTUPT_FILE", "report.sqlite"), ("EXPORT_INPUT_PATH", rep),
                ("EXPORT_OUTUPT_PATH", "report.sqlite"), ("EXPORT_OVERWRITE", "true"), ("EXPORT_LAZY", "true")]
            return
        w.rows["META_DATA_EXPORT"] += [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_PRODUCT_VERSION", prod),
            ("EXPORT_PRODUCT_DATE", date), ("EXPORT_SCHEMA_VERSION", full), ("EXPORT_SCHEMA_VERSION_MAJOR", major),
            ("EXPORT_SCHEMA_VERSION_MINOR", minor), ("EXPORT_SCHEMA_VERSION_MICRO", micro),
            ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"), ("EXPORT_HOST", "layerc-gen"),
            ("EXPORT_USER", "layerc"), ("EXPORT_PARAM_EXPORT_TYPE", "SQLite"), ("EXPORT_PARAM_INPUT_FILE", rep),
            ("EXPORT_PARAM_OUTPUT_FILE", "report.sqlite"), ("EXPORT_PARAM_LAZY", "true"),
            ("EXPORT_PARAM_INCLUDE_JSON", "false"), ("EXPORT_PARAM_INCLUDE_BLOBS", "false"),
            ("EXPORT_PARAM_TIME_NORMALIZE", "false"), ("EXPORT_TIME", "0.52 sec"),
            ("GENERATED_BY", "layerc.backends.synth.nsys (synthetic)")]
        w.rows["META_DATA_CAPTURE"] += [
            ("DEVICE_ID", "Local (CLI)"), ("CAPTURE_EVENT_TYPE", "NvtxEvents"), ("CAPTURE_EVENT_TYPE", "Cuda"),
            ("START_TRIGGER", "Immediate"), ("STOP_TRIGGER", "Delayed"), ("DEVICE_TYPE", "Unix"),
            ("CUDA_GRAPH_TRACE_OPTIONS:MODE", "Node" if self.node_mode else "Graph"),
            ("CUDA_GRAPH_TRACE_OPTIONS:TRACE_DEVICE_GRAPH_LAUNCH", "false"),
            ("CUDA_FLUSH_PERIODICALLY", "true"), ("CUDA_TRACE_SCOPE", "ProcessTree"),
            ("TRACE_AFTER_FORK_BEFORE_EXEC", "true"), ("INCLUDE_CHILDREN", "true")]
