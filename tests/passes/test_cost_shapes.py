"""The cost pass on the shapes real dumps give attention: every architecture ``gen-dump`` writes
is costed (metadata ops are not attention), attention's q of rank 2, 3 or 4 in each layout the
dumps use gives the same FLOPs and bytes for the same attention, and a shape the closed form
cannot read is a warning and an unknown cost for that op — never a crash, never a made-up number.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from layerc.grammar.decoder_layer import build_layer
from layerc.grammar.dumps import load
from layerc.grammar.hf_config import load_preset
from layerc.ir.diagnostics import LayercError
from layerc.ir.targets import op_name
from layerc.ir.types import TensorType
from layerc.passes.base import Context
from layerc.passes.cost import CostModel, op_kind
from layerc.passes.schedule import ListSchedule
from layerc.backends.synth.dump import ARCHES, write
from tests import capped

MEMORY = 2 << 30
TIMEOUT = 120
KV_LEN = 1000
BF16 = 2


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    """A two-layer decode dump of every architecture gen-dump knows."""
    root = tmp_path_factory.mktemp("dumps")
    return {arch: write(arch, root / arch, layers=2) for arch in ARCHES}


def run_layerc(*args) -> tuple[int, str]:
    """``layerc ARGS`` in a capped child (tests/capped.py: RLIMIT_AS, its group killed past the time)."""
    done = capped.run(args, memory=MEMORY, timeout=TIMEOUT)
    return done.returncode, done.stderr


def costed(path: Path, **options):
    module = load(path)
    ctx = Context()
    CostModel(**options).apply(ctx, module)
    return module, ctx


# -- every architecture's dump ---------------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHES)
def test_cli_costs_every_architecture(dumps, tmp_path, arch):
    """``layerc opt DUMP -p cost{kv-len=...}``: exit 0 on every architecture, no internal error,
    no op whose cost is unknown."""
    rc, err = run_layerc("opt", dumps[arch], "-p", f"cost{{kv-len={KV_LEN}}}", "-o", tmp_path / "o.txt")
    assert rc == 0, err[-2000:]
    assert "internal error" not in err and "Traceback" not in err
    assert "cost: unknown" not in err, err


@pytest.mark.parametrize("arch", ARCHES)
def test_without_kv_len_paged_attention_is_a_located_error(dumps, arch):
    """The reported case (``opt DUMP -p cost`` on a llama dump) once crashed on the metadata op's 2-D
    position ids read as attention's q; now it is costed up to the paged attention, whose key count
    only the kv-len option gives: a located error, exit 1."""
    rc, err = run_layerc("opt", dumps[arch], "-p", "cost")
    assert "internal error" not in err and "Traceback" not in err, err[-2000:]
    first = err.splitlines()[0] if err else ""
    if rc == 1:
        assert re.match(rf"^{re.escape(str(dumps[arch]))}:\d+:\d+: error: .*give kv-len", first), first
    else:
        assert rc == 0, err[-2000:]


@pytest.mark.parametrize("arch", ARCHES)
def test_symbolic_dumps_ask_for_symbol_values(tmp_path, arch):
    path = write(arch, tmp_path / arch, layers=1, symbolic=True)
    rc, err = run_layerc("opt", path, "-p", f"cost{{kv-len={KV_LEN}}}")
    assert "internal error" not in err and "Traceback" not in err, err[-2000:]
    assert rc in (0, 1)
    if rc == 1:
        assert re.match(rf"^{re.escape(str(path))}(:\d+:\d+)?: error: ", err), err[:500]


@pytest.mark.parametrize("arch", ARCHES)
def test_metadata_ops_are_not_attention_and_attention_is_known(dumps, arch):
    module, ctx = costed(dumps[arch], kv_len=KV_LEN)
    ops = [n for g in module.graphs for n in g.ops]
    for n in ops:
        c = n.meta["cost"]
        assert c.known and c.bound != "unknown", (n.name, c)
        assert c.flops >= 0 and c.bytes >= 0 and c.time_ns >= 0
    for n in ops:
        if "prepare_metadata" in op_name(n.target):
            assert n.meta["cost"].kind == "metadata" and n.meta["cost"].flops == 0
    attention = [n for n in ops if op_kind(n) == "attention"]
    if arch in ("llama", "qwen3_moe", "deepseek_v3"):  # two layers of the others: mamba, delta rule, torch_mla
        assert attention
    assert all(n.meta["cost"].flops > 0 for n in attention)
    assert all(g.meta["cost"]["unknown"] == 0 for g in module.graphs)


# -- one attention, every layout --------------------------------------------------------------------

def _llama_attention(dumps):
    module = load(dumps["llama"])
    att = next(n for n in module.graphs[0].ops if op_name(n.target) == "flashinfer_attention_mha_with_cache")
    return module, att


def _retype(att, q, k, out):
    qv, kv, vv = att.args[:3]
    for value, dims in ((qv, q), (kv, k), (vv, k), (att, out)):
        value.type = TensorType(tuple(dims), value.type.dtype)


def _costed_attention(dumps, shapes, hide: bool = False):
    """The llama dump's attention retyped to ``shapes`` (q, k, out), costed: (module, op, context)."""
    module, att = _llama_attention(dumps)
    _retype(att, *shapes)
    if hide:
        _hide_sequences(att)
    ctx = Context()
    CostModel(kv_len=KV_LEN).apply(ctx, module)
    return module, att, ctx


def _hide_sequences(att):
    """Rename the batch metadata so that no input says how many sequences there are."""
    for a in att.args[3:]:
        name = getattr(a, "name", "")
        if re.search(r"seq_?len|seqlen|last_page_len|seq_start", name):
            a.name = "meta_" + re.sub(r"seq_?len|seqlen|last_page_len|seq_start", "m", name)


#: the gen-dump llama decode: 8 sequences of one token, 32 query heads, 8 KV heads, head size 128
B, HQ, HKV, D = 8, 32, 8, 128
PAGED_LAYOUTS = {
    "bsnd [B, S, H, d]": ((B, 1, HQ, D), (B, 1, HKV, D), (B, 1, HQ, D)),
    "flattened heads [B, S, H*d]": ((B, 1, HQ * D), (B, 1, HKV * D), (B, 1, HQ * D)),
    "flattened tokens [T, H*d]": ((B, HQ * D), (B, HKV * D), (B, HQ * D)),
    "tokens [T, H, d]": ((B, HQ, D), (B, HKV, D), (B, HQ, D)),
}


@pytest.mark.parametrize("layout", PAGED_LAYOUTS)
def test_paged_attention_layouts_cost_the_same(dumps, layout):
    module, att, ctx = _costed_attention(dumps, PAGED_LAYOUTS[layout])
    c = att.meta["cost"]
    keys = KV_LEN + 1
    assert c.known and c.bound in ("compute", "memory")
    assert c.flops == 2 * B * HQ * keys * 2 * D
    io = (2 * B * HQ * D + 2 * B * HKV * D) * BF16
    assert c.bytes == io + B * (keys + 1) * 2 * HKV * D * BF16  # the cache read, the new rows written
    assert not [w for w in ctx.warnings if "unknown" in w]


UNREADABLE = {
    "rank 5": ((B, 1, HQ, 1, D), (B, 1, HKV, 1, D), (B, 1, HQ, 1, D)),
    "rank 1": ((HQ * D,), (HKV * D,), (HQ * D,)),
    "keys of other tokens": ((B, 1, HQ, D), (B // 2, 1, HKV, D), (B, 1, HQ, D)),
    "result of other tokens": ((B, 1, HQ, D), (B, 1, HKV, D), (B + 1, 1, HQ, D)),
    "tokens not a multiple of the sequences": ((B + 1, HQ * D), (B + 1, HKV * D), (B + 1, HQ * D)),
    "head size neither": ((B, 1, HQ * D + 1), (B, 1, HKV * D), (B, 1, HQ * D + 1)),
}


@pytest.mark.parametrize("case", UNREADABLE)
def test_unreadable_attention_shapes_are_an_unknown_cost_with_a_warning(dumps, case):
    module, att, ctx = _costed_attention(dumps, UNREADABLE[case])
    _assert_unknown(module, att, ctx)


@pytest.mark.parametrize("layout", ["flattened tokens [T, H*d]", "tokens [T, H, d]"])
def test_tokens_without_sequence_metadata_are_unknown_not_guessed(dumps, layout):
    """T flattened tokens could be one sequence or T of them: without the batch's metadata the
    cost is unknown rather than a guess."""
    module, att, ctx = _costed_attention(dumps, PAGED_LAYOUTS[layout], hide=True)
    _assert_unknown(module, att, ctx)
    assert "sequences" in next(w for w in ctx.warnings if "unknown" in w)


def _assert_unknown(module, att, ctx):
    c = att.meta["cost"]
    assert not c.known and c.bound == "unknown" and c.kind == "attention"
    assert c.flops == 0 and c.bytes == 0 and c.compute_ns == 0 and c.memory_ns == 0
    assert c.time_ns == c.overhead_ns > 0  # only its launch: a kernel runs, its work is not made up
    warnings = [w for w in ctx.warnings if w.startswith("cost: unknown for 1 op")]
    assert len(warnings) == 1 and f"'%{att.name}'" in warnings[0], ctx.warnings
    assert module.graphs[0].meta["cost"]["unknown"] == 1
    ListSchedule().apply(ctx, module)  # the simulation goes on with it


# -- attention without a cache (scaled_dot_product_attention's layout, bsnd) ------------------------

def _fused_layer():
    module = build_layer(load_preset("llama-3.2-1b"), "prefill", 64, 2)
    att = next(n for n in module.graphs[0].ops if op_kind(n) == "attention")
    return module, att


def test_sdpa_layout_any_rank(tmp_path):
    """``[B, H, S, d]``, ``[B*H, S, d]`` and, for one head, ``[S, d]``: the same FLOPs per head."""
    module, att = _fused_layer()
    q = att.args[0].type.shape
    b, hq, s, d = q
    ctx = Context()
    CostModel().apply(ctx, module)
    four = att.meta["cost"]
    assert four.known and four.flops > 0

    k = att.args[1].type.shape
    hkv = k[1]
    module, att = _fused_layer()
    _retype(att, (b * hq, s, d), (b * hkv, s, d), (b * hq, s, d))
    CostModel().apply(Context(), module)
    assert att.meta["cost"].flops == four.flops

    module, att = _fused_layer()
    _retype(att, (s, d), (s, d), (s, d))  # one sequence, one head
    CostModel().apply(Context(), module)
    assert att.meta["cost"].flops * b * hq == four.flops


def test_bsnd_layout_argument(tmp_path):
    module, att = _fused_layer()
    b, hq, s, d = att.args[0].type.shape
    hkv = att.args[1].type.shape[1]
    CostModel().apply(Context(), module)
    expected = att.meta["cost"].flops
    module, att = _fused_layer()
    _retype(att, (b, s, hq, d), (b, s, hkv, d), (b, s, hq, d))
    att.kwargs = {**att.kwargs, "layout": "bsnd"}
    CostModel().apply(Context(), module)
    assert att.meta["cost"].known and att.meta["cost"].flops == expected


# -- any shape at all: a cost or an unknown, never an exception --------------------------------------

dims = st.lists(st.integers(0, 9), min_size=0, max_size=6).map(tuple)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(q=dims, k=dims, out=dims, hide=st.booleans(), paged=st.booleans())
def test_any_attention_shapes_give_a_cost_or_an_unknown(dumps, q, k, out, hide, paged):
    if paged:
        module, att = _llama_attention(dumps)
    else:
        module, att = _fused_layer()
    _retype(att, q, k, out)
    if hide and paged:
        _hide_sequences(att)
    ctx = Context()
    try:
        CostModel(kv_len=KV_LEN).apply(ctx, module)
    except LayercError as e:  # only the limits of 64-bit counts may stop it, at the op
        assert e.loc is not None and "2**6" in e.message, e.format()
        return
    c = att.meta["cost"]
    assert c.flops >= 0 and c.bytes >= 0 and c.time_ns > 0
    if not c.known:
        assert c.flops == 0 and c.bytes == 0 and any(w.startswith("cost: unknown") for w in ctx.warnings)
