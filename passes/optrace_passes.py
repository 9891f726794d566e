"""Passes over model source: ``trace-ops`` builds the op tree, ``cross-validate-kernels``
checks it against a bottom-up scan of the model's kernel calls (seed 003, step 5), and
``profile-ops`` (``passes.optrace_dynamic``) checks it against a profiled CPU run. They keep the
pass contract (frozen dataclass, ``name``, ``apply(ctx, module)``) on an ``OpTraceModule``::

    module = OpTraceModule(SourceSet("modeling_llama.py"), "LlamaForCausalLM")
    run_passes(build_pipeline("cross-validate-kernels", OPTRACE_PASSES), module)  # runs trace-ops first
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from layerc.grammar.pysource import SourceModule, SourceSet
from layerc.ir.diagnostics import Diagnostic, LayercError, Location, VerifyError, source_line_at
from layerc.ir.optree import OpNode, OpTree, Site
from layerc.passes.base import Context, ModulePass
from layerc.passes.registry import get_all_passes
from layerc.passes.kernel_calls import KernelKind, kernel_calls
from layerc.passes.optrace import OpTracer, model_kernel_sites
from layerc.passes.optrace_layers import check_layers
from layerc.passes.pyconst import Knowns
from layerc.passes.pyresolve import ClassInfo, Resolver, check_module_size

if TYPE_CHECKING:
    from layerc.passes.optrace_dynamic import Agreement  # imported at run time by --dynamic alone


@dataclass
class Unmapped:
    """A kernel call in model code that no op of the tree reaches."""

    kernel: KernelKind
    site: Site
    function: str


@dataclass
class CrossValidation:
    """Seed 003 step 5: every kernel maps to an op, every leaf op has kernels, chains end at ops."""

    kernels: dict[str, list[str]]  #: kernel name → labels of the ops it maps to
    categories: dict[str, list[str]]  #: category → kernel names
    chains: int  #: kernel chains checked to end at their op's call site
    scanned: int  #: custom-kernel calls found bottom-up in the model modules
    unmapped: list[Unmapped] = field(default_factory=list)
    ops_without_kernels: list[OpNode] = field(default_factory=list)

    @property
    def issues(self) -> int:
        return len(self.unmapped) + len(self.ops_without_kernels)


@dataclass
class OpTraceModule:
    """Model source, the entry class, and what the passes found."""

    sources: SourceSet
    entry: str  #: ``Class`` or ``package.module:Class``
    scope: tuple[str, ...] = ()  #: model-code module prefixes (default: the entry's package)
    knowns: Knowns = field(default_factory=Knowns)  #: the configuration branches are decided by
    tree: OpTree | None = None
    tracer: OpTracer | None = None
    validation: CrossValidation | None = None
    dynamic: Agreement | None = None  #: after ``profile-ops``
    unresolved: list[str] = field(default_factory=list)  #: located warnings: calls the tree could not follow
    pruned: int = 0  #: branches the configuration decided against

    @property
    def source(self) -> str:
        """What was read: an error that names no file is about it."""
        return self.sources.label

    def verify(self) -> None:
        if self.tree is not None:
            self.tree.verify()
        if self.validation is not None and self.tree is None:
            raise VerifyError("a cross-validation without an op tree")

    def need_tree(self, pass_name: str) -> OpTree:
        if self.tree is None:
            raise LayercError(f"{pass_name} needs the op tree: run trace-ops before it")
        return self.tree


@dataclass(frozen=True)
class TraceOps(ModulePass["OpTraceModule"]):
    """Build the op tree from the entry class's ``forward`` (see ``passes.optrace``)."""

    name: ClassVar[str] = "trace-ops"
    ir: ClassVar[str] = "optree"

    @classmethod
    def satisfied(cls, module: OpTraceModule) -> bool:
        return module.tree is not None

    def apply(self, ctx: Context, module: OpTraceModule) -> None:
        table = kernel_calls()
        resolver = Resolver(module.sources, knowns=module.knowns, jit_loaders=table.jit_loaders, compilers=table.compilers)
        entry = find_entry(resolver, module.entry)
        scope = module.scope or (entry.module.name.rpartition(".")[0] or entry.module.name,)
        module.scope = scope
        tracer = OpTracer(resolver, table, scope)
        tree = tracer.build(entry)
        check_layers(resolver, entry, tree)
        module.unresolved = unresolved_calls(tree)
        module.pruned = tree.pruned = len(resolver.pruned)
        tree.configuration = module.knowns.describe()
        tree.warnings += resolver.warnings
        for w in resolver.warnings:
            ctx.warn(w)
        for path, line, col, label in unresolved_sites(tree):
            ctx.warn(f"cannot resolve {label}", path, Location(line, col))
        module.tree, module.tracer = tree, tracer


@dataclass(frozen=True)
class CrossValidateKernels(ModulePass["OpTraceModule"]):
    """Map kernels to ops and report what does not fit (seed 003 step 5)."""

    name: ClassVar[str] = "cross-validate-kernels"
    ir: ClassVar[str] = "optree"
    requires: ClassVar[tuple[str, ...]] = ("trace-ops",)

    def apply(self, ctx: Context, module: OpTraceModule) -> None:
        tree = module.need_tree(self.name)
        module.validation = cross_validate(tree, module.tracer)


def unresolved_sites(tree: OpTree) -> list[tuple[str, int, int, str]]:
    """(path, line, column, call) once per call site the tree could not follow."""
    out: dict[tuple[str, int, int], tuple[str, int, int, str]] = {}
    for node, _ in tree.root.walk():
        if node.unresolved and node.site is not None:
            s = node.site
            out.setdefault((s.path, s.line, s.col), (s.path, s.line, s.col, node.label.removesuffix("()")))
    return list(out.values())


def unresolved_calls(tree: OpTree) -> list[str]:
    """``file:line:col: warning: cannot resolve X``, once per call site the tree could not follow."""
    return [Diagnostic("warning", f"cannot resolve {label}", path, Location(line, col)).format()
            for path, line, col, label in unresolved_sites(tree)]



def find_entry(resolver: Resolver, entry: str) -> ClassInfo:
    """The entry class: ``Class`` (in the file given, else searched in the package) or
    ``package.module:Class``; a miss is an error at the best place to look."""
    sources = resolver.sources
    module_name, _, cls_name = entry.rpartition(":")
    if not module_name and "." in entry and sources.entry_module is None:
        module_name, _, cls_name = entry.rpartition(".")
    if module_name:
        candidates = [module_name]
        if resolver.module(module_name) is None:
            raise LayercError(f"no module {module_name!r} in {sources.label}", sources.label)
    elif sources.entry_module:
        candidates = [sources.entry_module]
    else:
        candidates = sources.find_classes(cls_name, list(resolver.packages))
        if not candidates:
            raise LayercError(f"no class {cls_name!r} in {sources.label} (packages {', '.join(resolver.packages)})",
                              sources.label)
    found = []
    for name in candidates:
        mod = resolver.module(name)
        if mod is None:
            continue
        check_module_size(mod)
        mod.tree  # a syntax error in the entry module (or one too large to parse) is the user's error: raise it
        ci = resolver.find_class(name, cls_name)
        if ci is not None:
            found.append(ci)
    if len(found) > 1:  # the same class name in several modules: which one is the user's to say
        listed = "; ".join(f"{c.module.name}:{c.name} ({c.site.path}:{c.site.line})" for c in found)
        raise LayercError(f"--entry {entry!r} is ambiguous: {len(found)} classes of that name ({listed}); "
                          f"name one as module:Class", sources.label)
    if found:
        return found[0]
    mod = resolver.module(candidates[0])
    classes = {c.name: c for c in _module_classes(resolver, mod)} if mod is not None else {}
    close = difflib.get_close_matches(cls_name, list(classes), n=1)
    path = mod.real_path or mod.path if mod is not None else sources.label
    if close:
        assert mod is not None  # the classes are its own
        c = classes[close[0]].node
        loc = Location(c.lineno, c.col_offset + 7)
        raise LayercError(f"no class {cls_name!r} in {mod.name}; did you mean {close[0]!r}?", path, loc,
                          source_line_at(mod.text, c.lineno))
    known = ", ".join(sorted(classes)[:8]) or "none"
    raise LayercError(f"no class {cls_name!r} in {candidates[0]} (classes: {known})", path, Location(1, 1),
                      source_line_at(mod.text, 1) if mod is not None else None)


def _module_classes(resolver: Resolver, mod: SourceModule) -> list[ClassInfo]:
    import ast

    tree = resolver.tree(mod)
    return [resolver.class_info(s, mod) for s in (tree.body if tree is not None else []) if isinstance(s, ast.ClassDef)]


def cross_validate(tree: OpTree, tracer: OpTracer | None) -> CrossValidation:
    kernels: dict[str, list[str]] = {}
    categories: dict[str, list[str]] = {}
    listed: set[tuple[str, str, str]] = set()  # pairs already listed: a set, not a scan of each list (quadratic)
    reached: set[Site] = set()
    chains = 0
    without: list[OpNode] = []
    for node, _ in tree.nodes():
        for k in node.kernels:
            if ("op", k.name, node.label) not in listed:
                listed.add(("op", k.name, node.label))
                kernels.setdefault(k.name, []).append(node.label)
            if ("category", k.category, k.name) not in listed:
                listed.add(("category", k.category, k.name))
                categories.setdefault(k.category, []).append(k.name)
            reached.update(step.site for step in k.chain)
            chains += 1
        if node.is_leaf_op and not node.kernels:
            without.append(node)
    unmapped, scanned = [], 0
    if tracer is not None:
        seen: set[Site] = set()
        for kind, site, function in model_kernel_sites(tracer):
            if site in seen:
                continue
            seen.add(site)
            scanned += 1
            if site not in reached:
                unmapped.append(Unmapped(kind, site, function))
    return CrossValidation(kernels, categories, chains, scanned, unmapped, without)


def __getattr__(name: str) -> object:
    """``OPTRACE_PASSES``: the one registry's op-tree view, made on first use (a plugin's
    entry points load importlib.metadata, which the command's own pipeline never needs)."""
    if name == "OPTRACE_PASSES":
        return get_all_passes("optree")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
