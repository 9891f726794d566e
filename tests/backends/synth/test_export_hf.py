"""layerc.backends.synth.hf_export: tiny HF models -> AutoDeploy-style graph dumps + layer ground truth."""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import re
import subprocess
import sys
import textwrap

import pytest

from layerc.ir.diagnostics import LayercError
from layerc.backends.synth import hf_export as export_hf
from layerc.tools import export_hf as export_hf_cli

NUM_LAYERS = 2
HEADER = "# Transform: export_to_gm\n# Stage: export\n# GraphModules found: 1\n\n"
RULE = "=" * 80
ROOT_BANNER = f"\n{RULE}\n# GraphModule: (root)\n{RULE}\n\n"

# "%name = target(args) : out"; args never contain " = " so the first one splits.
DEF_LINE = re.compile(r"^%(\w+) = (.*)$")
REF = re.compile(r"%(\w+)")
INLINE_REF = re.compile(r"%(\w+) : ([^:,()]+?) : ([\w.]+)")


# --------------------------------------------------------------------------
# Pure-python parts (no torch needed)
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, prefix, expected",
    [
        ("model.layers.3", None, 3),
        ("model.layers.3.mlp.experts.7", None, 3),
        ("model.layers.12.self_attn.q_proj.weight", "model.layers", 12),
        ("L['self'].model.layers[3]", "model.layers", 3),
        ("L__self__.model.layers.1.mlp", "model.layers", 1),
        ("transformer.h.1.self_attention", "transformer.h", 1),
        ("transformer.h.1.self_attention", None, 1),
        ("model.embed_tokens", "model.layers", None),
        ("model.norm.weight", None, None),
        ("model.rotary_emb", None, None),
        ("lm_head", "model.layers", None),
        ("", None, None),
    ],
)
def test_layer_of_path(path, prefix, expected):
    assert export_hf.layer_of_path(path, prefix) == expected


def test_parser():
    p = argparse.ArgumentParser()
    export_hf_cli.configure_parser(p)
    args = p.parse_args(["--arch", "deepseek_v3", "out"])
    assert (args.arch, args.layers, args.outdir) == ("deepseek_v3", 2, "out")
    assert p.parse_args(["--arch", "llama", "--layers", "5", "o"]).layers == 5
    if importlib.util.find_spec("transformers") is not None:  # without it, run() says what is missing
        with pytest.raises(SystemExit):
            p.parse_args(["--arch", "no_such_arch", "o"])
    for required in ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "deepseek_v3", "mistral"):
        assert required in export_hf.ARCHES


def test_tiny_config_made_for_the_layer_count():
    assert export_hf.tiny_config("llama", 3) == {**export_hf._BASE, "num_hidden_layers": 3}
    # a hybrid's pattern, repeated and cut to the layer count
    assert export_hf.tiny_config("qwen3_next", 2)["layer_types"] == ["linear_attention", "full_attention"]
    assert export_hf.tiny_config("qwen3_next", 3)["layer_types"] == ["linear_attention", "full_attention", "linear_attention"]
    assert export_hf.tiny_config("gpt_neo", 3)["attention_types"] == [[["global", "local"], 1], [["global"], 1]]
    # DROP removes a base key; LAYERS reaches into sub-configs
    assert "max_position_embeddings" not in export_hf.tiny_config("xlnet", 2)
    assert export_hf.tiny_config("blt", 3)["global_config"]["num_hidden_layers"] == 3
    # a wrapper: the base goes to its text config
    mllama = export_hf.tiny_config("mllama", 3)
    assert "vocab_size" not in mllama
    assert mllama["text_config"] == {**export_hf._BASE, "num_hidden_layers": 3, "cross_attention_layers": [1]}


def test_the_tested_set_and_the_left_out():
    assert len(export_hf.ARCHES) == 44 and "jamba" not in export_hf.ARCHES and "jamba" in export_hf.ARCH_CONFIGS
    assert not set(export_hf.NOT_EXPORTED) & set(export_hf.ARCH_CONFIGS)
    assert export_hf.NOT_EXPORTED["gemma3"] == "multimodal wrapper: its text model is gemma3_text"


def test_an_architecture_not_exported_says_why():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    with pytest.raises(LayercError, match="--arch dbrx is not exported: its experts loop in Python over nonzero"):
        export_hf.build_model("dbrx", 2)


def test_imports_and_fails_cleanly_without_torch(tmp_path):
    code = textwrap.dedent(
        f"""
        import argparse, sys
        sys.modules["torch"] = None          # make "import torch" fail
        sys.modules["transformers"] = None
        from layerc.tools import export_hf as export_hf_cli
        from layerc.ir.diagnostics import LayercError
        args = argparse.Namespace(arch="llama", layers=2, outdir={str(tmp_path)!r})
        try:
            export_hf_cli.run(args)
        except LayercError as exc:
            print(exc.message)
        else:
            raise SystemExit("no LayercError")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "export-hf needs the [torch] extra: pip install 'layerc[torch]'" in proc.stdout
    assert not any(tmp_path.iterdir())


# --------------------------------------------------------------------------
# The writer, on a hand-built graph (exact text)
# --------------------------------------------------------------------------


def test_writer_exact_format():
    torch = pytest.importorskip("torch")
    fx = torch.fx

    class Holder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(4, 3))

    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(2, 3)
    y = g.placeholder("y")  # no val
    w = g.get_attr("w")
    w.meta["val"] = torch.empty(4, 3)
    lin = g.create_node("call_function", torch.ops.aten.linear.default, (x, w), {"bias": None}, name="linear")
    lin.meta["val"] = torch.empty(2, 4)
    s = g.create_node("call_function", torch.ops.aten.sum.default, (lin,), name="sum_1")
    s.meta["val"] = torch.empty(())
    sp = g.create_node("call_function", torch.ops.aten.split.Tensor, (lin, 2, -1), name="split")
    sp.meta["val"] = (torch.empty(2, 2, dtype=torch.float16), None)
    import operator

    gi = g.create_node("call_function", operator.getitem, (sp, 0), name="getitem")
    gi.meta["val"] = torch.empty(2, 2, dtype=torch.float16)
    cat = g.create_node("call_function", torch.ops.aten.cat.default, ([gi, gi], 1), name="cat")  # no val
    m = g.create_node("call_method", "size", (y, 0), name="size")
    m.meta["val"] = 7  # int: no shape, no dtype
    g.output((cat, s, None))
    gm = fx.GraphModule(Holder(), g)

    buf = io.StringIO()
    assert export_hf.write_dump(buf, gm) == 1
    expected = (
        HEADER
        + ROOT_BANNER
        + "%x : 2x3 : torch.float32\n"
        + "%y : ? : unknown\n"
        + "%linear = aten.linear.default(%x : 2x3 : torch.float32, %w : 4x3 : torch.float32)"
        " : 2x4 : torch.float32\n"
        + "%sum_1 = aten.sum.default(%linear : 2x4 : torch.float32) : scalar : torch.float32\n"
        + "%split = aten.split.Tensor(%linear : 2x4 : torch.float32, 2, -1)"
        " : (2x2, ?) : (torch.float16, None)\n"
        + "%getitem = <built-in function getitem>(%split : ? : tuple, 0) : 2x2 : torch.float16\n"
        + "%cat = aten.cat.default([getitem, getitem], 1) : ? : N/A\n"
        + "%size = size(%y : ? : unknown, 0) : ? : int\n"
        + "output %cat, %sum_1, None\n"
    )
    assert buf.getvalue() == expected


# --------------------------------------------------------------------------
# Real exports, one per arch (module-scoped cache)
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    cache: dict[str, dict] = {}

    def get(arch: str) -> dict:
        if arch not in cache:
            out = tmp_path_factory.mktemp(f"export_{arch}")
            result = export_hf.export(arch, NUM_LAYERS, out)
            result["outdir"] = out
            result["dump_text"] = (out / export_hf.DUMP_FILENAME).read_text()
            result["fx_text"] = (out / export_hf.FX_FILENAME).read_text()
            result["layers_doc"] = json.loads((out / export_hf.LAYERS_FILENAME).read_text())
            cache[arch] = result
        return cache[arch]

    return get


def _def_lines(dump: str):
    for line in dump.splitlines():
        m = DEF_LINE.match(line)
        if m:
            yield m.group(1), m.group(2)


def _weight_layer(qualified: str, prefix: str | None) -> int | None:
    return export_hf.layer_of_path(qualified, prefix)


@pytest.mark.parametrize("arch", export_hf.ARCHES)
def test_export_arch(arch, exported):
    res = exported(arch)
    out = res["outdir"]
    dump, fx_text, doc = res["dump_text"], res["fx_text"], res["layers_doc"]

    # files, written atomically (no temp files left behind)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [export_hf.DUMP_FILENAME, export_hf.FX_FILENAME, export_hf.LAYERS_FILENAME]
    )
    assert res["dump"] == str(out / export_hf.DUMP_FILENAME)

    # header + single root GraphModule banner
    assert dump.startswith(HEADER + ROOT_BANNER)
    body = dump[len(HEADER + ROOT_BANNER) :]
    lines = body.splitlines()
    assert body.endswith("\n")
    assert lines[0].startswith("%input_ids : 2x8 : torch.int64")
    assert lines[-1].startswith("output %")

    weights: dict[str, str] = doc["weights"]
    nodes: dict[str, int | None] = doc["nodes"]
    prefix = doc["layers_module"]
    assert doc["arch"] == arch and doc["num_layers"] == NUM_LAYERS
    assert weights and set(weights) <= set(nodes)

    # one line per non-get_attr node; no get_attr lines at all
    assert len(lines) == len(nodes) - len(weights)
    for line in lines:
        assert "get_attr" not in line
        head = re.match(r"^%(\w+)", line)
        if head:
            assert head.group(1) not in weights, line

    # fx's own print of the same graph, get_attr nodes included
    assert fx_text.startswith("graph():\n")
    for name, target in weights.items():
        assert f"%{name} : [num_users=" in fx_text
        assert f"get_attr[target={target}]" in fx_text

    # weight args appear inline as "%name : shape : dtype" with the real shape
    model = export_hf.build_model(arch, NUM_LAYERS)
    state = dict(model.named_parameters(remove_duplicate=False))
    state.update(dict(model.named_buffers(remove_duplicate=False)))
    seen_weights = set()
    for name, rest in _def_lines(body):
        inline = {m.group(1): (m.group(2), m.group(3)) for m in INLINE_REF.finditer(rest)}
        for ref in REF.findall(rest):
            if ref not in weights:
                continue
            assert ref in inline, f"{name}: weight %{ref} without shape : dtype"
            shape, dtype = inline[ref]
            assert re.fullmatch(r"\d+(x\d+)*|scalar", shape), (name, ref, shape)
            tensor = state.get(weights[ref])  # None for constants export lifted (falcon)
            if tensor is not None:
                assert shape == ("x".join(map(str, tensor.shape)) or "scalar"), (name, ref)
                assert dtype == str(tensor.dtype), (name, ref)
                seen_weights.add(ref)
    assert seen_weights, "no weight is used by any op line"

    # layer attribution: every layer has nodes; consumers of layer-i weights are in layer i
    assert set(range(NUM_LAYERS)) <= {v for v in nodes.values() if v is not None}
    assert all(v is None or 0 <= v < NUM_LAYERS for v in nodes.values())
    checked = 0
    for name, rest in _def_lines(body):
        for ref in REF.findall(rest):
            if ref not in weights:
                continue
            want = _weight_layer(weights[ref], prefix)
            m = re.match(r"(?:.*_)?(?:layers|h)_(\d+)_", ref)
            if m:
                assert want == int(m.group(1)), (ref, weights[ref])
            assert nodes[ref] == want
            if want is not None:
                assert nodes[name] == want, f"{name} uses {ref} (layer {want}) but maps to {nodes[name]}"
                checked += 1
    assert checked > 0
    # embeddings, final norm and lm_head sit outside the decoder layers
    assert nodes["input_ids"] is None
    out_name = re.match(r"output %(\w+)", lines[-1]).group(1)
    assert nodes[out_name] is None
