"""Pass pipelines: parse ``a,b{k=v}``, build the passes, run them with verification,
IR printing and timing between passes (MLIR's instrumentation, xDSL's pipeline callback).

Every pass name and option is checked before the first pass runs.
"""

from __future__ import annotations

import dataclasses
import time
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, TextIO

from layerc.ir.diagnostics import LayercError, Location, ParseError, clip
from layerc.passes.base import Context, ModulePass
from layerc.passes.registry import BUILTIN_PASSES, IRS, get_all_passes, get_pass_class, other_ir, with_discovered

def build_pipeline(text: str, registry: dict[str, Callable[[], type[ModulePass[Any]]]] | None = None) -> list[ModulePass[Any]]:
    """Parse ``text`` and instantiate its passes (from ``registry``, default the graph passes);
    unknown names and bad options fail here."""
    from layerc.passes.pipeline_text import SOURCE, parse_pipeline_text

    specs = parse_pipeline_text(text)
    known = get_all_passes("graph") if registry is None else registry
    unknown = [s for s in specs if s.name not in known]
    if unknown:  # a pass the list does not name may be a new module of the package, of this IR
        ir = _ir_of(known)
        known = {**known, **{n: f for n, f in with_discovered(ir).items() if n not in known}}
        unknown = [s for s in specs if s.name not in known]
    if unknown:
        s = unknown[0]
        names = ", ".join(sorted(known))
        other = other_ir(s.name)
        message = (f"pass '{s.name}' runs on the {other} IR (layerc {IRS.get(other, 'opt')}), not here (passes here: {names})"
                   if other is not None else f"unknown pass '{clip(s.name)}' (known passes: {names})")
        raise ParseError(message, SOURCE, Location(s.line, s.column)).with_source(SOURCE, text)
    passes: list[ModulePass[Any]] = []
    for s in specs:
        try:
            cls = get_pass_class(s.name) if registry is None else known[s.name]()
            passes.append(make_pass(cls, s.options))
        except LayercError as e:
            raise ParseError(f"{s.name}: {e.message}", SOURCE, Location(s.line, s.column)).with_source(SOURCE, text) from None
    return passes


def _ir_of(known: dict[str, Callable[[], type[ModulePass[Any]]]]) -> str | None:
    """The IR of a registry view (None: passes of several IRs)."""
    irs = {BUILTIN_PASSES[n][0] for n in known if n in BUILTIN_PASSES}
    return irs.pop() if len(irs) == 1 else None


def make_pass(cls: type[ModulePass[Any]], options: dict[str, tuple[str, ...]]) -> ModulePass[Any]:
    """Convert raw option strings to the types of the pass's fields."""
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, object] = {}
    for key, raw in options.items():
        if key not in by_name:
            allowed = ", ".join(k.replace("_", "-") for k in by_name) or "none"
            raise LayercError(f"unknown option '{clip(key.replace('_', '-'))}' (options: {allowed})")
        kwargs[key] = _convert(key, raw, hints[key])
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise LayercError(str(e)) from None


def _convert(key: str, raw: tuple[str, ...], hint: Any) -> object:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(raw) == 1 and raw[0].lower() == "none":
            return None
        return _convert(key, raw, inner[0])
    if origin is tuple:
        item = args[0] if args else str
        return tuple(_scalar(key, r, item) for r in raw)
    if len(raw) != 1:
        raise LayercError(f"option '{key}' takes one value, not a list")
    return _scalar(key, raw[0], hint)


def _scalar(key: str, text: str, hint: Any) -> object:
    try:
        if hint is bool:
            low = text.lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if hint in (int, float, str):
            return hint(text)
    except ValueError:
        raise LayercError(f"option '{key}' expects {hint.__name__}, got '{clip(text)}'") from None
    raise LayercError(f"option '{key}' has a type layerc cannot parse: {hint}")


@dataclass
class PassTiming:
    """One step's wall time (``--timing``)."""

    name: str
    seconds: float


@dataclass
class PassManager:
    """Runs passes in order, each after the passes it requires that the module lacks (run with
    their default options). After each step: verify (unless disabled), drop the analyses the
    step does not preserve, print the IR if asked, time it. ``ran`` lists every step that ran."""

    passes: list[ModulePass[Any]]
    verify_each: bool = True
    print_ir_after_all: bool = False
    print_ir: Callable[[Any], str] | None = None  #: the printer of the module's IR
    ir_stream: TextIO | None = None
    timings: list[PassTiming] = field(default_factory=list)
    ran: list[ModulePass[Any]] = field(default_factory=list)

    def run(self, ctx: Context, module: Any) -> None:
        """Run every pass; an error that names no file is about the module's input, and says so."""
        try:
            for p in self.passes:
                self._step(p, ctx, module, ())
        except LayercError as e:
            if e.path is None and getattr(module, "source", None) is not None:
                e.path = module.source
            raise

    def _step(self, p: ModulePass[Any], ctx: Context, module: Any, needed_by: tuple[str, ...]) -> None:
        for name in type(p).requires:
            if name in needed_by:
                raise LayercError(f"pass '{p.name}' requires '{name}', which requires it: "
                                  f"{' -> '.join((*needed_by, p.name, name))}")
            required = get_pass_class(name)
            if not required.satisfied(module):
                self._step(required(), ctx, module, (*needed_by, p.name))
        start = time.perf_counter()
        p.apply(ctx, module)
        self.timings.append(PassTiming(p.name, time.perf_counter() - start))
        self.ran.append(p)
        ctx.analyses.invalidate(type(p).preserves)
        if self.verify_each:
            start = time.perf_counter()
            try:
                module.verify()
            except LayercError as e:
                e.message = f"IR is invalid after pass '{p.name}': {e.message}"
                raise
            self.timings.append(PassTiming("(verify)", time.perf_counter() - start))
        if self.print_ir_after_all and self.print_ir is not None and self.ir_stream is not None:
            self.ir_stream.write(f"// -----// IR Dump After {p.pipeline_text()} //----- //\n")
            self.ir_stream.write(self.print_ir(module))

    @property
    def pipeline_text(self) -> str:
        return ",".join(p.pipeline_text() for p in self.passes)


def run_passes(passes: list[ModulePass[Any]], module: Any, ctx: Context | None = None) -> Context:
    """Run ``passes`` (and what they require) on ``module`` with verification; the context
    holds the results and warnings."""
    ctx = ctx if ctx is not None else Context()
    PassManager(passes).run(ctx, module)
    return ctx


def timing_report(phases: list[PassTiming]) -> str:
    """An MLIR-style ``-mlir-timing`` list report."""
    total = sum(t.seconds for t in phases) or 1e-12
    lines = [
        "===" + "-" * 73 + "===",
        "... Execution time report ...".center(79),
        "===" + "-" * 73 + "===",
        f"  Total Execution Time: {total:.4f} seconds",
        "",
        "  ----Wall Time----  ----Name----",
    ]
    for t in phases:
        lines.append(f"  {t.seconds:8.4f} ({100 * t.seconds / total:5.1f}%)  {t.name}")
    lines.append(f"  {total:8.4f} (100.0%)  Total")
    return "\n".join(lines) + "\n"
