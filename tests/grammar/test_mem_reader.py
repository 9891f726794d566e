"""The memory-planner dump reader: generated dumps (a port of the emitters) come back whole, from a
TRITON_DUMP_WS_GRAPHS directory and from a debug log; broken text is a located error."""

from __future__ import annotations

import gzip
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.grammar.ws_memory import read_dump_dir, read_log_text, read_ws_memory
from layerc.ir.diagnostics import LayercError, ParseError
from layerc.ir.memory import KIND_NAMES, Kernel, MemoryModule
from layerc.backends.synth import ws_mem as gen


def describe(m: MemoryModule, k: Kernel) -> dict:
    """A kernel's tables in ``gen_ws_mem.expected``'s shape."""
    s = m.text
    b, sm, cn, ce, ko = k.buffers, k.summary, k.channel_nodes, k.channel_edges, k.key_ops
    out: dict = {
        "buffers": [(KIND_NAMES[b.kind[i]], int(b.index[i]), s(b.name[i]), int(b.buffer_id[i]), int(b.bytes[i]), int(b.rows[i]),
                     int(b.cols[i]), int(b.start[i]), int(b.end[i]), int(b.operand_d[i])) for i in range(len(b))],
        "summary": [(KIND_NAMES[sm.kind[i]], s(sm.name[i]), int(sm.buffer_id[i]), int(sm.bytes[i]), int(sm.rows[i]), int(sm.cols[i]),
                     int(sm.channels[i]), int(sm.start[i]), int(sm.end[i]), int(sm.operand_d[i])) for i in range(len(sm))],
        "channel_nodes": [(int(cn.id[i]), KIND_NAMES[b.kind[cn.buffer[i]]], int(b.index[cn.buffer[i]]), bool(cn.operand_d[i]),
                           int(cn.src_op[i]), int(cn.dst_op[i])) for i in range(len(cn))],
        "channel_edges": [(int(ce.id[i]), int(ce.src[i]), int(ce.dst[i]), KIND_NAMES[ce.kind[i]], bool(ce.operand_d[i]),
                           int(ce.buffer_ref[i]), s(ce.loc[i])) for i in range(len(ce))],
        "partitions": sorted((int(k.partitions.id[i]), s(k.partitions.label[i]), s(k.partitions.fill[i]))
                             for i in range(len(k.partitions))),
    }
    members: dict[int, list[int]] = {}
    for op, p in zip(k.op_partitions.op.tolist(), k.op_partitions.partition.tolist()):
        members.setdefault(op, []).append(p)
    out["key_ops"] = sorted(
        (int(ko.node[i]), int(ko.op_id[i]), s(ko.name[i]), s(ko.op[i]), tuple(k.operands_of(i, m.strings)), s(ko.shape[i]),
         int(ko.depth[i]), s(ko.border[i]), tuple(members[i])) for i in range(len(ko)))
    for key in ("buffers", "summary", "channel_nodes", "channel_edges"):
        out[key].sort(key=repr)
    return out


def _same(module: MemoryModule, kernels: list[gen.KernelSpec]) -> None:
    dumped = [k for k in kernels if gen.dumps_of(k)]
    assert len(module.kernels) == len(dumped)
    for got, spec in zip(module.kernels, dumped):
        assert set(got.graphs) == set(gen.dumps_of(spec))
        assert describe(module, got) == gen.expected(spec), spec.name
    module.verify()


@pytest.mark.parametrize("algo", [0, 1])
@pytest.mark.parametrize("debug", [True, False])
def test_flash_attention_backward_round_trip(tmp_path, algo, debug):
    kernels = [gen.flash_attention_backward("_attn_bwd", algo=algo, debug=debug),
               gen.flash_attention_backward("_attn_bwd_causal", algo=algo, debug=debug, seed=3)]
    gen.write_dump_dir(kernels, tmp_path / "dir", first_index=5)
    _same(read_dump_dir(tmp_path / "dir"), kernels)
    log = read_log_text(gen.debug_log(kernels))
    _same(log, kernels)
    assert [k.name for k in log.kernels] == ["_attn_bwd", "_attn_bwd_causal"]


def test_doc_example_figures():
    """The planner documentation's FA-backward TMEM table: dk and dv are 128x128 with two
    OperandD channels each, qkT and dpT 128x128."""
    m = read_log_text(gen.debug_log([gen.flash_attention_backward()]))
    k = m.kernels[0]
    tm = {m.text(k.summary.name[i]): (int(k.summary.rows[i]), int(k.summary.cols[i]), int(k.summary.channels[i]), int(k.summary.operand_d[i]))
          for i in range(len(k.summary)) if k.summary.kind[i] == 1}
    assert tm["dk"] == tm["dv"] == (128, 128, 2, 2)
    assert tm["qkT"][:2] == tm["dpT"][:2] == (128, 128) and tm["dpT"][3] == 0
    assert len(k.partitions) == 5 and sorted(k.partitions.id.tolist()) == [0, 1, 3, 4, 5]


@settings(max_examples=40)
@given(st.integers(0, 2**31), st.integers(1, 4), st.booleans())
def test_random_kernels_round_trip(tmp_path_factory, seed, n, noise):
    rng = random.Random(seed)
    kernels = [gen.random_kernel(rng, f"k{i}", max_ops=40) for i in range(n)]
    if not any(gen.dumps_of(k) for k in kernels):  # no channels: the planner dumps nothing
        with pytest.raises(LayercError, match="no memory-planner graphs"):
            read_log_text(gen.debug_log(kernels, noise=noise))
        return
    _same(read_log_text(gen.debug_log(kernels, noise=noise)), kernels)
    directory = tmp_path_factory.mktemp("dump")
    gen.write_dump_dir(kernels, directory, first_index=rng.randint(0, 30))
    _same(read_dump_dir(directory), kernels)


def test_empty_cases(tmp_path):
    """Hopper (no TMEM), only [0-0) SMEM buffers, and a kernel without channels (no dumps)."""
    rng = random.Random(1)
    hopper = gen.flash_attention_backward("hopper")
    hopper.tmem = []
    hopper.channels = [ch for ch in hopper.channels if ch.kind == "SMEM"]
    no_smem = gen.flash_attention_backward("tmem_only")
    no_smem.smem = []
    no_smem.channels = [ch for ch in no_smem.channels if ch.kind == "TMEM"]
    zero = gen.random_kernel(rng, "zero", algo=0)
    for a in zero.smem:
        a.start = a.end = 0
        a.fixed = True
    zero.smem.append(gen.SmemAlloc(9, 64, 0, 0, "z", fixed=True))
    silent = gen.random_kernel(rng, "silent")
    silent.channels = []
    kernels = [hopper, no_smem, silent, zero]
    m = read_log_text(gen.debug_log(kernels))
    _same(m, kernels)
    assert m.kernels[0].graphs["tmem"].empty == "No TMEM allocations"
    assert m.kernels[1].graphs["smem"].empty == "No SMEM allocations"
    assert m.kernels[2].graphs["smem"].empty == "No liveness intervals"
    gen.write_dump_dir(kernels, tmp_path)
    _same(read_dump_dir(tmp_path), kernels)


def test_files_cleaned_by_hand_and_gzip(tmp_path):
    """A dump file already cut to its digraph (the doc's sed), and a gzipped log."""
    k = gen.flash_attention_backward()
    text = gen.emit_combined(k)
    bare = text[text.index("digraph") : text.index("}\n=== End") + 2]
    (tmp_path / "combined_graph_7.dot").write_text(bare)
    (tmp_path / "smem_liveness_6.dot").write_text(gen.emit_smem(k))
    (tmp_path / "tmem_liveness_8.dot").write_text(gen.emit_tmem(k))
    (tmp_path / "notes.txt").write_text("not a dump")
    _same(read_dump_dir(tmp_path), [k])
    gz = tmp_path / "run.log.gz"
    gz.write_bytes(gzip.compress(gen.debug_log([k]).encode()))
    _same(read_ws_memory(gz), [k])
    assert read_dump_dir(tmp_path).kernels[0].graphs["combined"].dot == bare


def test_clean_dot_is_the_digraph(tmp_path):
    k = gen.flash_attention_backward()
    m = read_log_text(gen.debug_log([k]))
    for kind, emit in gen.EMIT.items():
        text = emit(k)
        assert m.kernels[0].graphs[kind].dot == text[text.index("digraph") : text.rindex("}\n") + 2]


# -- broken input -----------------------------------------------------------------------------------
def _error(text: str) -> LayercError:
    with pytest.raises(LayercError) as e:
        read_log_text(text, "run.log")
    return e.value


def _log(mutate) -> tuple[str, str]:
    text = gen.debug_log([gen.flash_attention_backward()])
    return text, mutate(text)


@pytest.mark.parametrize("mutate, where, words", [
    (lambda t: t.replace('label="k B0 [36-77) size=32768"', 'label="k B0 [3-42 size=32768"'), 'label="k B0', "SMEM buffer label"),
    (lambda t: t.replace("<TD>[49-67)</TD>", "<TD>49-67</TD>"), "49-67", "liveness reads"),
    (lambda t: t.replace("<TD>32768</TD><TD>2</TD>", "<TD>32k</TD><TD>2</TD>"), "32k", "size in bytes"),
    (lambda t: t.replace('[label="ch9 (37 to 56)"', '[label="ch8 (37 to 56)"'), 'label="ch8', "labelled ch8"),
    (lambda t: t.replace("op_op_36 -> op_op_54 [label=", "op_op_36 -> op_op_54 [lable="), "op_op_36 -> op_op_54", "no label"),
    (lambda t: t.replace('op_op_54 [label="[54] qkT = tc_gen5_mma(k, q)', 'op_op_54 [label="[54] qkT = tc_gen5_mma k, q'),
     'label="[54]', "op label reads"),
    (lambda t: t.replace("  subgraph cluster_partition_3 {", "  subgraph cluster_part_3 {"), "cluster_part_3", "unexpected subgraph"),
    (lambda t: t.replace("    style=filled;\n    fillcolor=\"lightgreen\";\n    color=black;", "    style=filled\n    fillcolor=\"lightgreen\" ;\n    color=black;", 1), None, None),
    (lambda t: t.replace('label="dv 128x128 [40-86) [2 OperandD]"', 'label="dv 128x128 [40-86) [two OperandD]"'), "label=\"dv", "TMEM buffer label"),
    (lambda t: t.replace('    label="v B1 [37-57) size=32768";\n', '    label="v B1 [37-57) size=32768\n'), 'label="v B1',
     "not closed on its line"),
    (lambda t: t.replace("=== End TMEM Buffer Liveness Graph ===", ""), "=== TMEM Buffer", "no '=== End TMEM"),
    (lambda t: t.replace("digraph TmemBufferLiveness", "digraph SmemBufferLiveness"), "digraph SmemBufferLiveness", "expected 'digraph Tmem"),
    (lambda t: t.replace("</TABLE>", "", 1), "<TABLE", "never closes <TABLE>"),  # dot would fail on it
    (lambda t: t.replace("<B>Name</B>", "<B>Name</TD>", 1), "<B>Name</TD>", "</TD> where </B> belongs"),
])
def test_corrupted_logs_give_located_errors(mutate, where, words):
    original, text = _log(mutate)
    assert text != original
    if words is None:  # a harmless edit (DOT needs no ';' there): still reads
        read_log_text(text)
        return
    err = _error(text)
    assert isinstance(err, ParseError) and err.loc is not None, err
    shown = err.format()
    assert shown.startswith(f"run.log:{err.loc.line}:{err.loc.column}: error: "), shown
    assert words in err.message, shown
    lines = shown.split("\n")
    assert len(lines) == 3 and lines[2].rstrip().endswith("^"), shown
    line = text.split("\n")[err.loc.line - 1]
    assert lines[1] == line
    if where is not None:
        assert where in line, shown


def test_unreadable_inputs(tmp_path):
    with pytest.raises(LayercError, match="no memory-planner graphs"):
        read_log_text("nothing here\n")
    with pytest.raises(LayercError, match="pass their directory"):
        read_log_text("Dumped SMEM liveness to: /tmp/g/smem_liveness_0.dot\n")
    with pytest.raises(LayercError, match="no smem_liveness"):
        read_dump_dir(tmp_path)
    (tmp_path / "tmem_liveness_0.dot").write_text(gen.emit_smem(gen.flash_attention_backward()))
    with pytest.raises(ParseError, match="named like a tmem dump"):
        read_dump_dir(tmp_path)
    with pytest.raises(LayercError, match="no such file"):
        read_ws_memory(tmp_path / "missing.log")
    broken = tmp_path / "b.log.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00broken")
    with pytest.raises(LayercError, match="truncated gzip|corrupt gzip"):  # read through layerc.grammar.inputs
        read_ws_memory(broken)


def test_address_node_ids_that_clash():
    """Without operation ids, nodes are op_op_<address % 100000>: two ops may share one. The
    reader keeps both (one row per distinct label); mem-check reports the clash."""
    k = gen.flash_attention_backward(debug=False)
    ops = [op for op in k.ops if op.tasks]
    ops[1].address = ops[0].address + 100000 * 7
    m = read_log_text(gen.debug_log([k]))
    nodes = m.kernels[0].key_ops.node
    assert len(nodes) == len(set(nodes.tolist())) + 1
