"""The kernel tables kept beside the bytecode (``passes.data_cache``): read back as they were made,
never used for other tables or other code, never a failure of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerc.passes import data_cache, kernel_tables
from layerc.passes.kernel_tables import KernelTable, _read_dir, builtin_files, builtin_table

TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "traces" / "torch" / "hf_qwen1.5-0.5b_h100.json.gz"


@pytest.fixture
def writing(monkeypatch):
    """Caches written, whatever PYTHONDONTWRITEBYTECODE says where the tests run."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)


def _fresh() -> KernelTable:
    return KernelTable(_read_dir(builtin_files()))


def _cached(tmp_path: Path) -> KernelTable:
    """The tables as a second run reads them: written by a first, read back."""
    cache = tmp_path / "kernel_tables.tables"
    builtin_table(cache)
    assert cache.is_file()
    return builtin_table(cache)


def test_a_second_run_reads_the_tables_it_kept(tmp_path, writing):
    table = _cached(tmp_path)
    fresh = _fresh()
    assert [(e.match, e.kind, e.examples, e.source, e.templated) for e in table.entries] == \
           [(e.match, e.kind, e.examples, e.source, e.templated) for e in fresh.entries]
    assert _from_cache(table)
    assert all(f is not None for f in table._filters)  # the literals came with them


_NAMES = [x for e in _fresh().entries for x in e.examples]


@pytest.fixture(scope="module")
def kept_and_read(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "dont_write_bytecode", False)
        return _cached(tmp_path_factory.mktemp("cache")), _fresh()


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(_NAMES), cut=st.integers(0, 300), noise=st.text(max_size=8), flip=st.booleans())
def test_the_kept_tables_classify_as_the_read_ones(kept_and_read, name, cut, noise, flip):
    """Every example name, cut, with noise and case flipped: the same entry and short name from
    tables read back from the cache (literal filters on from the first name, patterns compiled
    where first searched) as from tables read from their TOML."""
    kept, read = kept_and_read
    name = name[:cut] + noise + name[cut:]
    name = name.swapcase() if flip else name
    assert kept.match(name) == read.match(name)


def test_other_tables_or_other_code_are_not_read_from_it(tmp_path, writing, monkeypatch):
    cache = tmp_path / "kernel_tables.tables"
    builtin_table(cache)
    files = builtin_files()
    changed = [(p, t.replace('short = "hipblaslt_gemm"', 'short = "changed_gemm"')) for p, t in files]
    monkeypatch.setattr(kernel_tables, "builtin_files", lambda: changed)
    assert builtin_table(cache).lookup("Cijk_Alik_Bljk_BBS_BH").short == "changed_gemm"
    monkeypatch.setattr(kernel_tables, "builtin_files", lambda: files)
    assert builtin_table(cache).lookup("Cijk_Alik_Bljk_BBS_BH").short == "hipblaslt_gemm"
    assert _from_cache(builtin_table(cache))
    # the code that derives the literals, changed (as a checkout's edit changes its stamp)
    monkeypatch.setattr(kernel_tables.data_cache, "stamp", lambda path: (0, 0))
    assert not _from_cache(builtin_table(cache))
    assert _from_cache(builtin_table(cache))  # kept again under the new stamp


def _from_cache(table: KernelTable) -> bool:
    """Tables read back compile no regex until a name is searched; tables read from TOML have
    compiled every one (to check it, and for its literals)."""
    return not any("pattern" in vars(e) for e in table.entries)


@pytest.mark.parametrize("content", [b"", b"\x00" * 10, b"not marshal at all", None])
def test_a_broken_cache_is_read_around_and_mended(tmp_path, writing, content):
    cache = tmp_path / "kernel_tables.tables"
    builtin_table(cache)
    if content is None:  # cut short
        content = cache.read_bytes()[: cache.stat().st_size // 2]
    cache.write_bytes(content)
    table = builtin_table(cache)
    assert table.lookup("Cijk_Alik_Bljk_BBS_BH").short == "hipblaslt_gemm"
    assert data_cache.read(cache, _key()) is not None  # written again, whole


def _key():
    return kernel_tables.cache_key(builtin_files())


def test_nothing_is_written_where_bytecode_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    cache = tmp_path / "kernel_tables.tables"
    assert builtin_table(cache).lookup("Cijk_Alik").short == "hipblaslt_gemm"
    assert not cache.exists()


def test_a_folder_that_cannot_be_written_is_no_error(tmp_path, writing):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    cache = blocker / "__pycache__" / "kernel_tables.tables"  # a folder inside a file
    assert builtin_table(cache).lookup("Cijk_Alik").short == "hipblaslt_gemm"
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_a_link_in_the_cache_place_is_replaced_not_followed(tmp_path, writing):
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    cache = tmp_path / "kernel_tables.tables"
    cache.symlink_to(target)
    builtin_table(cache)
    assert target.read_text() == "keep me" and not cache.is_symlink()


@pytest.mark.skipif(not TRACE.is_file(), reason="needs ../shared/data")
def test_the_trace_command_writes_it_where_python_keeps_bytecode(tmp_path):
    """A whole run under PYTHONPYCACHEPREFIX: the first run keeps the tables there, the second
    reads them, and both print the same report."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    runs = [subprocess.run([sys.executable, "-m", "layerc.tools.driver", "trace", str(TRACE)], capture_output=True, text=True,
                           env=env, timeout=120) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    kept = list((tmp_path / "pyc").rglob("kernel_tables.*.tables"))
    assert len(kept) == 1 and data_cache.read(kept[0], _key()) is not None


def test_hardware_presets_from_the_cache_are_those_of_the_toml():
    """A trace's roofline reads the presets' fields from the cache: each is the preset as the TOML
    gives it (load_hardware), whichever way it was read."""
    from layerc.passes import hardware

    for key, fields in hardware._builtin_presets().items():
        assert hardware.Hardware(**fields) == hardware.load_hardware(key)
        assert fields["devices"], f"{key}: a preset no device name finds"
