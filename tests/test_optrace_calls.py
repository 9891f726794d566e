"""Calls reached the ways today's model sources make them: a kernel function stored in an
attribute (``self.qkv_latent_func = fused_qkv_a_proj_with_mqa``) or a bound method, passed as an
argument, returned by a factory, wrapped in ``functools.partial``; names re-exported through
chains of star imports, aliases and PEP 562 module ``__getattr__``; functions put in a registry
by a decorator (``@register_fused_func("name")``) or a dict literal indexed by the config."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from test_optrace import kernel_names, trace

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
    from layerc_cli import run_layerc

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(UNRESOLVABLE.lstrip("\n"))
    rc, _, err = run_layerc("optrace", pkg, "--entry", "M", "-o", tmp_path / "r.md")
    assert rc == 0 and "m.py:13:16: warning: cannot resolve self.qkv_latent_func" in err and "1 unresolved calls" in err
    rc, _, err = run_layerc("optrace", pkg, "--entry", "M", "-o", tmp_path / "w.md", "--werror")
    assert rc == 1 and "1 call(s) cannot be resolved (--werror)" in err and not (tmp_path / "w.md").exists()
