"""The nsys reader on broken exports: every table and column it reads, given a value of the wrong
storage class, dropped, or emptied; string ids spread far apart or pointing nowhere. Each gives a
trace or an error that names the table, the column, what was found and the row; never an
internal error, never an allocation sized by an id."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tests import capped
from layerc.grammar.nsys import ANY, SCHEMA, read_nsys
from layerc.ir.diagnostics import LayercError, ParseError
from layerc.backends.synth.nsys import generate

MEMORY, TIMEOUT = 1 << 30, 60
#: values of every storage class but INTEGER, as SQL literals, and the class SQLite stores them as
WRONG = {"'text'": "TEXT", "x'00ff'": "BLOB", "''": "TEXT"}
#: columns read packed by SQL arithmetic, where any class reads as a number; grid and block sizes
#: are checked where that number is 0, registers and dynamic shared memory are not
PACKED = {"registersPerThread", "dynamicSharedMemory"}


@pytest.fixture(scope="module", params=["2.9.1", "3.28"])
def export(request, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nsys") / f"run-{request.param}.sqlite"
    generate(path, schema=request.param, layers=2, replays=2, devices=2)
    return path


def _copy(export: Path, tmp_path: Path, *sql: str, loose: str | None = None) -> Path:
    """A copy of the export changed by ``sql``; ``loose``: that table first rebuilt without its
    constraints (NOT NULL, PRIMARY KEY), as a hand-edited or damaged file can be."""
    path = tmp_path / export.name
    shutil.copy(export, path)
    db = sqlite3.connect(path, isolation_level=None)
    if loose:
        db.execute(f'CREATE TABLE "loose" AS SELECT * FROM "{loose}"')
        db.execute(f'DROP TABLE "{loose}"')
        db.execute(f'ALTER TABLE "loose" RENAME TO "{loose}"')
    for statement in sql:
        db.execute(statement)
    db.close()
    return path


def _columns(path: Path, table: str) -> list[str]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
    finally:
        db.close()


def _tables(path: Path) -> list[str]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    finally:
        db.close()


def _row(path: Path, table: str) -> int:
    """A row in the middle of the table (not the first: the error must find it)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = [r[0] for r in db.execute(f'SELECT rowid FROM "{table}" ORDER BY rowid')]
    finally:
        db.close()
    return rows[len(rows) // 2] if rows else 0


def _cases(tables=SCHEMA) -> list[tuple[str, str]]:
    return [(t, c) for t in tables for c, column in SCHEMA[t].items() if column.kind != ANY]


@pytest.mark.parametrize("table,column", _cases())
@pytest.mark.parametrize("literal", list(WRONG))
def test_a_value_of_the_wrong_class_is_named_with_its_row(export, tmp_path, table, column, literal):
    if table not in _tables(export) or column not in _columns(export, table):
        pytest.skip(f"the {export.stem} export has no {table}.{column}")
    kind = SCHEMA[table][column].kind
    if kind == "text" and WRONG[literal] == "TEXT":
        pytest.skip("text is what this column holds")
    row = _row(export, table)
    path = _copy(export, tmp_path, f'UPDATE "{table}" SET "{column}" = {literal} WHERE rowid = {row}', loose=table)
    try:
        read_nsys(path)
    except ParseError as e:
        expected = kind.upper() + ("" if not SCHEMA[table][column].null else " or NULL")
        assert e.message == f"{table}.{column}: expected {expected}, got {WRONG[literal]} (row {row})"
        assert e.format().startswith(f"{path}: error: {table}.{column}: ")
        return
    # read: only where the value is not used as a number, or packed by SQL arithmetic
    assert column in PACKED or table.startswith("ENUM_") or _unused(table, column), f"{table}.{column} = {literal} read silently"


def _unused(table: str, column: str) -> bool:
    """Columns read only in some exports (an ENUM's label or name, whichever it has)."""
    return (table, column) in {("NVTX_EVENTS", "textId"), ("NVTX_EVENTS", "text")}


@pytest.mark.parametrize("table,column", [(t, c) for t, c in _cases() if not SCHEMA[t][c].null])
def test_null_where_a_value_is_due_is_named(export, tmp_path, table, column):
    if table not in _tables(export):
        pytest.skip(f"the {export.stem} export has no {table}")
    row = _row(export, table)
    path = _copy(export, tmp_path, f'UPDATE "{table}" SET "{column}" = NULL WHERE rowid = {row}', loose=table)
    with pytest.raises(ParseError) as e:
        read_nsys(path)
    assert e.value.message == f"{table}.{column}: expected {SCHEMA[table][column].kind.upper()}, got NULL (row {row})"


@pytest.mark.parametrize("table,column", [(t, c) for t, cs in SCHEMA.items() for c, col in cs.items() if col.required])
def test_a_required_column_missing_is_named(export, tmp_path, table, column):
    if table not in _tables(export):
        pytest.skip(f"the {export.stem} export has no {table}")
    path = _copy(export, tmp_path, f'ALTER TABLE "{table}" DROP COLUMN "{column}"', loose=table)
    try:
        read_nsys(path)
    except ParseError as e:
        assert e.message == f"{table}: no column '{column}' (every Nsight Systems export has it)"
        return
    assert table in ("TARGET_INFO_GPU", "META_DATA_CAPTURE"), "a table read only for facts it may lack"


def test_any_table_dropped_or_emptied_gives_a_trace_or_an_error(export, tmp_path):
    for table in _tables(export):
        for sql in (f'DROP TABLE "{table}"', f'DELETE FROM "{table}"'):
            path = _copy(export, tmp_path, sql)
            try:
                read_nsys(path)
            except LayercError as e:
                assert e.format().startswith(f"{path}: error: "), (sql, e.format())
            path.unlink()


def test_a_string_id_stringids_lacks_is_named(export, tmp_path):
    row = _row(export, "CUPTI_ACTIVITY_KIND_KERNEL")
    path = _copy(export, tmp_path, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 123456789012 WHERE rowid = {row}")
    with pytest.raises(ParseError) as e:
        read_nsys(path)
    assert e.value.message == f"CUPTI_ACTIVITY_KIND_KERNEL.demangledName: string id 123456789012 is not in StringIds (row {row})"


def _layerc(*argv: str) -> tuple[int, str, str]:
    done = capped.run(argv, memory=MEMORY, timeout=TIMEOUT)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("shift", [1 << 30, 10**15, (1 << 62)])
def test_string_ids_far_apart_read_in_little_memory(export, tmp_path, shift):
    """Ids spread by ``shift`` (every reference moved with them): the same names, read in 1 GB."""
    refs = [("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"), ("CUPTI_ACTIVITY_KIND_KERNEL", "shortName"),
            ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId"), ("NVTX_EVENTS", "textId")]
    sql = ["UPDATE StringIds SET id = id * 7 + " + str(shift)]
    sql += [f'UPDATE "{t}" SET "{c}" = "{c}" * 7 + {shift} WHERE "{c}" IS NOT NULL'
            for t, c in refs if t in _tables(export) and c in _columns(export, t)]
    path = _copy(export, tmp_path, *sql)
    before, after = read_nsys(export), read_nsys(path)
    assert list(before.strings.lookup(before.kernels.name)) == list(after.strings.lookup(after.kernels.name))
    assert list(before.strings.lookup(before.launches.name)) == list(after.strings.lookup(after.launches.name))
    rc, out, err = _layerc("trace", str(path), "--json", "-")
    assert rc == 0 and "internal error" not in err, err


@pytest.mark.parametrize("literal", ["'text'", "x'00ff'", "1e308", "9223372036854775807"])
def test_the_command_line_names_a_bad_value_and_leaves_the_file(export, tmp_path, literal):
    row = _row(export, "CUPTI_ACTIVITY_KIND_KERNEL")
    path = _copy(export, tmp_path, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = {literal} WHERE rowid = {row}")
    data = path.read_bytes()
    rc, _, err = _layerc("trace", str(path))
    assert rc in (0, 1) and "internal error" not in err and "Traceback" not in err, err
    if rc == 1:
        assert err.startswith(f"{path}: error: CUPTI_ACTIVITY_KIND_KERNEL.start: expected INTEGER, got "), err
    assert path.read_bytes() == data


@pytest.mark.parametrize("table", [t for t in SCHEMA if not t.startswith(("ENUM_", "EXPORT_"))])
def test_commands_answer_an_export_without_a_table(export, tmp_path, table):
    """Every analysis on what remains (a trace without launches, names or annotations): an
    answer or an error, never an internal error."""
    if table not in _tables(export) or "2.9.1" in export.name:
        pytest.skip("one schema is enough for the commands")
    path = _copy(export, tmp_path, f'DROP TABLE "{table}"')
    for argv in (["trace", str(path)], ["replay", str(path), "-o", str(tmp_path / "r.json")]):
        rc, _, err = _layerc(*argv)
        assert rc in (0, 1) and "internal error" not in err and "Traceback" not in err, (argv, err)
        if rc == 1:
            assert err.startswith(f"{path}: error: "), err


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> Path:
    """An export whose kernel table spans several of the column reader's Arrow batches."""
    path = tmp_path_factory.mktemp("nsys") / "batches.sqlite"
    generate(path, kernels=150_000)
    return path


@pytest.mark.parametrize("column", ["start", "streamId", "shortName", "gridX"])
@pytest.mark.parametrize("place", ["first", "later batch"])
@pytest.mark.parametrize("literal", ["'text'", "NULL", "2.5"])
def test_a_bad_value_in_any_batch_is_named_with_its_row(batches, tmp_path, column, place, literal):
    """The driver types a column by its first batch: a value of another class there changes the
    column's type, past it the driver refuses the batch. Either way the error names the row."""
    db = sqlite3.connect(f"file:{batches}?mode=ro", uri=True)
    rows = [r[0] for r in db.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid")]
    db.close()
    row = rows[0] if place == "first" else rows[(len(rows) * 3) // 4]
    path = _copy(batches, tmp_path, f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {column} = {literal} WHERE rowid = {row}",
                 loose="CUPTI_ACTIVITY_KIND_KERNEL")
    got = {"'text'": "TEXT", "NULL": "NULL", "2.5": "REAL"}[literal]
    nullable = SCHEMA["CUPTI_ACTIVITY_KIND_KERNEL"][column].null
    if (literal == "NULL" and nullable) or (column == "gridX" and literal == "2.5"):
        # NULL where allowed reads as absent; a size packed by SQL arithmetic takes a real's integer part
        read_nsys(path)
        return
    with pytest.raises(ParseError) as e:
        read_nsys(path)
    expected = "INTEGER" + (" or NULL" if nullable else "")
    assert e.value.message == f"CUPTI_ACTIVITY_KIND_KERNEL.{column}: expected {expected}, got {got} (row {row})"
