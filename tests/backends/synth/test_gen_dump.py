"""GraphBuilder naming and the synthetic AutoDeploy dump generator.

Generated dumps stand in for real ones in the slicer tests, so they must go through the real
reader and printer unchanged, and their ground truth must agree with the weight names.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter

import pytest

from layerc.backends.autodeploy import print_module
from layerc.grammar.autodeploy import parse_autodeploy
from layerc.ir.builder import GETITEM, GraphBuilder, Namespace, sanitize, target_base
from layerc.ir.graph import OP, OUTPUT, PLACEHOLDER, Weight, is_structurally_equivalent
from layerc.ir.types import TensorType, TupleType
from layerc.passes.pipeline import run_passes
from layerc.passes.slicing import SliceLayers
from layerc.backends.synth import dump as gen_dump
from layerc.tools import gen_dump as gen_dump_cli
from layerc.backends.synth.dump import ARCHES, generate, truth

#: Small layer counts that still cover every layer kind of each architecture.
SMALL = {"deepseek_v3": 6, "deepseek_v3_prefusion": 5, "llama": 3, "qwen3_moe": 3, "nemotron_h": 7, "qwen3_next": 8, "eager": 3}
LAYER_WEIGHT = re.compile(r"^(?:model|backbone)_layers_(\d+)_")


# -- GraphBuilder ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "target, base",
    [
        ("auto_deploy.torch_linear_simple.default", "torch_linear_simple_default"),
        ("aten.add.Tensor", "add"),
        ("<built-in function getitem>", "getitem"),
        ("<function begin_aux_stream_passthrough at 0x7f2a1c0b3d90>", "begin_aux_stream_passthrough"),
        ("trtllm.noaux_tc_op.default", "noaux_tc_op_default"),
        ("auto_deploy.trtllm_moe_fused", "trtllm_moe_fused"),
        ("dist.trtllm_fused_allreduce_residual_rmsnorm.default", "trtllm_fused_allreduce_residual_rmsnorm_default"),
        ("view", "view"),
    ],
)
def test_target_base(target, base):
    assert target_base(target) == base


def test_sanitize_is_fx_snake_case():
    assert sanitize("model.layers.5.mlp.gate.e_score_correction_bias") == "model_layers_5_mlp_gate_e_score_correction_bias"
    assert sanitize("backbone.layers.0.mixer.A_log") == "backbone_layers_0_mixer_a_log"
    assert sanitize("model.fooBar") == "model_foo_bar"


def test_namespace_matches_torch_fx():
    fx_graph = pytest.importorskip("torch.fx.graph")
    rng = random.Random(0)
    pool = ["add", "add_1", "add_3", "pow", "pow_1", "slice", "getitem", "view_2", "x", "for", "torch", "output", "a.b", "3d"]
    ours, theirs = Namespace(), fx_graph._Namespace()
    for _ in range(3000):
        c = rng.choice(pool)
        assert ours.create_name(c) == theirs.create_name(c, None), c


def test_builder_names_weights_and_getitems():
    b = GraphBuilder()
    t = TensorType((8, 16), "torch.bfloat16")
    x = b.placeholder("x", t)
    w = b.weight("model.layers.0.w", t)
    assert b.weight("model_layers_0_w") is w
    a = b.op("aten.add.Tensor", (x, w), t)
    a1 = b.op("aten.add.Tensor", (a, x), t)
    p = b.op("aten.pow.Tensor_Scalar", (a1, 2), t)  # a builtin name: fx starts at _1
    pair = b.op("aten.split_with_sizes.default", (p, [8, 8], -1), TupleType((t, t)))
    g0, g1 = b.getitems(pair)
    b.output(g0, g1)
    assert [n.name for n in b.graph.ops] == ["add", "add_1", "pow_1", "split_with_sizes", "getitem", "getitem_1"]
    b.graph.verify()


# -- every architecture through the real reader and printer -----------------------------------------
@pytest.mark.parametrize("symbolic", [False, True], ids=["concrete", "symbolic"])
@pytest.mark.parametrize("arch", ARCHES)
def test_round_trip(arch, symbolic):
    mod = generate(arch, SMALL[arch], symbolic=symbolic)
    mod.verify()
    text = print_module(mod)
    parsed = parse_autodeploy(text, gen_dump.dump_name(mod))
    parsed.verify()
    assert print_module(parsed) == text
    if arch != "deepseek_v3_prefusion":  # expert weights only appear bare in lists there: no type to read back
        assert is_structurally_equivalent(parsed, mod)
    assert ("s72xs70x" in text) == symbolic


#: A text of each constant class that ``constants=True`` puts into every layer.
CONSTANT_TEXTS = [
    "aten.einsum.default(bsh,bsh->bs, [", "-inf, inf)", ", nan)", "(Ellipsis, slice(None, 64, None))",
    ", [0, 1], constant, 0.0)", "(0.5+0.5j)", "cuda:0, torch.bfloat16, False, False, torch.contiguous_format)",
    "'layout': torch.strided, 'device': device(type='cuda', index=0)", "Expected all(h > -inf) in 'model.layers[0]', got {",
]


@pytest.mark.parametrize("symbolic", [False, True], ids=["concrete", "symbolic"])
@pytest.mark.parametrize("arch", ARCHES)
def test_constants_round_trip(arch, symbolic):
    """Every constant class, in every layer of every architecture: read back as the same values,
    printed back as the same bytes; the constant ops belong to their layer."""
    mod = generate(arch, SMALL[arch], symbolic=symbolic, constants=True)
    mod.verify()
    text = print_module(mod)
    parsed = parse_autodeploy(text, gen_dump.dump_name(mod))
    parsed.verify()
    assert print_module(parsed) == text
    if arch != "deepseek_v3_prefusion":
        assert is_structurally_equivalent(parsed, mod)
    for piece in CONSTANT_TEXTS + (["Runtime assertion failed for expression Ge(s72, 1) on node 'ge'", "[s72, s70, "]
                                   if symbolic else []):
        assert piece in text, piece
    layers = {n.name: n.meta["true_layer"] for n in mod.main_graph().nodes}
    einsums = [n for n in parsed.main_graph().ops if n.target == "aten.einsum.default"]
    assert [layers[n.name] for n in einsums] == list(range(SMALL[arch]))
    assert all(n.args[0] == "bsh,bsh->bs" for n in einsums)
    run_passes([SliceLayers()], parsed)  # the slicer places them in their layers
    added = {"aten.einsum.default", "aten.clamp.default", "aten.where.ScalarOther", "aten._assert_async.msg",
             "aten.pad.default", "aten.mul.Scalar", "aten.to.device", "auto_deploy.workspace_alloc.default"}
    assert all(n.meta["layer"] == layers[n.name] for n in parsed.main_graph().ops if n.target in added)
    plain = generate(arch, SMALL[arch], symbolic=symbolic)  # the default adds none of them
    assert not any(n.target == "aten.einsum.default" for n in plain.main_graph().ops)


@pytest.mark.parametrize("shuffle", [False, True], ids=["ordered", "shuffled"])
@pytest.mark.parametrize("arch", ARCHES)
def test_truth_agrees_with_weights(arch, shuffle):
    mod = generate(arch, SMALL[arch], seed=5 if shuffle else None, shuffle=shuffle)
    graph = mod.main_graph()
    assert all("true_layer" in n.meta for n in graph.nodes)
    seen = set()
    for node in graph.ops:
        for w in node.weights:
            m = LAYER_WEIGHT.match(w.name)
            if m:
                assert node.meta["true_layer"] == int(m.group(1)), (node.name, w.name)
                seen.add(int(m.group(1)))
    assert seen == set(range(SMALL[arch]))
    layers = [n.meta["true_layer"] for n in graph.nodes]
    assert set(layers) == set(range(SMALL[arch])) | {None}
    assert list(truth(mod)) == [n.name for n in graph.nodes]


def test_deepseek_v3_full_size():
    mod = generate("deepseek_v3")
    text = print_module(mod)
    op_lines = sum(1 for line in text.splitlines() if line.startswith("%") and " = " in line)
    assert op_lines > 3000
    parsed = parse_autodeploy(text, "085_compile_compile_model.txt")
    parsed.verify()
    assert print_module(parsed) == text
    graph = parsed.main_graph()
    moes = [n for n in graph.ops if n.target == "auto_deploy.trtllm_moe_fused"]
    assert len(moes) == 61 - 3
    layer_of = {n.name: n.meta["true_layer"] for n in mod.main_graph().nodes}
    for k, node in enumerate(moes):  # fused-weight numbers count MoE ops in graph order, not layers
        assert [w.name for w in node.weights] == [f"fused_moe_w3_w1_stacked_{k}", f"fused_moe_w2_stacked_{k}"]
        assert layer_of[node.name] == k + 3
    assert layer_of["noaux_tc_op_default_2"] == 5
    assert layer_of["flashinfer_mla_with_cache_default_5"] == 5
    counts = Counter(n.target for n in graph.ops)
    assert counts["auto_deploy.flashinfer_mla_with_cache.default"] == 61
    assert counts["dist.trtllm_fused_allreduce_residual_rmsnorm.default"] == 61  # 60 input norms + the final norm
    assert counts["<function begin_aux_stream_passthrough at 0x7f2a1c0b3d90>"] == 61 + 58
    caches = [n for n in graph.placeholders if re.match(r"r\d+_(ckv|kpe)_cache$", n.name)]
    assert len(caches) == 2 * 61


def test_prefusion_expert_lists():
    mod = generate("deepseek_v3_prefusion", 5)
    assert (mod.stage, mod.graphs[0].name) == ("pattern_matcher", "(root)")
    moes = [n for n in mod.main_graph().ops if n.target == "auto_deploy.torch_moe.default"]
    assert [n.meta["true_layer"] for n in moes] == [3, 4]
    w1, w2, w3 = moes[1].args[3:]
    assert len(w1) == len(w2) == len(w3) == 256
    assert (w1[0].name, w2[255].name) == ("model_layers_4_mlp_experts_0_gate_proj_weight",
                                          "model_layers_4_mlp_experts_255_down_proj_weight")
    assert "[model_layers_4_mlp_experts_0_up_proj_weight, model_layers_4_mlp_experts_1_up_proj_weight, " in print_module(mod)


def test_seed_and_shuffle():
    base = generate("deepseek_v3", 6)
    mixed = generate("deepseek_v3", 6, seed=11, shuffle=True)
    mixed.verify()
    assert print_module(mixed) == print_module(generate("deepseek_v3", 6, seed=11, shuffle=True))
    b, m = base.main_graph(), mixed.main_graph()
    key = lambda g: Counter((n.target, n.meta["true_layer"], n.type) for n in g.nodes)  # noqa: E731
    assert key(b) == key(m)
    assert [n.name for n in b.nodes] != [n.name for n in m.nodes]
    assert [n.meta["true_layer"] for n in b.nodes] == [n.meta["true_layer"] for n in m.nodes]  # layers stay contiguous
    fixed = {n.name for n in b.ops if target_base(n.target) not in gen_dump.GENERIC}
    assert fixed <= {n.name for n in m.ops}  # only generic ops are renamed
    renamed = generate("deepseek_v3", 6, seed=11)  # a seed alone keeps the order
    assert [n.target for n in renamed.main_graph().nodes] == [n.target for n in b.nodes]


def test_write_and_cli(tmp_path):
    parser = __import__("argparse").ArgumentParser()
    gen_dump_cli.configure_parser(parser)
    args = parser.parse_args(["nemotron_h", str(tmp_path), "--layers", "6", "--symbolic", "--seed", "2", "--shuffle",
                              "--constants"])
    assert gen_dump_cli.run(args) == 0
    dump = tmp_path / "084_compile_compile_model.txt"
    layers = json.loads((tmp_path / "084_compile_compile_model_truth.json").read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == [dump.name, "084_compile_compile_model_truth.json"]
    parsed = parse_autodeploy(dump.read_text(), str(dump))
    assert list(layers) == [n.name for n in parsed.main_graph().nodes]
    assert {v for v in layers.values()} == {None, 0, 1, 2, 3, 4, 5}
    ssm_caches = [n for n in parsed.main_graph().nodes if n.kind == PLACEHOLDER and n.name.endswith("ssm_state_cache")]
    assert [layers[n.name] for n in ssm_caches] == [0, 2, 4]
    asserts = [n for n in parsed.main_graph().ops if n.target == "aten._assert_scalar.default"]
    assert [layers[n.name] for n in asserts] == [0, 1, 2, 3, 4, 5]
    assert gen_dump.write("llama", tmp_path, layers=2) == tmp_path / "081_compile_compile_model.txt"


# -- piecewise CUDA graph sections -------------------------------------------------------------------
def _op_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("%") and " = " in line)


def test_piecewise_round_trip():
    mod = generate("deepseek_v3", 4, piecewise=True)
    mod.verify()
    text = print_module(mod)
    parsed = parse_autodeploy(text, gen_dump.dump_name(mod))
    parsed.verify()
    assert print_module(parsed) == text
    assert parsed.main_graph().name == "monolithic.model"
    names = [g.name for g in parsed.graphs]
    # named_modules order; the graph opens with a dynamic op (prepare_metadata), so no submod_0:
    # submod_1 prepares, odd pieces hold one MLA each, even pieces the static code between them.
    assert names == ["monolithic.model", "piecewise.split_gm"] + [f"piecewise.split_gm.submod_{k}" for k in range(1, 11)]
    assert text.startswith(f"# Transform: compile_model\n# Stage: compile\n# GraphModules found: {len(names)}\n")
    assert "\n%submod_3 = submod_3(%getitem : ? : unknown, %getitem_1 : ? : unknown, " in text
    main, split, *subs = parsed.graphs
    assert Counter(n.target for g in subs for n in g.ops) == Counter(n.target for n in main.ops)
    assert {n.target for n in split.ops} == {g.name.rsplit(".", 1)[1] for g in subs} | {GETITEM}


@pytest.mark.parametrize("arch, layers", [("deepseek_v3", 4), ("nemotron_h", 7), ("qwen3_next", 4)])
def test_piecewise_partition(arch, layers):
    mod = generate(arch, layers, piecewise=True)
    main, split, *subs = mod.graphs
    by_name = {n.name: n for n in main.nodes}
    # every op of monolithic.model is copied into exactly one piece; split_module renames the
    # copies (add → add_tensor), so a copy names its original in meta["source"]
    copies = [n for g in subs for n in g.ops]
    assert sorted(n.meta["source"] for n in copies) == sorted(n.name for n in main.ops)
    for n in copies:
        orig = by_name[n.meta["source"]]
        assert (n.target, n.type, n.meta["true_layer"]) == (orig.target, orig.type, orig.meta["true_layer"])
        assert n.name == gen_dump.fx_name(n.target) or re.fullmatch(re.escape(gen_dump.fx_name(n.target)) + r"_\d+", n.name)
    for g in subs:
        dynamic = [n for n in g.ops if gen_dump.is_dynamic(n.target)]
        assert len(g.ops) == 1 if dynamic else not dynamic  # a dynamic op is a piece of its own
        for ph in g.placeholders:  # inputs are named after the value they receive
            src = by_name.get(ph.name) or main.weights[ph.name]
            assert ph.type == src.type and "true_layer" in ph.meta
    n_dynamic = sum(1 for n in main.ops if gen_dump.is_dynamic(n.target))
    assert sum(1 for g in subs if len(g.ops) == 1 and gen_dump.is_dynamic(g.ops[0].target)) == n_dynamic
    # the split graph: the model's inputs, a call per piece, getitems of multi-value pieces, output
    assert [n.name for n in split.placeholders] == [n.name for n in main.placeholders]
    calls = [n for n in split.ops if n.target != GETITEM]
    assert [n.target for n in calls] == [n.name for n in calls] == [g.name.rsplit(".", 1)[1] for g in subs]
    for g, call in zip(subs, calls):
        outs = g.output.args[0]
        getitems = [u for u in call.users if u.target == GETITEM]
        assert len(getitems) == (len(outs) if isinstance(outs, tuple) else 0)
        assert len(call.inputs) == len(g.placeholders) > 0
    assert split.nodes[-1].kind == OUTPUT and split.nodes[-1].args[0] is calls[-1]


def _fx_mirror(graph, torch):
    """``graph`` as a torch.fx GraphModule: real aten overloads, stand-ins with the same ``__name__``
    for the other ops, a buffer per weight; arguments reduced to the values read."""
    import operator

    root, g, env, fns = torch.nn.Module(), torch.fx.Graph(), {}, {}

    def target(t):
        if t == GETITEM:
            return operator.getitem
        ns, _, rest = t.partition(".")
        if ns == "aten":
            op, _, overload = rest.partition(".")
            return getattr(getattr(torch.ops.aten, op), overload) if overload else getattr(torch.ops.aten, op)
        if t not in fns:
            fns[t] = fn = lambda *a: None  # noqa: E731
            fn.__name__ = fn.__qualname__ = t.split()[1] if t.startswith("<") else rest
        return fns[t]

    for n in graph.nodes:
        for v in n.inputs:
            if isinstance(v, Weight) and v not in env:
                root.register_buffer(v.name, torch.empty(0))
                env[v] = g.get_attr(v.name)
        if n.kind == PLACEHOLDER:
            env[n] = g.placeholder(n.name)
        elif n.kind == OP:
            args = (env[n.args[0]], n.args[1]) if n.target == GETITEM else tuple(env[v] for v in n.inputs)
            env[n] = g.create_node("call_function", target(n.target), args, name=n.name)
        else:
            g.output(env[n.args[0]])
    return torch.fx.GraphModule(root, g)


@pytest.mark.parametrize("arch, layers, shuffle", [("deepseek_v3", 3, False), ("nemotron_h", 7, True),
                                                   ("qwen3_next", 4, False)])
def test_piecewise_matches_torch_split_module(arch, layers, shuffle):
    """Our split gives the names, inputs and outputs torch's own split_module gives, called as
    AutoDeploy calls it, on the same partition."""
    torch = pytest.importorskip("torch")
    split_module = pytest.importorskip("torch.fx.passes.split_module").split_module
    mod = generate(arch, layers, symbolic=shuffle, seed=3 if shuffle else None, shuffle=shuffle, piecewise=True)
    main = mod.main_graph()
    pid = {n.name: k for n, k in gen_dump.partition_ids(main).items()}
    gm = _fx_mirror(main, torch)
    split = split_module(gm, gm, lambda n: pid[n.name], keep_original_order=True)
    theirs = [("piecewise.split_gm", split)] + [(f"piecewise.split_gm.{k}", m) for k, m in split.named_children()]
    kinds = {PLACEHOLDER: "placeholder", OUTPUT: "output", OP: "call"}
    for (name, m), g in zip(theirs, mod.graphs[1:], strict=True):
        assert name == g.name
        fx_nodes = [(n.op.split("_")[0], n.name, [a.name for a in n.all_input_nodes]) for n in m.graph.nodes
                    if n.op != "get_attr"]
        assert fx_nodes == [(kinds[n.kind], n.name, [v.name for v in n.inputs]) for n in g.nodes], name


def test_piecewise_full_size_and_cli(tmp_path):
    mod = generate("deepseek_v3", piecewise=True)
    text = print_module(mod)
    assert _op_lines(text) > 5500
    assert len(mod.graphs) == 2 + 1 + 61 + 62  # prepare, 61 MLAs, 62 static pieces around them
    assert print_module(parse_autodeploy(text, "085_compile_compile_model.txt")) == text
    parser = __import__("argparse").ArgumentParser()
    gen_dump_cli.configure_parser(parser)
    assert gen_dump_cli.run(parser.parse_args(["llama", str(tmp_path), "--layers", "2", "--piecewise"])) == 0
    dump = (tmp_path / "081_compile_compile_model.txt").read_text()
    assert "# GraphModules found: 8\n" in dump and "\n# GraphModule: piecewise.split_gm.submod_5\n" in dump
    layers = json.loads((tmp_path / "081_compile_compile_model_truth.json").read_text())
    assert list(layers) == [n.name for n in generate("llama", 2).main_graph().nodes]
    with pytest.raises(ValueError):
        generate("deepseek_v3_prefusion", 2, piecewise=True)


def test_unknown_arch():
    with pytest.raises(ValueError):
        generate("gpt2")
    assert all(n.kind != OP or n.target for n in generate("llama", 1).main_graph().nodes)
