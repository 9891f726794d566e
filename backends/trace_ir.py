"""The trace IR as text, for ``layerc opt`` and ``--print-ir-after-all``: a header with what the
passes found, then one line per kernel in start order with its columns (type, pass, layer and
stage once the passes have set them)."""

from __future__ import annotations

import numpy as np

from layerc.passes.kernel_tables import TYPES
from layerc.passes.layer_facts import STAGES
from layerc.passes.trace_passes import TraceModule


def print_trace(module: TraceModule) -> str:
    t, k = module.trace, module.trace.kernels
    lines = [f'trace "{t.source}" format={t.format} kernels={len(k)}']
    layers, cls, roof = module.layers, module.classification, module.roofline
    if layers is not None:
        lines.append(f"  layers strategy={layers.strategy} confidence={layers.confidence:.2f} "
                     f"period={layers.period} per_pass={layers.layers_per_pass}")
    order = np.argsort(k.start, kind="stable")
    shorts = t.strings.lookup(cls.short if cls is not None else k.short)
    for i in order.tolist():
        facts = [f"k{i}", f"@{int(k.start[i])}", f"+{int(k.end[i] - k.start[i])}ns", f"dev{int(k.device[i])}",
                 f"s{int(k.stream[i])}"]
        if cls is not None:
            facts.append(TYPES[int(cls.type[i])])
        if layers is not None:
            facts.append(f"pass={int(layers.pass_of[i])} layer={int(layers.layer[i])}")
        if module.stage is not None and module.stage[i] >= 0:
            facts.append(f"stage={STAGES[int(module.stage[i])]}")
        if roof is not None and not np.isnan(roof.flops[i]):
            bound = roof.bound_ns[i] / max(int(k.end[i] - k.start[i]), 1)
            facts.append(f"flops={roof.flops[i]:.4g} bytes={roof.bytes[i]:.4g}" + ("" if np.isnan(bound) else f" roofline={bound:.0%}"))
        lines.append("  " + " ".join(facts) + f' "{shorts[i]}"')
    return "\n".join(lines) + "\n"
