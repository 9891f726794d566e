"""The op tree of a model from its source: seed 003's op tracing and kernel tracing, automated.

From the entry class's ``forward``, every call is resolved (``passes.pyresolve``): calls of
module instances (``self.mlp(...)``, ``layer(...)``), of methods (``self.forward_prepare(...)``)
and of package functions (``apply_rotary_pos_emb(...)``) that reach kernels become ops, in
execution order (innermost call first in one expression). An op is expanded into sub-ops when
its callee is model code (``scope``: the entry's package by default) or hands work back to
modules the model built (``LayerCommunicator.prepare_attn`` calling the layer's
``input_layernorm``); otherwise it is a leaf op, and its kernels are found by following every
call below it (the kernel-trace side) until calls the kernel table names. A call under
``if x == Enum.MHA`` is annotated ``MHA path``; a module attribute assigned differently under
different conditions (``DeepseekV2MoE`` vs ``DeepseekV2MLP``) becomes one branch per class.

The tree is bounded whatever the source: containers nest ``MAX_EXPAND_DEPTH`` deep, the kernel
search follows calls ``MAX_KERNEL_DEPTH`` deep, and the work is counted where it multiplies:
the whole tree examines at most ``MAX_TREE_CALLS`` call sites and callee alternatives (a call
graph whose functions share callees has exponentially many paths), lists at most
``MAX_TREE_KERNELS`` kernel call steps (call sites × alternatives × the kernels each reaches),
and the kernel search merges at most ``MAX_KERNEL_SEARCH`` call chains; the resolver below it
counts its own work (``pyresolve.MAX_CONTEXT_WORK``). Each bound that cuts says so once, as a
warning at the place it cut.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from typing import Iterator, cast

from layerc.grammar.pysource import SourceModule
from layerc.ir.optree import BRANCH, OP, ROOT, ChainStep, KernelSite, OpNode, OpTree, Site
from layerc.passes.kernel_calls import KernelCalls, KernelKind
from layerc.passes.pyregistry import torch_op_impls
from layerc.passes.pyresolve import (JIT_PREFIX, ClassInfo, Ext, ExtObj, Fn, Frame, FuncInfo, Obj, Resolver, Seq, Tests, Thunks,
                                     Unknown, Value, _bind_exprs, cond_text, is_cute_jit, is_index, is_triton_jit, source_text)

MAX_EXPAND_DEPTH = 24  #: nested containers
MAX_TOUCH_DEPTH = 3  #: calls followed to see whether library code calls the model's modules
#: Calls followed down from an op to the kernels it reaches (sglang's deepest chain: 15).
MAX_KERNEL_DEPTH = 32
#: Call sites the tree examines in all, and the callee alternatives of each: the tree of a call
#: graph with shared callees grows as the number of paths through it (exponential in its depth);
#: sglang's DeepSeek examines 2,700.
MAX_TREE_CALLS = 20_000
#: Kernel call steps the tree lists in all (each kernel an op can launch, weighted by the length
#: of its call chain): a call site with many alternatives that each reach many kernels multiplies
#: them. sglang's DeepSeek lists 90,000.
MAX_TREE_KERNELS = 300_000
#: Call chains the kernel search merges in all (a function's kernels are the union of its
#: callees'): sglang's DeepSeek merges 43,000.
MAX_KERNEL_SEARCH = 1_000_000
#: Conditions longer than this are shown as written, not read as enum dispatches.
MAX_ENUM_TEST = 400
_ENUM_TEST = re.compile(r"^[\w.\[\]()]+\s*(?:==|is)\s*(?:[\w]+\.)+([A-Z][A-Z0-9_]*)$")
# one way only to split the members (commas between them): no backtracking over the splits
_ENUM_MEMBER = r"(?:\w+\.)+[A-Z][A-Z0-9_]*"
_ENUM_IN = re.compile(rf"^[\w.\[\]()]+\s+in\s+[(\[{{]\s*({_ENUM_MEMBER}(?:\s*,\s*{_ENUM_MEMBER})*)\s*,?\s*[)\]}}]$")


def annotation(cond: str, limit: int = 60) -> str:
    """How a branch condition is shown: ``MHA path`` for an enum dispatch, else ``if cond``."""
    if not cond:
        return ""
    m = _ENUM_TEST.match(cond) if len(cond) <= MAX_ENUM_TEST else None
    if m:
        return f"{m.group(1)} path"
    m = _ENUM_IN.match(cond) if len(cond) <= MAX_ENUM_TEST else None
    if m:
        return " / ".join(x.strip().split(".")[-1] for x in m.group(1).split(",") if x.strip()) + " path"
    text = cond if len(cond) <= limit else cond[: limit - 1] + "…"
    return f"if {text}"


def call_label(call: ast.Call, limit: int = 70) -> str:
    func = call.func.value if isinstance(call.func, ast.Subscript) and not is_index(call.func) else call.func
    text = source_text(func)  # cached per node: a call is labelled at every place the tree reaches it
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{text}()"


@dataclass(frozen=True)
class CallSite:
    """A call in a function body: the innermost condition it runs under (``cond``), and every
    enclosing ``if`` test with whether the call sits in its ``else`` (for type narrowing)."""

    call: ast.Call
    cond: str
    tests: Tests = ()


def calls_in_order(body: list[ast.stmt]) -> list[CallSite]:
    """Every call a function body makes, in execution order (arguments before the call, so the
    innermost call of an expression first), with the ``if`` tests it runs under. Nested function
    bodies and lambdas are left out: they run when called, not here."""
    out: list[CallSite] = []

    def expr(e: ast.AST, cond: str, tests: Tests) -> None:
        if isinstance(e, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        if isinstance(e, ast.IfExp):
            expr(e.test, cond, tests)
            expr(e.body, cond_text(e.test), tests + ((e.test, False),))
            expr(e.orelse, cond_text(e.test, negate=True), tests + ((e.test, True),))
            return
        for child in ast.iter_child_nodes(e):
            expr(child, cond, tests)
        if isinstance(e, ast.Call):
            out.append(CallSite(e, cond, tests))

    def block(stmts: list[ast.stmt], cond: str, tests: Tests) -> None:
        for s in stmts:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(s, ast.If):
                expr(s.test, cond, tests)
                block(s.body, cond_text(s.test), tests + ((s.test, False),))
                block(s.orelse, cond_text(s.test, negate=True), tests + ((s.test, True),))
                if s.body and isinstance(s.body[-1], ast.Return) and not s.orelse:
                    # what follows an ``if`` that returns runs only when its test is false (an
                    # ``if`` that raises guards against an error: what follows is the normal path)
                    cond, tests = cond_text(s.test, negate=True), tests + ((s.test, True),)
            elif isinstance(s, (ast.For, ast.AsyncFor)):
                expr(s.iter, cond, tests)
                block(s.body, cond, tests)
                block(s.orelse, cond, tests)
            elif isinstance(s, ast.While):
                expr(s.test, cond, tests)
                block(s.body, cond, tests)
                block(s.orelse, cond, tests)
            elif isinstance(s, (ast.With, ast.AsyncWith)):
                for item in s.items:
                    expr(item.context_expr, cond, tests)
                block(s.body, cond, tests)
            elif isinstance(s, (ast.Try, ast.TryStar)):
                block(s.body, cond, tests)
                for h in s.handlers:
                    block(h.body, cond, tests)
                block(s.orelse, cond, tests)
                block(s.finalbody, cond, tests)
            elif isinstance(s, ast.Match):
                expr(s.subject, cond, tests)
                for case in s.cases:
                    block(case.body, f"case {source_text(case.pattern)}", tests)
            else:
                expr(s, cond, tests)

    block(body, "", ())
    return out


@dataclass
class _Hit:
    kind: KernelKind
    chain: tuple[ChainStep, ...]


@dataclass
class Callee:
    """What one call site can run, sorted by how the tracer treats it."""

    modules: list[Obj] = field(default_factory=list)  #: package module instances called
    ext_modules: list[ExtObj] = field(default_factory=list)  #: ``nn.Linear``-like instances called
    functions: list[Fn] = field(default_factory=list)  #: methods and functions
    kernels: list[KernelKind] = field(default_factory=list)  #: kernel calls
    unresolved: bool = False


class OpTracer:
    """Builds the ``OpTree`` of an entry class (see the module docstring)."""

    def __init__(self, resolver: Resolver, table: KernelCalls, scope: tuple[str, ...]):
        self.r = resolver
        self.table = table
        self.scope = scope
        self._calls: dict[tuple[object, ...], list[CallSite]] = {}
        self._kernels: dict[tuple[object, ...], list[_Hit]] = {}
        self._busy: set[tuple[object, ...]] = set()
        self._touches: dict[tuple[object, ...], bool] = {}
        self.visited: set[tuple[str, int, int]] = set()  #: functions whose bodies the kernel search read
        self.examined = 0  #: call sites and alternatives the tree has examined (see ``MAX_TREE_CALLS``)
        self.kernel_steps = 0  #: kernel call steps the tree lists (see ``MAX_TREE_KERNELS``)
        self.merged = 0  #: call chains the kernel search merged (see ``MAX_KERNEL_SEARCH``)
        self.expanded: set[tuple[str, int, int]] = set()  #: functions expanded as containers

    # -- classification

    def in_scope(self, module: str) -> bool:
        return any(module == s or module.startswith(s + ".") for s in self.scope)

    def calls(self, fn: Fn) -> list[CallSite]:
        key = fn.fn.key
        got = self._calls.get(key)
        if got is None:
            node = fn.fn.node
            body: list[ast.stmt] = [ast.Return(value=node.body)] if isinstance(node, ast.Lambda) else node.body
            got = self._calls[key] = calls_in_order(body)
        return got

    def frame(self, fn: Fn, call: ast.Call | None = None, caller: Frame | None = None) -> Frame:
        args = None
        if call is not None and caller is not None:
            skip = fn.bound is not None or (fn.fn.cls is not None and "staticmethod" not in fn.fn.decorators)
            args = Thunks(_bind_exprs(fn.fn, call, skip_self=skip), caller, self.r.site(caller.module, call))
        return Frame(fn.fn, fn.fn.module, fn.bound, args, fn.closure)

    def resolve_call(self, call: ast.Call, frame: Frame) -> Callee:
        out = Callee()
        values = self.r.callees(call, frame)
        if isinstance(call.func, ast.Subscript) and not is_index(call.func):
            for jit in cast("list[Fn]", values):  # a Triton launch ``kernel[grid](...)``: the jit functions
                out.kernels.append(self.table.triton(jit.fn.name, jit.fn.qualname))
            return out
        # an ``nn.Sequential`` called runs each of its modules, in order
        values = [x for v in values for x in (v.elems if isinstance(v, Seq) else [v])]
        for v in values:
            if isinstance(v, Obj):
                out.modules.append(v)
            elif isinstance(v, ExtObj):
                kind = self.table.classify(v.qual)
                if kind is not None:
                    out.ext_modules.append(v)
            elif isinstance(v, Fn):
                if is_triton_jit(v.fn):
                    continue  # a jit function called without a grid is not a launch
                if is_cute_jit(v.fn):
                    out.kernels.append(self.table.cute(v.fn.name, v.fn.qualname))
                    continue
                out.functions.extend(self.r.method_alternatives(v))
            elif isinstance(v, Ext):
                impls = torch_op_impls(self.r, v.qual) if v.qual.startswith("torch.ops.") else []
                if impls:  # a custom op registered in the package: follow its implementation
                    out.functions.extend(impls)
                    continue
                kind = self.table.classify(v.qual)
                if kind is not None:
                    out.kernels.append(kind)
        if not (out.modules or out.ext_modules or out.functions or out.kernels) and isinstance(call.func, ast.Attribute):
            if all(isinstance(v, (Unknown, ExtObj)) or (isinstance(v, Ext) and v.qual.startswith("builtins.")) for v in values):
                receivers = self.r.eval(call.func.value, frame)
                out.kernels += self.library_methods(receivers, call.func.attr)
                if not any(isinstance(v, (Obj,)) for v in receivers):
                    kind = self.table.tensor_method(call.func.attr)
                    if kind is not None:
                        out.kernels.append(kind)
                if isinstance(call.func.value, ast.Name) and call.func.value.id == "self" and not out.kernels:
                    out.unresolved = True
        if not (out.modules or out.ext_modules or out.functions or out.kernels) and isinstance(call.func, ast.Name) \
                and frame.fn is not None and all(isinstance(v, Unknown) for v in values):
            bindings = self.r.local_bindings(frame.fn).get(call.func.id) or []
            if bindings and all(b.kind == "for" for b in bindings):
                out.unresolved = True  # a loop's element called (``for layer in self.layers: layer(h)``), unknown
        platform = self.r.knowns.platform
        if platform:  # kernels of libraries bound to another platform cannot run
            out.kernels = [k for k in out.kernels if k.runs_on(platform)]
        return out

    def library_methods(self, receivers: list[Value], method: str) -> list[KernelKind]:
        """A method of an object of a kernel library's class (``wrapper.run(...)`` on a
        ``flashinfer...BatchMLAPagedAttentionWrapper``): a kernel call, named ``Class.method``.
        PyTorch's own classes are left to the tensor-method table."""
        out = []
        for v in receivers:
            if isinstance(v, ExtObj) and v.qual.startswith(JIT_PREFIX):
                out.append(self.table.jit(method, f"{v.qual}.{method}"))
            elif isinstance(v, ExtObj) and not method.startswith("_"):
                kind = self.table.classify(f"{v.qual}.{method}")
                if kind is not None and kind.family != "torch":
                    out.append(replace(kind, name=f"{v.qual.rsplit('.', 1)[-1]}.{method}"))
        return out

    def narrow(self, func: ast.expr, objs: list[Obj], tests: Tests, frame: Frame) -> list[Obj]:
        """Type narrowing: under ``if isinstance(self.mlp, MoE)`` a call of ``self.mlp`` is a
        ``MoE`` (and in the ``else``, not one)."""
        text = ast.dump(func)
        for test, negated in tests:
            if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
                    and len(test.args) == 2 and ast.dump(test.args[0]) == text):
                continue
            kinds = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
            classes = [v.cls for k in kinds for v in self.r.eval(k, frame) if hasattr(v, "cls") and isinstance(v.cls, ClassInfo)]
            if not classes:
                continue
            kept = [o for o in objs if any(c in self.r.mro(o.cls) for c in classes) != negated]
            objs = kept if kept else objs
        return objs

    def module_forwards(self, objs: list[Obj]) -> list[Fn]:
        out = []
        for o in objs:
            for f in self.r.forward_of(o):
                f.cond = f.cond or o.cond
                out.append(f)
        return out

    # -- kernel search (the kernel-trace side)

    def kernel_hits(self, fn: Fn) -> list[_Hit]:
        key = (fn.fn.key, fn.bound.cls.qualname if fn.bound is not None else None)
        if key in self._kernels:
            return self._kernels[key]
        if key in self._busy:
            return []  # a cycle: what the function reaches is being collected further up
        if len(self._busy) >= MAX_KERNEL_DEPTH:
            site = fn.fn.site
            self.r.warn_once("kernel-depth", f"{site.path}:{site.line}:{site.col}: calls nest deeper than "
                             f"{MAX_KERNEL_DEPTH} below an op; kernels further down are not searched")
            return []
        if self.merged > MAX_KERNEL_SEARCH:
            site = fn.fn.site
            self.r.warn_once("kernel-search", f"{site.path}:{site.line}:{site.col}: the kernel search merged "
                             f"{MAX_KERNEL_SEARCH} call chains; kernels below {fn.fn.qualname} and further ops "
                             "are not searched")
            return []
        self._busy.add(key)
        self.visited.add(fn.fn.key)
        hits: dict[str, _Hit] = {}
        try:
            frame = self.frame(fn)
            for cs in self.calls(fn):
                if self.r.excluded(cs.tests, frame):
                    continue
                cond = self.r.live_cond(cs.cond, cs.tests, frame)
                label, site = call_label(cs.call), self.r.site(fn.fn.module, cs.call)
                found = self._call_hits(cs.call, frame)
                self.merged += 1 + len(found)
                for h, alt in found:
                    chain = h.chain + (ChainStep(label, site, " and ".join(x for x in (cond, alt) if x)),)
                    old = hits.get(h.kind.target)
                    # the chain kept is the least conditional, then the shortest
                    if old is None or _chain_rank(chain) < _chain_rank(old.chain):
                        hits[h.kind.target] = _Hit(h.kind, chain)
        finally:
            self._busy.discard(key)
        result = list(hits.values())
        self._kernels[key] = result
        return result

    def _call_hits(self, call: ast.Call, frame: Frame) -> list[tuple[_Hit, str]]:
        """The kernels one call reaches, each with the condition of the callee alternative
        that reaches it ("" for an unconditional one)."""
        c = self.resolve_call(call, frame)
        out = [(_Hit(k, ()), "") for k in c.kernels]
        # the outside modules kept are the ones the table classifies
        out += [(_Hit(cast(KernelKind, self.table.classify(m.qual)), ()), m.cond) for m in c.ext_modules]
        for f in self.module_forwards(c.modules) + c.functions:
            self.merged += 1
            out += [(h, f.cond) for h in self.kernel_hits(f)]
        return out

    # -- does library code hand work back to the model's modules?

    def touches_model(self, fn: Fn, call: ast.Call | None, caller: Frame | None, depth: int = 0) -> bool:
        """Does library code hand work back to modules the model built (``LayerCommunicator``
        calling the layer's ``input_layernorm``, ``LogitsProcessor`` calling ``lm_head``)?
        Followed ``MAX_TOUCH_DEPTH`` calls deep. The call's arguments are bound only where one
        of them is such a module: elsewhere the answer does not depend on them."""
        if depth > MAX_TOUCH_DEPTH:
            return False
        sensitive = call is not None and caller is not None and self.passes_model_module(call, caller)
        memo: tuple[object, ...] = (fn.fn.key, fn.bound.key if fn.bound is not None else None)
        if sensitive:
            assert caller is not None  # sensitive: a call from a caller
            memo += (call, caller.args.key if caller.args is not None else None,
                     caller.self_obj.key if caller.self_obj is not None else None)
        got = self._touches.get(memo)
        if got is None:
            self._touches[memo] = False  # recursion guard
            frame = self.frame(fn, call, caller) if sensitive else self.frame(fn)
            got = self._touches[memo] = self._touches_model(fn, frame, depth)
        return got

    def _touches_model(self, fn: Fn, frame: Frame, depth: int) -> bool:
        for cs in self.calls(fn):
            c = self.resolve_call(cs.call, frame)
            if any(self.model_module(o) and o is not fn.bound for o in c.modules):
                return True
            for f in c.functions:
                if f.fn is not fn.fn and self.touches_model(f, cs.call, frame, depth + 1):
                    return True
        return False

    def model_module(self, v: Value) -> bool:
        """A module instance the model code itself constructed."""
        return isinstance(v, Obj) and v.origin is not None and self.in_scope_path(v.origin.path)

    def passes_model_module(self, call: ast.Call, frame: Frame) -> bool:
        args = list(call.args) + [k.value for k in call.keywords]
        return any(self.model_module(v) for a in args if isinstance(a, (ast.Name, ast.Attribute))
                   for v in self.r.eval(a, frame))

    def in_scope_path(self, path: str) -> bool:
        mod = path[:-3].replace("/", ".").removesuffix(".__init__")
        return self.in_scope(mod)

    # -- the execution graph

    def build(self, entry: ClassInfo) -> OpTree:
        obj = self.r.make_obj(entry, None, None)
        root = OpNode(f"{entry.name}.forward()", ROOT, entry.site, callee=f"{entry.qualname}.forward")
        forwards = self.r.forward_of(obj)
        root.callee_sites = tuple(f.fn.site for f in forwards)
        if forwards:
            self.expand(root, forwards[0], None, None, [forwards[0].fn.key])
        return OpTree(entry.qualname, self.r.sources.label, root, self.scope)

    def expand(self, node: OpNode, fn: Fn, call: ast.Call | None, caller: Frame | None, stack: list[tuple[object, ...]]) -> None:
        """Fill ``node`` with the ops ``fn``'s body calls and the kernels it calls itself."""
        calls = self.calls(fn)
        if self.examined + len(calls) + 1 > MAX_TREE_CALLS:
            self._tree_full(fn.fn.site, fn.fn.qualname)
            return
        self.examined += len(calls) + 1
        self.expanded.add(fn.fn.key)
        frame = self.frame(fn, call, caller)
        op_site = node.site if node.kind == OP else None
        direct: list[KernelSite] = []
        for cs in calls:
            sub = cs.call
            site = self.r.site(fn.fn.module, sub)
            if self.examined > MAX_TREE_CALLS:  # the alternatives of earlier calls took it there
                self._tree_full(site, call_label(sub))
                break
            if self.r.excluded(cs.tests, frame):
                continue
            cond = self.r.live_cond(cs.cond, cs.tests, frame)
            c = self.resolve_call(sub, frame)
            if c.modules and cs.tests:
                c.modules = self.narrow(sub.func, c.modules, cs.tests, frame)
            label = call_label(sub)
            for k in c.kernels:
                if not k.node:
                    direct.append(self.kernel_site(k, (ChainStep(label, site, cond),), op_site, node))
            custom = [k for k in c.kernels if k.node]
            if custom:
                leaf = OpNode(label, OP, site, annotation(cond), callee=custom[0].target)
                leaf.kernels = [self.kernel_site(k, (), site, leaf) for k in custom]
                node.children.append(leaf)
            targets = self.module_forwards(c.modules) + c.functions
            self.examined += len(targets) + len(c.kernels) + len(c.ext_modules)
            if not targets and not c.ext_modules and not c.unresolved:
                continue
            child = OpNode(label, OP, site, annotation(cond), unresolved=c.unresolved and not targets and not c.ext_modules)
            child.callee_sites = tuple(f.fn.site for f in targets)
            child.callee_classes = tuple(dict.fromkeys(
                [f.bound.cls.name for f in targets if f.bound is not None and f.fn.name in ("forward", "__call__")]
                + [m.qual.split(".")[-1] for m in c.ext_modules]))
            child.callee = targets[0].fn.qualname if targets else (c.ext_modules[0].qual if c.ext_modules else "")
            for m in c.ext_modules:
                # the outside modules kept are the ones the table classifies
                child.kernels.append(self.kernel_site(cast(KernelKind, self.table.classify(m.qual)), (), site, child))
            self.fill(child, targets, sub, frame, stack)
            if child.children or child.kernels or c.modules or c.ext_modules or child.unresolved:
                node.children.append(child)
        node.kernels = direct + node.kernels
        node.direct = len(direct)

    def fill(self, child: OpNode, targets: list[Fn], call: ast.Call, frame: Frame, stack: list[tuple[object, ...]]) -> None:
        """Expand or kernel-search each alternative callee of one op."""
        expandable, leaves = [], []
        for f in targets:
            if f.fn.key in stack or len(stack) >= MAX_EXPAND_DEPTH:
                child.recursive = child.recursive or f.fn.key in stack
                leaves.append(f)
            elif self.in_scope(f.fn.module.name) or self.touches_model(f, call, frame):
                expandable.append(f)
            else:
                leaves.append(f)
        leaf_kernels = 0
        for f in leaves:
            for h in self.kernel_hits(f):
                if self.kernels_full(cast(Site, child.site)):  # an op: it has its call site
                    break
                child.kernels.append(self.kernel_site(h.kind, h.chain, child.site, child, f.cond))
                leaf_kernels += 1
        if len(expandable) == 1 and not leaf_kernels:
            self.expand(child, expandable[0], call, frame, stack + [expandable[0].fn.key])
            return
        for f in expandable:
            owner = f.bound.cls.name if f.bound is not None else f.fn.module.name.split(".")[-1]
            branch = OpNode(f"{owner}.{f.fn.name}()", BRANCH, child.site, annotation(f.cond), callee=f.fn.qualname,
                            callee_sites=(f.fn.site,))
            branch.callee_classes = (owner,) if f.fn.name in ("forward", "__call__") else ()
            self.expand(branch, f, call, frame, stack + [f.fn.key])
            if branch.children or branch.kernels:
                child.children.append(branch)
        if len(child.children) == 1 and child.children[0].kind == BRANCH and not leaf_kernels:
            only = child.children[0]
            child.children = only.children
            child.kernels = only.kernels + child.kernels
            child.direct = only.direct
            child.callee_sites = only.callee_sites

    def _tree_full(self, site: Site, what: str) -> None:
        self.r.warn_once("tree-calls", f"{site.path}:{site.line}:{site.col}: the op tree reached {MAX_TREE_CALLS} "
                         f"call sites and callees; {what} and other calls from here on are not expanded")

    def kernels_full(self, site: Site) -> bool:
        """Whether the tree lists ``MAX_TREE_KERNELS`` kernel call steps already (said once, at
        the op where the listing stops)."""
        if self.kernel_steps < MAX_TREE_KERNELS:
            return False
        self.r.warn_once("tree-kernels", f"{site.path}:{site.line}:{site.col}: the op tree lists {MAX_TREE_KERNELS} "
                         "kernel call steps; the kernels of this op and of ops from here on are not listed")
        return True

    def kernel_site(self, kind: KernelKind, chain: tuple[ChainStep, ...], op_site: Site | None, node: OpNode,
                    cond: str = "") -> KernelSite:
        """A kernel of ``node``: the chain ends at the op's call site (one step for a kernel
        called at the op itself); ``cond``, the condition of the callee alternative that
        reaches it, marks that step."""
        if op_site is not None:
            label = node.label if node.kind == OP else (chain[-1].label if chain else kind.name + "()")
            if not chain or chain[-1].site != op_site:
                chain = chain + (ChainStep(label, op_site, cond),)
            elif cond and not chain[-1].cond:
                chain = chain[:-1] + (ChainStep(chain[-1].label, op_site, cond),)
        self.kernel_steps += 1 + len(chain)
        return KernelSite(kind.name, kind.target, kind.family, kind.category, chain, kind.aten)


def _chain_rank(chain: tuple[ChainStep, ...]) -> tuple[int, int]:
    return (sum(1 for s in chain if s.cond), len(chain))


def model_kernel_sites(tracer: OpTracer) -> list[tuple[KernelKind, Site, str]]:
    """The bottom-up side of the cross-validation: every custom-kernel call written in the model
    modules the tree went through (kind, call site, enclosing function)."""
    r = tracer.r
    modules = sorted({key[0] for key in tracer.expanded if tracer.in_scope(key[0])})
    out = []
    for name in modules:
        mod = r.module(name)
        tree = r.tree(mod) if mod is not None else None
        if tree is None:
            continue
        assert mod is not None  # its tree was read
        for fi in _functions(r, mod, tree):
            fn = Fn(fi, r.make_obj(fi.cls, None, None, declared=True) if fi.cls is not None else None)
            frame = tracer.frame(fn)
            for cs in tracer.calls(fn):
                c = tracer.resolve_call(cs.call, frame)
                for k in c.kernels:
                    if k.node:
                        out.append((k, r.site(mod, cs.call), fi.qualname))
    return out


def _functions(r: Resolver, mod: SourceModule, tree: ast.Module) -> Iterator[FuncInfo]:
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield r.func_info(stmt, mod)
        elif isinstance(stmt, ast.ClassDef):
            ci = r.class_info(stmt, mod)
            yield from ci.methods.values()
