"""The dynamic cross-check of an op tree: run a tiny Hugging Face model on CPU under
``torch.profiler`` (Python stacks on) and map every top-level aten op to a node of the static
tree built from the installed ``modeling_<arch>.py``.

An aten op's Python stack (the profiler's ``python_function`` parents: ``path(first line):
name`` frames and ``nn.Module: Class_N`` markers) is walked from the outside in, down the
tree: a frame whose function is the definition behind one of the current node's children
moves to that child (siblings calling the same function are taken in execution order); frames
of other code (``torch``, decorators' wrappers) are passed over. The op *agrees* when the walk
explains the whole stack: it ends in a leaf op (whose implementation may call anything), or in
the node whose own function made the aten call. An op whose stack passes through model code
the tree does not have, or ends in an unexplained call, does not agree.

The check runs both ways on modules: every module class the run called (forward hooks) must be
one the tree calls (``runtime_missing`` lists those it does not), and every module op of the
tree the run never entered is listed (``never_called``), with whether the tree marks it
conditional (a branch the configuration of the run did not take) or not (a tree error). The
model runs with its default attention implementation (SDPA on CPU), as users run it.

torch is imported only here, and only when the check runs; the model is built by the caller
(``layerc.tools.optrace.build_profiled_model``), so this pass imports nothing from ``tools``.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, cast

from layerc.ir.diagnostics import LayercError
from layerc.ir.optree import BRANCH, OpNode, OpTree, Site
from layerc.passes.base import Context, ModulePass

if TYPE_CHECKING:
    from layerc.passes.optrace_passes import OpTraceModule

_FRAME = re.compile(r"^(?P<path>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
#: the profiler's marker of a module's call: its class and a per-class counter in first-call order
_MODULE = re.compile(r"^nn\.Module: (?P<cls>\w+?)_(?P<n>\d+)$")
DYNAMIC_LAYERS = 2  #: decoder layers of the tiny model (a DeepSeek-V3 needs 2: one dense, one MoE)


@dataclass(frozen=True)
class Frame:
    """One profiler ``python_function`` parent: a function (path relative to site-packages,
    first line) or an ``nn.Module`` marker (class set)."""

    event: int  #: which profiled call (the event object's identity while the profile is read)
    path: str = ""
    line: int = 0
    func: str = ""
    module_class: str = ""
    module_attr: str = ""  #: the attribute the module is held in (``q_a_proj``; ``0`` in a ModuleList)


@dataclass
class AtenOp:
    name: str
    frames: tuple[Frame, ...]  #: outermost first


@dataclass
class Agreement:
    """What the profiled run says about the static tree."""

    arch: str
    total: int  #: top-level aten ops under the model's forward
    agreed: int
    predicted: int  #: agreed ops whose aten name a kernel call site of their node names
    by_node: dict[int, Counter[str]] = field(default_factory=dict)  #: id(node) → aten name counts
    disagreed: list[tuple[str, str]] = field(default_factory=list)  #: (aten op, where the walk stopped)
    config: dict[str, Any] = field(default_factory=dict)
    runtime_missing: list[tuple[str, str]] = field(default_factory=list)  #: (class, module name): run, not in the tree
    never_called: list[tuple[int, bool]] = field(default_factory=list)  #: (id(node), conditional): in the tree, not run

    @property
    def percent(self) -> float:
        return 100.0 * self.agreed / self.total if self.total else 0.0

    @property
    def predicted_percent(self) -> float:
        return 100.0 * self.predicted / self.agreed if self.agreed else 0.0

    def to_dict(self, tree: OpTree) -> dict[str, Any]:
        labels = {id(n): n for n, _ in tree.nodes()}
        return {
            "arch": self.arch, "config": self.config, "aten_ops": self.total, "agreed": self.agreed,
            "agreement_pct": round(self.percent, 2), "predicted_by_kernel_sites_pct": round(self.predicted_percent, 2),
            "per_op": [{"op": labels[k].label, "site": cast(Site, labels[k].site).to_dict() if labels[k].site else None,
                        "aten": dict(sorted(v.items()))} for k, v in self.by_node.items()],
            "disagreed": [{"aten": a, "where": w} for a, w in self.disagreed],
            "runtime_modules_missing_from_tree": [{"class": c, "module": m} for c, m in self.runtime_missing],
            "tree_ops_never_called": [{"op": labels[k].label, "conditional": cond,
                                       "site": cast(Site, labels[k].site).to_dict() if labels[k].site else None}
                                      for k, cond in self.never_called],
        }


@dataclass(frozen=True)
class ProfileOps(ModulePass["OpTraceModule"]):
    """Profile a tiny ``arch`` model (``layerc export-hf``'s configs) and map its aten ops to
    the op tree (the tree must be the one of the installed ``modeling_<arch>.py``)."""

    name: ClassVar[str] = "profile-ops"
    ir: ClassVar[str] = "optree"
    requires: ClassVar[tuple[str, ...]] = ("trace-ops",)
    arch: str = "llama"
    layers: int = DYNAMIC_LAYERS

    def apply(self, ctx: Context, module: OpTraceModule) -> None:
        tree = module.need_tree(self.name)
        given = ctx.inputs.get("model")  # the tool that built the model (to find its source) passes it on
        if given is None and (build := ctx.inputs.get("build_model")) is not None:
            given = build(self.arch, self.layers)  # (`layerc opt` passes a builder of tiny models)
        if given is None:
            raise LayercError(f"{self.name} needs the model it checks: (model, config) in ctx.inputs['model'] "
                              "(`layerc optrace --dynamic` builds one; so does layerc.tools.optrace.build_profiled_model)")
        model, config = given
        ops, called = profile(model)
        module.dynamic = agree(tree, ops, self.arch, config, called)


def modeling_file(model: Any) -> tuple[Path, str]:
    """The source file of a built model's class and the class name: what the static tree of a
    dynamic check is built from."""
    cls = type(model)
    return Path(cast(str, sys.modules[cls.__module__].__file__)), cls.__name__  # a model's module is a file


def profile(model: Any, batch: int = 1, seq_len: int = 8) -> tuple[list[AtenOp], dict[str, list[str]]]:
    """One forward under ``torch.profiler`` with stacks: the top-level aten ops with their
    frames, and the modules called (class name → qualified names, in first-call order)."""
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq_len), generator=gen)
    with torch.no_grad():
        with _first_calls(model) as names:  # warm-up: lazy initialisation stays out of the profile
            model(input_ids=ids)
        with torch_profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            model(input_ids=ids)
    ops = []
    for e in prof.events():
        if not e.name.startswith("aten::"):
            continue
        frames, parent, nested = [], e.cpu_parent, False
        while parent is not None:
            if parent.name.startswith("aten::"):
                nested = True
                break
            m = _MODULE.match(parent.name)
            if m:
                cls, n = m.group("cls"), int(m.group("n"))
                held = names.get(cls, [])
                attr = held[n].rsplit(".", 1)[-1] if n < len(held) else ""
                frames.append(Frame(id(parent), module_class=cls, module_attr=attr))
            else:
                f = _FRAME.match(parent.name)
                if f:
                    frames.append(Frame(id(parent), f.group("path"), int(f.group("line")), f.group("func")))
            parent = parent.cpu_parent
        if not nested:
            ops.append(AtenOp(e.name, tuple(reversed(frames))))
    return ops, names


@contextmanager
def _first_calls(model: Any) -> Iterator[dict[str, list[str]]]:
    """Class name → qualified names of its instances in the order of their first call (the
    order in which the profiler numbers ``nn.Module: Linear_N``): so a marker tells which of
    three ``Linear``s side by side ran, by the attribute it is held in."""
    names: dict[str, list[str]] = {}

    def hook(name: str) -> Callable[[Any, Any], None]:
        def record(module: Any, args: Any) -> None:
            seen = names.setdefault(type(module).__name__, [])
            if name not in seen:
                seen.append(name)
        return record

    handles = [mod.register_forward_pre_hook(hook(name)) for name, mod in model.named_modules()]
    try:
        yield names
    finally:
        for h in handles:
            h.remove()


def _attribute(label: str) -> str:
    """``self.q_a_proj()`` → ``q_a_proj``: the attribute an op's call reads its module from."""
    return label.removesuffix("()").rsplit(".", 1)[-1] if label.startswith("self.") else ""


class _Walker:
    """Maps stacks to nodes; remembers which child each profiled call went to."""

    def __init__(self, tree: OpTree):
        self.tree = tree
        self.top = tuple(p + "/" for p in {s.split(".")[0] for s in tree.scope})
        self.scope_paths = tuple(s.replace(".", "/") + "/" for s in tree.scope)
        self.chosen: dict[int, OpNode] = {}
        self.cursor: dict[tuple[int, int], int] = {}

    def in_package(self, path: str) -> bool:
        return path.startswith(self.top)

    def in_model(self, path: str) -> bool:
        return path.startswith(self.scope_paths)

    @staticmethod
    def sites(node: OpNode) -> set[tuple[str, int]]:
        return {(s.path, s.line) for s in node.callee_sites}

    def child_for(self, node: OpNode, parent_event: int, frame: Frame) -> OpNode | None:
        if frame.event in self.chosen:
            return self.chosen[frame.event]
        if frame.module_class:
            matches = [i for i, c in enumerate(node.children) if frame.module_class in c.callee_classes]
            named = [i for i in matches if _attribute(node.children[i].label) == frame.module_attr]
            matches = named or matches
        else:
            matches = [i for i, c in enumerate(node.children) if (frame.path, frame.line) in self.sites(c)]
        if not matches:
            return None
        last = self.cursor.get((id(node), parent_event), -1)
        pick = next((i for i in matches if i > last), matches[0])
        self.cursor[(id(node), parent_event)] = pick
        self.chosen[frame.event] = node.children[pick]
        return node.children[pick]

    def leaf_alternative(self, node: OpNode, frame: Frame) -> bool:
        """Whether ``frame`` enters one of an op's callee alternatives that the tree did not
        expand: the op has expanded alternatives (branches), and this is none of them."""
        if frame.module_class or (frame.path, frame.line) not in self.sites(node):
            return False
        branches = [b for b in node.children if b.kind == BRANCH]
        return bool(branches) and not any((frame.path, frame.line) in self.sites(b) for b in branches)

    def branch(self, node: OpNode, frame: Frame) -> OpNode:
        """An op whose callee has alternatives (``DeepseekV3MoE`` | ``DeepseekV3MLP``): the
        frame that enters one of them, or its module marker, picks the branch."""
        for b in node.children:
            if b.kind != BRANCH:
                continue
            if frame.module_class in b.callee_classes if frame.module_class else (frame.path, frame.line) in self.sites(b):
                return b
        return node

    def walk(self, op: AtenOp) -> tuple[OpNode | None, str]:
        """The node an aten op maps to, or None and where the walk stopped."""
        node = self.tree.root
        entered = False  # the root's own forward frame was seen
        parent_event = -1
        own = False  # the innermost model frame so far is the current node's own function
        for frame in op.frames:
            if not frame.module_class and not self.in_package(frame.path):
                continue  # torch, the standard library
            if entered and not node.children:
                return node, ""  # inside a leaf op's implementation
            if not frame.module_class and (frame.path, frame.line) in self.sites(node):
                entered, own = True, True
                parent_event = frame.event
                node = self.branch(node, frame)
                continue
            if not entered:
                continue  # wrappers above the entry's forward
            child = self.child_for(node, parent_event, frame)
            if child is None and frame.module_class:
                continue  # a module whose forward frame decides
            if child is None and own and (frame.path, frame.line) in self.sites(node):
                return node, ""  # one of the op's alternatives that is a leaf (``sdpa_attention_forward``)
            if child is None:
                if self.in_model(frame.path):
                    return None, f"{frame.path}:{frame.line} {frame.func} (not a child of {node.label})"
                own = False  # a wrapper or helper outside the model code
                continue
            node, parent_event, own = self.branch(child, frame), frame.event, bool(not frame.module_class)
            if frame.module_class and not node.callee_sites:
                return node, ""  # an outside module (nn.Linear): a leaf
            if node is child and self.leaf_alternative(node, frame):
                return node, ""  # the op runs an alternative the tree keeps as a leaf (``sdpa_attention_forward``)
        if node is self.tree.root and not entered:
            return None, "outside the entry's forward"
        if not node.children or own:
            return node, ""
        return None, f"an unexplained call below {node.label}"


def agree(tree: OpTree, ops: list[AtenOp], arch: str, config: dict[str, Any] | None = None,
          called: dict[str, list[str]] | None = None) -> Agreement:
    walker = _Walker(tree)
    result = Agreement(arch, 0, 0, 0, config=dict(config or {}))
    if called is not None:
        result.runtime_missing, result.never_called = compare_modules(tree, called)
    model_ops = [op for op in ops if any(walker.in_package(f.path) for f in op.frames if not f.module_class)]
    result.total = len(model_ops)
    expected = {id(n): _expected_aten(n) for n, _ in tree.nodes()}
    for op in model_ops:
        node, where = walker.walk(op)
        if node is None:
            result.disagreed.append((op.name, where))
            continue
        result.agreed += 1
        result.by_node.setdefault(id(node), Counter())[op.name] += 1
        if op.name in expected[id(node)]:
            result.predicted += 1
    return result


def compare_modules(tree: OpTree, called: dict[str, list[str]]) -> tuple[list[tuple[str, str]], list[tuple[int, bool]]]:
    """Both ways: module classes the run called that no op of the tree calls (with the first
    module name of each), and the tree's module ops whose classes never ran (with whether the
    tree marks them conditional)."""
    entry = tree.entry.rsplit(".", 1)[-1]
    in_tree = {entry} | {c for n, _ in tree.nodes() for c in n.callee_classes}
    missing = [(cls, names[0] if names else "") for cls, names in called.items() if cls not in in_tree]
    never: list[tuple[int, bool]] = []

    def visit(node: OpNode, conditional: bool) -> None:
        conditional = conditional or bool(node.annotation)
        if node.callee_classes and not any(c in called for c in node.callee_classes):
            never.append((id(node), conditional))
            return  # what it calls did not run either
        for c in node.children:
            visit(c, conditional)

    visit(tree.root, False)
    return missing, never


def _expected_aten(node: OpNode) -> set[str]:
    return {a for k in node.kernels for a in k.aten}
