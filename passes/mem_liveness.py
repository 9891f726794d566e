"""``mem-liveness``: live SMEM bytes and live TMEM columns at every operation id, their peaks and
where they happen, held against the hardware.

A buffer is live at operation ``t`` when ``start <= t < end`` (the planner's intervals are
end-exclusive). SMEM sizes are those of the SMEM graph: one copy of each buffer, before the planner
multi-buffers it (``buffer.copy``), so the figure is what the kernel needs at one pipeline stage.
TMEM is counted in columns of its 128 lanes (a ``rows x cols`` allocation takes ``cols``
columns); an allocation whose size the dump does not give is left out and counted in ``unknown``.
Running it alone::

    module = read_ws_memory("/tmp/ws_graphs")
    MemLiveness(arch="sm100").apply(Context(), module)
    module.kernels[0].liveness["smem"].peak
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from layerc.ir.memory import SMEM, SMEM_GRAPH, TMEM, TMEM_GRAPH, Kernel, Liveness, MemoryModule, quoted
from layerc.passes.base import Context, ModulePass


class Capacity(NamedTuple):
    """Per streaming multiprocessor: shared memory, the most one block may opt in to (what a
    warp-specialized kernel, one block per SM, can plan with), and TMEM columns (0: no TMEM)."""

    smem_per_sm: int
    smem_per_block: int
    tmem_columns: int
    gpus: str


KIB = 1024
#: CUDA C Programming Guide, "Technical Specifications per Compute Capability"; TMEM is
#: 128 lanes x 512 columns of 32-bit cells on sm100/sm103 (the Blackwell datacenter parts).
CAPACITY: dict[str, Capacity] = {
    "sm80": Capacity(164 * KIB, 163 * KIB, 0, "A100"),
    "sm86": Capacity(100 * KIB, 99 * KIB, 0, "RTX 30xx, A40"),
    "sm89": Capacity(100 * KIB, 99 * KIB, 0, "L40S, RTX 40xx"),
    "sm90": Capacity(228 * KIB, 227 * KIB, 0, "H100, H200, GH200"),
    "sm100": Capacity(228 * KIB, 227 * KIB, 512, "B200, GB200"),
    "sm103": Capacity(228 * KIB, 227 * KIB, 512, "B300, GB300"),
    "sm120": Capacity(100 * KIB, 99 * KIB, 0, "RTX 50xx, RTX PRO 6000"),
}
TMEM_LANES = 128
ARCHS = ("auto", *CAPACITY)


def pick_arch(module: MemoryModule, arch: str) -> str:
    """``auto``: sm100 when a kernel has TMEM allocations (only Blackwell has TMEM), else sm90."""
    if arch != "auto":
        return arch
    has_tmem = any((k.buffers.kind == TMEM).any() for k in module.kernels)
    return "sm100" if has_tmem else "sm90"


def live_curve(start: np.ndarray, end: np.ndarray, amount: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The amount live as a step function ``(ops, live)``: ``live[i]`` from operation ``ops[i]``
    on, a step only where the amount changes, the last (0) where the last interval ends. Intervals
    with ``end <= start`` hold nothing. Its size is the number of intervals, whatever operation ids
    they name (a dense curve over ``[36-2147483647)`` would take 16 GB)."""
    start, end, amount = (np.asarray(a, np.int64) for a in (start, end, amount))
    keep = end > start
    if not keep.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    start, end, amount = start[keep], end[keep], amount[keep]
    ops, where = np.unique(np.concatenate((start, end)), return_inverse=True)
    delta = np.zeros(len(ops), np.int64)
    np.add.at(delta, where, np.concatenate((amount, -amount)))
    live = np.cumsum(delta)
    changes = np.concatenate(([True], live[1:] != live[:-1]))
    return ops[changes], live[changes]


def kernel_liveness(kernel: Kernel, kind: int, capacity: int) -> Liveness:
    b = kernel.buffers
    mine = b.kind == kind
    amount = b.bytes if kind == SMEM else b.cols.astype(np.int64)
    known = mine & (amount >= 0)
    ops, live = live_curve(b.start[known], b.end[known], amount[known])
    peak = int(live.max()) if len(live) else 0
    peak_at = int(ops[np.argmax(live)]) if peak > 0 else -1
    return Liveness("bytes" if kind == SMEM else "columns", ops, live, peak, peak_at, capacity, int((mine & ~known).sum()))


def live_at(kernel: Kernel, kind: int, op: int) -> np.ndarray:
    """Rows of the ``kind`` buffers live at operation ``op``."""
    b = kernel.buffers
    return np.nonzero((b.kind == kind) & (b.start <= op) & (op < b.end))[0]


@dataclass(frozen=True)
class MemLiveness(ModulePass[MemoryModule]):
    """Live SMEM bytes and TMEM columns per operation id, peaks, and an error where a peak passes
    the capacity of ``arch`` (``auto``: sm100 with TMEM, else sm90)."""

    name: ClassVar[str] = "mem-liveness"
    ir: ClassVar[str] = "mem"
    arch: str = "auto"

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {', '.join(ARCHS)}, not '{self.arch}'")

    def apply(self, ctx: Context, module: MemoryModule) -> None:
        arch = pick_arch(module, self.arch)
        cap = CAPACITY[arch]
        module.arch = arch
        module.findings = [f for f in module.findings if not f.code.startswith("capacity")]
        for k in module.kernels:
            k.liveness = {"smem": kernel_liveness(k, SMEM, cap.smem_per_block), "tmem": kernel_liveness(k, TMEM, cap.tmem_columns)}
            self._over(module, k, "smem", SMEM_GRAPH, f"{cap.smem_per_block:,} bytes an {arch} block can have")
            if (k.buffers.kind == TMEM).any():
                what = (f"{cap.tmem_columns} TMEM columns of an {arch} SM" if cap.tmem_columns else f"no TMEM: {arch} has none")
                self._over(module, k, "tmem", TMEM_GRAPH, what)

    @staticmethod
    def _over(module: MemoryModule, k: Kernel, mem: str, graph_kind: str, what: str) -> None:
        live = k.liveness[mem]
        if live.peak <= live.capacity:
            return
        kind = SMEM if mem == "smem" else TMEM
        rows = live_at(k, kind, live.peak_at)
        amount = k.buffers.bytes if kind == SMEM else k.buffers.cols
        rows = rows[np.argsort(-amount[rows], kind="stable")]
        names = ", ".join(f"{quoted(module.text(k.buffers.name[r]))} {int(amount[r]):,}" for r in rows[:6].tolist())
        more = f" and {len(rows) - 6} more" if len(rows) > 6 else ""
        g = k.graphs.get(graph_kind)
        where = (g.file, g.line, g.column) if g is not None else (-1, 0, 0)
        module.add(k, "error", f"capacity-{mem}", f"{mem.upper()} peaks at {live.peak:,} {live.unit} at operation "
                   f"{live.peak_at} ({names}{more}), over the {what}", *where)
