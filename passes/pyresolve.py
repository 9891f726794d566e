"""What a name in model source stands for: a small abstract interpreter over Python ``ast``.

The op tracer asks questions such as "what can ``self.mlp`` be in a ``DeepseekV2DecoderLayer``?"
or "what does ``attention_interface`` call?". Answers are *sets of abstract values*:

``Obj``     an instance of a package class (with the constructor call that made it, so
            ``self.input_layernorm = input_layernorm`` resolves through the caller's argument)
``ClsRef``  a package class;  ``Fn`` a package function or (bound) method;  ``ModRef`` a package module
``Ext``     something outside the package (``torch.nn.functional.linear``, ``sgl_kernel.bmm_fp8``)
``ExtObj``  an instance of an outside class (``torch.nn.Linear``)
``Seq``     a list / ``nn.ModuleList`` / tuple;  ``DictV`` a dict literal;  ``Unknown`` anything else

Values carry ``cond``, the source of the ``if`` (or conditional expression) under which they
were assigned, so config- and dispatch-dependent alternatives can be labelled. Resolution
follows ``__init__`` assignments through the MRO (mixins in other modules included),
``super().__init__(...)`` arguments, imports (conditional ones give alternatives), function
returns (with argument binding, bounded depth), annotations (a declared type also stands for
its subclasses' overrides) and a few container idioms. It never imports or runs the code.

Hostile source cannot make it recurse without bound: every cycle (aliases of each other, star
imports of each other, classes deriving from each other, functions calling each other) is cut
where it closes, resolution nests at most ``MAX_RESOLVE_DEPTH`` evaluations (then the value is
unknown, with a warning), class hierarchies are walked without recursion, and no module tree
nests deeper than ``pysource.MAX_NESTING``. Nor can it work without bound: the work is counted
as it is done — evaluations, the values they hand on (a sequence with everything it holds),
the returns asked for, the statements and MRO classes walked — so that calling contexts, which
multiply along call chains that share callees, stop being told apart past a budget of units
(``MAX_CONTEXT_WORK`` and ``CONTEXT_WORK_PER_BYTE`` of the source parsed), and nothing more is
resolved past a larger one (``MAX_RESOLVE_WORK``, ``RESOLVE_WORK_PER_BYTE``): the work stays
linear in the source read, whatever its call graph.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterable, Iterator, Self, TypeVar, cast

from layerc.grammar.pysource import SourceModule, SourceSet, first_line, parse_expression
from layerc.ir.diagnostics import LayercError, Location, ParseError, source_line_at
from layerc.ir.optree import Site
from layerc.passes.pyconst import MISSING, ConstEval, Knowns

MAX_CALL_DEPTH = 6  #: nested function-return evaluations
#: Nested evaluations, all kinds together (an alias of an attribute of a call's result...): real
#: models need under 40 (sglang's DeepSeek: 37); each costs about six Python frames.
MAX_RESOLVE_DEPTH = 64
#: Sequences of sequences kept apart (``[[x]]``); deeper ones are known only as sequences.
MAX_SEQ_DEPTH = 8
#: Resolution work is counted in units: an evaluation; each value it hands on, a sequence or dict
#: with every value it holds (hashing, deduping and keeping one costs that much); each function
#: return asked for, cached or not; each statement a return's evaluation walks; each class of an
#: MRO walked for a lookup. A unit is about a microsecond, whatever the source.
#: Function returns are evaluated per calling context (call site, arguments, the caller's own
#: context), and contexts multiply along call chains that share callees: exponential work in the
#: chain's depth. Past this many units, plus ``CONTEXT_WORK_PER_BYTE`` for each byte of source
#: parsed, a call that starts a new context is resolved once per function instead, without its
#: arguments. sglang's DeepSeek (5.5 MB parsed) takes 1.8 million units, its budget is 3.2
#: million; tests/optrace_pkg takes 1,600.
MAX_CONTEXT_WORK = 500_000
CONTEXT_WORK_PER_BYTE = 0.5
#: Past this many units, plus ``RESOLVE_WORK_PER_BYTE`` a byte of source parsed, nothing more is
#: resolved: every value asked for is unknown (a bounded answer, with a warning). A small hostile
#: package stops within a second or two; a megabyte of source adds about as much as parsing it.
MAX_RESOLVE_WORK = 1_000_000
RESOLVE_WORK_PER_BYTE = 1.0
#: Package classes followed up one line of inheritance (real models: under 6).
MAX_CLASS_DEPTH = 64
#: Tokens (words and punctuation, counted by a scan before parsing) one module may have: Python's
#: parser holds about 400 bytes a token while it works, and the tree about as much after, so a
#: megabyte of ``x<x<x<...`` would take 500 MB. sglang's largest module has 42,000. A larger
#: module is skipped with a warning; the entry module is an error.
MAX_MODULE_TOKENS = 200_000
_TOKEN = re.compile(r"\w+|[^\w\s]")
_BUILTIN_SEQ = {"list", "tuple", "sorted", "reversed", "iter"}
#: a dict's views, read as sequences (``for name, block in self.blocks.items()``)
_VIEWS = ("items", "values", "keys")
#: the ``ExtObj`` a JIT loader returns is named ``jit:<loader>``
JIT_PREFIX = "jit:"
_MAPPING_GETTERS = ("__getitem__", "get", "pop", "setdefault")
_MAPPING_BASES = ("dict", "OrderedDict", "UserDict", "Mapping", "MutableMapping")
#: ``class Name(bases`` up to the next parenthesis: linear however many lines are left unclosed
_CLASS_RX = re.compile(r"^[ \t]*class[ \t]+(\w+)[ \t]*\(([^()]*)", re.M)


# -- values ------------------------------------------------------------------------------

#: the ``if`` tests a statement sits under, outermost first, each with whether it is in the ``else``
Tests = tuple[tuple[ast.expr, bool], ...]
#: a function's node: a ``def`` or a ``lambda``
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
#: what a branch's test is statically (True, False), or None
Prune = Callable[[ast.expr], bool | None]


class Value:
    __slots__ = ("cond",)

    def __init__(self, cond: str = ""):
        self.cond = cond

    @property
    def key(self) -> tuple[object, ...]:
        raise NotImplementedError

    def with_cond(self, cond: str) -> Self:
        """This value under ``cond``, unless it has a condition already (the innermost one counts)."""
        if not cond or self.cond:
            return self
        return self.recond(cond)

    def recond(self, cond: str) -> Self:
        """A copy of this value under ``cond`` instead of its own."""
        clone = object.__new__(type(self))
        for cls in type(self).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                setattr(clone, slot, getattr(self, slot))
        clone.cond = cond
        return clone


class _Named(Value):
    """A value known by one string: ``Unknown`` (its source text), ``Ext`` (a qualified name
    outside the package), ``ExtObj`` (an instance of an outside class), ``ModRef`` (a package
    module)."""

    __slots__ = ("qual",)
    tag = ""

    def __init__(self, qual: str, cond: str = ""):
        super().__init__(cond)
        self.qual = qual

    @property
    def key(self) -> tuple[object, ...]:
        return (self.tag, self.qual)


class Unknown(_Named):
    __slots__ = ()
    tag = "?"


class Ext(_Named):
    __slots__ = ()
    tag = "ext"


class ExtObj(_Named):
    __slots__ = ()
    tag = "extobj"


class ModRef(_Named):
    __slots__ = ()
    tag = "mod"


class ClsRef(Value):
    __slots__ = ("cls",)

    def __init__(self, cls: "ClassInfo", cond: str = ""):
        super().__init__(cond)
        self.cls = cls

    @property
    def key(self) -> tuple[object, ...]:
        return ("cls", self.cls.qualname)


class Obj(Value):
    """An instance. ``declared``: known only from an annotation, so it may be any subclass."""

    __slots__ = ("cls", "origin", "ctor", "declared", "attrs", "inits", "_key")

    def __init__(self, cls: "ClassInfo", origin: Site | None, ctor: "Thunks | None", declared: bool, cond: str = ""):
        super().__init__(cond)
        self.cls = cls
        self.origin = origin
        self.ctor = ctor
        self.declared = declared
        self.attrs: dict[str, list[Value]] = {}
        self.inits: dict[str, Frame] | None = None
        # built once, of strings and ints (a Site's dataclass hash runs Python code each time)
        where = (origin.path, origin.line, origin.col, origin.end_line) if origin is not None else None
        self._key = ("obj", cls.qualname, where, declared)

    @property
    def key(self) -> tuple[object, ...]:
        return self._key


class Fn(Value):
    __slots__ = ("fn", "bound", "closure")

    def __init__(self, fn: "FuncInfo", bound: Obj | None = None, closure: "Frame | None" = None, cond: str = ""):
        super().__init__(cond)
        self.fn = fn
        self.bound = bound
        self.closure = closure

    @property
    def key(self) -> tuple[object, ...]:
        return ("fn", self.fn.key, self.bound.key if self.bound is not None else None)


class Seq(Value):
    """A sequence: ``elems`` any element; ``items`` per position when the length is known.
    Sequences nest at most ``MAX_SEQ_DEPTH`` deep (``key`` recurses through them); below that an
    element is an unknown sequence."""

    __slots__ = ("elems", "items", "depth", "size", "_key")
    depth: int  #: sequences nested in it, itself included

    def __init__(self, elems: list[Value], items: list[list[Value]] | None = None, cond: str = ""):
        super().__init__(cond)
        self.depth = 1 + max((v.depth for v in elems if isinstance(v, Seq)), default=0)
        if self.depth > MAX_SEQ_DEPTH:
            elems, items, self.depth = [Unknown("[...]")], None, 1
        self.elems = elems
        self.items = items
        #: values held, nested ones included: what handing this sequence on costs (see ``value_size``)
        self.size = 1 + sum(map(value_size, elems)) + (sum(map(len, items)) if items is not None else 0)
        self._key: tuple[object, ...] | None = None

    @property
    def key(self) -> tuple[object, ...]:
        if self._key is None:  # values never change: the key of a large nested sequence is built once
            self._key = ("seq", tuple(v.key for v in self.elems), len(self.items) if self.items is not None else -1)
        return self._key


class DictV(Value):
    __slots__ = ("entries",)

    def __init__(self, entries: list[tuple[object, list[Value]]], cond: str = ""):
        super().__init__(cond)
        self.entries = entries

    @property
    def key(self) -> tuple[object, ...]:
        return ("dict", id(self))


class SuperRef(Value):
    __slots__ = ("cls", "obj")

    def __init__(self, cls: "ClassInfo", obj: Obj | None):
        super().__init__("")
        self.cls = cls
        self.obj = obj

    @property
    def key(self) -> tuple[object, ...]:
        return ("super", self.cls.qualname, self.obj.key if self.obj is not None else None)


def value_size(v: Value) -> int:
    """Values one value holds, itself included (a sequence its elements, a dict its entries'
    values): the unit resolution work is counted in (see ``MAX_CONTEXT_WORK``)."""
    if isinstance(v, Seq):
        return v.size
    if isinstance(v, DictV):
        return 1 + sum(len(vals) for _, vals in v.entries)
    return 1


V = TypeVar("V", bound=Value)


def dedupe(values: Iterable[V]) -> list[V]:
    seen: dict[tuple[object, ...], V] = {}
    for v in values:
        k = v.key
        if k not in seen:
            seen[k] = v
        elif seen[k].cond and not v.cond:
            seen[k] = v  # also reachable unconditionally
    return list(seen.values())


def known(values: list[Value]) -> list[Value]:
    return [v for v in values if not isinstance(v, Unknown)]


# -- program structure -------------------------------------------------------------------

@dataclass(eq=False)
class FuncInfo:
    node: FunctionNode
    module: SourceModule
    cls: "ClassInfo | None"
    qualname: str

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.module.name, self.node.lineno, self.node.col_offset)

    @property
    def name(self) -> str:
        return getattr(self.node, "name", "<lambda>")

    @property
    def site(self) -> Site:
        n = self.node
        first = first_line(n) if not isinstance(n, ast.Lambda) else n.lineno
        return Site(self.module.path, first, n.col_offset + 1, getattr(n, "end_lineno", n.lineno) or n.lineno)

    @cached_property
    def decorators(self) -> list[str]:
        return [source_text(d) for d in getattr(self.node, "decorator_list", [])]

    @cached_property
    def params(self) -> dict[str, tuple[int, ast.arg, ast.expr | None]]:
        return _params(self.node)

    @property
    def is_property(self) -> bool:
        return any(d in ("property", "cached_property", "functools.cached_property") for d in self.decorators)


@dataclass(eq=False)
class ClassInfo:
    node: ast.ClassDef
    module: SourceModule
    qualname: str
    methods: dict[str, FuncInfo] = field(default_factory=dict)
    body_assigns: dict[str, list[ast.expr]] = field(default_factory=dict)
    annotations: dict[str, ast.expr] = field(default_factory=dict)
    _self_assigns: dict[str, list[tuple[FuncInfo, Binding]]] | None = None

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def site(self) -> Site:
        return Site(self.module.path, self.node.lineno, self.node.col_offset + 1, self.node.end_lineno or self.node.lineno)


@dataclass
class Binding:
    """One way a name gets its value in a scope."""

    kind: str  #: def | class | import | importmod | assign | unpack | for | with | param | seqitem | append | extend
    node: ast.AST | None
    cond: str = ""
    index: int = -1  #: tuple-unpacking position
    target: str = ""  #: for imports: the module (and name)
    tests: "Tests" = ()  #: the ``if`` tests it sits under, each with whether it is in the ``else``


@dataclass(eq=False)
class Thunks:
    """Arguments of one call, evaluated when first needed, in the caller's frame. ``key`` names
    the calling context (this call site, the caller's ``self`` and the caller's own context),
    so results that depend on arguments are cached per context, not per evaluation."""

    exprs: dict[str, list[ast.expr]]
    frame: "Frame"
    site: Site

    @property
    def key(self) -> tuple[object, ...]:
        f = self.frame
        return (self.site, f.fn.key if f.fn is not None else None,
                f.self_obj.key if f.self_obj is not None else None, f.args.key if f.args is not None else None)


class Frame:
    """A function's evaluation context: which function, ``self``, the call's arguments, the
    enclosing frame (closures), and how deep in returns we are."""

    __slots__ = ("fn", "module", "self_obj", "args", "parent", "depth", "cache", "busy", "consts")

    def __init__(self, fn: FuncInfo | None, module: SourceModule, self_obj: Obj | None = None,
                 args: Thunks | None = None, parent: "Frame | None" = None, depth: int = 0):
        self.fn = fn
        self.module = fn.module if fn is not None else module
        self.self_obj = self_obj
        self.args = args
        self.parent = parent
        self.depth = depth
        self.cache: dict[str, list[Value]] = {}
        self.busy: set[str] = set()
        self.consts: dict[str, list[object]] = {}  #: the constant values of locals (``ConstEval``)


def cond_text(test: ast.expr, negate: bool = False) -> str:
    text = source_text(test)
    if not negate:
        return text
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return source_text(test.operand)
    return f"not ({text})" if " " in text else f"not {text}"


def scope_bindings(body: list[ast.stmt], conds: tuple[str, ...] = (), tests: Tests = ()) -> Iterator[tuple[str, Binding]]:
    """(name, binding) for every name a block binds, conditional blocks included (each binding
    with the ``if`` tests it sits under); nested function and class bodies are their own scopes
    and are not entered."""
    cond = conds[-1] if conds else ""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield stmt.name, Binding("def", stmt, cond, tests=tests)
        elif isinstance(stmt, ast.ClassDef):
            yield stmt.name, Binding("class", stmt, cond, tests=tests)
        elif isinstance(stmt, ast.Import):
            for a in stmt.names:
                if a.asname:
                    yield a.asname, Binding("importmod", stmt, cond, target=a.name, tests=tests)
                else:
                    top = a.name.split(".")[0]
                    yield top, Binding("importmod", stmt, cond, target=top, tests=tests)
        elif isinstance(stmt, ast.ImportFrom):
            for a in stmt.names:
                if a.name != "*":
                    yield a.asname or a.name, Binding("import", stmt, cond, target=a.name, tests=tests)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if stmt.value is None:
                continue
            for t in targets:
                yield from _target_bindings(t, stmt.value, cond, tests=tests)
        elif isinstance(stmt, ast.AugAssign):
            if isinstance(stmt.op, ast.Add) and isinstance(stmt.target, ast.Name):  # ``layers += [Block()]``
                yield stmt.target.id, Binding("assign", stmt.value, cond, tests=tests)
            continue
        elif isinstance(stmt, ast.Expr) and (grown := _grown(stmt)) is not None and isinstance(grown[0], ast.Name):
            yield grown[0].id, Binding(grown[1], grown[2], cond, tests=tests)  # ``layers.append(Block())``
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            yield from _target_bindings(stmt.target, stmt.iter, cond, kind="for", tests=tests)
            yield from scope_bindings(stmt.body, conds, tests)
            yield from scope_bindings(stmt.orelse, conds, tests)
        elif isinstance(stmt, ast.If):
            yield from scope_bindings(stmt.body, conds + (cond_text(stmt.test),), tests + ((stmt.test, False),))
            yield from scope_bindings(stmt.orelse, conds + (cond_text(stmt.test, negate=True),), tests + ((stmt.test, True),))
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            for item in stmt.items:
                if item.optional_vars is not None:
                    yield from _target_bindings(item.optional_vars, item.context_expr, cond, kind="with", tests=tests)
            yield from scope_bindings(stmt.body, conds, tests)
        elif isinstance(stmt, (ast.Try, ast.TryStar)):
            yield from scope_bindings(stmt.body, conds, tests)
            for h in stmt.handlers:
                yield from scope_bindings(h.body, conds, tests)
            yield from scope_bindings(stmt.orelse, conds, tests)
            yield from scope_bindings(stmt.finalbody, conds, tests)
        elif isinstance(stmt, ast.While):
            yield from scope_bindings(stmt.body, conds, tests)
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                yield from scope_bindings(case.body, conds + (f"case {source_text(case.pattern)}",), tests)
        # walrus targets inside expressions
        for sub in ast.walk(stmt) if isinstance(stmt, (ast.Expr, ast.Assign, ast.If, ast.Return)) else ():
            if isinstance(sub, ast.NamedExpr) and isinstance(sub.target, ast.Name):
                yield sub.target.id, Binding("assign", sub.value, cond, tests=tests)


def _target_bindings(t: ast.expr, value: ast.expr, cond: str, kind: str = "assign", tests: Tests = ()) -> Iterator[tuple[str, Binding]]:
    if isinstance(t, ast.Name):
        yield t.id, Binding(kind, value, cond, tests=tests)
    elif isinstance(t, (ast.Tuple, ast.List)):
        for i, el in enumerate(t.elts):
            if isinstance(el, ast.Name):
                yield el.id, Binding("unpack" if kind == "assign" else kind, value, cond, index=i, tests=tests)
            elif isinstance(el, ast.Starred) and isinstance(el.value, ast.Name):
                yield el.value.id, Binding(kind, None, cond, tests=tests)


def attr_name(e: ast.expr) -> str | None:
    """The attribute name ``getattr``/``setattr`` are given: a string, or an f-string's template
    (``f"layer_{i}"`` → ``layer_{}``: the attributes a loop sets, as one name that a loop gets)."""
    if isinstance(e, ast.Constant) and isinstance(e.value, str):
        return e.value
    if isinstance(e, ast.JoinedStr):
        # an f-string's constant parts are its literal text
        return "".join(cast(str, v.value) if isinstance(v, ast.Constant) else "{}" for v in e.values)
    return None


def is_index(sub: ast.Subscript) -> bool:
    """``self.layers[i]`` (an index into modules) rather than ``kernel[grid]`` (a launch)."""
    return not isinstance(sub.slice, (ast.Tuple, ast.Lambda)) and not (
        isinstance(sub.slice, ast.Name) and sub.slice.id.lower().startswith("grid"))


# -- the resolver ----------------------------------------------------------------------------

class Resolver:
    """Abstract values of expressions in the modules of one ``SourceSet`` (see module docstring).

    ``packages``: the top-level packages that count as source (everything else is external).
    """

    def __init__(self, sources: SourceSet, packages: list[str] | None = None, knowns: Knowns | None = None,
                 jit_loaders: frozenset[str] = frozenset(), compilers: frozenset[str] = frozenset()):
        self.sources = sources
        self.jit_loaders = jit_loaders  #: outside functions that return a module compiled at run time
        self.compilers = compilers  #: outside functions that return the function they are given, compiled
        self.knowns = knowns or Knowns()
        self.consts = ConstEval(self)
        self.pruned: set[tuple[str, int, int]] = set()  #: branches the configuration decided against (file, line, col)
        self.packages = tuple(packages or sources.top_packages())
        self._globals: dict[str, dict[str, list[Binding]]] = {}
        self._classes: dict[tuple[str, int, int], ClassInfo] = {}
        self._funcs: dict[tuple[str, int, int], FuncInfo] = {}
        self._objs: dict[tuple[str, Site | None, bool], Obj] = {}
        self._global_cache: dict[tuple[str, str], list[Value]] = {}
        self._registrations_cache: dict[tuple[str, str], list[tuple[object, list[Value]]]] = {}
        self._global_busy: set[tuple[str, str]] = set()
        self._locals: dict[tuple[object, ...], dict[str, list[Binding]]] = {}
        self._mro: dict[str, list[ClassInfo]] = {}
        self._bases: dict[str, list[Value]] = {}
        self._class_index: dict[str, list[tuple[str, str]]] | None = None
        self._subclasses: dict[str, list[ClassInfo]] = {}
        self._returns: dict[tuple[object, ...], list[Value]] = {}
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        self._depth = 0  #: evaluations under way (see ``MAX_RESOLVE_DEPTH``)
        self.evaluations = 0  #: evaluations so far
        self.work = 0  #: units of resolution work so far (see ``MAX_CONTEXT_WORK``)
        self.source_bytes = 0  #: bytes of the modules parsed so far (the work budgets grow with them)
        self._read: set[str] = set()
        self._import_busy: set[tuple[str, str]] = set()
        self._super_inits: dict[tuple[object, ...], ast.Call | None] = {}
        self._key_calls: dict[ast.AST, ast.Call] = {}  #: by the subscript or getter call they stand for
        self.chosen_classes_cache: list[ClassInfo] | None = None  #: what ``knowns.selections`` build (pyregistry)
        self.torch_op_cache: dict[tuple[str, str], list[Fn]] = {}  #: implementations of custom ops (pyregistry)
        self.quoted_names_cache: dict[str, list[str]] | None = None  #: modules by the names they quote (pyregistry)

    # ---- modules and definitions

    def in_package(self, module: str) -> bool:
        return module.split(".")[0] in self.packages

    def module(self, name: str) -> SourceModule | None:
        if not self.in_package(name):
            return None
        return self.sources.module(name)

    def tree(self, mod: SourceModule) -> ast.Module | None:
        """The module's ast; a module that does not parse (or is too large to) is skipped with a
        warning (the entry module's parse error is raised by the caller, which parses it first)."""
        check_module_size(mod)
        try:
            tree = mod.tree
        except LayercError as e:  # a module deep inside a package that does not parse should not stop the trace
            where = f"{mod.path}:{e.loc.line}:{e.loc.column}" if e.loc is not None else mod.path
            self.warn(f"{where}: {e.message}; module {mod.name} skipped")
            return None
        if mod.name not in self._read:  # the work budgets grow with the source parsed
            self._read.add(mod.name)
            self.source_bytes += len(mod.text)
        return tree

    def context_budget(self) -> int:
        """Units of work past which calls are resolved without their arguments."""
        return MAX_CONTEXT_WORK + int(CONTEXT_WORK_PER_BYTE * self.source_bytes)

    def work_budget(self) -> int:
        """Units of work past which nothing more is resolved."""
        return MAX_RESOLVE_WORK + int(RESOLVE_WORK_PER_BYTE * self.source_bytes)

    def warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.warnings.append(message)

    def warn_once(self, kind: str, message: str) -> None:
        """The first warning of a kind that could repeat at every place a hostile input reaches."""
        if kind not in self._warned:
            self._warned.add(kind)
            self.warn(message)

    def globals_of(self, mod: SourceModule) -> dict[str, list[Binding]]:
        g = self._globals.get(mod.name)
        if g is None:
            g = {}
            tree = self.tree(mod)
            if tree is not None:
                for name, b in scope_bindings(tree.body):
                    g.setdefault(name, []).append(b)
            self._globals[mod.name] = g
        return g

    def class_info(self, node: ast.ClassDef, mod: SourceModule, outer: str = "") -> ClassInfo:
        key = (mod.name, node.lineno, node.col_offset)
        ci = self._classes.get(key)
        if ci is None:
            qual = f"{mod.name}.{outer}{node.name}"
            ci = ClassInfo(node, mod, qual)
            self._classes[key] = ci
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    ci.methods[stmt.name] = self.func_info(stmt, mod, ci)
                elif isinstance(stmt, ast.Assign):
                    for t in stmt.targets:
                        if isinstance(t, ast.Name):
                            ci.body_assigns.setdefault(t.id, []).append(stmt.value)
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    ci.annotations[stmt.target.id] = stmt.annotation
                    if stmt.value is not None:
                        ci.body_assigns.setdefault(stmt.target.id, []).append(stmt.value)
        return ci

    def func_info(self, node: FunctionNode, mod: SourceModule, cls: ClassInfo | None = None, outer: str = "") -> FuncInfo:
        key = (mod.name, node.lineno, node.col_offset)
        fi = self._funcs.get(key)
        if fi is None:
            name = getattr(node, "name", "<lambda>")
            qual = f"{cls.qualname}.{name}" if cls is not None else f"{mod.name}.{outer}{name}"
            fi = FuncInfo(node, mod, cls, qual)
            self._funcs[key] = fi
        return fi

    def find_class(self, module: str, name: str) -> ClassInfo | None:
        mod = self.module(module)
        if mod is None:
            return None
        for v in self.lookup_global(mod, name):
            if isinstance(v, ClsRef):
                return v.cls
        return None

    # ---- classes: MRO, members, subclasses

    def bases(self, ci: ClassInfo) -> list[Value]:
        got = self._bases.get(ci.qualname)
        if got is None:
            got = []
            frame = Frame(None, ci.module)
            for b in ci.node.bases:
                vals = known(self.eval(b, frame)) or [Unknown(source_text(b))]
                got.append(vals[0])
            self._bases[ci.qualname] = got
        return got

    def base_classes(self, ci: ClassInfo) -> list[ClassInfo]:
        return [b.cls for b in self.bases(ci) if isinstance(b, ClsRef)]

    def mro(self, ci: ClassInfo) -> list[ClassInfo]:
        """C3 linearization over package classes (outside bases end the chain). The hierarchy is
        walked with a stack, not recursion, at most ``MAX_CLASS_DEPTH`` classes up; a class that
        derives from itself (through any others) has that base cut, with a warning."""
        got = self._mro.get(ci.qualname)
        if got is not None:
            return got
        path: list[ClassInfo] = []  # the classes whose bases are being linearized, outermost first
        stack: list[tuple[ClassInfo, list[ClassInfo] | None]] = [(ci, None)]
        while stack:
            c, bases = stack[-1]
            if c.qualname in self._mro and bases is None:  # reached through another base meanwhile
                stack.pop()
                continue
            if bases is None:
                bases = self._followed_bases(c, path)
                stack[-1] = (c, bases)
                path.append(c)
                stack += [(b, None) for b in reversed(bases) if b.qualname not in self._mro]
                continue
            stack.pop()
            path.pop()
            self._mro[c.qualname] = _c3(c, [self._mro[b.qualname] for b in bases if b.qualname in self._mro])
        return self._mro[ci.qualname]

    def _followed_bases(self, c: ClassInfo, path: list[ClassInfo]) -> list[ClassInfo]:
        """The package bases of ``c`` the MRO walk goes on to: not one it is already inside (a
        cycle), none past ``MAX_CLASS_DEPTH``."""
        bases = self.base_classes(c)
        if len(path) >= MAX_CLASS_DEPTH and bases:
            self.warn_once("class-depth", f"{c.module.path}:{c.node.lineno}:{c.node.col_offset + 1}: class hierarchy "
                           f"deeper than {MAX_CLASS_DEPTH}; the bases of {c.name} are not followed")
            return []
        kept = []
        for b in bases:
            if b is c or b in path:
                self.warn(f"{c.module.path}:{c.node.lineno}:{c.node.col_offset + 1}: class {c.name} derives from "
                          f"itself (through {b.name}); that base is left out")
            elif b not in kept:
                kept.append(b)
        return kept

    def external_bases(self, ci: ClassInfo) -> list[str]:
        out = []
        chain = self.mro(ci)
        self.work += len(chain)
        for c in chain:
            out += [b.qual for b in self.bases(c) if isinstance(b, Ext)]
            out += [b.qual for b in self.bases(c) if isinstance(b, Unknown)]
        return out

    def lookup_method(self, ci: ClassInfo, name: str, after: ClassInfo | None = None) -> FuncInfo | None:
        chain = self.mro(ci)
        self.work += len(chain)  # a class with a thousand bases walks a thousand classes a lookup
        if after is not None and after in chain:
            chain = chain[chain.index(after) + 1:]
        for c in chain:
            if name in c.methods:
                return c.methods[name]
        return None

    def subclasses(self, ci: ClassInfo) -> list[ClassInfo]:
        """Every package class deriving from ``ci`` (transitively, depth first), found by a text
        scan of the package for ``class X(...Name...)`` and confirmed through the resolved bases.
        Walked with a stack: a chain of subclasses of any length costs no recursion."""
        got = self._subclasses.get(ci.qualname)
        if got is not None:
            return got
        index = self._index()
        found: list[ClassInfo] = []
        stack = [(ci, iter(index.get(ci.name, ())))]
        while stack:
            base, candidates = stack[-1]
            for modname, name in candidates:
                sub = self.find_class(modname, name)
                if sub is not None and sub is not ci and sub not in found and base in self.mro(sub):
                    found.append(sub)
                    stack.append((sub, iter(index.get(sub.name, ()))))
                    break
            else:
                stack.pop()
        self._subclasses[ci.qualname] = found
        return found

    def _index(self) -> dict[str, list[tuple[str, str]]]:
        """Base name → (module, class) of every ``class X(...)`` in the packages (a text scan)."""
        if self._class_index is not None:
            return self._class_index
        self._class_index = {}
        for top in self.packages:
            for modname in self.sources.package_modules(top):
                src = self.sources.module(modname)
                if src is None:
                    continue
                for m in _CLASS_RX.finditer(src.text):
                    for base in re.findall(r"[\w.]+", m.group(2)):
                        self._class_index.setdefault(base.split(".")[-1], []).append((modname, m.group(1)))
        return self._class_index

    def few_subclasses(self, ci: ClassInfo, limit: int = 64) -> bool:
        """Whether a class has few enough direct subclass candidates (a text count, nothing
        parsed) to search them all: a base every model derives from (a config) is not."""
        return len(self._index().get(ci.name, ())) <= limit

    def self_assigns(self, ci: ClassInfo) -> dict[str, list[tuple[FuncInfo, Binding]]]:
        """``self.X = ...`` in every method of the class, with the ``if`` they sit under."""
        if ci._self_assigns is None:
            out: dict[str, list[tuple[FuncInfo, Binding]]] = {}
            for fi in ci.methods.values():
                assert not isinstance(fi.node, ast.Lambda)  # a method: a def
                args = fi.node.args.args
                if not args:
                    continue
                me = args[0].arg
                for stmt, cond, tests in walk_tested(fi.node.body):
                    grown = _grown(stmt)
                    if grown is not None and isinstance(grown[0], ast.Attribute) and isinstance(grown[0].value, ast.Name) \
                            and grown[0].value.id == me:  # ``self.layers.append(Block(i))`` in a loop
                        out.setdefault(grown[0].attr, []).append((fi, Binding(grown[1], grown[2], cond, tests=tests)))
                        continue
                    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and isinstance(stmt.target, ast.Attribute) \
                            and isinstance(stmt.target.value, ast.Name) and stmt.target.value.id == me:
                        out.setdefault(stmt.target.attr, []).append((fi, Binding("assign", stmt.value, cond, tests=tests)))
                        continue
                    call = stmt.value if isinstance(stmt, ast.Expr) else None
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "setattr"
                            and len(call.args) == 3 and isinstance(call.args[0], ast.Name) and call.args[0].id == me):
                        name = attr_name(call.args[1])  # ``setattr(self, f"layer_{i}", Layer())``
                        if name is not None:
                            out.setdefault(name, []).append((fi, Binding("assign", call.args[2], cond, tests=tests)))
                        continue
                    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                        for t in targets:
                            for i, el in _flat_targets(t):
                                if isinstance(el, ast.Attribute) and isinstance(el.value, ast.Name) and el.value.id == me:
                                    kind = "unpack" if i >= 0 else "assign"
                                    out.setdefault(el.attr, []).append((fi, Binding(kind, stmt.value, cond, index=i, tests=tests)))
            ci._self_assigns = out
        return ci._self_assigns

    # ---- objects

    def make_obj(self, ci: ClassInfo, site: Site | None, ctor: Thunks | None, declared: bool = False, cond: str = "") -> Obj:
        key = (ci.qualname, site, declared)
        obj = self._objs.get(key)
        if obj is None:
            obj = self._objs[key] = Obj(ci, site, ctor, declared)
        return obj.with_cond(cond) if cond else obj

    def init_frames(self, obj: Obj) -> dict[str, Frame]:
        """The ``__init__`` frames an instance's construction runs, by class: the constructor
        call binds the first ``__init__``; each ``super().__init__(...)`` binds the next."""
        if obj.inits is not None:
            return obj.inits
        obj.inits = {}
        chain = self.mro(obj.cls)
        args = obj.ctor
        start = 0
        super_call: tuple[ast.Call, Frame] | None = None
        while True:
            init = None
            for i in range(start, len(chain)):
                if "__init__" in chain[i].methods:
                    init, start = chain[i].methods["__init__"], i + 1
                    break
            if init is None:
                break
            if super_call is not None:
                call, caller = super_call
                args = Thunks(_bind_exprs(init, call, skip_self=True), caller, self.site(caller.module, call))
            frame = Frame(init, init.module, obj, args)
            obj.inits[cast(ClassInfo, init.cls).qualname] = frame  # a method: it has its class
            super_init = self._super_init(init)
            args, super_call = None, (super_init, frame) if super_init is not None else None
        return obj.inits

    def _super_init(self, init: FuncInfo) -> ast.Call | None:
        """The ``super().__init__(...)`` call of an ``__init__``, found once per function (not
        once per instance: a long ``__init__`` built at many places would cost their product)."""
        key = init.key
        if key not in self._super_inits:
            found = None
            for call in ast.walk(init.node):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__"
                        and isinstance(call.func.value, ast.Call) and isinstance(call.func.value.func, ast.Name)
                        and call.func.value.func.id == "super"):
                    found = call
                    break
            self._super_inits[key] = found
        return self._super_inits[key]

    def attr_of_obj(self, obj: Obj, name: str) -> list[Value]:
        if name in obj.attrs:
            return obj.attrs[name]
        obj.attrs[name] = []  # recursion guard
        out = self._attr_in(obj, name, self.mro(obj.cls))
        if obj.declared and not known(out) and self.few_subclasses(obj.cls):
            # only a subclass defines it; methods found in the MRO get their subclasses'
            # overrides where they are called (``method_alternatives``)
            mro = self.mro(obj.cls)
            chosen = self.chosen(obj.cls)
            out += self._attr_in(obj, name, [c for c in (chosen if chosen is not None else self.subclasses(obj.cls))
                                             if c not in mro])
        obj.attrs[name] = dedupe(out)
        return obj.attrs[name]

    def _attr_in(self, obj: Obj, name: str, classes: list[ClassInfo]) -> list[Value]:
        out: list[Value] = []
        # What construction assigns is the module's state; other methods' assignments (mode
        # switches such as ``enter_torch_compile``) count only where construction assigns nothing.
        inits = self.init_frames(obj) if not obj.declared else {}
        constructed: list[Value] = []
        later: list[Value] = []
        for c in classes:
            for fi, b in self.self_assigns(c).get(name, []):
                frame = inits.get(c.qualname) if fi.name == "__init__" else None
                if frame is None:
                    frame = Frame(fi, fi.module, obj)
                got = self.live_values(b, frame)
                (constructed if fi.name == "__init__" else later).extend(got)
        out += constructed if known(constructed) else constructed + later
        for c in classes:
            if name in c.methods:
                fi = c.methods[name]
                owner = obj if c in self.mro(obj.cls) else self.make_obj(c, None, None, declared=True)
                if fi.is_property:
                    out += self.returns(Fn(fi, owner), None, Frame(None, c.module), 0)
                elif "staticmethod" in fi.decorators:
                    out.append(Fn(fi))
                else:
                    out.append(Fn(fi, owner))
                break  # the MRO's first definition
        for c in classes:
            for expr in c.body_assigns.get(name, []):
                out += self.eval(expr, Frame(None, c.module))
            if name in c.annotations and not known(out):
                out += self.declared(c.annotations[name], Frame(None, c.module))
        return out

    def declared(self, annotation: ast.expr | None, frame: Frame) -> list[Value]:
        """Instances of the types an annotation names (``Optional[X]``, ``X | None``, ``"X"``)."""
        if annotation is None:
            return []
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            annotation = parse_expression(annotation.value)
            if annotation is None:
                return []
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            return self.declared(annotation.left, frame) + self.declared(annotation.right, frame)
        if isinstance(annotation, ast.Subscript):
            head = ast.unparse(annotation.value).split(".")[-1]
            inner = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
            if head in ("Optional", "Union"):
                return [v for e in inner for v in self.declared(e, frame)]
            if head in ("List", "list", "Sequence", "Tuple", "tuple", "Iterable"):
                return [Seq([v for e in inner for v in self.declared(e, frame)])]
            return []
        out: list[Value] = []
        for v in self.eval(annotation, frame):
            if isinstance(v, ClsRef):
                out.append(self.make_obj(v.cls, None, None, declared=True))
            elif isinstance(v, Ext) and v.qual.split(".")[-1][:1].isupper():
                out.append(ExtObj(v.qual))
        return out

    # ---- names

    def lookup_global(self, mod: SourceModule, name: str) -> list[Value]:
        key = (mod.name, name)
        if key in self._global_cache:
            return self._global_cache[key]
        if key in self._global_busy:
            return []
        self._global_busy.add(key)
        try:
            out = []
            frame = Frame(None, mod)
            for b in self.globals_of(mod).get(name, []):
                out += self.live_values(b, frame)
            if not out:  # ``from .ops import *`` (chains of them): the name may come from there
                for stmt in (self.tree(mod) or ast.Module(body=[], type_ignores=[])).body:
                    if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                        got = self.import_from(_import_base(stmt, mod), name)
                        if known(got):
                            out = got
                            break
            if any(isinstance(v, DictV) for v in out):  # a registry: what decorators put in it
                regs = self._registrations(mod, name)
                if regs:
                    out.append(DictV(regs))
            if not out and name == "__name__":
                out = [Unknown(mod.name)]
        finally:
            self._global_busy.discard(key)
        out = dedupe(out)
        self._global_cache[key] = out
        return out

    def _binding_values(self, b: Binding, frame: Frame) -> list[Value]:
        mod = frame.module
        if b.kind == "def":
            fi = self.func_info(cast(FunctionNode, b.node), mod, None, outer=_outer_prefix(frame))
            return [Fn(fi, None, frame if frame.fn is not None else None)]
        if b.kind == "class":
            return [ClsRef(self.class_info(cast(ast.ClassDef, b.node), mod, outer=_outer_prefix(frame)))]
        if b.kind == "importmod":
            return [self.module_value(b.target)]
        if b.kind == "import":
            base = _import_base(cast(ast.ImportFrom, b.node), mod)
            return self.import_from(base, b.target)
        # the other kinds' node: the expression the value comes from (None for a starred target)
        value = cast("ast.expr | None", b.node)
        if b.kind in ("assign", "with"):
            return self.eval(value, frame) if value is not None else []
        if b.kind == "unpack":
            return self.unpack(self.eval(cast(ast.expr, value), frame), b.index)  # a tuple's: never starred
        if b.kind == "append":  # a list grown one element at a time holds that element
            return [Seq(self.eval(value, frame))] if value is not None else []
        if b.kind == "extend":
            return [Seq(self.elements(self.eval(value, frame)))] if value is not None else []
        if b.kind == "for":
            vals = self.eval(value, frame) if value is not None else []
            elems = self.elements(vals)
            return self.unpack(elems, b.index) if b.index >= 0 else elems
        return []

    def module_value(self, name: str) -> Value:
        return ModRef(name) if self.module(name) is not None else Ext(name)

    def import_from(self, module: str, name: str) -> list[Value]:
        mod = self.module(module)
        if mod is None:
            return [Ext(f"{module}.{name}" if module else name)]
        if name in self.globals_of(mod):
            return self.lookup_global(mod, name)
        sub = f"{module}.{name}"
        if self.module(sub) is not None:
            return [ModRef(sub)]
        key = (module, name)
        if key in self._import_busy:  # modules that star-import each other
            return []
        self._import_busy.add(key)
        try:
            # ``from pkg import name`` where pkg re-exports by ``from .x import *``
            for stmt in (self.tree(mod) or ast.Module(body=[], type_ignores=[])).body:
                if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                    got = self.import_from(_import_base(stmt, mod), name)
                    if known(got):
                        return got
        finally:
            self._import_busy.discard(key)
        return [Unknown(f"{module}.{name}")]

    def name(self, ident: str, frame: Frame) -> list[Value]:
        f: Frame | None = frame
        while f is not None:
            if f.fn is not None:
                got = self._local(ident, f)
                if got is not None:
                    return got
            f = f.parent
        got = self.lookup_global(frame.module, ident) if frame.module is not None else []
        if got:
            return got
        if hasattr(builtins, ident):
            return [Ext(f"builtins.{ident}")]
        return [Unknown(ident)]

    def _local(self, ident: str, frame: Frame) -> list[Value] | None:
        fi = cast(FuncInfo, frame.fn)  # asked of a function's frame only
        if ident in frame.cache:
            return frame.cache[ident]
        if ident in frame.busy:
            return []
        params = fi.params
        bindings = self.local_bindings(fi).get(ident)
        if ident not in params and not bindings:
            return None
        frame.busy.add(ident)
        try:
            out: list[Value] = []
            if ident in params:
                out += self._param(ident, params[ident], frame)
            for b in bindings or []:
                out += self.live_values(b, frame)
        finally:
            frame.busy.discard(ident)
        out = dedupe(out)
        frame.cache[ident] = out
        return out

    def _param(self, ident: str, spec: tuple[int, ast.arg, ast.expr | None], frame: Frame) -> list[Value]:
        index, arg, default = spec
        fi = cast(FuncInfo, frame.fn)  # a parameter: of the frame's function
        if index == 0 and fi.cls is not None and not isinstance(fi.node, ast.Lambda) and "staticmethod" not in fi.decorators:
            if frame.self_obj is not None:
                return [frame.self_obj]
            if "classmethod" in fi.decorators:
                return [ClsRef(fi.cls)]
            return [self.make_obj(fi.cls, None, None, declared=True)]
        if frame.args is not None and ident in frame.args.exprs:
            out = []
            for e in frame.args.exprs[ident]:
                out += self.eval(e, frame.args.frame)
            if known(out):
                return out
        out = self.declared(arg.annotation, frame_for_module(fi.module))
        if default is not None and not (isinstance(default, ast.Constant) and default.value is None):
            out += self.eval(default, frame_for_module(fi.module))
        return out or [Unknown(ident)]

    def local_bindings(self, fi: FuncInfo) -> dict[str, list[Binding]]:
        got = self._locals.get(fi.key)
        if got is None:
            got = {}
            if isinstance(fi.node, ast.Lambda):
                body: list[ast.stmt] = []
            else:
                body = fi.node.body
            for name, b in scope_bindings(body):
                got.setdefault(name, []).append(b)
            for comp in ast.walk(fi.node):  # comprehension variables, for ``[f(x) for x in xs]``
                if isinstance(comp, ast.comprehension):
                    for name, b in _target_bindings(comp.target, comp.iter, "", kind="for"):
                        got.setdefault(name, []).append(b)
            self._locals[fi.key] = got
        return got

    # ---- expressions

    def site(self, mod: SourceModule, node: ast.expr | ast.stmt) -> Site:
        return Site(mod.path, node.lineno, node.col_offset + 1, getattr(node, "end_lineno", None) or node.lineno)

    def eval(self, expr: ast.expr, frame: Frame) -> list[Value]:
        if self._depth >= MAX_RESOLVE_DEPTH:
            return [self._too_deep(expr, frame)]
        if self.work > self.work_budget():
            return [self._work_spent(expr, frame)]
        self._depth += 1
        self.evaluations += 1
        try:
            got = self._eval(expr, frame)
        finally:
            self._depth -= 1
        self.work += 1 + sum(map(value_size, got))  # the evaluation, and every value it handed on
        return dedupe(got)

    def _work_spent(self, expr: ast.expr, frame: Frame) -> Value:
        """What an evaluation past the work budget gives: an unknown value, said once."""
        where = frame.module.path if frame.module is not None else "?"
        self.warn_once("resolve-work", f"{where}:{expr.lineno}:{expr.col_offset + 1}: resolution took "
                       f"{self.work_budget():,} units of work (evaluations and the values they handed on); "
                       "values from here on are left unknown")
        return Unknown("…")

    def _too_deep(self, expr: ast.expr, frame: Frame) -> Value:
        """What an evaluation past ``MAX_RESOLVE_DEPTH`` gives: an unknown value, said once."""
        where = frame.module.path if frame.module is not None else "?"
        self.warn_once("resolve-depth", f"{where}:{expr.lineno}:{expr.col_offset + 1}: resolution nests deeper than "
                       f"{MAX_RESOLVE_DEPTH} evaluations here; the value is left unknown")
        return Unknown("…")

    def _eval(self, e: ast.expr, frame: Frame) -> list[Value]:
        if isinstance(e, ast.Name):
            return self.name(e.id, frame)
        if isinstance(e, ast.Attribute):
            out = []
            for v in self.eval(e.value, frame):
                out += self.attr(v, e.attr, e)
            return out
        if isinstance(e, ast.Call):
            return self.call(e, frame)
        if isinstance(e, ast.Subscript):
            out = []
            index = self.key_value(e.slice, frame)
            for v in self.eval(e.value, frame):
                out += self.subscript(v, index, isinstance(e.slice, ast.Slice), frame, e)
            return out or [Unknown(_short(e))]
        if isinstance(e, ast.IfExp):
            t = self.consts.truth(e.test, frame)
            if t is not None:
                self.mark_pruned(e.test, frame)
                return self.eval(e.body if t else e.orelse, frame)
            return ([v.with_cond(cond_text(e.test)) for v in self.eval(e.body, frame)]
                    + [v.with_cond(cond_text(e.test, True)) for v in self.eval(e.orelse, frame)])
        if isinstance(e, ast.BoolOp):
            return [v for x in e.values for v in self.eval(x, frame)]
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            items = [self.eval(x, frame) for x in e.elts if not isinstance(x, ast.Starred)]
            star = [v for x in e.elts if isinstance(x, ast.Starred) for v in self.elements(self.eval(x.value, frame))]
            return [Seq(dedupe([v for it in items for v in it] + star), None if star else items)]
        if isinstance(e, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return [Seq(self.eval(e.elt, frame))]
        if isinstance(e, ast.Dict):
            entries: list[tuple[object, list[Value]]] = []
            for k, item in zip(e.keys, e.values):
                key = k.value if isinstance(k, ast.Constant) else None
                entries.append((key, self.eval(item, frame)))
            return [DictV(entries)]
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add):
            left, right = self.eval(e.left, frame), self.eval(e.right, frame)
            seqs = [v for v in left + right if isinstance(v, Seq)]
            if seqs:
                return [Seq(dedupe([x for s in seqs for x in s.elems]))]
            return [Unknown(_short(e))]
        if isinstance(e, ast.Lambda):
            fi = self.func_info(e, frame.module, None)
            return [Fn(fi, None, frame)]
        if isinstance(e, ast.NamedExpr):
            return self.eval(e.value, frame)
        if isinstance(e, ast.Await):
            return self.eval(e.value, frame)
        return [Unknown(_short(e))]

    def attr(self, v: Value, name: str, node: ast.AST | None = None) -> list[Value]:
        if isinstance(v, Obj):
            got = self.attr_of_obj(v, name)
            return got or [self._unknown_attr(name, node)]
        if isinstance(v, ClsRef):
            if name == "apply" and self.is_autograd_function(v.cls):  # ``_attention.apply(q, k, v)`` runs ``forward``
                fi = self.lookup_method(v.cls, "forward")
                if fi is not None:
                    return [Fn(fi)]
            for c in self.mro(v.cls):
                if name in c.methods:
                    return [Fn(c.methods[name])]
                if name in c.body_assigns:
                    out = []
                    for expr in c.body_assigns[name]:
                        out += self.eval(expr, frame_for_module(c.module))
                    return out
            return [self._unknown_attr(name, node)]
        if isinstance(v, SuperRef):
            fi = self.lookup_method(v.obj.cls if v.obj else v.cls, name, after=v.cls)
            if fi is not None:
                return [Fn(fi, v.obj)]
            return [Ext(f"super.{name}")]
        if isinstance(v, ModRef):
            mod = self.module(v.qual)
            if mod is not None and name in self.globals_of(mod):
                return self.lookup_global(mod, name)
            got = self.import_from(v.qual, name) if mod is not None else []  # star re-exports
            if known(got):
                return got
            lazy = self._lazy_attr(mod, name) if mod is not None else []
            if lazy:
                return lazy
            return [self.module_value(f"{v.qual}.{name}")]
        if isinstance(v, Ext):
            return [Ext(f"{v.qual}.{name}")]
        if isinstance(v, ExtObj):
            return [self._unknown_attr(name, node)]
        return [self._unknown_attr(name, node)]

    @staticmethod
    def _unknown_attr(name: str, node: ast.AST | None) -> Unknown:
        return Unknown(name if node is None else _short(node))

    def key_value(self, e: ast.expr, frame: Frame) -> object:
        """A subscript's or a mapping getter's key where it is a constant: written so, or made
        one by the configuration (``ACT2FN[config.hidden_act]``); else None."""
        if isinstance(e, ast.Constant):
            return e.value
        if isinstance(e, ast.Slice):
            return None
        got = self.consts.value(e, frame)
        return None if got is MISSING else got

    def subscript(self, v: Value, index: object, is_slice: bool, frame: Frame, node: ast.Subscript | None = None) -> list[Value]:
        if isinstance(v, Seq):
            if is_slice:
                return [v]
            if isinstance(index, int) and v.items is not None and -len(v.items) <= index < len(v.items):
                return v.items[index]
            return v.elems
        if isinstance(v, DictV):
            return self.dict_entry(v, index, source_text(node.slice) if node is not None else "key")
        if isinstance(v, Obj) and self.is_mapping(v.cls):
            getitem = self.lookup_method(v.cls, "__getitem__")
            if getitem is not None:
                call = self._key_call(node, node.slice) if node is not None else None
                return _in_caller_terms(self.returns(Fn(getitem, v), call, frame, 0), getitem, call, True)
            return self.mapping_contents(v, index)
        if isinstance(v, Ext):
            return [Ext(v.qual)]  # ``torch.float32``-like; a subscripted typing alias stays external
        return []

    def is_autograd_function(self, ci: ClassInfo) -> bool:
        """A ``torch.autograd.Function``: its ``apply`` runs its static ``forward``."""
        return "apply" not in ci.methods and any(
            b in ("torch.autograd.Function", "torch.autograd.function.Function") for b in self.external_bases(ci))

    def is_mapping(self, ci: ClassInfo) -> bool:
        return any(b.split(".")[-1] in _MAPPING_BASES for b in self.external_bases(ci))

    def dict_entry(self, d: DictV, index: object, index_text: str) -> list[Value]:
        """``d[index]``: the entry a known key names (none when every key is a constant and none
        matches: a ``KeyError``, or a getter's default); with the key unknown, every entry,
        each marked with the key that selects it."""
        if index is not None:
            exact = [vals for k, vals in d.entries if k == index]
            if exact:
                return exact[0]
            if d.entries and all(k is not None for k, _ in d.entries):
                return []
        return [x.with_cond(f"{index_text} == {k!r}" if k is not None else "") for k, vals in d.entries for x in vals]

    def _key_call(self, node: ast.AST, key: ast.expr) -> ast.Call:
        """A call ``(key)`` standing for ``m[key]`` or ``m.get(key)`` to bind ``__getitem__``'s
        key; one per place, so returns stay cached per calling context."""
        call = self._key_calls.get(node)
        if call is None:
            call = ast.copy_location(ast.Call(func=ast.Name("__getitem__", ast.Load()), args=[key], keywords=[]), node)
            self._key_calls[node] = call
        return call

    def mapping_contents(self, obj: Obj, index: object = None) -> list[Value]:
        """The values a dict subclass was built from (its constructor's first argument): the
        entry a known key names, else every one."""
        if obj.ctor is None:
            return []
        exprs = next(iter(obj.ctor.exprs.values()), [])
        out = []
        for e in exprs:
            for d in self.eval(e, obj.ctor.frame):
                if isinstance(d, DictV):
                    out += self.dict_entry(d, index, "key")
        return out

    def elements(self, values: list[Value]) -> list[Value]:
        out = []
        for v in values:
            if isinstance(v, Seq):
                out += v.elems
            elif isinstance(v, DictV):
                out += [Unknown("key")]
            elif isinstance(v, Obj):
                it = self.lookup_method(v.cls, "__iter__")
                if it is None:
                    out += self.subscript(v, None, False, frame_for_module(v.cls.module))
        return out

    def _registrations(self, mod: SourceModule, name: str) -> list[tuple[object, list[Value]]]:
        """The entries a decorator registry gets: ``@register("fast")`` on a function, where
        ``register``'s body (its inner function) stores into the module's dict ``name``
        (``REG[key] = fn``). Keys are the decorator's first argument where it is a constant.
        Modules are read only where their text names the decorator."""
        key = (mod.name, name)
        if key in self._registrations_cache:
            return self._registrations_cache[key]
        self._registrations_cache[key] = []
        tree = self.tree(mod) or ast.Module(body=[], type_ignores=[])
        factories = [f.name for f in tree.body if isinstance(f, ast.FunctionDef) and any(
            isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name
            for s in ast.walk(f) if isinstance(s, ast.Assign) for t in s.targets)]
        out: list[tuple[object, list[Value]]] = []
        if factories:
            rx = re.compile(r"@[\w.]*\b(?:" + "|".join(map(re.escape, factories)) + r")\b")
            for top in self.packages:
                for modname in self.sources.package_modules(top):
                    src = self.sources.module(modname)
                    if src is None or not rx.search(src.text):
                        continue
                    for node in ast.walk(self.tree(src) or ast.Module(body=[], type_ignores=[])):
                        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            continue
                        for d in node.decorator_list:
                            call = d if isinstance(d, ast.Call) else None
                            f = call.func if call is not None else d
                            fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                            if fname in factories:
                                k = call.args[0].value if call is not None and call.args and isinstance(call.args[0], ast.Constant) else None
                                out.append((k, [Fn(self.func_info(node, src, None))]))
        self._registrations_cache[key] = out
        return out

    def _lazy_attr(self, mod: SourceModule, name: str) -> list[Value]:
        """A name a module hands out through its ``__getattr__`` (PEP 562 lazy exports): looked
        up in the modules that function imports (``from . import impl``, ``from .impl import x``)."""
        fn = next((s for s in (self.tree(mod) or ast.Module(body=[], type_ignores=[])).body
                   if isinstance(s, ast.FunctionDef) and s.name == "__getattr__"), None)
        if fn is None:
            return []
        for stmt in ast.walk(fn):
            if isinstance(stmt, ast.ImportFrom):
                base = _import_base(stmt, mod)
                for a in stmt.names:
                    target = f"{base}.{a.name}" if base else a.name
                    got = self.import_from(target, name) if self.module(target) is not None else self.import_from(base, name)
                    if known(got):
                        return got
            elif isinstance(stmt, ast.Import):
                for a in stmt.names:
                    if self.module(a.name) is not None and known(got := self.import_from(a.name, name)):
                        return got
        return []

    def _view(self, values: list[Value], view: str) -> list[Value]:
        """``d.items()``, ``d.values()``, ``d.keys()`` of a dict (an ``nn.ModuleDict``), as a
        sequence: of (key, value) tuples, of values, or of keys."""
        out: list[Value] = []
        for v in values:
            if isinstance(v, DictV):
                keys: list[Value] = [Ext("builtins.str")]
                vals = [x for _, xs in v.entries for x in xs]
                if view == "values":
                    out.append(Seq(vals))
                elif view == "keys":
                    out.append(Seq(keys))
                else:
                    out.append(Seq([Seq(keys + vals, [keys, vals])]))
        return out

    def unpack(self, values: list[Value], index: int) -> list[Value]:
        out = []
        for v in values:
            if isinstance(v, Seq):
                if v.items is not None and index < len(v.items):
                    out += v.items[index]
                elif v.items is None:
                    out += v.elems
        return out

    def call(self, e: ast.Call, frame: Frame) -> list[Value]:
        func = e.func
        if isinstance(func, ast.Name) and func.id == "super" and frame.fn is not None and frame.fn.cls is not None:
            return [SuperRef(frame.fn.cls, frame.self_obj)]
        if isinstance(func, ast.Name) and func.id == "getattr" and len(e.args) >= 2 and attr_name(e.args[1]) is not None:
            out: list[Value] = []
            for v in self.eval(e.args[0], frame):
                out += known(self.attr(v, cast(str, attr_name(e.args[1]))))  # a name: checked above
            if len(e.args) > 2:
                out += self.eval(e.args[2], frame)
            return out or [Unknown(_short(e))]
        if isinstance(func, ast.Attribute) and func.attr in _MAPPING_GETTERS:
            got = self._mapping_get(func, e, frame)
            if got:
                return got
        if isinstance(func, ast.Attribute) and func.attr in _VIEWS and not e.args:
            got = self._view(self.eval(func.value, frame), func.attr)
            if got:
                return got
        callees = self.eval(func, frame)
        out = []
        for c in callees:
            out += self.call_value(c, e, frame)
        return out or [Unknown(_short(e))]

    def call_value(self, c: Value, e: ast.Call, frame: Frame) -> list[Value]:
        mod = frame.module
        if isinstance(c, ClsRef):
            return [self.make_obj(c.cls, self.site(mod, e), Thunks(_bind_exprs(c.cls, e), frame, self.site(mod, e)), cond=c.cond)]
        if isinstance(c, Fn):
            if frame.depth >= MAX_CALL_DEPTH:
                return [Unknown(_short(e))]
            got = [v for alt in self.method_alternatives(c)
                   for v in _in_caller_terms(self.returns(alt, e, frame, frame.depth + 1), alt.fn, e,
                                             alt.bound is not None or _is_method(alt.fn))]
            if known(got):
                return got
            return got + self._pass_through(e, frame)
        if isinstance(c, Ext):
            last = c.qual.split(".")[-1]
            if c.qual in self.jit_loaders:
                return [ExtObj(JIT_PREFIX + c.qual)]
            if c.qual == "torch.nn.ModuleDict" and e.args:
                got = [v for v in self.eval(e.args[0], frame) if isinstance(v, DictV)]
                if got:
                    return got
            if c.qual == "torch.nn.Sequential":  # its modules as arguments (or one OrderedDict, or *a list)
                args = [v for a in e.args for v in self.eval(a.value if isinstance(a, ast.Starred) else a, frame)]
                mods = [x for v in args for x in (v.elems if isinstance(v, Seq) else
                                                  [y for _, ys in v.entries for y in ys] if isinstance(v, DictV) else [v])]
                return [Seq(dedupe(mods), None)]
            if c.qual in ("torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.ModuleDict") or (
                    c.qual.startswith("builtins.") and last in _BUILTIN_SEQ):
                return [Seq(self.elements([v for a in e.args for v in self.eval(a, frame)]))]
            if c.qual in ("builtins.enumerate", "builtins.zip") and e.args:
                # one tuple per step: (index, element) or (element of each argument, ...)
                columns = [self.elements(self.eval(a, frame)) for a in e.args]
                numbers: list[list[Value]] = [[Ext("builtins.int")]] if last == "enumerate" else []
                items = numbers + columns
                return [Seq([Seq(dedupe([v for col in items for v in col]), items)])]
            if (c.qual in ("functools.partial", "builtins.staticmethod", "builtins.classmethod") or c.qual in self.compilers) \
                    and e.args:
                return self.eval(e.args[0], frame)
            if last[:1].isupper():
                return [ExtObj(c.qual, c.cond)]
            return self._pass_through(e, frame)
        if isinstance(c, Unknown):
            return self._pass_through(e, frame)
        return []

    def _mapping_get(self, func: ast.Attribute, e: ast.Call, frame: Frame) -> list[Value]:
        """``super().__getitem__(key)`` / ``super().get(key, default)`` in a dict subclass: the
        entry of the contents the mapping was built from (``ClassInstantier(ACT2CLS)``) that a
        known key names, else every entry; through the class's own ``__getitem__`` where it
        has one (``get`` of a ``MutableMapping``); and the default where the key may be missing."""
        out = []
        index = self.key_value(e.args[0], frame) if e.args else None
        for v in self.eval(func.value, frame):
            obj = v.obj if isinstance(v, SuperRef) else v if isinstance(v, Obj) else None
            if obj is None or not self.is_mapping(obj.cls):
                continue
            if isinstance(v, Obj) and self.lookup_method(obj.cls, func.attr) is not None:
                continue
            getitem = self.lookup_method(obj.cls, "__getitem__") if func.attr != "__getitem__" else None
            if getitem is not None and e.args:
                call = self._key_call(e, e.args[0])
                found = _in_caller_terms(self.returns(Fn(getitem, obj), call, frame, 0), getitem, call, True)
            else:
                found = self.mapping_contents(obj, index)
            out += found
            if func.attr == "get" and len(e.args) > 1 and (index is None or not found):
                missing = f"{source_text(e.args[0])} not in the mapping" if found else ""
                out += [v.with_cond(missing) for v in self.eval(e.args[1], frame)]
        return out

    def _pass_through(self, e: ast.Call, frame: Frame) -> list[Value]:
        """What an unknown call may hand back: a function, class or list of modules given to it
        (registries' ``get(key, default)``, wrappers such as ``offloader.wrap_modules(layers)``)."""
        out: list[Value] = []
        for a in list(e.args) + [k.value for k in e.keywords]:
            if isinstance(a, (ast.Name, ast.Attribute, ast.GeneratorExp, ast.ListComp, ast.Lambda)):
                out += [v for v in self.eval(a, frame) if isinstance(v, (Fn, ClsRef, Seq))]
        return out

    def returns(self, fn: Fn, call: ast.Call | None, caller: Frame | None, depth: int) -> list[Value]:
        """The values a function call returns (its ``return`` expressions, arguments bound)."""
        fi = fn.fn
        self.work += 1  # a cached answer too: callers ask for the returns of every alternative
        if fi.cls is not None and fi.name == "__init__":
            return []
        memo = (fi.key, fn.bound.key if fn.bound is not None else None, call,  # the caller's context
                caller.args.key if caller is not None and caller.args is not None else None,  # decides what
                caller.self_obj.key if caller is not None and caller.self_obj is not None else None)  # it passes
        if memo in self._returns:
            return self._returns[memo]
        if self.work > self.context_budget() and call is not None and caller is not None:
            self._context_work_spent(call, caller)
            return self.returns(fn, None, None, depth)
        self._returns[memo] = []  # recursion guard
        self._returns[memo] = got = self._returns_of(fn, call, caller, depth)
        return got

    def _context_work_spent(self, call: ast.Call, caller: Frame) -> None:
        """Said once: past the context budget, calls are resolved without their arguments."""
        if "return-contexts" not in self._warned:
            site = self.site(caller.module, call)
            self.warn_once("return-contexts", f"{site.path}:{site.line}:{site.col}: resolution took "
                           f"{self.context_budget():,} units of work (evaluations and the values they handed on); "
                           "calls from here on are resolved without their arguments")

    def _returns_of(self, fn: Fn, call: ast.Call | None, caller: Frame | None, depth: int) -> list[Value]:
        fi = fn.fn
        args = None
        if call is not None and caller is not None:
            args = Thunks(_bind_exprs(fi, call, skip_self=fn.bound is not None or _is_method(fi)), caller,
                          self.site(caller.module, call))
        frame = Frame(fi, fi.module, fn.bound, args, fn.closure, depth)
        if isinstance(fi.node, ast.Lambda):
            return self.eval(fi.node.body, frame)
        out = []
        for stmt, cond in _walk_stmts(fi.node.body, prune=lambda test: self.truth(test, frame)):
            self.work += 1  # every context walks the whole body for its returns
            if isinstance(stmt, ast.Return) and stmt.value is not None:
                out += [v.with_cond(cond) for v in self.eval(stmt.value, frame)]
        return dedupe(out)

    def truth(self, test: ast.expr, frame: Frame) -> bool | None:
        """A condition's value when the types known here decide it (``isinstance(layer, FusedMoE)``
        for a ``layer`` that is a ``LinearBase``), else None. Factories dispatch this way."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            t = self.truth(test.operand, frame)
            return None if t is None else not t
        if isinstance(test, ast.BoolOp):
            values = [self.truth(v, frame) for v in test.values]
            if isinstance(test.op, ast.And):
                return False if False in values else True if all(v is True for v in values) else None
            return True if True in values else False if all(v is False for v in values) else None
        if (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
                and len(test.args) == 2):
            objs = self.eval(test.args[0], frame)
            if not objs or not all(isinstance(o, Obj) and not o.declared for o in objs):
                return None
            kinds = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
            classes = [v for k in kinds for v in self.eval(k, frame)]
            if not all(isinstance(c, (ClsRef, Ext)) for c in classes):
                return None
            names = {c.qual for c in classes if isinstance(c, Ext)}
            results = set()
            for o in cast("list[Obj]", objs):  # every one an instance: checked above
                mro = self.mro(o.cls)
                self.work += len(classes) * len(mro)
                hit = any(isinstance(c, ClsRef) and c.cls in mro for c in classes)
                if not hit and names:  # an outside class may be a base of this one
                    ext = set(self.external_bases(o.cls))
                    if ext & names:
                        hit = True
                    elif not ext <= {"torch.nn.Module", "builtins.object"}:
                        return None
                results.add(hit)
            return results.pop() if len(results) == 1 else None
        return self.consts.truth(test, frame)

    def excluded(self, tests: Tests, frame: Frame) -> bool:
        """Whether the configuration (``knowns``) decides against a statement's ``if`` tests:
        the branch is pruned, and counted in ``pruned``. With no configuration, nothing is."""
        if self.knowns.empty:
            return False
        for test, negated in tests:
            if self.consts.truth(test, frame) is negated:
                self.mark_pruned(test, frame)
                return True
        return False

    def mark_pruned(self, test: ast.expr, frame: Frame) -> None:
        self.pruned.add((frame.module.path if frame.module is not None else "?", test.lineno, test.col_offset + 1))

    def live_cond(self, cond: str, tests: Tests, frame: Frame) -> str:
        """The condition a binding or call written under ``tests`` is marked with: ``cond`` as
        written with no configuration; else its innermost ``if`` test that the configuration
        leaves undecided ("" when every one is decided for it)."""
        if not tests or self.knowns.empty:
            return cond
        got = self.consts.live_cond(tests, frame)
        return cond_text(got[0], got[1]) if got else ""

    def live_values(self, b: Binding, frame: Frame) -> list[Value]:
        """A binding's values, marked with its live condition; none where the configuration
        decides against it."""
        if self.excluded(b.tests, frame):
            return []
        cond = self.live_cond(b.cond, b.tests, frame)
        return [v.with_cond(cond) for v in self._binding_values(b, frame)]

    # ---- calls as the op tracer sees them

    def callees(self, call: ast.Call, frame: Frame) -> list[Value]:
        """What a call invokes (not what it returns): ``self.mlp(...)`` → the module instance(s),
        ``self.forward_prepare(...)`` → the bound method, ``bmm_fp8(...)`` → ``Ext``."""
        func = call.func
        if isinstance(func, ast.Subscript) and not is_index(func):  # ``kernel[grid](...)``: a Triton launch
            return [v for v in self.eval(func.value, frame) if isinstance(v, Fn) and is_triton_jit(v.fn)]
        return self.eval(func, frame)

    def chosen(self, ci: ClassInfo) -> list[ClassInfo] | None:
        """The classes a declared ``ci`` can be under the user's choices (``--attention-backend``):
        None where no choice bears on it (then it may be any subclass)."""
        if not self.knowns.selections:
            return None
        from layerc.passes.pyregistry import selected_classes

        return selected_classes(self, ci)

    def _chosen_methods(self, chosen: list[ClassInfo], names: tuple[str, ...]) -> list[Fn]:
        out = []
        for c in chosen:
            for name in names:
                fi = self.lookup_method(c, name)
                if fi is not None:
                    out.append(Fn(fi, self.make_obj(c, None, None, declared=True)))
                    break
        return dedupe(out)

    def forward_of(self, obj: Obj) -> list[Fn]:
        """What calling a module instance runs: ``__call__`` when a package class defines one,
        else ``forward`` (and, for a declared type, every subclass's override, or only the
        classes the user's choices select)."""
        chosen = self.chosen(obj.cls) if obj.declared else None
        if chosen is not None:
            got = self._chosen_methods(chosen, ("__call__", "forward"))
            if got:
                return got
        out = []
        for name in ("__call__", "forward"):
            fi = self.lookup_method(obj.cls, name)
            if fi is not None:
                out.append(Fn(fi, obj))
                break
        if obj.declared:
            for sub in self.subclasses(obj.cls):
                fi = sub.methods.get("forward") or sub.methods.get("__call__")
                if fi is not None:
                    out.append(Fn(fi, self.make_obj(sub, None, None, declared=True)))
            self.work += len(out)
        return _by_type(out)

    def method_alternatives(self, fn: Fn) -> list[Fn]:
        """A bound method on a declared (annotation-only) instance may be any subclass's override."""
        if fn.bound is None or not fn.bound.declared or fn.fn.cls is None:
            return [fn]
        chosen = self.chosen(fn.bound.cls)
        if chosen is not None:
            got = self._chosen_methods(chosen, (fn.fn.name,))
            if got:
                return got
        out = [fn]
        for sub in self.subclasses(fn.bound.cls):
            fi = sub.methods.get(fn.fn.name)
            if fi is not None and fi is not fn.fn:
                out.append(Fn(fi, self.make_obj(sub, None, None, declared=True)))
        self.work += len(out)
        return _by_type(out)


# -- helpers --------------------------------------------------------------------------------

def _by_type(alternatives: list[Fn]) -> list[Fn]:
    """Alternatives that a declared instance's runtime type picks, each marked with that type
    (one alone is no choice)."""
    if len(alternatives) < 2:
        return alternatives
    return [f.with_cond(f"the instance is a {f.bound.cls.name}") if f.bound is not None else f for f in alternatives]


def check_module_size(mod: SourceModule) -> None:
    """Before a module is parsed: more than ``MAX_MODULE_TOKENS`` tokens make it unreadable (its
    ``tree`` raises a ParseError at the token past the limit). Only a module of more characters
    than that is scanned."""
    if mod._tree is not None or mod.error is not None or len(mod.text) <= MAX_MODULE_TOKENS:
        return
    for i, m in enumerate(_TOKEN.finditer(mod.text)):
        if i == MAX_MODULE_TOKENS:
            at = m.start()
            line = mod.text.count("\n", 0, at) + 1
            col = at - (mod.text.rfind("\n", 0, at) + 1) + 1
            mod.error = ParseError(f"more than {MAX_MODULE_TOKENS:,} tokens (words and symbols) in one module: too "
                                   "large to parse", mod.where, Location(line, col), source_line_at(mod.text, line))
            return


def frame_for_module(mod: SourceModule) -> Frame:
    return Frame(None, mod)


def _c3(ci: ClassInfo, base_mros: list[list[ClassInfo]]) -> list[ClassInfo]:
    """C3 merge of the bases' linearizations (an inconsistent hierarchy falls back to
    depth-first order)."""
    seqs = [list(m) for m in base_mros if m] + [[m[0] for m in base_mros if m]]
    result = [ci]
    while any(seqs):
        for s in seqs:
            if not s:
                continue
            head = s[0]
            if not any(head in t[1:] for t in seqs):
                break
        else:
            for s in seqs:
                result += [c for c in s if c not in result]
            break
        if head not in result:
            result.append(head)
        seqs = [t[1:] if t and t[0] is head else t for t in seqs]
    return result


def _in_caller_terms(values: list[Value], fi: FuncInfo, call: ast.Call | None, skip_self: bool) -> list[Value]:
    """Conditions a callee's values carry in terms of its parameters (``key == 'silu'``, from
    a registry lookup), put in the caller's terms (``config.hidden_act == 'silu'``), so that a
    mark reads where the choice is made."""
    if call is None or not any(v.cond for v in values):
        return values
    bound = {name: exprs[0] for name, exprs in _bind_exprs(fi, call, skip_self=skip_self).items() if len(exprs) == 1}
    out = []
    for v in values:
        head = v.cond.split(" ", 1)[0] if v.cond else ""
        if head in bound:
            v = v.recond(source_text(bound[head]) + v.cond[len(head):])
        out.append(v)
    return out


def is_cute_jit(fi: FuncInfo) -> bool:
    """A CuTe DSL function (``@cute.jit`` host code, ``@cute.kernel`` device code): calling it
    runs a compiled kernel; its body is device code, not calls to follow."""
    return any(re.fullmatch(r"(?:\w+\.)*cute\.(?:jit|kernel)", d.split("(")[0]) for d in fi.decorators)


def is_triton_jit(fi: FuncInfo) -> bool:
    return any(re.match(r"(triton\.)?(jit|autotune|heuristics)\b", d.split("(")[0].replace("tl.", "triton."))
               or d.startswith("triton.") for d in fi.decorators)


def _is_method(fi: FuncInfo) -> bool:
    return fi.cls is not None and "staticmethod" not in fi.decorators


def _outer_prefix(frame: Frame) -> str:
    return f"{frame.fn.name}.<locals>." if frame.fn is not None else ""


_TEXT: dict[int, tuple[ast.AST, str]] = {}


def source_text(node: ast.AST) -> str:
    """``ast.unparse`` on one line, cached per node (the resolver asks for the same ones often)."""
    got = _TEXT.get(id(node))
    if got is None or got[0] is not node:
        got = _TEXT[id(node)] = (node, " ".join(ast.unparse(node).split()))
    return got[1]


def _short(node: ast.AST, limit: int = 80) -> str:
    text = source_text(node)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _import_base(stmt: ast.ImportFrom, mod: SourceModule) -> str:
    if not stmt.level:
        return stmt.module or ""
    parts = mod.package.split(".") if mod.package else []
    if stmt.level > 1:
        parts = parts[: len(parts) - (stmt.level - 1)]
    if stmt.module:
        parts.append(stmt.module)
    return ".".join(parts)


def _params(node: FunctionNode) -> dict[str, tuple[int, ast.arg, ast.expr | None]]:
    a = node.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = {arg.arg: (i, arg, d) for i, (arg, d) in enumerate(zip(positional, defaults))}
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out[arg.arg] = (len(out) + 1000, arg, d)
    if a.vararg:
        out[a.vararg.arg] = (-1, a.vararg, None)
    if a.kwarg:
        out[a.kwarg.arg] = (-1, a.kwarg, None)
    return out


def _bind_exprs(target: FuncInfo | ClassInfo | None, call: ast.Call, skip_self: bool = True) -> dict[str, list[ast.expr]]:
    """Parameter name → argument expressions of ``call`` for ``target`` (a FuncInfo, a
    ClassInfo — its ``__init__`` — or None: keep positions as ``#i``)."""
    node = None
    if isinstance(target, FuncInfo):
        node = target.node
    elif isinstance(target, ClassInfo):
        init = target.methods.get("__init__")
        node = init.node if init is not None else None
        skip_self = True
    out: dict[str, list[ast.expr]] = {}
    names: list[str] = []
    if node is not None:
        a = node.args
        names = [x.arg for x in a.posonlyargs + a.args]
        if skip_self and names:
            names = names[1:]
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        key = names[i] if i < len(names) else f"#{i}"
        out.setdefault(key, []).append(arg)
    for kw in call.keywords:
        if kw.arg is not None:
            out.setdefault(kw.arg, []).append(kw.value)
    return out


def _grown(stmt: ast.stmt) -> tuple[ast.expr, str, ast.expr] | None:
    """``xs.append(v)`` / ``xs.insert(i, v)`` / ``xs.extend(vs)`` as a statement: (the list, kind,
    what it gains)."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and not call.keywords):
        return None
    name, args = call.func.attr, call.args
    if name == "append" and len(args) == 1:
        return call.func.value, "append", args[0]
    if name == "insert" and len(args) == 2:
        return call.func.value, "append", args[1]
    if name == "extend" and len(args) == 1:
        return call.func.value, "extend", args[0]
    return None


def _flat_targets(t: ast.expr) -> Iterator[tuple[int, ast.expr]]:
    if isinstance(t, (ast.Tuple, ast.List)):
        for i, el in enumerate(t.elts):
            yield i, el
    else:
        yield -1, t


def _walk_stmts(body: list[ast.stmt], cond: str = "", prune: Prune | None = None) -> Iterator[tuple[ast.stmt, str]]:
    """Every statement of a function body (not of nested functions), with the innermost
    condition it runs under. ``prune(test)`` may say a branch's test is statically True/False;
    the branch that cannot run is left out (and code after a decided ``return`` too)."""
    for stmt, cond, _ in walk_tested(body, cond, prune):
        yield stmt, cond


def walk_tested(body: list[ast.stmt], cond: str = "", prune: Prune | None = None,
                tests: Tests = ()) -> Iterator[tuple[ast.stmt, str, Tests]]:
    """``_walk_stmts`` with the ``if`` tests each statement sits under. The statements after an
    ``if`` whose body returns run under its negation (after one that raises, an error guard,
    they are the normal path)."""
    for stmt in body:
        yield stmt, cond, tests
        if isinstance(stmt, ast.If):
            truth = prune(stmt.test) if prune is not None else None
            if truth is not False:
                yield from walk_tested(stmt.body, cond_text(stmt.test), prune, tests + ((stmt.test, False),))
            if truth is not True:
                yield from walk_tested(stmt.orelse, cond_text(stmt.test, negate=True), prune, tests + ((stmt.test, True),))
            leaves = bool(stmt.body) and isinstance(stmt.body[-1], (ast.Return, ast.Raise))
            if truth is True and leaves:
                return
            if leaves and isinstance(stmt.body[-1], ast.Return) and not stmt.orelse and truth is None:
                cond, tests = cond_text(stmt.test, negate=True), tests + ((stmt.test, True),)
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            yield from walk_tested(stmt.body, cond, prune, tests)
            yield from walk_tested(getattr(stmt, "orelse", []), cond, prune, tests)
        elif isinstance(stmt, (ast.Try, ast.TryStar)):
            yield from walk_tested(stmt.body, cond, prune, tests)
            for h in stmt.handlers:
                yield from walk_tested(h.body, cond, prune, tests)
            yield from walk_tested(stmt.orelse, cond, prune, tests)
            yield from walk_tested(stmt.finalbody, cond, prune, tests)
        elif isinstance(stmt, ast.Match):
            for case in stmt.cases:
                yield from walk_tested(case.body, f"case {source_text(case.pattern)}", prune, tests)
