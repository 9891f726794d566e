"""Property-based testing with layerc's own generators: hypothesis strategies for graphs (IR
modules that print and parse back), dumps, traces and memory plans with their ground truth, and
the invariants every layer slicing must keep. Another project's regression suite can draw from
them as ours does::

    from hypothesis import given
    from layerc.testing import dumps, slicing_violations

    @given(dumps())
    def test_my_pass_keeps_layers(module):
        ...

Needs hypothesis (the ``dev`` extra).
"""

from layerc.testing.graphs import ad_modules, fx_modules, unused_weights
from layerc.testing.inputs import DumpSpec, MemoryPlanSpec, TraceSpec, dump_specs, dumps, memory_plan_specs, trace_specs
from layerc.testing.invariants import sliced_dump, slicing_violations

__all__ = ["DumpSpec", "MemoryPlanSpec", "TraceSpec", "ad_modules", "dump_specs", "dumps", "fx_modules", "memory_plan_specs",
           "sliced_dump", "slicing_violations", "trace_specs", "unused_weights"]
