"""``tag-weights``: the decoder layer of every weight whose name says it.

Weight names are sanitized module paths (``model.layers.5.mlp.gate.weight`` →
``model_layers_5_mlp_gate_weight``). By default the decoder layers are the numbered module list
that repeats a block of weights (:mod:`layerc.passes.layer_list`), however the model spells it;
in a graph with no such list (one layer), ``layers_N_``, ``h_N_`` or ``blocks_N_`` names the
layer, also in dotted ``get_attr`` targets. Fused weights (``fused_moe_w3_w1_stacked_2``,
``fused_weight_7``) carry a global counter, not a layer: they get their layer from dataflow
(``slice-layers``). ``graph.meta['layer_list']`` says which list was taken.

The ``pattern`` option is user input like any other: it is compiled when the pass is made, so a
pattern that does not compile (a regex error, groups nested too deep for the compiler, a
repetition count past its limit, more than :data:`MAX_PATTERN` characters) is an error that
names the option, located in the pipeline text; a group 1 that captures something other than a
layer number is an error at the weight; and the search over the weight names stops after
:data:`MATCH_SECONDS` (a pattern that backtracks exponentially, ``(\\w*)*X``) with an error,
rather than run for ever.
"""

from __future__ import annotations

import re
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import ClassVar, Iterator

from layerc.ir.diagnostics import LayercError
from layerc.ir.graph import Graph, Module, Weight
from layerc.passes.base import Context, ModulePass
from layerc.passes.layer_list import find_layer_list, first_numbered
from layerc.passes.user_regex import compile_user_regex

DEFAULT_PATTERN = r"(?:^|_)(?:layers|h|blocks)_(\d+)(?:_|$)"
DOTTED_PATTERN = r"(?:^|\.)(?:layers|h|blocks)\.(\d+)(?:\.|$)"
#: The longest pattern accepted (real ones are under 100 characters).
MAX_PATTERN = 1000
#: Digits a layer number may have (a real one has at most 4; int() refuses past 4300).
MAX_LAYER_DIGITS = 18
#: Seconds the searches of one run may take in all, where a timer can stop them (the main thread).
MATCH_SECONDS = 5.0


def compile_pattern(text: str) -> re.Pattern[str]:
    """The pattern as a compiled regex with at least one group; a LayercError ``pattern: ...``
    (the pipeline adds the pass's name and the place) when it is none."""
    try:
        pattern = compile_user_regex(text, MAX_PATTERN)
    except LayercError as e:
        raise LayercError(f"pattern: {e.message}") from None
    if pattern.groups < 1:
        raise LayercError("pattern: needs a group that captures the layer number")
    return pattern


def weight_layer(weight: Weight, pattern: re.Pattern[str], dotted: re.Pattern[str] | None) -> int | None:
    m = pattern.search(weight.name)
    if m is None and dotted is not None and weight.target:
        m = dotted.search(weight.target)
    if m is None:
        return None
    text = m.group(1)
    if text is None:  # an optional group 1 that took no part in the match
        return None
    text = text.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_LAYER_DIGITS):
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise LayercError(f"tag-weights: pattern: group 1 matched '{shown}' in weight '{_clip(weight.name)}', "
                          f"which is not a layer number (1 to {MAX_LAYER_DIGITS} digits)", loc=weight.loc)
    return int(text)


def _clip(name: str, limit: int = 80) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


def _structural_name(weight: Weight) -> str:
    """The name whose numbered parts are the module path: the weight's own, else its target's."""
    if weight.target and first_numbered(weight.name) is None:
        return weight.target
    return weight.name


def _tag(weight: Weight, layer: int | None) -> None:
    weight.meta["layer"] = layer
    weight.meta["layer_source"] = "name" if layer is not None else None


def _tag_by_structure(graph: Graph, ctx: Context) -> bool:
    """Tag ``graph``'s weights by the repeated module list; False where it has none."""
    names = {w: _structural_name(w) for w in graph.weights.values()}
    found = find_layer_list(names.values())
    if found is None:
        return False
    for w, name in names.items():
        _tag(w, found.layer_of.get(name))
    graph.meta["layer_list"] = found.path
    if found.others:
        ctx.warn(f"tag-weights: graph '{graph.name}': decoder layers taken from '{found.path}' "
                 f"({len(set(found.layer_of.values()))} entries); other repeated module lists are model-level: "
                 + ", ".join(f"'{p}'" for p in found.others[:4]) + (" ..." if len(found.others) > 4 else ""))
    return True


class _Overtime(Exception):
    """The searches' time is up (raised by the timer's signal handler, inside ``re``)."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise ``_Overtime`` in the block after ``seconds`` — ``re`` checks for signals while it
    backtracks. Only the main thread receives signals, and only a timer nobody else set may be
    borrowed: elsewhere the block runs unbounded."""
    if (threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer")
            or signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0)):
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise _Overtime()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class TagWeights(ModulePass[Module]):
    """Tag each weight with the decoder layer its name gives (meta 'layer'; None when none)."""

    name: ClassVar[str] = "tag-weights"
    #: A regex whose first group is the layer number (default: the repeated module list).
    pattern: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str):
            raise LayercError(f"pattern: a regular expression (text), not {type(self.pattern).__name__}")
        compile_pattern(self.pattern or DEFAULT_PATTERN)

    @classmethod
    def satisfied(cls, module: Module) -> bool:
        return all("layer" in w.meta for g in module.graphs for w in g.weights.values())

    def apply(self, ctx: Context, module: Module) -> None:
        pattern = compile_pattern(self.pattern or DEFAULT_PATTERN)
        dotted = None if self.pattern else re.compile(DOTTED_PATTERN)
        weight = None
        try:
            with _deadline(MATCH_SECONDS):
                for graph in module.graphs:
                    if not self.pattern and _tag_by_structure(graph, ctx):
                        continue
                    for weight in graph.weights.values():
                        _tag(weight, weight_layer(weight, pattern, dotted))
        except _Overtime:
            where = f" (at weight '{_clip(weight.name)}')" if weight is not None else ""
            raise LayercError(f"tag-weights: pattern: matching the weight names took more than {MATCH_SECONDS:g} s"
                              f"{where}; the pattern backtracks too much (nested repeats such as (\\w*)*)",
                              loc=weight.loc if weight is not None else None) from None
        except RecursionError:
            raise LayercError("tag-weights: pattern: too complex to match") from None
