"""What a branch condition in model source is under the configuration the user names.

Model code branches on its configuration (``if config.q_lora_rank is not None``,
``if self.config._attn_implementation != "eager"``), on the platform (``if _is_hip:``,
``current_platform.is_rocm()``) and on the phase (``forward_batch.forward_mode.is_decode()``).
``Knowns`` is what the user said (``optrace --config``, ``--platform``, ``--phase``,
``--attention-backend``, ``--quant``); ``ConstEval`` gives an expression's constant value when
those and the source decide it, and ``MISSING`` otherwise, so that a branch is taken or pruned
only on evidence, and kept (marked conditional) on none.

Values come from: literals; config keys (an attribute or ``getattr`` of an object whose name ends
in ``config`` or ``_args``: HF configs and engine arguments are read this way); the platform and phase predicates below;
names and ``self`` attributes whose every assignment gives the same constant (module globals such
as ``_is_hip = is_hip()``, ``__init__`` fields such as ``self.q_lora_rank = config.q_lora_rank``);
and arguments bound at the call. Evaluation nests at most ``MAX_CONST_DEPTH`` deep.
"""

from __future__ import annotations

import ast
import json
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, cast

if TYPE_CHECKING:
    from layerc.grammar.pysource import SourceModule
    from layerc.passes.pyresolve import Binding, ClassInfo, Frame, Resolver, Tests

MAX_CONST_DEPTH = 24
MISSING = object()  #: an expression whose value is not known

PLATFORMS = ("cuda", "rocm")
PHASES = ("prefill", "decode")
#: platform predicates (functions or methods of that name) → the platforms where they hold;
#: other accelerators' predicates hold on neither
PLATFORM_PREDICATES: dict[str, frozenset[str]] = {
    "is_cuda": frozenset({"cuda"}), "is_cuda_alike": frozenset({"cuda", "rocm"}), "is_hip": frozenset({"rocm"}),
    "is_rocm": frozenset({"rocm"}), "is_torch_cuda_available": frozenset({"cuda", "rocm"}),
    **{name: frozenset() for name in ("is_npu", "is_xpu", "is_cpu", "is_hpu", "is_musa", "is_tpu", "is_mps",
                                      "is_neuron", "is_torch_npu_available", "is_torch_xpu_available",
                                      "is_torch_hpu_available", "is_torch_mlu_available", "is_torch_musa_available",
                                      "is_torch_mps_available", "is_torch_tpu_available")},
}
#: platform queries by their dotted name (ROCm builds of torch report CUDA as available)
PLATFORM_CALLS: dict[str, frozenset[str]] = {"torch.cuda.is_available": frozenset({"cuda", "rocm"})}
#: ``torch.version.hip`` is set on ROCm builds, ``torch.version.cuda`` on CUDA builds
PLATFORM_ATTRS: dict[str, frozenset[str]] = {"torch.version.hip": frozenset({"rocm"}),
                                             "torch.version.cuda": frozenset({"cuda"})}
#: forward-mode predicates (SGLang's ``ForwardMode``, vLLM's and others' of the same names) → the
#: phases where they hold; speculative and idle modes hold in neither
PHASE_PREDICATES: dict[str, frozenset[str]] = {
    "is_decode": frozenset({"decode"}), "is_decode_or_idle": frozenset({"decode"}),
    "is_extend": frozenset({"prefill"}), "is_prefill": frozenset({"prefill"}),
    "is_extend_or_draft_extend_or_mixed": frozenset({"prefill"}),
    **{name: frozenset() for name in ("is_idle", "is_target_verify", "is_draft_extend", "is_dummy_first")},
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


@dataclass(frozen=True)
class Knowns:
    """The configuration a trace is made under; every field unset means every branch is kept.

    ``selections``: registry keys that pick one entry (``--attention-backend``, ``--quant``)."""

    config: Mapping[str, object] = field(default_factory=dict)
    platform: str | None = None
    phase: str | None = None
    attention_backend: str | None = None
    quant: str | None = None

    @property
    def selections(self) -> tuple[str, ...]:
        return tuple(v for v in (self.attention_backend, self.quant) if v)

    @property
    def empty(self) -> bool:
        return not (self.config or self.platform or self.phase or self.selections)

    def lookup(self, path: list[str]) -> object:
        """A config key by its attribute path below the config object (``text_config.hidden_act``);
        a nested key missing where it is looked for is looked up at the top (HF sub-configs
        inherit many keys there)."""
        here: object = self.config
        for part in path:
            if isinstance(here, Mapping) and part in here:
                here = here[part]
            else:
                here = MISSING
                break
        if here is MISSING and len(path) > 1 and path[-1] in self.config:
            here = self.config[path[-1]]
        if here is MISSING and path and path[-1] in ("_attn_implementation", "attn_implementation") and self.attention_backend:
            here = self.attention_backend
        return here

    def describe(self) -> str:
        parts = [f"{k}={json.dumps(v)}" for k, v in sorted(self.config.items()) if not isinstance(v, (dict, list))]
        parts += [f"--{name.replace('_', '-')} {v}" for name, v in (("platform", self.platform), ("phase", self.phase),
                  ("attention_backend", self.attention_backend), ("quant", self.quant)) if v]
        return ", ".join(parts)


def parse_config_value(text: str) -> object:
    """``key=value`` on the command line: JSON where it parses (``true``, ``null``, ``1536``), else a string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def config_path(e: ast.expr) -> list[str] | None:
    """The key path of a config read: ``self.config.text_config.hidden_act`` → ``[text_config,
    hidden_act]``; None when ``e`` reads no object named ``*config``."""
    parts: list[str] = []
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    if isinstance(e, ast.Name):
        parts.append(e.id)
    else:
        return None
    parts.reverse()
    for i, p in enumerate(parts[:-1]):
        if is_config_name(p):
            return parts[i + 1:]
    return None


def is_config_name(name: str) -> bool:
    """An object read as configuration: ``config``, ``hf_config``, ``model_config``, and an
    engine's arguments (``server_args``, ``engine_args``)."""
    low = name.lower()
    return low.endswith("config") or low.endswith("_args")


def _dotted(e: ast.expr) -> str:
    parts = []
    while isinstance(e, ast.Attribute):
        parts.append(e.attr)
        e = e.value
    if not isinstance(e, ast.Name):
        return ""
    parts.append(e.id)
    return ".".join(reversed(parts))


class ConstEval:
    """Constant values of expressions under ``resolver.knowns`` (see the module docstring)."""

    def __init__(self, resolver: "Resolver"):
        self.r = resolver
        self.k: Knowns = resolver.knowns
        self._attrs: dict[tuple[str, str], object] = {}
        self._globals: dict[tuple[str, str], object] = {}
        self._depth = 0

    # -- conditions

    def truth(self, test: ast.expr, frame: "Frame") -> bool | None:
        """True or False where the configuration decides ``test``; None where it does not, and
        always where no configuration is given (then every branch is kept)."""
        if self.k.empty:
            return None
        v = self.value(test, frame)
        if v is MISSING:
            return None
        try:
            return bool(v)
        except Exception:  # an object whose truth is not plain
            return None

    def live_cond(self, tests: "Tests", frame: "Frame") -> tuple[ast.expr, bool] | None:
        """The innermost test left undecided (what a conditional mark shows), or None."""
        for test, negated in reversed(tests):
            if self.truth(test, frame) is None:
                return test, negated
        return None

    # -- values

    def value(self, e: ast.expr, frame: "Frame") -> object:
        if self._depth >= MAX_CONST_DEPTH:
            return MISSING
        self._depth += 1
        self.r.work += 1
        try:
            return self._value(e, frame)
        finally:
            self._depth -= 1

    def _value(self, e: ast.expr, frame: "Frame") -> object:
        if isinstance(e, ast.Constant):
            return e.value
        if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
            items = [self.value(x, frame) for x in e.elts]
            return MISSING if any(x is MISSING for x in items) else tuple(items)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            t = self.truth(e.operand, frame)
            return MISSING if t is None else not t
        if isinstance(e, ast.BoolOp):
            return self._bool_op(e, frame)
        if isinstance(e, ast.Compare):
            return self._compare(e, frame)
        if isinstance(e, ast.Attribute):
            return self._attribute(e, frame)
        if isinstance(e, ast.Name):
            return self._name(e.id, frame)
        if isinstance(e, ast.Call):
            return self._call(e, frame)
        if isinstance(e, ast.IfExp):
            t = self.truth(e.test, frame)
            return MISSING if t is None else self.value(e.body if t else e.orelse, frame)
        if isinstance(e, ast.NamedExpr):
            return self.value(e.value, frame)
        return MISSING

    def _bool_op(self, e: ast.BoolOp, frame: "Frame") -> object:
        """``a and b`` / ``a or b`` by truth: one decided operand can decide the whole."""
        truths = []
        for x in e.values:
            t = self.truth(x, frame)
            if isinstance(e.op, ast.And) and t is False:
                return False
            if isinstance(e.op, ast.Or) and t is True:
                return True
            truths.append(t)
        return MISSING if None in truths else isinstance(e.op, ast.And)

    def _compare(self, e: ast.Compare, frame: "Frame") -> object:
        left = self.value(e.left, frame)
        if left is MISSING:
            return MISSING
        for op, right_e in zip(e.ops, e.comparators):
            right = self.value(right_e, frame)
            fn = _COMPARE.get(type(op))
            if right is MISSING or fn is None:
                return MISSING
            if isinstance(op, (ast.Is, ast.IsNot)) and not (left is None or right is None or isinstance(left, bool)):
                return MISSING  # identity of anything but None and the booleans is not a value question
            try:
                if not fn(left, right):
                    return False
            except TypeError:
                return MISSING
            left = right
        return True

    def _attribute(self, e: ast.Attribute, frame: "Frame") -> object:
        dotted = _dotted(e)
        if dotted in PLATFORM_ATTRS and self.k.platform:
            return "set" if self.k.platform in PLATFORM_ATTRS[dotted] else None
        path = config_path(e)
        if path:
            return self.k.lookup(path)
        if isinstance(e.value, ast.Name) and frame.fn is not None and frame.fn.cls is not None:
            params = frame.fn.params
            first = next((name for name, spec in params.items() if spec[0] == 0), None)
            if e.value.id == first:
                return self._self_attr(frame.fn.cls, e.attr)
        return MISSING

    def _self_attr(self, cls: ClassInfo, name: str) -> object:
        """A field every assignment of which (in any method of the class and its bases) gives
        the same constant."""
        key = (cls.qualname, name)
        if key in self._attrs:
            return self._attrs[key]
        self._attrs[key] = MISSING  # recursion guard
        from layerc.passes.pyresolve import Frame

        values = []
        for c in self.r.mro(cls):
            for fi, b in self.r.self_assigns(c).get(name, []):
                if b.kind != "assign" or b.node is None:
                    return MISSING
                frame = Frame(fi, fi.module)
                if self.r.excluded(b.tests, frame):
                    continue
                values.append(self.value(cast(ast.expr, b.node), frame))  # an assignment's value
            for expr in c.body_assigns.get(name, []):
                values.append(self.value(expr, Frame(None, c.module)))
        got = values[0] if values and all(v is not MISSING and _same(v, values[0]) for v in values) else MISSING
        self._attrs[key] = got
        return got

    def _name(self, ident: str, frame: "Frame") -> object:
        from layerc.passes.pyresolve import Frame

        fn = frame.fn
        if fn is not None:
            params = fn.params
            if ident in params:
                if frame.args is not None:
                    exprs = frame.args.exprs.get(ident)
                    if exprs:
                        got = [self.value(x, frame.args.frame) for x in exprs]
                        return got[0] if all(v is not MISSING and _same(v, got[0]) for v in got) else MISSING
                    default = params[ident][2]
                    return self.value(default, Frame(None, fn.module)) if default is not None else MISSING
                return MISSING
            bindings = self.r.local_bindings(fn).get(ident)
            if bindings:
                # a local's value, once per frame (tests name locals again and again)
                held = frame.consts.get(ident, None)
                if held is None:
                    frame.consts[ident] = [MISSING]  # recursion guard
                    held = frame.consts[ident] = [self._bindings_value(bindings, frame)]
                return held[0]
            if frame.parent is not None:
                return self._name(ident, frame.parent)
        mod = frame.module
        if mod is None:
            return MISSING
        key = (mod.name, ident)
        if key not in self._globals:
            self._globals[key] = MISSING  # recursion guard
            self._globals[key] = self._global(mod, ident)
        return self._globals[key]

    def _global(self, mod: SourceModule, ident: str) -> object:
        from layerc.passes.pyresolve import Frame, _import_base

        bindings = self.r.globals_of(mod).get(ident)
        if not bindings:
            return MISSING
        if len(bindings) == 1 and bindings[0].kind == "import":
            b = bindings[0]
            target = self.r.module(_import_base(cast(ast.ImportFrom, b.node), mod))
            return self._name(b.target, Frame(None, target)) if target is not None else MISSING
        return self._bindings_value(bindings, Frame(None, mod))

    def _bindings_value(self, bindings: list[Binding], frame: "Frame") -> object:
        values = []
        for b in bindings:
            if b.kind != "assign" or b.node is None:
                return MISSING
            if self.r.excluded(b.tests, frame):
                continue
            values.append(self.value(cast(ast.expr, b.node), frame))  # an assignment's value
        return values[0] if values and all(v is not MISSING and _same(v, values[0]) for v in values) else MISSING

    def _call(self, e: ast.Call, frame: "Frame") -> object:
        func = e.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if self.k.platform and _dotted(func) in PLATFORM_CALLS:
            return self.k.platform in PLATFORM_CALLS[_dotted(func)]
        if name in PLATFORM_PREDICATES and self.k.platform and not e.args:
            return self.k.platform in PLATFORM_PREDICATES[name]
        if name in PHASE_PREDICATES and self.k.phase and not e.args:
            return self.k.phase in PHASE_PREDICATES[name]
        if name in ("getattr", "hasattr") and len(e.args) >= 2 and isinstance(e.args[1], ast.Constant):
            key = e.args[1].value
            path = config_path(e.args[0]) if isinstance(e.args[0], ast.Attribute) else (
                [] if isinstance(e.args[0], ast.Name) and is_config_name(e.args[0].id) else None)
            if path is not None and isinstance(key, str):
                got = self.k.lookup(path + [key])
                if name == "hasattr":
                    return MISSING if got is MISSING else True
                if got is MISSING and len(e.args) > 2 and self.k.config:
                    return MISSING  # the default holds only where the config lacks the key, unknown here
                return got
        if isinstance(func, ast.Attribute) and func.attr == "get" and e.args and isinstance(e.args[0], ast.Constant):
            base = func.value
            path = config_path(base) if isinstance(base, ast.Attribute) else (
                [] if isinstance(base, ast.Name) and is_config_name(base.id) else None)
            if path is not None and isinstance(e.args[0].value, str):
                return self.k.lookup(path + [e.args[0].value])
        return MISSING


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b
