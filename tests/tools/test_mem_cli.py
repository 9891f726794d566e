"""``layerc mem``: outputs, exit status, selection, located errors without partial outputs, and
the generator's command."""

from __future__ import annotations

import argparse
import hashlib
import json

import pytest
from PIL import Image

from layerc.backends.synth import ws_mem as gen
from layerc.tools import gen_ws_mem as gen_cli
from layerc.tools.driver import main


def _mem(capsys, *args) -> tuple[int, str, str]:
    rc = main(["mem", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def _digest(path) -> str:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()


def test_dump_dir_to_all_outputs(tmp_path, capsys):
    dump = tmp_path / "ws_graphs"
    gen.write_dump_dir([gen.flash_attention_backward()], dump)
    before = _digest(dump)
    rc, out, err = _mem(capsys, dump, "-o", tmp_path / "out", "--combine")
    assert rc == 0, err
    assert _digest(dump) == before  # the input is never changed
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    stems = [f"kernel_0.{g}" for g in ("combined_graph", "smem_liveness", "tmem_liveness")]
    assert names == sorted([s + x for s in stems for x in (".dot", ".png")] + ["kernel_0.liveness.png", "kernel_0.all.png",
                                                                               "memory.json", "memory.pftrace"])
    assert (tmp_path / "out" / "kernel_0.smem_liveness.dot").read_text().startswith("digraph SmemBufferLiveness {\n")
    assert "===" not in (tmp_path / "out" / "kernel_0.combined_graph.dot").read_text()
    doc = json.loads((tmp_path / "out" / "memory.json").read_text())
    assert doc["kernels"][0]["peak_tmem_columns"] == 512 and doc["kernels"][0]["peak_tmem_at"] == 56
    combined = Image.open(tmp_path / "out" / "kernel_0.all.png")
    parts = [Image.open(tmp_path / "out" / f"kernel_0.{n}.png") for n in ("liveness", "smem_liveness", "tmem_liveness", "combined_graph")]
    assert combined.height > sum(p.height for p in parts) * 0.9 and combined.width >= min(2400, max(p.width for p in parts))
    assert "SMEM peak 129 KiB (132,096 B) at op 51" in out and "0 error(s)" in out


def test_log_with_two_kernels_selection_json_and_ir(tmp_path, capsys):
    log = tmp_path / "run.log"
    log.write_text(gen.debug_log([gen.flash_attention_backward("_attn_bwd"),
                                  gen.flash_attention_backward("_attn_fwd_like", algo=1, seed=2)]))
    rc, out, err = _mem(capsys, log, "--json", "--kernel", "_attn_fwd_like", "--print-ir-after-all", "--timing",
                        "--arch", "sm103")
    assert rc == 0, err
    doc = json.loads(out)
    assert [k["name"] for k in doc["kernels"]] == ["_attn_fwd_like"] and doc["arch"] == "sm103"
    assert set(doc["kernels"][0]["graphs"]) == {"combined", "tmem"}  # allocator 1 dumps no SMEM graph
    assert "// -----// IR Dump After mem-liveness{arch=sm103} //----- //" in err and "Execution time report" in err
    rc, out, err = _mem(capsys, log, "--kernel", "nope")
    assert rc == 1 and "no kernel 'nope'" in err and "0:_attn_bwd, 1:_attn_fwd_like" in err
    rc, out, err = _mem(capsys, log, "-o", tmp_path / "both", "--combine")
    assert rc == 0, err
    pages = {n: Image.open(tmp_path / "both" / f"{n}.png") for n in ("_attn_bwd.all", "_attn_fwd_like.all", "all")}
    assert pages["all"].height > 0.9 * (pages["_attn_bwd.all"].height + pages["_attn_fwd_like.all"].height)
    rc, out, err = _mem(capsys, log, "--kernel", "0", "-o", tmp_path / "o", "--no-render")
    assert rc == 0 and sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "_attn_bwd.combined_graph.dot", "_attn_bwd.smem_liveness.dot", "_attn_bwd.tmem_liveness.dot", "memory.json", "memory.pftrace"]


def test_errors_and_warnings_set_the_exit_status(tmp_path, capsys):
    log = tmp_path / "big.log"
    log.write_text(gen.debug_log([gen.flash_attention_backward(head_dim=256)]))
    rc, out, err = _mem(capsys, log, "-o", tmp_path / "out", "--no-render")
    assert rc == 1 and "error: SMEM peaks at" in out
    assert (tmp_path / "out" / "memory.json").exists()  # outputs are complete all the same
    text = gen.debug_log([gen.flash_attention_backward()]).replace('    label="Partition 5";', '    label="Partition 6";')
    log.write_text(text)
    assert _mem(capsys, log)[0] == 0
    rc, out, _ = _mem(capsys, log, "--werror")
    assert rc == 1 and "warning: cluster_partition_5 is labelled 'Partition 6'" in out


def test_broken_input_is_a_located_error_and_writes_nothing(tmp_path, capsys):
    log = tmp_path / "run.log"
    log.write_text(gen.debug_log([gen.flash_attention_backward()]).replace("<TD>[49-67)</TD>", "<TD>[49-67</TD>"))
    rc, out, err = _mem(capsys, log, "-o", tmp_path / "out")
    assert rc == 1 and out == ""
    first, source, caret = err.rstrip("\n").split("\n")
    assert first.startswith(f"{log}:") and ": error: liveness reads '[<start>-<end>)', not '[49-67'" in first
    assert "<TD>[49-67</TD>" in source and caret.strip() == "^"
    assert not (tmp_path / "out").exists()
    rc, _, err = _mem(capsys, tmp_path / "missing")
    assert rc == 1 and "no such file or directory" in err
    rc, _, err = _mem(capsys, log, "--passes", "mem-check,bogus")
    assert rc == 1 and "unknown pass 'bogus'" in err


def test_gen_mem_command(tmp_path, capsys):
    p = argparse.ArgumentParser()
    gen_cli.configure_parser(p)
    assert gen_cli.run(p.parse_args([str(tmp_path / "d"), "--kernels", "2", "--smem-alloc-algo", "1", "--no-operation-ids"])) == 0
    assert sorted(f.name for f in (tmp_path / "d").iterdir()) == [
        "combined_graph_0.dot", "combined_graph_2.dot", "tmem_liveness_1.dot", "tmem_liveness_3.dot"]
    assert gen_cli.run(p.parse_args([str(tmp_path / "r.log"), "--log", "--example", "random", "--kernels", "3", "--seed", "4"])) == 0
    capsys.readouterr()
    rc, out, _ = _mem(capsys, tmp_path / "d", "--json")
    doc = json.loads(out)
    assert len(doc["kernels"]) == 2 and all(k["partitions"] for k in doc["kernels"])
    assert all(op["op_id"] is None for p in doc["kernels"][0]["partitions"] for op in p["ops"])  # no operation ids
    with pytest.raises(Exception):
        gen_cli.run(p.parse_args([str(tmp_path / "r.log"), "--kernels", "1"]))
