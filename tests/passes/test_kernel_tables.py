"""Kernel family tables: format, examples, real-trace coverage, user override, errors, speed."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from layerc.ir.diagnostics import LayercError
from layerc.ir.trace import Kernels, Strings, Trace
from layerc.passes.kernel_tables import (
    MARK, MARKS, STAGES, TYPES, Classification, KernelTable, _read_dir, builtin_files, kernel_table,
)

TRACES = Path("/work/shared/data/traces")
LLM_TRACES = ("sglang_qwen3-8b_decode_mi300x", "sglang_qwen3-8b_extend_mi300x", "hf_qwen1.5-0.5b_h100")
OTHER = TYPES.index("OTHER")


@pytest.fixture(scope="module")
def table():
    """The built-in tables alone (whatever LAYERC_KERNEL_TABLES says)."""
    return KernelTable(_read_dir(builtin_files()))


def _trace(names: list[str], repeat: np.ndarray | None = None) -> Trace:
    strings = Strings()
    ids = np.array([strings.intern(n) for n in names], np.int32)
    col = ids if repeat is None else ids[repeat]
    short = np.array([strings.intern("own_" + str(i)) for i in range(len(names))], np.int32)
    short = short if repeat is None else short[repeat]
    n = len(col)
    k = Kernels.from_columns({"start": np.arange(n), "end": np.arange(n) + 1, "name": col, "short": short})
    return Trace("synthetic", "kineto", strings, k)


# -- the tables ---------------------------------------------------------------------------------


def test_every_builtin_table_loads_and_every_entry_documents_itself(table):
    files = builtin_files()
    assert len(files) >= 13
    families = {e.kind.family for e in table.entries}
    for fam in ("gemm", "hipblaslt", "aiter", "ck_tile", "flashinfer", "flash_attention", "trtllm",
                "sglang", "vllm", "nccl", "triton", "pytorch"):
        assert fam in families
    for e in table.entries:
        assert e.examples, f"{e.source}: no examples"
        for x in e.examples:
            assert e.pattern.search(x), f"{e.source}: does not match its example {x[:80]}"
            i, short = table.match(x)
            assert table.entries[i] is e, f"{e.source}: example {x[:60]} taken by {table.entries[i].source}"
            assert short and "\\" not in short


def test_fields_and_order_specific_first(table):
    look = table.lookup
    assert look("moeSoftmax").type == "MOE"  # the seed's reason for MoE before attention
    k = look("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib")
    assert (k.type, k.layer_start) == ("NORM", True)
    assert look("fused_dual_residual_rmsnorm_kernel").layer_start
    assert look("_fused_rms_fp8_group_quant_kernel").layer_start
    assert not look("void vllm::rms_norm_kernel<c10::BFloat16>(c10::BFloat16*)").layer_start
    k = look("mla_a8w8_qh16_qseqlen1_gqaratio16_ps")
    assert (k.type, k.stage, k.marks) == ("ATTENTION", "decode", ("mla",))
    assert look("void flash_fwd_splitkv_kernel<T>(Flash_fwd_params)").stage == "decode"
    assert look("void flashinfer::BatchPrefillWithPagedKVCacheKernel<T>(P)").stage == "prefill"
    assert look("fmha_fwd_hd128_bf16").stage == "prefill"
    assert look("silu_and_mul_kernel").marks == ("fc",)
    assert look("chunk_gated_delta_rule_fwd_kernel_h_blockdim64").marks == ("gdn",)
    assert look("triton_poi_fused_add_cos_sin_0").short == "triton_poi"
    assert look("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0").type == "NORM"
    assert look("fused_add_mul_kernel").type == "ELEMENTWISE"
    k = look("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int)")
    assert (k.type, k.short) == ("ELEMENTWISE", "aten_CUDAFunctor_add")
    assert look("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int)").type == "MEMORY"
    assert look("no_such_kernel_xyz") is None


def test_classify_arrays_and_kinds_agree(table):
    names = ["mla_a8w8_qh16_qseqlen1_gqaratio16_ps", "fused_rmsnorm_kernel", "nothing_known", "moe_fused_gate_kernel",
             "void flashinfer::BatchPrefillWithPagedKVCacheKernel<T>(P)"]
    t = _trace(names, np.array([0, 1, 2, 3, 4, 2, 0]))
    t.kernels.name[-1] = -1  # a kernel without a name
    c = table.classify(t)
    assert isinstance(c, Classification) and len(c) == 7
    assert [TYPES[i] for i in c.type] == ["ATTENTION", "NORM", "OTHER", "MOE", "ATTENTION", "OTHER", "OTHER"]
    assert c.stage.tolist() == [1, -1, -1, -1, 0, -1, -1]
    assert c.layer_start.tolist() == [False, True, False, False, False, False, False]
    assert c.has("mla").tolist() == [True] + [False] * 6
    assert c.has("moe").tolist() == [False, False, False, True, False, False, False]
    assert c.marks[4] == MARK["mha"] and c.entry[2] == -1
    assert t.strings[int(c.short[2])] == "own_2"  # no entry: the trace's own short name
    assert t.strings[int(c.short[0])] == "mla_decode"
    short, kind = table.kinds(t)
    assert (short == c.short).all() and (kind == c.type).all()
    empty = table.classify(_trace([]))
    assert len(empty) == 0 and empty.type.dtype == np.int8
    assert STAGES == ("prefill", "decode") and MARKS == ("mla", "moe", "fc", "gdn", "mha")


# -- real traces --------------------------------------------------------------------------------


def _real(path):
    from layerc.grammar.traces import read_trace

    return read_trace(str(path), kinds={"kernels"})


def _real_traces():
    return sorted(p for p in TRACES.glob("*/*") if p.is_file())


@pytest.mark.skipif(not TRACES.exists(), reason="shared traces not present")
@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name.split(".json")[0].split(".sqlite")[0])
def test_real_trace_classification(path, table, capsys):
    t = _real(path)
    c = table.classify(t)
    k = t.kernels
    dur = (k.end - k.start).astype(np.float64)
    counts = {TYPES[i]: int(n) for i, n in enumerate(np.bincount(c.type, minlength=len(TYPES))) if n}
    other = c.type == OTHER
    other_pct = 100.0 * dur[other].sum() / max(dur.sum(), 1.0)
    left = sorted({t.strings[int(n)][:120] for n in k.name[other]})
    with capsys.disabled():
        print(f"\n{path.name}: {len(k)} kernels {counts} OTHER {other_pct:.2f}% of time"
              + "".join(f"\n  OTHER: {n}" for n in left))
    if any(path.name.startswith(p) for p in LLM_TRACES):
        assert other_pct <= 1.0, left
        assert counts.get("ATTENTION", 0) and counts.get("LINEAR", 0) and counts.get("NORM", 0) or path.name.startswith("hf_")
    if path.name.startswith("sglang_"):
        assert c.layer_start.sum() >= 72  # aiter add_rmsnorm_quant, twice per decoder layer (36 layers)
        stage = c.stage[c.type == TYPES.index("ATTENTION")]
        want = 1 if "decode" in path.name else 0
        assert (stage == want).sum() >= 36 and not (stage == 1 - want).any()


# -- user tables and errors ---------------------------------------------------------------------


def test_user_directory_overrides_builtin(tmp_path, monkeypatch):
    (tmp_path / "mine.toml").write_text(
        'family = "mine"\n[[kernel]]\nmatch = "Cijk_"\nshort = "my_gemm"\ntype = "other"\nstage = "decode"\n'
        'marks = ["moe", "fc"]\nexamples = ["Cijk_Alik"]\n'
    )
    monkeypatch.setenv("LAYERC_KERNEL_TABLES", str(tmp_path))  # read at each call: no tables kept from before
    k = kernel_table().lookup("Cijk_Alik_Bljk_BBS_BH")
    assert (k.short, k.type, k.family, k.stage, k.marks) == ("my_gemm", "OTHER", "mine", "decode", ("moe", "fc"))
    assert kernel_table().lookup("nvjet_tst_128x256").family == "gemm"  # built-ins still there
    monkeypatch.delenv("LAYERC_KERNEL_TABLES")
    assert kernel_table().lookup("Cijk_Alik_Bljk_BBS_BH").short == "hipblaslt_gemm"


def test_old_format_still_loads(tmp_path):
    (tmp_path / "old.toml").write_text('[[kernel]]\nmatch = "foo"\nshort = "foo"\ntype = "LINEAR"\n')
    k = kernel_table(str(tmp_path)).lookup("foo_kernel")
    assert (k.type, k.family, k.stage, k.layer_start, k.marks) == ("LINEAR", "old", None, False, ())


@pytest.mark.parametrize("body, words", [
    ('[[kernel]\nmatch = "x"', "bad kernel table"),
    ('[[kernel]]\nmatch = "("\nshort = "x"', "entry 1"),
    ('[[kernel]]\nmatch = "x"\nshort = "x"\ntype = "GEMM"', "type must be"),
    ('[[kernel]]\nmatch = "x"\nshort = "x"\n[[kernel]]\nmatch = "y"\nshort = "y"\nstage = "both"', "entry 2 (y): stage"),
    ('[[kernel]]\nmatch = "x"\nshort = "x"\nlayer_start = "yes"', "layer_start"),
    ('[[kernel]]\nmatch = "x"\nshort = "x"\nmarks = ["dense"]', "marks"),
    ('[[kernel]]\nmatch = "x"\nshort = "x"\nlayerstart = true', "unknown key"),
    ('[[kernel]]\nmatch = "x"\nshort = "x_\\\\2"', "group 2"),
    ('[[kernel]]\nshort = "x"', "'match'"),
])
def test_broken_table_names_file_and_entry(tmp_path, body, words):
    path = tmp_path / "broken.toml"
    path.write_text(body)
    with pytest.raises(LayercError) as err:
        kernel_table(str(tmp_path))
    assert err.value.path == str(path) and words in err.value.message


# -- speed --------------------------------------------------------------------------------------


def test_classify_one_million_kernels_fast(table, capsys):
    base = [e.examples[0] for e in table.entries] + [f"unknown_kernel_{i}" for i in range(60)]
    names = (base * 3)[:300]
    names = [n if i < len(base) else f"{n} /*{i}*/" for i, n in enumerate(names)]
    rng = np.random.default_rng(0)
    t = _trace(names, rng.integers(0, len(names), 1_000_000))
    fresh = KernelTable(table.entries)  # nothing memoised: includes the regex work
    t0 = time.perf_counter()
    c = fresh.classify(t)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    fresh.classify(t)
    warm = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\nclassify 1,000,000 kernels / {len(set(names))} names: {cold * 1e3:.0f} ms cold, {warm * 1e3:.0f} ms warm")
    assert len(c) == 1_000_000 and (c.type != OTHER).sum() > 500_000
    assert cold < 0.5
