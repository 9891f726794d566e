"""``layerc optrace`` on source: the small package in tests/optrace_pkg (golden reports and the
structure seed 003 asks for), the installed transformers models, generated packages
(properties), the kernel table, and bad input."""

from __future__ import annotations

import importlib.util
import os
import shutil
import textwrap
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from tests.conftest import TESTS
from layerc.grammar.pysource import SourceSet
from layerc.ir.optree import BRANCH, OpNode
from layerc.passes.base import Context
from layerc.passes.kernel_calls import kernel_calls
from layerc.passes.optrace_passes import OPTRACE_PASSES, OpTraceModule
from layerc.passes.pipeline import build_pipeline
from layerc.tools.driver import main

PKG = TESTS / "optrace_pkg" / "tinyllm"
GOLDEN = TESTS / "golden" / "optrace"
_TRANSFORMERS = importlib.util.find_spec("transformers")  # found, not imported
#: the installed transformers' model sources (tests that read them skip without the [torch] extra)
HF = Path(_TRANSFORMERS.origin).parent / "models" if _TRANSFORMERS and _TRANSFORMERS.origin else Path("/no-transformers")
needs_transformers = pytest.mark.skipif(not HF.is_dir(), reason="transformers is not installed (the [torch] extra)")


def trace(source, entry: str, passes: str = "trace-ops,cross-validate-kernels") -> OpTraceModule:
    module = OpTraceModule(SourceSet(source), entry)
    for p in build_pipeline(passes, OPTRACE_PASSES):
        p.apply(Context(), module)
        module.verify()
    return module


def find(root: OpNode, label: str, annotation: str | None = None) -> list[OpNode]:
    return [n for n, _ in root.walk() if n.label == label and (annotation is None or n.annotation == annotation)]


def kernel_names(node: OpNode) -> set[str]:
    return {k.name for k in node.kernels}


@pytest.fixture(scope="module")
def tiny() -> OpTraceModule:
    return trace(PKG, "TinyForCausalLM")


# -- the small package: golden reports -------------------------------------------------------

def test_tinyllm_reports_match_golden(tmp_path, capsys, monkeypatch):
    out = tmp_path / "tiny_op_traces.md"
    kernels = tmp_path / "tiny_kernel_traces.md"
    monkeypatch.chdir(PKG.parent)  # the source as a relative path: the reports do not name the checkout
    rc = main(["optrace", "tinyllm", "--entry", "TinyForCausalLM", "-o", str(out), "--json",
               "--kernel-traces", str(kernels), "--link-prefix", "../"])
    assert rc == 0
    assert "2 cross-validation issues" in capsys.readouterr().err
    produced = {"tiny_op_traces.md": out.read_text(encoding="utf-8"),
                "tiny_kernel_traces.md": kernels.read_text(encoding="utf-8"),
                "tiny_op_traces.json": orjson.dumps(orjson.loads(out.with_suffix(".json").read_bytes()),
                                                    option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"}
    for name, text in produced.items():
        path = GOLDEN / name
        if os.environ.get("LAYERC_UPDATE_GOLDEN"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        assert text == path.read_text(encoding="utf-8"), name


def test_tinyllm_markdown_follows_seed_003(tmp_path):
    out = tmp_path / "r.md"
    assert main(["optrace", str(PKG), "--entry", "tinyllm.models.tiny:TinyForCausalLM", "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections == ["## Execution Graph", "## Op Summary", "## Cross-Validation Summary", "## Notes"]
    graph = text.split("## Execution Graph")[1].split("## Op Summary")[0]
    assert "├─> " in graph and "└─> " in graph and "│\u00a0\u00a0\u00a0" in graph
    # links are relative to the report, pointing at the real file and the call's line
    rel = os.path.relpath(PKG / "layers" / "communicator.py", tmp_path)
    line = next(i for i, s in enumerate((PKG / "layers" / "communicator.py").read_text().splitlines(), 1)
                if "return self.input_layernorm(hidden_states, residual)" in s)
    assert f"[self.input_layernorm()]({rel}#L{line})" in graph
    # containers are not linked, and the summary table leaves them out
    assert "─> self.self_attn()\\" in graph
    table = text.split("## Op Summary")[1].split("## Cross-Validation")[0]
    assert "| `self.input_layernorm()` |" in table and "`self.self_attn()`" not in table
    assert "`self.model()`" not in table


# -- the small package: structure --------------------------------------------------------------

def test_dispatch_paths_and_mixins(tiny):
    root = tiny.tree.root
    (attn,) = find(root, "self.self_attn()")
    assert [(c.label, c.annotation) for c in attn.children] == [
        ("self.forward_normal()", "MHA path"), ("self.forward_absorb()", "MLA path")]
    # forward_absorb lives in a mixin of another module; its calls are found through the MRO
    absorb = attn.children[1]
    assert [c.label for c in absorb.children] == [
        "self.q_a_layernorm()", "self.q_b_proj()", "bmm_fp8()", "self.attn_mqa()", "self.o_proj()"]
    # nested calls in one expression: innermost first
    (normal,) = [attn.children[0]]
    assert [c.label for c in normal.children] == ["self.q_proj()", "rotate()", "self.o_proj()"]
    assert absorb.children[2].annotation == "if self.w_kc.dtype == torch.float8_e4m3fn"
    assert kernel_names(absorb) == {"torch.bmm"}  # the else branch's torch.bmm is absorb's own kernel


def test_dense_vs_moe_branches_and_narrowing(tiny):
    root = tiny.tree.root
    moe_call, mlp_call = find(root, "self.mlp()")
    assert moe_call.annotation == "if isinstance(self.mlp, MoE)"
    assert [c.label for c in moe_call.children] == ["self.forward_deepep()", "self.forward_normal()"]
    assert [c.label for c in mlp_call.children] == ["self.gate_up_proj()", "self.down_proj()"]
    experts = find(root, "self.experts()")
    assert experts and all("fused_moe_kernel" in kernel_names(e) for e in experts)
    # the quant config's factory dispatches on the layer type: linears never reach the MoE kernel
    for proj in find(root, "self.q_proj()") + find(root, "self.gate_up_proj()"):
        assert kernel_names(proj) == {"F.linear", "fp8_scaled_mm", "per_token_quant_fp8"}


def test_config_dependent_attribute_gives_branches(tmp_path):
    (tmp_path / "branchy").mkdir()
    (tmp_path / "branchy" / "__init__.py").write_text("")
    (tmp_path / "branchy" / "m.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Dense(nn.Module):
            def forward(self, x):
                return torch.matmul(x, x)

        class Sparse(nn.Module):
            def __init__(self):
                super().__init__()
                self.router = nn.Linear(4, 4)
            def forward(self, x):
                return self.router(x)

        class Block(nn.Module):
            def __init__(self, config, i):
                super().__init__()
                self.mlp = Sparse() if i >= config.first_dense else Dense()
            def forward(self, x):
                return self.mlp(x)
        """))
    tree = trace(tmp_path / "branchy", "Block").tree
    (mlp,) = find(tree.root, "self.mlp()")
    assert [(b.kind, b.label, b.annotation) for b in mlp.children] == [
        (BRANCH, "Sparse.forward()", "if i >= config.first_dense"),
        (BRANCH, "Dense.forward()", "if not (i >= config.first_dense)")]
    assert [c.label for c in mlp.children[0].children] == ["self.router()"]
    assert kernel_names(mlp.children[1]) == {"torch.matmul"}


def test_attributes_bound_through_super_init(tmp_path):
    (tmp_path / "inherit.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Base(nn.Module):
            def __init__(self, hidden, norm=None):
                super().__init__()
                self.norm = norm
                self.proj = nn.Linear(hidden, hidden)

            def forward(self, x):
                return self.proj(self.norm(x))

        class Child(Base):
            def __init__(self, hidden):
                super().__init__(hidden, norm=nn.LayerNorm(hidden))
        """))
    tree = trace(tmp_path / "inherit.py", "Child").tree
    assert [(c.label, [k.name for k in c.kernels]) for c in tree.root.children] == [
        ("self.norm()", ["nn.LayerNorm"]), ("self.proj()", ["nn.Linear"])]


def test_communicator_norms_and_kernel_chains(tiny):
    root = tiny.tree.root
    (prep,) = find(root, "self.layer_communicator.prepare_attn()")
    assert [c.label for c in prep.children] == ["self.input_layernorm()", "self.input_layernorm()"]
    norm = prep.children[1]
    assert {"rmsnorm", "fused_add_rmsnorm"} <= kernel_names(norm)
    fused = next(k for k in norm.kernels if k.name == "fused_add_rmsnorm")
    assert fused.family == "sgl-kernel" and fused.category == "Norm"
    # the chain runs from the kernel call in RMSNorm.forward_cuda, through the platform
    # dispatch (self._forward_method), back to the op's call site in the communicator
    assert fused.chain[0].site.path == "tinyllm/layers/norm.py"
    assert [s.label for s in fused.chain] == ["fused_add_rmsnorm()", "self._forward_method()", "self.input_layernorm()"]
    assert fused.chain[-1].site == norm.site
    # a mode switch outside __init__ (enter_torch_compile) does not add alternatives
    (mlp_norm,) = find(root, "self.post_attention_layernorm()")
    assert "dist.all_reduce()" in [c.label for c in find(root, "self.layer_communicator.prepare_mlp()")[0].children]
    assert kernel_names(mlp_norm) == kernel_names(norm)
    (experts,) = find(root, "self.experts()")[:1]
    triton = next(k for k in experts.kernels if k.name == "fused_moe_kernel")
    assert triton.family == "triton" and triton.chain[0].label == "fused_moe_kernel()"


def test_cross_validation_reports_what_does_not_fit(tiny):
    v = tiny.validation
    assert [(u.kernel.name, u.function.rsplit(".", 1)[-1]) for u in v.unmapped] == [("tinyllm.probe", "debug_probe")]
    assert [o.label for o in v.ops_without_kernels] == ["self.logits_scaler()"]
    assert v.issues == 2
    assert set(v.kernels["fused_add_rmsnorm"]) == {"self.input_layernorm()", "self.q_a_layernorm()",
                                                   "self.post_attention_layernorm()", "self.norm()"}
    assert "bmm_fp8" in v.categories["GEMM"]


def test_passes_run_alone_and_verify():
    module = OpTraceModule(SourceSet(PKG / "models" / "tiny.py"), "TinyForCausalLM")
    with pytest.raises(Exception, match="needs the op tree"):
        OPTRACE_PASSES["cross-validate-kernels"]()().apply(Context(), module)
    OPTRACE_PASSES["trace-ops"]()().apply(Context(), module)
    module.verify()
    assert module.scope == ("tinyllm.models",)
    node = find(module.tree.root, "self.norm()")[0]
    node.kernels[0] = type(node.kernels[0])(**{**node.kernels[0].__dict__, "chain": node.kernels[0].chain[:-1]})
    with pytest.raises(Exception, match="not at its op"):
        module.verify()


# -- real sources: the installed transformers ----------------------------------------------------

def labels(node: OpNode) -> list[str]:
    return [c.label for c in node.children]


@needs_transformers
def test_hf_llama_tree():
    tree = trace(HF / "llama" / "modeling_llama.py", "LlamaForCausalLM").tree
    (layer,) = find(tree.root, "decoder_layer()")
    assert labels(layer) == ["self.input_layernorm()", "self.self_attn()", "self.post_attention_layernorm()", "self.mlp()"]
    (attn,) = find(tree.root, "self.self_attn()")
    assert labels(attn)[:4] == ["self.q_proj()", "self.k_proj()", "self.v_proj()", "apply_rotary_pos_emb()"]
    assert labels(attn)[-2:] == ["attention_interface()", "self.o_proj()"]
    (interface,) = find(tree.root, "attention_interface()")
    # ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward): with no
    # configuration, every registered implementation, each marked with the key that selects it, and the
    # default (eager, model code, expanded) where the key is none of them
    (eager,) = interface.children
    assert eager.label == "modeling_llama.eager_attention_forward()" and labels(eager) == ["repeat_kv()", "repeat_kv()"]
    assert eager.annotation == "if self.config._attn_implementation not in the mapping"
    assert {"torch.matmul", "F.softmax"} <= kernel_names(eager)
    sdpa = [k for k in interface.kernels if k.name == "F.scaled_dot_product_attention"]
    assert sdpa and all("self.config._attn_implementation == 'sdpa'" in k.conditions for k in sdpa)
    (mlp,) = find(tree.root, "self.mlp()")
    assert labels(mlp) == ["self.gate_proj()", "self.act_fn()", "self.up_proj()", "self.down_proj()"]
    assert "F.silu" in kernel_names(mlp.children[1])  # ACT2FN[...] resolved through ClassInstantier
    assert kernel_names(find(tree.root, "self.input_layernorm()")[0]) >= {"torch.rsqrt", "Tensor.pow", "Tensor.mean"}


@needs_transformers
def test_hf_deepseek_v3_tree():
    tree = trace(HF / "deepseek_v3" / "modeling_deepseek_v3.py", "DeepseekV3ForCausalLM").tree
    (attn,) = find(tree.root, "self.self_attn()")
    assert [(c.label, c.annotation) for c in attn.children[:4]] == [
        ("self.q_proj()", "if self.q_lora_rank is None"), ("self.q_a_proj()", "if not (self.q_lora_rank is None)"),
        ("self.q_a_layernorm()", "if not (self.q_lora_rank is None)"), ("self.q_b_proj()", "if not (self.q_lora_rank is None)")]
    (mlp,) = find(tree.root, "self.mlp()")
    moe, dense = mlp.children
    assert (moe.label, moe.annotation) == ("DeepseekV3MoE.forward()", "if layer_idx >= config.first_k_dense_replace")
    assert labels(moe) == ["self.gate()", "self.experts()", "self.shared_experts()"]
    assert dense.label == "DeepseekV3MLP.forward()"
    assert "torch.topk" not in kernel_names(moe.children[1]) and "Tensor.topk" in kernel_names(moe.children[0])


@needs_transformers
def test_hf_qwen3_moe_tree():
    tree = trace(HF / "qwen3_moe" / "modeling_qwen3_moe.py", "Qwen3MoeForCausalLM").tree
    (attn,) = find(tree.root, "self.self_attn()")
    assert labels(attn)[:5] == ["self.q_proj()", "self.q_norm()", "self.k_proj()", "self.k_norm()", "self.v_proj()"]
    (mlp,) = find(tree.root, "self.mlp()")
    assert [b.label for b in mlp.children] == ["Qwen3MoeSparseMoeBlock.forward()", "Qwen3MoeMLP.forward()"]
    assert labels(mlp.children[0]) == ["self.gate()", "self.experts()"]
    assert {"torch.topk", "F.softmax", "F.linear"} <= kernel_names(mlp.children[0].children[0])


# -- generated packages: the tree mirrors the calls written -----------------------------------

@st.composite
def module_trees(draw, depth=0):
    """A module class: an ordered list of (attribute, child class or None for a leaf)."""
    n = draw(st.integers(1 if depth == 0 else 0, 3 if depth < 2 else 0))
    return [(f"m{depth}_{i}", draw(module_trees(depth + 1)) if depth < 2 and draw(st.booleans()) else None)
            for i in range(n)]


def _emit(spec, name: str, classes: list[str]) -> None:
    body_init, body_fwd = [], []
    for attr, child in spec:
        if child is None:
            body_init.append(f"        self.{attr} = nn.Linear(4, 4)")
        else:
            cname = f"{name}_{attr}"
            _emit(child, cname, classes)
            body_init.append(f"        self.{attr} = {cname}()")
        body_fwd.append(f"        x = self.{attr}(x)")
    init = "\n".join(["    def __init__(self):", "        super().__init__()"] + body_init)
    fwd = "\n".join(["    def forward(self, x):", "        x = torch.relu(x)"] + body_fwd + ["        return x"])
    classes.append(f"class {name}(nn.Module):\n{init}\n\n{fwd}\n")


def _expected(spec) -> list:
    return [(f"self.{attr}()", _expected(child) if child is not None else []) for attr, child in spec]


def _shape(node: OpNode) -> list:
    return [(c.label, _shape(c)) for c in node.children]


def _check_kernels(node: OpNode, spec) -> None:
    """Containers call torch.relu themselves; a module with no submodules is a leaf op with
    its relu; an nn.Linear is a leaf op with its kernel. Every chain ends at the op."""
    assert [k.name for k in node.kernels[: node.direct]] == ["torch.relu"]
    for child, (attr, sub) in zip(node.children, spec):
        if sub is None:
            assert [k.name for k in child.kernels] == ["nn.Linear"] and not child.children
        elif not sub:
            assert [k.name for k in child.kernels] == ["torch.relu"] and not child.children
        else:
            _check_kernels(child, sub)
        assert all(k.chain[-1].site == child.site for k in child.kernels)


@settings(max_examples=20, deadline=None)
@given(module_trees())
def test_generated_packages_trace_as_written(tmp_path_factory, spec):
    d = tmp_path_factory.mktemp("gen")
    classes: list[str] = []
    _emit(spec, "Root", classes)
    (d / "gen.py").write_text("import torch\nfrom torch import nn\n\n\n" + "\n\n".join(classes))
    module = trace(d / "gen.py", "Root")
    tree = module.tree
    assert _shape(tree.root) == _expected(spec)
    _check_kernels(tree.root, spec)
    assert module.validation.issues == 0


# -- the kernel table ------------------------------------------------------------------------------

@pytest.mark.parametrize("qual,name,family,category,node", [
    ("sgl_kernel.bmm_fp8", "bmm_fp8", "sgl-kernel", "GEMM", True),
    ("torch.ops.sgl_kernel.fused_add_rmsnorm.default", "fused_add_rmsnorm", "sgl-kernel", "Norm", True),
    ("flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla", "trtllm_batch_decode_with_kv_cache_mla", "flashinfer", "Attention", True),
    ("vllm._custom_ops.rms_norm", "rms_norm", "vllm", "Norm", True),
    ("deep_gemm.fp8_m_grouped_gemm_nt_masked", "fp8_m_grouped_gemm_nt_masked", "deep-gemm", "GEMM", True),
    ("aiter.ops.triton.gemm_a16w16.gemm_a16w16", "gemm_a16w16", "aiter", "GEMM", True),
    ("torch.ops.mylib.fused_rope", "mylib.fused_rope", "torch.ops", "RoPE", True),
    ("torch.distributed.all_reduce", "all_reduce", "nccl", "Communication", True),
    ("torch.bmm", "torch.bmm", "torch", "GEMM", False),
    ("torch.nn.functional.linear", "F.linear", "torch", "GEMM", False),
    ("torch.nn.Linear", "nn.Linear", "torch", "GEMM", False),
    ("torch.nn.functional.scaled_dot_product_attention", "F.scaled_dot_product_attention", "torch", "Attention", False),
])
def test_kernel_table_classifies(qual, name, family, category, node):
    k = kernel_calls().classify(qual)
    assert (k.name, k.family, k.category, k.node) == (name, family, category, node)


@pytest.mark.parametrize("qual", ["torch.cuda.current_stream", "torch.no_grad", "torch.nn.ModuleList", "deep_ep.Buffer",
                                  "torch.distributed.get_rank", "numpy.zeros", "torch.float32"])
def test_kernel_table_leaves_out_non_kernels(qual):
    assert kernel_calls().classify(qual) is None


def test_kernel_table_aten_names():
    assert kernel_calls().classify("torch.nn.Linear").aten == ("aten::linear",)
    assert kernel_calls().tensor_method("view").aten == ("aten::view",)
    assert kernel_calls().tensor_method("update") is None


# -- bad input ---------------------------------------------------------------------------------

def test_unknown_entry_class_points_at_the_closest(tmp_path, capsys):
    out = tmp_path / "r.md"
    rc = main(["optrace", str(PKG / "models" / "tiny.py"), "--entry", "TinyForCausalLMX", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and not out.exists()
    first, source, caret = err.splitlines()[:3]
    path, line, col = first.split(": error: ")[0].rsplit(":", 2)
    assert path == str(PKG / "models" / "tiny.py")
    assert "no class 'TinyForCausalLMX'" in first and "did you mean 'TinyForCausalLM'?" in first
    assert source == "class TinyForCausalLM(nn.Module):" and caret == " " * (int(col) - 1) + "^"
    assert source[int(col) - 1:].startswith("TinyForCausalLM")


def test_unknown_entry_in_a_package(capsys):
    assert main(["optrace", str(PKG), "--entry", "NoSuchModel"]) == 1
    assert "error: no class 'NoSuchModel'" in capsys.readouterr().err


def test_unparsable_entry_module(tmp_path, capsys):
    pkg = tmp_path / "tinyllm"
    shutil.copytree(PKG, pkg)
    src = pkg / "models" / "tiny.py"
    lines = src.read_text().splitlines()
    bad = next(i for i, s in enumerate(lines) if s.startswith("class MLP"))
    lines[bad] = "class MLP(nn.Module)"  # the colon is missing
    src.write_text("\n".join(lines) + "\n")
    before = src.read_bytes()
    out = tmp_path / "r.md"
    assert main(["optrace", str(pkg), "--entry", "TinyForCausalLM", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{src}:{bad + 1}:") and "error: invalid Python" in err and "^" in err
    assert not out.exists() and src.read_bytes() == before


@pytest.mark.parametrize("argv", [
    ["optrace", str(PKG)],  # no --entry
    ["optrace", "--entry", "X"],  # no source
    ["optrace", str(PKG), "--entry", "X", "--arch", "llama"],  # --arch without --dynamic
    ["optrace", str(PKG), "--dynamic", "--arch", "llama"],  # --dynamic with a source
    ["optrace", "--dynamic"],  # --dynamic without --arch
])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_missing_source(capsys):
    assert main(["optrace", "/no/such/dir", "--entry", "X"]) == 1
    assert "error: no such file or directory" in capsys.readouterr().err
