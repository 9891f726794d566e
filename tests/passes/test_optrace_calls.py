"""Calls reached the ways today's model sources make them: a kernel function stored in an
attribute (``self.qkv_latent_func = fused_qkv_a_proj_with_mqa``) or a bound method, passed as an
argument, returned by a factory, wrapped in ``functools.partial``; names re-exported through
chains of star imports, aliases and PEP 562 module ``__getattr__``; functions put in a registry
by a decorator (``@register_fused_func("name")``) or a dict literal indexed by the config."""

from __future__ import annotations

import textwrap

import pytest

from tests.passes.test_optrace import kernel_names, trace

CASES = {
 "attr_func": ("""
def fused_qkv(x):
    return torch.relu(x)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv_func = fused_qkv
    def forward(self, x):
        return self.qkv_func(x)
""", {}),
 "attr_method": ("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv_func = self._qkv
    def _qkv(self, x):
        return torch.relu(x)
    def forward(self, x):
        return self.qkv_func(x)
""", {}),
 "arg_callback": ("""
def apply(fn, x):
    return fn(x)
def act(x):
    return torch.relu(x)
class M(nn.Module):
    def forward(self, x):
        return apply(act, x)
""", {}),
 "factory": ("""
def make(kind):
    def inner(x):
        return torch.relu(x)
    return inner
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = make("a")
    def forward(self, x):
        return self.f(x)
""", {}),
 "star_reexport": ("""
from .ops import *
class M(nn.Module):
    def forward(self, x):
        return kern(x)
""", {"ops/__init__.py": "from .impl import *\n", "ops/impl.py": "import torch\n__all__ = ['kern']\ndef kern(x):\n    return torch.relu(x)\n"}),
 "alias": ("""
from .ops import kern as k2
class M(nn.Module):
    def forward(self, x):
        return k2(x)
""", {"ops.py": "import torch\ndef kern(x):\n    return torch.relu(x)\n"}),
 "lazy_getattr": ("""
from . import ops
class M(nn.Module):
    def forward(self, x):
        return ops.kern(x)
""", {"ops/__init__.py": "def __getattr__(name):\n    from . import impl\n    return getattr(impl, name)\n", "ops/impl.py": "import torch\ndef kern(x):\n    return torch.relu(x)\n"}),
 "decorator_registry": ("""
REG = {}
def register(name):
    def deco(fn):
        REG[name] = fn
        return fn
    return deco
@register("fast")
def fast(x):
    return torch.relu(x)
class M(nn.Module):
    def forward(self, x):
        return REG["fast"](x)
""", {}),
 "dict_registry": ("""
def a(x):
    return torch.relu(x)
def b(x):
    return torch.tanh(x)
FUNCS = {"relu": a, "tanh": b}
class M(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.act = FUNCS[config.act]
    def forward(self, x):
        return self.act(x)
""", {}),
 "partial": ("""
import functools
def a(x, k):
    return torch.relu(x)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = functools.partial(a, k=2)
    def forward(self, x):
        return self.f(x)
""", {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_call_reaches_its_kernel(tmp_path, case):
    body, extra = CASES[case]
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text("import torch\nfrom torch import nn\n" + textwrap.dedent(body))
    for rel, text in extra.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    tree = trace(pkg, "M").tree
    reached = set().union(*(kernel_names(n) for n, _ in tree.root.walk()))
    assert reached & {"torch.relu", "torch.tanh"}
    if case == "dict_registry":  # no config given: both entries, each a branch of the dict
        assert {"torch.relu", "torch.tanh"} <= reached


UNRESOLVABLE = """
import torch
from torch import nn


class M(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.qkv_latent_func = fn
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        x = self.proj(x)
        return self.qkv_latent_func(x)
"""


def test_an_unresolved_call_is_a_located_warning_and_werror_makes_it_an_error(tmp_path):
    from tests.layerc_cli import run_layerc

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(UNRESOLVABLE.lstrip("\n"))
    rc, _, err = run_layerc("optrace", pkg, "--entry", "M", "-o", tmp_path / "r.md")
    assert rc == 0 and "m.py:13:16: warning: cannot resolve self.qkv_latent_func" in err and "1 unresolved calls" in err
    rc, _, err = run_layerc("optrace", pkg, "--entry", "M", "-o", tmp_path / "w.md", "--werror")
    assert rc == 1 and "1 call(s) cannot be resolved (--werror)" in err and not (tmp_path / "w.md").exists()


# -- kernels compiled at run time, CuTe DSL, and custom ops registered in the package -----------

KERNEL_CASES = {
 "load_inline_module": ("""
from torch.utils.cpp_extension import load_inline
_mod = None
def _module():
    return load_inline("rope", cpp_sources=[""], cuda_sources=[""], functions=["apply_rope"])
class M(nn.Module):
    def forward(self, x):
        m = _module()
        m.apply_rope(x)
        return x
""", {}, {("jit", "apply_rope")}),
 "jit_helper_chain": ("""
from .utils import load_jit
def cache_once(fn):
    return fn
@cache_once
def _jit_hadamard(dtype):
    return load_jit("hadamard", cuda_wrappers=[("hadamard_transform", "Kernel::run")])
def hadamard_transform(x):
    out = torch.empty_like(x)
    _jit_hadamard(x.dtype).hadamard_transform(x, out)
    return out
class M(nn.Module):
    def forward(self, x):
        return hadamard_transform(x)
""", {"utils.py": "def load_jit(*args, **kw):\n    from tvm_ffi.cpp import load_inline\n    return load_inline('x', cuda_sources=[])\n"},
    {("jit", "hadamard_transform"), ("torch", "torch.empty_like")}),
 "cute_dsl": ("""
import cutlass.cute as cute
@cute.kernel
def _device(x):
    cute.arch.barrier()
@cute.jit
def run_small_batch(x):
    _device(x).launch(grid=[1, 1, 1])
class M(nn.Module):
    def forward(self, x):
        run_small_batch(x)
        return x
""", {}, {("cute-dsl", "run_small_batch")}),
 "custom_op_decorator": ("""
@torch.library.custom_op("mylib::fused_add", mutates_args=())
def fused_add(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x)
@fused_add.register_fake
def _(x):
    return torch.empty_like(x)
class M(nn.Module):
    def forward(self, x):
        return torch.ops.mylib.fused_add(x)
""", {}, {("torch", "torch.relu")}),
 "direct_register": ("""
def direct_register_custom_op(op_name, op_func, mutates_args, fake_impl=None):
    pass
def _impl(x, out):
    torch.tanh(x, out=out)
def _impl_fake(x, out):
    torch.zeros_like(x)
direct_register_custom_op(op_name="apply_tanh", op_func=_impl, mutates_args=["out"], fake_impl=_impl_fake)
class M(nn.Module):
    def forward(self, x):
        return torch.ops.sglang.apply_tanh(x, x)
""", {}, {("torch", "torch.tanh")}),
 "library_impl": ("""
lib = torch.library.Library("ext", "FRAGMENT")
lib.define("gate(Tensor x) -> Tensor")
def gate_cuda(x):
    return torch.sigmoid(x)
def gate_meta(x):
    return torch.empty_like(x)
lib.impl("gate", gate_cuda, "CUDA")
lib.impl("gate", gate_meta, "Meta")
class M(nn.Module):
    def forward(self, x):
        return torch.ops.ext.gate(x)
""", {}, {("torch", "torch.sigmoid")}),
 "autograd_function": ("""
class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k):
        return torch.softmax(q, -1)
    @staticmethod
    def backward(ctx, g):
        return torch.tanh(g), None
attention = _Attention.apply
class M(nn.Module):
    def forward(self, x):
        return attention(x, x)
""", {}, {("torch", "torch.softmax")}),
 "triton_kernels_library": ("""
from triton_kernels.matmul_ogs import PrecisionConfig, matmul_ogs
from triton_kernels.routing import routing
class M(nn.Module):
    def forward(self, x, w):
        rdata, gather, scatter = routing(x, 4)
        return matmul_ogs(x, w, None, rdata, precision_config=PrecisionConfig())
""", {}, {("triton-kernels", "routing"), ("triton-kernels", "matmul_ogs")}),
 "unregistered_op_stays_opaque": ("""
class M(nn.Module):
    def forward(self, x):
        return torch.ops.other_lib.fused(x)
""", {}, {("torch.ops", "other_lib.fused")}),
}


@pytest.mark.parametrize("case", list(KERNEL_CASES))
def test_runtime_compiled_and_registered_kernels(tmp_path, case):
    """A JIT module's functions (``load_inline``, through helpers and decorators) are kernels;
    a CuTe DSL function is one kernel (its device body is not searched); ``torch.ops.<ns>.<op>``
    registered in the package runs its implementation (not its fake); one that is not stays an
    opaque kernel of its library."""
    body, extra, expected = KERNEL_CASES[case]
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text("import torch\nfrom torch import nn\n" + textwrap.dedent(body))
    for rel, text in extra.items():
        (pkg / rel).write_text(text)
    tree = trace(pkg, "M").tree
    got = {(k.family, k.name) for n, _ in tree.root.walk() for k in n.kernels}
    assert got == expected
