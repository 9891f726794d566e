"""Generated model packages whose kernels depend on the configuration, with the truth.

Each package has the forms engines and HF use to choose what runs, with random names and
counts, so a test of one package checks the class, not a sample:

- attention backends in a registry (by decorator, or a dict literal of classes), each a
  subclass of a declared base whose ``forward`` dispatches on the forward mode;
- a platform switch (a module-level ``_is_hip = is_hip()`` or ``current_platform.is_rocm()``)
  between kernel libraries bound to each platform;
- config branches: an ``if config.<key> is not None`` module choice in ``__init__``, a
  ``self.<flag> = config.<flag>`` field tested in ``forward``;
- an activation table indexed by ``config.<act key>`` (a dict subclass, as ``ACT2FN``).

``Truth.kernels(choice)`` is the set of kernel names that can run under a choice (a dict of
the option values; a missing option means "not given").
"""

from __future__ import annotations

import random
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

PHASES = ("prefill", "decode")


@dataclass
class Truth:
    backends: list[str]  #: registry keys
    act_keys: list[str]
    lora_key: str
    flag_key: str
    act_key: str
    platform_form: str
    kernels_by: dict[str, set[str]] = field(default_factory=dict)

    def kernels(self, choice: dict) -> set[str]:
        """Kernel names that can run under ``choice`` (keys: backend, phase, platform,
        config: dict)."""
        cfg = choice.get("config", {})
        out = set(self.kernels_by["always"])
        backends = [choice["backend"]] if choice.get("backend") else self.backends
        phases = [choice["phase"]] if choice.get("phase") else list(PHASES)
        out |= {f"attn_{b}_{p}" for b in backends for p in phases}
        platforms = [choice["platform"]] if choice.get("platform") else ["cuda", "rocm"]
        out |= {"rocm_norm" if p == "rocm" else "cuda_norm" for p in platforms}
        lora = cfg.get(self.lora_key, "?")
        if lora == "?":
            out |= {"q_lora_gemm", "q_plain_gemm"}
        else:
            out.add("q_lora_gemm" if lora is not None else "q_plain_gemm")
        flag = cfg.get(self.flag_key, "?")
        if flag == "?" or flag:
            out.add("flag_kernel")
        act = cfg.get(self.act_key, "?")
        out |= {f"act_{k}" for k in (self.act_keys if act == "?" else [act])}
        return out


def _ident(rng: random.Random, prefix: str) -> str:
    return prefix + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5))


def make_package(root: Path, seed: int) -> Truth:
    """Write a package under ``root/pkg`` and return its truth; the entry class is ``Model``."""
    rng = random.Random(seed)
    backends = sorted({_ident(rng, "b") for _ in range(rng.randint(2, 5))})
    act_keys = sorted({_ident(rng, "a") for _ in range(rng.randint(2, 4))})
    lora_key, flag_key, act_key = _ident(rng, "k"), _ident(rng, "use_"), _ident(rng, "act_")
    decorator_registry = rng.random() < 0.5
    platform_form = rng.choice(["global", "method"])
    truth = Truth(backends, act_keys, lora_key, flag_key, act_key, platform_form, {"always": {"out_gemm"}})
    pkg = root / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    files: dict[str, str] = {}
    files["platforms.py"] = """
        def is_hip():
            return False

        class Platform:
            def is_rocm(self):
                return False

        current_platform = Platform()
    """
    files["base.py"] = """
        class AttnBase:
            def forward(self, q, batch):
                if batch.forward_mode.is_decode():
                    return self.forward_decode(q)
                return self.forward_extend(q)

            def forward_decode(self, q):
                raise NotImplementedError

            def forward_extend(self, q):
                raise NotImplementedError
    """
    classes = []
    for b in backends:
        cls = "Backend" + b.capitalize()
        classes.append(cls)
        files[f"backend_{b}.py"] = f"""
            import sgl_kernel
            from pkg.base import AttnBase

            class {cls}(AttnBase):
                def forward_decode(self, q):
                    return sgl_kernel.attn_{b}_decode(q)

                def forward_extend(self, q):
                    return sgl_kernel.attn_{b}_prefill(q)
        """
    if decorator_registry:
        reg = ["BACKENDS = {}", "", "def register_backend(name):", "    def deco(fn):",
               "        BACKENDS[name] = fn", "        return fn", "    return deco", ""]
        for b, cls in zip(backends, classes):
            reg += ["", f'@register_backend("{b}")', f"def create_{b}(runner):",
                    f"    from pkg.backend_{b} import {cls}", f"    return {cls}()", ""]
        files["registry.py"] = "\n".join(reg)
    else:
        imports = "\n".join(f"from pkg.backend_{b} import {cls}" for b, cls in zip(backends, classes))
        entries = ", ".join(f'"{b}": {cls}' for b, cls in zip(backends, classes))
        files["registry.py"] = f"{imports}\n\nBACKENDS = {{{entries}}}\n"
    files["batch.py"] = """
        from dataclasses import dataclass
        from pkg.base import AttnBase

        @dataclass
        class Batch:
            attn_backend: AttnBase
            forward_mode: object
    """
    acts = "\n".join(f"""
        class Act{k.capitalize()}(nn.Module):
            def forward(self, x):
                return sgl_kernel.act_{k}(x)
    """ for k in act_keys)
    act_table = ", ".join(f'"{k}": Act{k.capitalize()}' for k in act_keys)
    if platform_form == "global":
        platform_head = "from pkg.platforms import is_hip\n        _is_hip = is_hip()"
        platform_test = "_is_hip"
    else:
        platform_head = "from pkg.platforms import current_platform"
        platform_test = "current_platform.is_rocm()"
    files["model.py"] = f"""
        import aiter
        import sgl_kernel
        import torch
        from torch import nn
        from collections import OrderedDict
        from pkg.batch import Batch
        {platform_head}

        class Instantier(OrderedDict):
            def __getitem__(self, key):
                content = super().__getitem__(key)
                return content()
        {acts}

        ACTS = Instantier({{{act_table}}})

        class Norm(nn.Module):
            def forward(self, x):
                if {platform_test}:
                    return aiter.rocm_norm(x)
                return sgl_kernel.cuda_norm(x)

        class LoraProj(nn.Module):
            def forward(self, x):
                return sgl_kernel.q_lora_gemm(x)

        class PlainProj(nn.Module):
            def forward(self, x):
                return sgl_kernel.q_plain_gemm(x)

        class Layer(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.norm = Norm()
                if config.{lora_key} is not None:
                    self.q = LoraProj()
                else:
                    self.q = PlainProj()
                self.{flag_key} = config.{flag_key}
                self.act = ACTS[config.{act_key}]

            def forward(self, x, batch: Batch):
                x = self.norm(x)
                q = self.q(x)
                if self.{flag_key}:
                    q = sgl_kernel.flag_kernel(q)
                x = batch.attn_backend.forward(q, batch)
                x = self.act(x)
                return sgl_kernel.out_gemm(x)

        class Model(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.layers = nn.ModuleList([Layer(config) for _ in range(config.num_hidden_layers)])

            def forward(self, x, batch: Batch):
                for layer in self.layers:
                    x = layer(x, batch)
                return x
    """
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text).lstrip())
    return truth
