"""``layerc optrace`` under a configuration (issue 18, deliverable 2): ``--config`` (a config.json
or key=value pairs), ``--attention-backend``, ``--quant``, ``--platform``, ``--phase``. A branch
on a known value is taken or pruned; with no value, every branch is kept and marked conditional.

The class is checked on generated packages with their truth (``optrace_config_gen``: backend
registries by decorator and by dict, platform switches, config branches in ``__init__`` and in
``forward``, an activation table), on the installed transformers source, and on sglang."""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from layerc.backends.optrace import summary_rows
from layerc.grammar.pysource import SourceSet
from layerc.passes.base import Context
from layerc.passes.optrace_passes import OpTraceModule, TraceOps
from layerc.passes.pyconst import Knowns, config_path, parse_config_value
from layerc.tools.driver import main

from tests.optrace_config_gen import make_package
from tests.passes.test_optrace import HF, find, kernel_names, needs_transformers


def traced(source, entry: str, knowns: Knowns) -> OpTraceModule:
    module = OpTraceModule(SourceSet(source), entry, knowns=knowns)
    TraceOps().apply(Context(), module)
    module.verify()
    return module


def reached(module: OpTraceModule) -> set[str]:
    return {k.name for n, _ in module.tree.nodes() for k in n.kernels}


def random_choice(rng: random.Random, truth) -> dict:
    choice: dict = {}
    if rng.random() < 0.6:
        choice["backend"] = rng.choice(truth.backends)
    if rng.random() < 0.6:
        choice["phase"] = rng.choice(["prefill", "decode"])
    if rng.random() < 0.6:
        choice["platform"] = rng.choice(["cuda", "rocm"])
    cfg = {"num_hidden_layers": 2}
    if rng.random() < 0.6:
        cfg[truth.lora_key] = rng.choice([None, 512])
    if rng.random() < 0.6:
        cfg[truth.flag_key] = rng.choice([True, False])
    if rng.random() < 0.6:
        cfg[truth.act_key] = rng.choice(truth.act_keys)
    choice["config"] = cfg
    return choice


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1))
def test_the_configuration_keeps_exactly_what_can_run(tmp_path_factory, seed):
    """Every choice (backend, phase, platform, config keys, or none of them) leaves exactly the
    kernels that can run under it, on packages of every form the generator makes."""
    root = tmp_path_factory.mktemp("pkg")
    truth = make_package(root, seed)
    rng = random.Random(seed)
    for _ in range(4):
        choice = random_choice(rng, truth)
        knowns = Knowns(choice["config"], choice.get("platform"), choice.get("phase"), choice.get("backend"))
        assert reached(traced(root / "pkg", "Model", knowns)) == truth.kernels(choice), choice


@pytest.mark.parametrize("seed", range(6))
def test_without_a_configuration_every_choice_is_kept_and_marked(tmp_path, seed):
    truth = make_package(tmp_path, seed)
    module = traced(tmp_path / "pkg", "Model", Knowns())
    assert reached(module) == truth.kernels({})
    rows = summary_rows(module.tree)
    always = {k.name for r in rows for k in r.kernels if k.name not in r.conditional}
    assert always == {"out_gemm"}  # the one kernel no choice decides
    marked = {k for r in rows for k in r.conditional}
    assert {k for k in truth.kernels({}) if k.startswith("attn_")} <= marked


def test_a_configuration_counts_what_it_pruned(tmp_path):
    truth = make_package(tmp_path, 7)
    module = traced(tmp_path / "pkg", "Model", Knowns({truth.lora_key: None}, "cuda", "decode", truth.backends[0]))
    assert module.pruned >= 3 and module.tree.pruned == module.pruned
    assert "--platform cuda" in module.tree.configuration


# -- the values a condition reads ------------------------------------------------------------

@pytest.mark.parametrize("text,path", [
    ("config.hidden_act", ["hidden_act"]), ("self.config.text_config.hidden_act", ["text_config", "hidden_act"]),
    ("self.hf_config.q_lora_rank", ["q_lora_rank"]), ("self.q_lora_rank", None), ("config", None)])
def test_config_reads_are_known_by_the_object_they_read(text, path):
    import ast

    assert config_path(ast.parse(text, mode="eval").body) == path


def test_nested_keys_fall_back_to_the_top():
    k = Knowns({"hidden_act": "silu", "text_config": {"hidden_size": 8}})
    assert k.lookup(["text_config", "hidden_size"]) == 8
    assert k.lookup(["text_config", "hidden_act"]) == "silu"  # an HF sub-config inherits it
    assert Knowns(attention_backend="sdpa").lookup(["_attn_implementation"]) == "sdpa"


@pytest.mark.parametrize("text,value", [("true", True), ("null", None), ("1536", 1536), ("silu", "silu"), ('"8"', "8")])
def test_key_value_pairs_read_json_values(text, value):
    assert parse_config_value(text) == value


# -- transformers ---------------------------------------------------------------------------

@needs_transformers
def test_hf_attention_and_activation_follow_the_configuration():
    path = HF / "llama" / "modeling_llama.py"
    sdpa = traced(path, "LlamaForCausalLM", Knowns({"hidden_act": "silu"}, attention_backend="sdpa")).tree
    (interface,) = find(sdpa.root, "attention_interface()")
    assert not interface.children  # eager_attention_forward is not the one selected
    assert "F.scaled_dot_product_attention" in kernel_names(interface)
    assert kernel_names(find(sdpa.root, "self.act_fn()")[0]) == {"F.silu"}
    eager = traced(path, "LlamaForCausalLM", Knowns({"hidden_act": "gelu"}, attention_backend="eager")).tree
    (interface,) = find(eager.root, "attention_interface()")
    assert [c.label for c in interface.children] == ["repeat_kv()", "repeat_kv()"]  # eager alone: no branch
    assert "F.scaled_dot_product_attention" not in kernel_names(interface)
    assert "F.silu" not in kernel_names(find(eager.root, "self.act_fn()")[0])


# -- the command line --------------------------------------------------------------------------

def test_cli_configuration(tmp_path, capsys):
    truth = make_package(tmp_path, 3)
    cfg = tmp_path / "config.json"
    cfg.write_bytes(orjson.dumps({truth.lora_key: 512, truth.act_key: truth.act_keys[0], "num_hidden_layers": 2}))
    out = tmp_path / "r.md"
    rc = main(["optrace", str(tmp_path / "pkg"), "--entry", "Model", "--config", str(cfg),
               "--config", f"{truth.lora_key}=null", "--attention-backend", truth.backends[-1],
               "--platform", "rocm", "--phase", "prefill", "-o", str(out), "--json"])
    assert rc == 0
    assert "branches pruned by the configuration" in capsys.readouterr().err
    doc = orjson.loads(out.with_suffix(".json").read_bytes())
    names = {k["name"] for k in doc["kernels"]}
    choice = {"backend": truth.backends[-1], "platform": "rocm", "phase": "prefill",
              "config": {truth.lora_key: None, truth.act_key: truth.act_keys[0]}}  # key=value given later wins
    assert names == truth.kernels(choice)
    assert doc["configuration"]["pruned_branches"] > 0
    assert "**Configuration:**" in out.read_text(encoding="utf-8")


def test_cli_bad_configuration(tmp_path, capsys):
    truth = make_package(tmp_path, 1)
    with pytest.raises(SystemExit) as e:
        main(["optrace", str(tmp_path / "pkg"), "--entry", "Model", "--config", "=3"])
    assert e.value.code == 2
    bad = tmp_path / "list.json"
    bad.write_text("[1, 2]\n")
    assert main(["optrace", str(tmp_path / "pkg"), "--entry", "Model", "--config", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:1:1: error:" in err and "Traceback" not in err
    assert truth.backends


def test_cli_dotted_keys_set_nested_config(tmp_path):
    """``--config text_config.hidden_act=silu`` sets the key inside the sub-config, where an HF
    multimodal model reads it (``config.text_config.hidden_act``)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(
        "import torch\nfrom torch import nn\n"
        "class M(nn.Module):\n"
        "    def __init__(self, config):\n"
        "        super().__init__()\n"
        "        self.config = config\n"
        "    def forward(self, x):\n"
        "        if self.config.text_config.use_gate:\n"
        "            x = torch.sigmoid(x)\n"
        "        return torch.relu(x)\n")
    out = tmp_path / "r.json"
    assert main(["optrace", str(pkg), "--entry", "M", "--config", "text_config.use_gate=false", "--json", str(out)]) == 0
    assert {k["name"] for k in orjson.loads(out.read_bytes())["kernels"]} == {"torch.relu"}
    for bad in ("a..b=1", ".a=1", "a.=1"):
        with pytest.raises(SystemExit) as e:
            main(["optrace", str(pkg), "--entry", "M", "--config", bad])
        assert e.value.code == 2
