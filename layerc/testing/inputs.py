"""Strategies for realistic inputs with their truth, drawn as specs (what to generate) that write
themselves: a spec is small to shrink, and the file it writes is what layerc reads in the field."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from layerc.ir.graph import Module

#: (architecture, fewest layers, most layers) the dump generator builds
_DUMP_ARCHES = (("deepseek_v3", 2, 7), ("llama", 2, 7), ("qwen3_moe", 2, 7), ("qwen3_next", 2, 7), ("nemotron_h", 2, 8))


@dataclass(frozen=True)
class DumpSpec:
    """An AutoDeploy dump of ``arch`` (every op node carries ``meta['true_layer']``)."""

    arch: str
    layers: int
    seed: int | None = None
    shuffle: bool = False
    symbolic: bool = False
    pattern: str | None = None  #: nemotron_h's block pattern (M: Mamba, E: MoE, *: attention)

    def build(self) -> Module:
        from layerc.backends.synth.dump import generate

        return generate(self.arch, self.layers, seed=self.seed, shuffle=self.shuffle, symbolic=self.symbolic,
                        pattern=self.pattern)


@st.composite
def dump_specs(draw: st.DrawFn) -> DumpSpec:
    arch, low, high = draw(st.sampled_from(_DUMP_ARCHES))
    pattern = draw(st.text("ME*", min_size=1, max_size=6)) if arch == "nemotron_h" else None
    return DumpSpec(arch, draw(st.integers(low, high)), draw(st.none() | st.integers(0, 1000)), draw(st.booleans()),
                    draw(st.booleans()), pattern)


def dumps() -> st.SearchStrategy[Module]:
    """Parsed dumps, built in memory (``DumpSpec.build``)."""
    return dump_specs().map(lambda spec: spec.build())


@dataclass(frozen=True)
class TraceSpec:
    """A Kineto trace of LLM serving; ``write`` returns its truth (layers per pass, kernels...)."""

    model: str
    vendor: str
    tp: int
    prefill: int
    decode: int
    layers: int
    seed: int
    modules: str
    graphs: str

    def write(self, path: str | Path) -> dict:
        from layerc.backends.synth.kineto import generate

        return generate(path, model=self.model, vendor=self.vendor, tp=self.tp, prefill=self.prefill, decode=self.decode,
                        layers=self.layers, seed=self.seed, modules=self.modules, graphs=self.graphs)


@st.composite
def trace_specs(draw: st.DrawFn) -> TraceSpec:
    from layerc.backends.synth.kineto import GRAPHS, MODELS, MODULES, VENDORS

    return TraceSpec(draw(st.sampled_from(sorted(MODELS))), draw(st.sampled_from(VENDORS)), draw(st.sampled_from((1, 2, 4, 8))),
                     draw(st.integers(0, 2)), draw(st.integers(1, 3)), draw(st.integers(2, 6)), draw(st.integers(0, 2**16)),
                     draw(st.sampled_from(MODULES)), draw(st.sampled_from(GRAPHS)))


@dataclass(frozen=True)
class MemoryPlanSpec:
    """Triton warp-specialization memory-planner dumps of ``kernels`` random kernels."""

    kernels: int
    seed: int
    algo: int

    def write(self, directory: str | Path) -> list[Path]:
        from layerc.backends.synth.ws_mem import random_kernel, write_dump_dir

        rng = random.Random(self.seed)
        specs = [random_kernel(rng, f"kernel_{i}", algo=self.algo, debug=True) for i in range(self.kernels)]
        return write_dump_dir(specs, directory)


@st.composite
def memory_plan_specs(draw: st.DrawFn) -> MemoryPlanSpec:
    return MemoryPlanSpec(draw(st.integers(1, 3)), draw(st.integers(0, 2**16)), draw(st.sampled_from((0, 1))))
