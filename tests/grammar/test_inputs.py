"""The one input module: what may be read, how compressed inputs inflate, and their limit."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from layerc.grammar import inputs
from layerc.ir.diagnostics import LayercError, ParseError

COMPRESS = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress}


@pytest.fixture(autouse=True)
def default_limit():
    inputs.set_max_decompressed(None)
    yield
    inputs.set_max_decompressed(None)


#: gzip inflated by ISA-L (every file from 0 bytes on) and by zlib (no file large enough)
INFLATERS = {"isal": 0, "zlib": 1 << 60}


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=20_000), kind=st.sampled_from(sorted(COMPRESS)), members=st.integers(1, 3),
       piece=st.sampled_from([1 << 10, 1 << 16]), inflater=st.sampled_from(sorted(INFLATERS)))
def test_every_compression_inflates_to_the_bytes_whatever_the_pieces(tmp_path_factory, data, kind, members, piece, inflater):
    """Concatenated members (pigz, pbzip2, cat a.gz b.gz) read as one stream, in any piece size,
    by either gzip inflater."""
    path = tmp_path_factory.mktemp("c") / "f"
    path.write_bytes(b"".join(COMPRESS[kind](data) for _ in range(members)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(inputs, "ISAL_FROM", INFLATERS[inflater])
        assert b"".join(inputs.byte_stream(path, piece)) == data * members
    assert inputs.compression(path.read_bytes()[:8]) == kind


def test_plain_bytes_pass_through(tmp_path):
    path = tmp_path / "plain.json"
    path.write_bytes(b'{"traceEvents": []}')
    assert inputs.read_bytes(path) == b'{"traceEvents": []}'


@pytest.mark.parametrize("inflater", sorted(INFLATERS))
@pytest.mark.parametrize("kind", sorted(COMPRESS))
def test_a_truncated_stream_is_a_parse_error_naming_its_format(tmp_path, monkeypatch, kind, inflater):
    monkeypatch.setattr(inputs, "ISAL_FROM", INFLATERS[inflater])
    path = tmp_path / "cut"
    whole = COMPRESS[kind](os.urandom(50_000))
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ParseError, match=kind):
        inputs.read_bytes(path)


@pytest.mark.parametrize("inflater", sorted(INFLATERS))
def test_corrupt_gzip_is_a_parse_error(tmp_path, monkeypatch, inflater):
    monkeypatch.setattr(inputs, "ISAL_FROM", INFLATERS[inflater])
    path = tmp_path / "bad.gz"
    data = bytearray(gzip.compress(b"x" * 10_000))
    data[20:30] = b"\xff" * 10
    path.write_bytes(bytes(data))
    with pytest.raises(ParseError, match="gzip"):
        inputs.read_bytes(path)


def test_a_bomb_stops_at_the_limit_and_says_how_to_raise_it(tmp_path):
    path = tmp_path / "bomb.gz"
    path.write_bytes(gzip.compress(b"\0" * (300 << 20), 9))  # 300 MB from about 300 KB
    with pytest.raises(LayercError, match="--max-decompressed") as e:
        inputs.read_bytes(path)
    assert e.value.path == str(path)
    inputs.set_max_decompressed(0)  # no limit
    assert len(inputs.read_bytes(path)) == 300 << 20


def test_the_default_limit_follows_the_file_size():
    assert inputs.limit_for(1_000) == inputs.MIN_LIMIT
    assert inputs.limit_for(10 << 30) == inputs.MAX_RATIO * (10 << 30)
    inputs.set_max_decompressed(5 << 20)
    assert inputs.limit_for(10 << 30) == 5 << 20


@pytest.mark.parametrize("text,size", [("0", 0), ("512", 512), ("4K", 4096), ("20G", 20 << 30), ("1.5M", 3 << 19),
                                        ("2gib", 2 << 30), ("3MB", 3 << 20)])
def test_sizes(text, size):
    assert inputs.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "-1", "nan", "inf", "G", "1Q", "1e999"])
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        inputs.parse_size(text)


def test_bad_size_option_is_a_usage_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "trace", "x.json", "--max-decompressed", "lots"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--max-decompressed" in r.stderr


def test_zstd_without_its_package_says_what_to_install(tmp_path, monkeypatch):
    path = tmp_path / "t.json.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 20)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as where it is not installed
    with pytest.raises(LayercError, match="zstandard"):
        inputs.read_bytes(path)


@pytest.mark.parametrize("make,says", [
    (lambda p: p.mkdir(), "a directory, not a file"),
    (lambda p: os.mkfifo(p), "a FIFO (named pipe), not a regular file"),
    (lambda p: None, "no such file"),
])
def test_what_cannot_be_read_is_named(tmp_path, make, says):
    path = tmp_path / "x"
    make(path)
    with pytest.raises(LayercError) as e:
        inputs.check_file(path)
    assert e.value.path == str(path) and e.value.message.startswith(says)


def test_a_directory_where_one_is_taken(tmp_path):
    assert inputs.check_file(tmp_path, directory=True) == tmp_path


def test_invalid_utf8_is_located(tmp_path):
    path = tmp_path / "dump.txt"
    path.write_bytes(b"graph():\n    x = 1\n    y = \xff\n")
    with pytest.raises(ParseError) as e:
        inputs.read_text(path)
    assert (e.value.loc.line, e.value.loc.column) == (3, 9)


def test_sqlite_names_read_exactly_that_file(tmp_path):
    """``r%20x`` is not ``r x``; ``#`` and ``?`` are not URI syntax: each name opens itself."""
    from layerc.grammar.traces import read_trace
    from layerc.backends.synth.nsys import generate

    generate(tmp_path / "r x.sqlite", layers=2, replays=1)
    generate(tmp_path / "r%20x.sqlite", layers=3, replays=2)
    generate(tmp_path / "run#1.sqlite", layers=4, replays=1)
    generate(tmp_path / "a?b.sqlite", layers=5, replays=1)
    generate(tmp_path / "é ü%3F.sqlite", layers=6, replays=1)
    counts = {name: len(read_trace(tmp_path / name).kernels)
              for name in ("r x.sqlite", "r%20x.sqlite", "run#1.sqlite", "a?b.sqlite", "é ü%3F.sqlite")}
    assert len(set(counts.values())) == len(counts), counts  # five different exports, each read as itself
    for name, n in counts.items():
        truth = tmp_path / (name.removesuffix(".sqlite") + "_truth.json")
        assert n == __import__("json").loads(truth.read_text())["kernel_rows"], name


def test_the_heap_settings_are_glibcs_or_nothing(monkeypatch):
    """``release_freed`` and ``reuse_freed`` call glibc where it is the C library, and do nothing
    where a function is missing (another C library): never an error."""
    assert inputs._libc("no_such_libc_function") is None
    inputs.release_freed()
    inputs.reuse_freed()
    monkeypatch.setattr(inputs, "_LIBC", {"malloc_trim": None, "mallopt": None})
    inputs.release_freed()
    inputs.reuse_freed()


def test_a_large_trace_read_in_a_process_that_keeps_freed_blocks(tmp_path):
    """A trace large enough for the commands to set the heap for reuse layers as without the
    setting (it changes where memory comes from, never what is computed); the reader itself
    leaves the allocator as the program set it."""
    from layerc.grammar.traces import RELEASE_FROM

    out = tmp_path / "big.sqlite"
    gen = subprocess.run([sys.executable, "-m", "layerc.tools.driver", "gen-nsys", "--kernels", str(RELEASE_FROM + 1000), str(out)],
                         capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr
    code = ("import sys, json; from layerc.grammar import inputs, traces; "
            "from layerc.passes.kernel_tables import kernel_table; from layerc.passes.trace_layers import detect_layers\n"
            "def refuse(): raise AssertionError('a reader set the allocator')\n"
            "inputs.reuse_freed, keep = refuse, inputs.reuse_freed\n"
            "t = traces.read_trace(sys.argv[1])\n"
            "if sys.argv[2] == 'on': keep()\n"
            "r = detect_layers(t, 'auto', kernel_table().classify(t))\n"
            "print(json.dumps([r.layers_per_pass, r.layer.tolist()[::97], r.pass_of.tolist()[::97]]))")
    runs = [subprocess.run([sys.executable, "-c", code, str(out), mode], capture_output=True, text=True, timeout=300) for mode in ("on", "off")]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr + runs[1].stderr
    assert runs[0].stdout == runs[1].stdout and len(runs[0].stdout) > 100


def test_a_new_file_on_a_deleted_inputs_inode_is_no_input(tmp_path):
    """The inputs a process read are known by inode, change time and size: a file made later on a
    deleted input's inode (file systems reuse them at once) may be written."""
    first = tmp_path / "read.json"
    first.write_text("x" * 100)
    inputs.check_file(first)
    assert inputs.is_input(os.stat(first))
    ino = os.stat(first).st_ino
    first.unlink()
    for i in range(200):
        new = tmp_path / f"new{i}"
        new.write_text("y")
        if os.stat(new).st_ino == ino:
            assert not inputs.is_input(os.stat(new))
            return
    pytest.skip("the file system gave no deleted inode back")
