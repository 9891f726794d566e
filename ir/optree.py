"""The op tree IR: what a model's forward calls, from its source (seed 003, automated).

An ``OpNode`` is a call site in the model's code: a *container* when the callee calls further
ops (``self.model()``, ``self.self_attn()``), a *leaf op* when it only reaches kernels
(``self.input_layernorm()``). A ``branch`` node stands for one alternative of a call whose
callee depends on the config or a dispatch (``self.mlp()`` is a ``DeepseekV2MoE`` or a
``DeepseekV2MLP``). Each node keeps the kernels it reaches, each with its *chain*: the call
sites from the kernel call back up to the op's call site (the kernel-trace side of seed 003).

Trees are small (hundreds of nodes), so they are plain objects; the JSON form is ``to_dict``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from layerc.ir.diagnostics import VerifyError

#: node kinds
ROOT, OP, BRANCH = "root", "op", "branch"
KINDS = (ROOT, OP, BRANCH)


@dataclass(frozen=True)
class Site:
    """A place in a source file: display path (inside the package root), 1-based line and
    column, and the last line of the construct."""

    path: str
    line: int
    col: int = 1
    end_line: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "col": self.col, "end_line": self.end_line or self.line}


@dataclass(frozen=True)
class ChainStep:
    """One call on the way from a kernel up to its op: what is called, where, and the condition
    it runs under where the configuration leaves one (``if config.q_lora_rank is not None``)."""

    label: str
    site: Site
    cond: str = ""


@dataclass(frozen=True)
class KernelSite:
    """A kernel call reached from an op, with the chain that leads back to the op's call site
    (``chain[0]`` is the kernel call itself, ``chain[-1]`` the op's call)."""

    name: str  #: display name (``bmm_fp8``, ``torch.matmul``, ``Tensor.view``)
    target: str  #: qualified callee (``sgl_kernel.bmm_fp8``)
    family: str  #: kernel source (``sgl-kernel``, ``flashinfer``, ``triton``, ``torch``)
    category: str  #: what it does (``GEMM``, ``Attention``, ``MoE``, ``Norm``...)
    chain: tuple[ChainStep, ...]
    aten: tuple[str, ...] = ()  #: the aten ops a CPU run of it records (torch-native kernels)

    @property
    def site(self) -> Site:
        return self.chain[0].site

    @property
    def conditions(self) -> tuple[str, ...]:
        """The conditions along the chain: the kernel runs only where they hold (empty: always)."""
        return tuple(dict.fromkeys(s.cond for s in self.chain if s.cond))

    @property
    def native(self) -> bool:
        """A PyTorch-native call (runs as aten ops), not a custom kernel library."""
        return self.family == "torch"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "target": self.target, "family": self.family, "category": self.category,
            "aten": list(self.aten),
            "chain": [{"label": s.label, **s.site.to_dict(), **({"cond": s.cond} if s.cond else {})} for s in self.chain],
            **({"conditions": list(self.conditions)} if self.conditions else {}),
        }


@dataclass
class OpNode:
    """A node of the execution graph (see the module docstring)."""

    label: str  #: ``self.input_layernorm()``, ``layer()``, ``DeepseekV2MoE.forward()``
    kind: str = OP
    site: Site | None = None  #: the call site (the class definition for the root)
    annotation: str = ""  #: dispatch path: ``MHA path``, ``if self.is_layer_sparse``
    callee: str = ""  #: what runs: ``pkg.mod.Class.forward``, ``torch.nn.Linear``, ``sgl_kernel.bmm_fp8``
    callee_sites: tuple[Site, ...] = ()  #: definitions of the callee's alternatives (decorators included)
    callee_classes: tuple[str, ...] = ()  #: class names of the module(s) called (``Linear``)
    children: list["OpNode"] = field(default_factory=list)
    kernels: list[KernelSite] = field(default_factory=list)
    direct: int = 0  #: the first ``direct`` kernels are called in the callee's own body
    unresolved: bool = False  #: the callee could not be found statically
    recursive: bool = False  #: not expanded: the callee is already being expanded above

    @property
    def is_container(self) -> bool:
        return bool(self.children)

    @property
    def is_leaf_op(self) -> bool:
        return self.kind == OP and not self.children

    def walk(self, depth: int = 0) -> Iterator[tuple["OpNode", int]]:
        """Pre-order (execution order), with depth."""
        yield self, depth
        for c in self.children:
            yield from c.walk(depth + 1)

    def to_dict(self) -> dict[str, Any]:
        d = self.fields_dict()
        d["kernels"] = [k.to_dict() | {"direct": i < self.direct} for i, k in enumerate(self.kernels)]
        d["children"] = [c.to_dict() for c in self.children]
        return d

    def fields_dict(self) -> dict[str, Any]:
        """The node without its kernels and children."""
        d: dict[str, Any] = {"label": self.label, "kind": self.kind}
        if self.site is not None:
            d["site"] = self.site.to_dict()
        if self.annotation:
            d["annotation"] = self.annotation
        if self.callee:
            d["callee"] = self.callee
        if self.unresolved:
            d["unresolved"] = True
        if self.recursive:
            d["recursive"] = True
        return d


@dataclass
class OpTree:
    """The op tree of one entry class, and what was learned while building it."""

    entry: str  #: qualified entry class, ``sglang.srt.models.deepseek_v2.DeepseekV2ForCausalLM``
    source: str  #: what was read (a directory, file or wheel)
    root: OpNode
    scope: tuple[str, ...] = ()  #: module prefixes whose functions are expanded as model code
    warnings: list[str] = field(default_factory=list)
    configuration: str = ""  #: the configuration branches were decided by ("": none, every branch kept)
    pruned: int = 0  #: branches the configuration decided against

    def nodes(self) -> Iterator[tuple[OpNode, int]]:
        return self.root.walk()

    def verify(self) -> None:
        """Invariants every pass must keep: one root, known kinds, chains that end at their op."""
        if self.root.kind != ROOT:
            raise VerifyError(f"the op tree's root is a {self.root.kind!r} node, not the root")
        for node, depth in self.nodes():
            if node.kind not in KINDS:
                raise VerifyError(f"node {node.label!r} has unknown kind {node.kind!r}")
            if depth and node.kind == ROOT:
                raise VerifyError(f"node {node.label!r} is a second root")
            if not 0 <= node.direct <= len(node.kernels):
                raise VerifyError(f"node {node.label!r} says {node.direct} direct kernels of {len(node.kernels)}")
            for k in node.kernels:
                if not k.chain:
                    raise VerifyError(f"kernel {k.name} of {node.label!r} has no call chain")
                if node.kind == OP and node.site is not None and k.chain[-1].site != node.site:
                    raise VerifyError(f"the chain of kernel {k.name} ends at {k.chain[-1].site}, not at its op "
                                      f"{node.label!r} ({node.site.path}:{node.site.line})")

    def to_dict(self) -> dict[str, Any]:
        return {"entry": self.entry, "source": self.source, "scope": list(self.scope),
                "warnings": list(self.warnings), "root": self.root.to_dict()}
