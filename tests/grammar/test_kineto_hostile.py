"""Mutated and hostile PyTorch profiler (Kineto) traces: ``layerc trace`` answers with a report or
an error at a place in the file, never with an internal error, a hang, a memory blow-up or a
changed input; and the reader's work stays linear in the file whatever the file holds.

The mutator starts from small valid traces (``gen-trace --layers 2``, the same indented, and two
real traces from ../shared/data) and applies byte flips, truncation, splicing of two traces,
numeric extremes, deep nesting, type swaps of the fields the reader uses, and gzip of the result.
The command line runs in capped child processes; the reader alone runs in-process on many more
mutations. Gzip bombs, 100 MB events and a GB of whitespace run in capped children too.
"""

from __future__ import annotations

import gzip
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests import capped
from tests.mutations import BASIC, POSITION, basic, nth, replace_nth
from layerc.grammar import kineto
from layerc.grammar.kineto import MAX_EVENT, MAX_NESTING, read_kineto
from layerc.grammar.traces import read_trace
from layerc.ir.diagnostics import LayercError, ParseError
from layerc.ir.trace import TIME_LIMIT

from tests.layerc_cli import run_layerc

MEMORY = 2 << 30  #: address space of a child layerc
TIMEOUT = 60  #: seconds a child may run (a clean run takes about one)
REAL = ("hta_triton_a100.json.gz", "hta_minitoy_mi250.json.gz")


class Seeds(list):
    """The seed traces (shown by name when hypothesis prints a failing example)."""

    def __repr__(self) -> str:
        return "seeds"


@pytest.fixture(scope="module")
def seeds(tmp_path_factory, shared) -> list[bytes]:
    """The valid traces the mutations start from, as JSON text."""
    root = tmp_path_factory.mktemp("seeds")
    rc, _, err = run_layerc("gen-trace", root / "g.json.gz", "--layers", "2")
    assert rc == 0, err
    gen = gzip.decompress((root / "g.json.gz").read_bytes())
    indented = json.dumps(json.loads(gen), indent=1).encode()
    real = [gzip.decompress((shared / "data/traces/torch" / name).read_bytes()) for name in REAL]
    return Seeds([gen, indented, *real])


# -- the mutator ---------------------------------------------------------------------------------

EXTREMES = [b"NaN", b"Infinity", b"-Infinity", b"1e300", b"-1e300", b"1e999", b"-1e999", b"1e-400",
            str(2**63).encode(), str(2**64).encode(), str(-(2**63) - 1).encode(), str(10**30).encode(),
            b"-5", b"-0", b"9" * 5000]
#: Every field the reader uses, in events, their args and the document's head.
FIELDS = [b"ph", b"cat", b"name", b"pid", b"tid", b"ts", b"dur", b"args", b"External id", b"correlation", b"device",
          b"stream", b"grid", b"block", b"registers per thread", b"shared memory", b"bytes", b"Input Dims",
          b"Sequence number", b"deviceProperties", b"id", b"schemaVersion", b"distributedInfo", b"traceName"]
VALUES = [b'"x"', b'"stream 7"', b'"\\ud800"', b"[]", b"[1, [2, 3]]", b"[1e300, -1, 2]", b"{}", b'{"a": {"b": 1}}',
          b"true", b"null", b"1.5", b"-1", b"1e300", b"-1e300", str(2**64).encode(), b'"' + b"k" * 100_000 + b'"']
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_OBJECT = re.compile(rb"\{")

mutations = st.one_of(
    BASIC["flip"],
    BASIC["truncate"],
    st.tuples(st.just("splice"), POSITION, st.integers(1, 2000), POSITION, st.integers(0, 3)),
    BASIC["delete"],
    st.tuples(st.just("number"), st.integers(0, 1 << 20), st.sampled_from(EXTREMES)),
    st.tuples(st.just("nest"), st.integers(0, 1 << 20), st.sampled_from([b"[", b'{"a": ']),
              st.sampled_from([2, MAX_NESTING - 3, MAX_NESTING + 1, 5000, 100_000]), st.booleans()),
    st.tuples(st.just("swap"), st.integers(0, 1 << 20), st.sampled_from(FIELDS), st.sampled_from(VALUES)),
)


def mutate(data: bytes, m: tuple, seeds: list[bytes]) -> bytes:
    """One mutation (tests/mutations.py's, a splice of another trace, or one of JSON's own)."""
    kind, k, *rest = m
    n = max(len(data), 1)
    if kind == "splice":  # a stretch of another trace (or this one) put in somewhere
        length, at, other = rest
        donor = seeds[other % len(seeds)]
        start = k % len(donor)
        return data[: at % n] + donor[start : start + length] + data[at % n :]
    done = basic(data, m)
    if done is not None:
        return done
    if kind == "number":
        return replace_nth(_NUMBER, data, k, rest[0])
    if kind == "nest":  # a new first key of an object, nested arrays or objects as its value
        opener, depth, closed = rest
        closer = b"]" if opener == b"[" else b"}"
        hit = nth(_OBJECT, data, k)
        at = hit.end() if hit else k % n
        return data[:at] + b'"nest": ' + opener * depth + b"1" + (closer * depth if closed else b"") + b", " + data[at:]
    if kind == "swap":  # the field gets a value of another type; its old value goes to an unknown key
        field, value = rest
        hit = nth(re.compile(rb'"%s"\s*:\s*' % re.escape(field)), data, k)
        return data[: hit.end()] + value + b', "was ' + field + b'": ' + data[hit.end() :] if hit else data
    raise AssertionError(kind)


def mutated(data: bytes, ms: list[tuple], seeds: list[bytes]) -> bytes:
    for m in ms:
        data = mutate(data, m, seeds)
    return data


# -- running layerc on it --------------------------------------------------------------------------


def run_trace(path: Path, *extra: str) -> tuple[int, str]:
    """``layerc trace PATH`` in a capped child (tests/capped.py): its exit status and stderr."""
    done = capped.run(["trace", path, *extra], memory=MEMORY, timeout=TIMEOUT)
    return done.returncode, done.stderr


def check_answer(rc: int, err: str, path: Path) -> None:
    """Exit 0 or 1; never an internal error; an error names the file (and a place in it) first."""
    shown = f"layerc trace {path} -> {rc}\n{err[:3000]}"
    assert rc in (0, 1), shown
    assert "internal error" not in err and "Traceback" not in err, shown
    if rc == 1:
        first = err.splitlines()[0] if err else ""
        assert re.match(rf"^{re.escape(str(path))}(:\d+(:\d+)?)?: error: ", first), shown


def check_cli(data: bytes, name: str = "t.json", *extra: str) -> tuple[int, str]:
    """``layerc trace`` on ``data`` written to ``name``; the file must be unchanged after."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        rc, err = run_trace(path, *extra)
        check_answer(rc, err, path)
        assert path.read_bytes() == data, "layerc changed its input"
    return rc, err


# -- the command line, on mutated traces -----------------------------------------------------------


@settings(max_examples=18, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 3), ms=st.lists(mutations, min_size=1, max_size=3), zipped=st.booleans())
def test_cli_answers_mutated_traces(seeds, seed, ms, zipped):
    data = mutated(seeds[seed], ms, seeds)
    check_cli(gzip.compress(data, 1) if zipped else data, "t.json.gz" if zipped else "t.json")


HOSTILE = {
    "args 100,000 arrays deep": [("nest", 40, b"[", 100_000, True)],
    "args 100,000 objects deep, unclosed": [("nest", 40, b'{"a": ', 100_000, False)],
    "ts of 1e300": [("swap", 30, b"ts", b"1e300")],
    "dur of 2**64": [("swap", 30, b"dur", str(2**64).encode())],
    "ts of NaN": [("swap", 30, b"ts", b"NaN")],
    "dur of 1e999": [("swap", 30, b"dur", b"1e999")],
    "a list for args": [("swap", 30, b"args", b"[1, 2]")],
    "an object for a kernel name": [("swap", 50, b"name", b'{"a": 1}')],
    "two traces spliced": [("splice", 5000, 20_000, 3000, 3)],
}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_cli_answers_hostile_traces(seeds, case):
    check_cli(mutated(seeds[0], HOSTILE[case], seeds))


# -- the reader alone, on many more mutations ------------------------------------------------------


def _read(path: Path, chunk: int):
    """The trace as read_trace gives it (rows no clock gives left out), read in pieces of
    ``chunk`` bytes; or the error."""
    try:
        t = read_kineto(path, chunk=chunk)
    except LayercError as e:
        return e
    t.drop_invalid()
    return t


def _top_level_keys(data: bytes) -> list[str]:
    keys: list[list[str]] = []
    json.loads(data, object_pairs_hook=lambda pairs: keys.append([k for k, _ in pairs]), parse_int=len, parse_float=len)
    return keys[-1] if keys else []


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 3), ms=st.lists(mutations, min_size=1, max_size=4), zipped=st.booleans())
@example(seed=0, ms=[("nest", 7, b"[", 100_000, False)], zipped=False)
@example(seed=1, ms=[("swap", 3, b"deviceProperties", b"[{}, 5, []]")], zipped=True)
@example(seed=0, ms=[("swap", 40, b"name", b"7"), ("flip", 40_000, 64)], zipped=False)
@example(seed=2, ms=[("swap", 6861, b"name", b"[]"), ("nest", 337, b"[", 100_000, False)], zipped=False)  # type, then depth
def test_reader_gives_a_trace_or_a_located_error(seeds, tmp_path, seed, ms, zipped):
    """Whatever the mutation: rows whose times no clock can give are left out, never garbage;
    an error names the file, and a place in it when it has one; and the answer is the same
    whether the text is read in pieces of 300 bytes (cuts guessed, events walked one by one)
    or of 256 KB (these small traces in one decode): the first error in the file, at its place."""
    path = tmp_path / ("t.json.gz" if zipped else "t.json")
    data = mutated(seeds[seed], ms, seeds)
    path.write_bytes(gzip.compress(data, 1) if zipped else data)
    whole, pieces = _read(path, kineto.CHUNK), _read(path, 300)
    if isinstance(whole, LayercError):
        text = whole.format()
        assert text.startswith(f"{path}:{whole.loc.line}:{whole.loc.column}: error: " if whole.loc else f"{path}: error: "), text
        assert len(text) < 2000, "a message quotes its input at length"
        assert isinstance(pieces, LayercError) and pieces.format() == text
        return
    assert not isinstance(pieces, LayercError), pieces.format()
    if _top_level_keys(data).count("traceEvents") > 1:  # JSON leaves duplicate keys undefined: msgspec
        return  # keeps the last array; a trace read in pieces has read the first one's events already
    assert pieces.summary() == whole.summary() and pieces.meta["events"] == whole.meta["events"]
    for name in ("kernels", "launches", "cpu_ops", "annotations", "memops", "modules"):
        table = getattr(whole, name)
        assert (np.abs(table.start) < TIME_LIMIT).all() and (table.end >= table.start).all()
        assert (np.abs(table.end) < TIME_LIMIT).all()
        other = getattr(pieces, name)  # (a table's rows are in the order its pieces came)
        assert sorted(zip(table.row, table.start, table.end)) == sorted(zip(other.row, other.start, other.end))


# -- numbers ---------------------------------------------------------------------------------------


def _kernels(n: int, **fields) -> list[dict]:
    return [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 1000.0 + 10 * i, "dur": 2.0,
             "args": {"correlation": i, "stream": 7, "device": 0, "grid": [1, 1, 1], "block": [128, 1, 1]}, **fields}
            for i in range(n)]


@pytest.mark.parametrize("field, value", [("ts", 1e300), ("ts", -1e300), ("ts", 2**63), ("ts", -(2**63) - 1), ("ts", 10**30),
                                          ("ts", None), ("dur", 1e300), ("dur", 2**70), ("dur", -5.0), ("ts", 4.7e15)])
def test_times_no_clock_gives_are_left_out_and_counted(tmp_path, field, value):
    """A kernel with such a time is left out (Trace.drop_invalid counts it in meta["dropped"] and
    warns); the others keep their exact times."""
    events = _kernels(6)
    if value is None:
        del events[3][field]
    else:
        events[3][field] = value
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    t = read_trace(tmp_path / "t.json")
    assert list(t.strings.lookup(t.kernels.name)) == ["k0", "k1", "k2", "k4", "k5"]
    assert list(t.kernels.start) == [1_000_000, 1_010_000, 1_020_000, 1_040_000, 1_050_000]
    assert (t.kernels.duration == 2000).all()
    assert sum(t.meta["dropped"]["kernels"].values()) == 1 and any("1 kernels left out" in w for w in t.warnings)


@pytest.mark.parametrize("text, message", [(b"NaN", "invalid character"), (b"Infinity", "invalid character"),
                                           (b"1e999", "Number out of range")])
def test_numbers_json_has_not_are_located_errors(tmp_path, text, message):
    doc = json.dumps({"traceEvents": _kernels(5)}).encode()
    at = doc.index(b'"ts": 1030.0') + len(b'"ts": ')
    (tmp_path / "t.json").write_bytes(doc[:at] + text + doc[at + len(b"1030.0") :])
    with pytest.raises(ParseError) as e:
        read_trace(tmp_path / "t.json")
    assert message in e.value.message and e.value.loc == (1, at + 1)


@pytest.mark.parametrize("field, value", [("pid", 2**64), ("tid", -1e300), ("args", {"stream": 1e300, "device": 2**70,
                          "correlation": "c 99999999999999999999999", "grid": [1e300, 2**40, -1], "block": "[x, 1e99, 4]",
                          "registers per thread": 2**64, "shared memory": -1e300, "External id": 10**30})])
def test_ids_out_of_range_read_as_absent(tmp_path, field, value):
    events = _kernels(3)
    events[1][field] = value
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    k = read_trace(tmp_path / "t.json").kernels
    assert len(k) == 3
    for col in ("device", "stream", "correlation", "grid_x", "grid_y", "block_y", "registers", "shared_static"):
        assert getattr(k, col)[1] >= -1


# -- nesting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("opener, closer", [(b"[", b"]"), (b'{"a": ', b"}")])
@pytest.mark.parametrize("closed", [True, False])
def test_nesting_too_deep_is_located_at_its_bracket(tmp_path, opener, closer, closed):
    """``args`` with 100,000 nested arrays or objects: msgspec gives up with a RecursionError; the
    error is placed at the bracket that opens level MAX_NESTING + 1 (the document, the array, the
    event and its args are the first four)."""
    doc = json.dumps({"traceEvents": _kernels(50)}).encode()
    at = doc.index(b'"args": {', doc.index(b'"name": "k30"')) + len(b'"args": {')
    deep = b'"x": ' + opener * 100_000 + b"1" + (closer * 100_000 + b", " if closed else b"")
    (tmp_path / "t.json").write_bytes(doc[:at] + deep + doc[at:])
    with pytest.raises(ParseError) as e:
        read_trace(tmp_path / "t.json")
    bracket = at + len(b'"x": ') + (MAX_NESTING - 4) * len(opener)
    assert e.value.message == f"nesting deeper than {MAX_NESTING} levels of arrays and objects"
    assert e.value.loc == (1, bracket + 1)


def test_nesting_msgspec_decodes_still_reads(tmp_path):
    events = _kernels(3)
    events[1]["args"]["x"] = json.loads("[" * (MAX_NESTING - 10) + "]" * (MAX_NESTING - 10))
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    assert len(read_trace(tmp_path / "t.json").kernels) == 3


# -- linear work -------------------------------------------------------------------------------------


@pytest.fixture
def decoded(monkeypatch) -> list[int]:
    """Counts the bytes msgspec parses for the reader: all of a text it decodes, or up to where a
    whole value is followed by more (how the reader finds an event's end)."""
    seen = [0]
    real = kineto._decode

    def counting(decoder, text, outer=0):
        try:
            value = real(decoder, text, outer)
        except kineto._Malformed as e:
            seen[0] += e.offset + 1 if e.trailing else len(text)
            raise
        seen[0] += len(text)
        return value

    monkeypatch.setattr(kineto, "_decode", counting)
    return seen


def _big_trace(n: int, name=lambda i: f"k{i}") -> bytes:
    events = [{"ph": "X", "cat": "kernel", "name": name(i), "pid": 0, "tid": 7, "ts": 1000.0 + i, "dur": 0.5,
               "args": {"correlation": i, "stream": 7, "grid": [i % 64 + 1, 1, 1]}} for i in range(n)]
    return json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()


@pytest.mark.parametrize("where", [0.05, 0.5, 0.95])
def test_one_bad_byte_costs_one_pass(tmp_path, decoded, where):
    """One bad byte anywhere in a 3 MB trace: it is reported where it is, having parsed the text
    before it about once (the fuzzer's trace took 72 s at 3.2 MB: each piece re-decoded as more
    arrived). Names full of ``}, {`` make the reader walk events one by one."""
    for doc in (_big_trace(20_000), _big_trace(14_000, lambda i: f"f<{{}}, {{{i}}}>")):
        at = doc.index(b'"ts": ', int(len(doc) * where)) + len(b'"ts": ')
        (tmp_path / "bad.json").write_bytes(doc[:at] + b"@" + doc[at + 1 :])
        decoded[0] = 0
        with pytest.raises(ParseError) as e:
            read_kineto(tmp_path / "bad.json")
        assert e.value.loc == (1, at + 1) and "invalid character" in e.value.message
        assert decoded[0] <= 3 * at + 2 * kineto.CHUNK, (decoded[0], at)


def _event(i: int, name: bytes | None = None) -> bytes:
    return b'{"ph": "X", "cat": "kernel", "name": "%s", "ts": %d, "dur": 1}' % (name or b"k%d" % i, i)


def _same_answer(path: Path) -> LayercError:
    """The error every piece size gives for ``path`` (the same text, at the same place)."""
    answers = []
    for chunk in (300, 1000, 4096, 1 << 16, kineto.CHUNK):
        with pytest.raises(LayercError) as e:
            read_kineto(path, chunk=chunk)
        answers.append(e.value)
    assert len({a.format() for a in answers}) == 1, [a.format() for a in answers]
    return answers[0]


@pytest.mark.parametrize("before", [b"k" * 300, b"k" * 65_436, b"k"])
@pytest.mark.parametrize("events", [1, 6, 3000])
def test_a_trailing_comma_is_an_error_wherever_the_text_is_cut(tmp_path, before, events):
    """``[..., {event}, ]``: JSON has no trailing comma, and no cut may hide it (a cut made after
    the comma once left the last decode an empty array to accept, for the default piece size
    too, after a long last event)."""
    doc = b'{"traceEvents": [' + b", ".join([_event(i) for i in range(events - 1)] + [_event(events, before)]) + b", ]}"
    (tmp_path / "t.json").write_bytes(doc)
    e = _same_answer(tmp_path / "t.json")
    assert "trailing comma in array" in e.message and e.loc == (1, doc.rindex(b"]}") + 1), e.format()


@pytest.mark.parametrize("first", [1, 40, 1700])
@pytest.mark.parametrize("second", [b"[]", b"[" + b'{"ph": "X", "cat": "kernel", "name": "x", "ts": 99, "dur": 1}' + b"]"])
def test_a_second_events_array_is_an_error(tmp_path, first, second):
    """Two ``traceEvents`` keys: JSON leaves which counts undefined, and a stream has read the
    first array's events before it meets the second (the events read depended on the piece
    size: 40, 33 or 1 of them). It is an error at the second key, whatever the piece size."""
    doc = b'{"traceEvents": [' + b", ".join(_event(i) for i in range(first)) + b'], "traceName": "x", "traceEvents": ' + second + b"}"
    (tmp_path / "t.json").write_bytes(doc)
    e = _same_answer(tmp_path / "t.json")
    assert "a second 'traceEvents' key" in e.message and e.loc == (1, doc.rindex(b'"traceEvents"') + 1), e.format()
    one = b'{"traceEvents": [' + b", ".join(_event(i) for i in range(first)) + b'], "traceName": "traceEvents"}'
    (tmp_path / "one.json").write_bytes(one)  # the word in a value is no second key
    assert read_kineto(tmp_path / "one.json", chunk=300).meta["events"] == first == read_kineto(tmp_path / "one.json").meta["events"]


@pytest.mark.parametrize("second", [b'"trace\\u0045vents"', b'"\\u0074raceEvents"'])
def test_a_second_events_key_written_with_escapes_is_an_error(tmp_path, second):
    """The same key with a character escaped (``trace\\u0045vents`` decodes to ``traceEvents``):
    it was let through, and the events read depended on the piece size (2,998 to 2,410)."""
    doc = b'{"traceEvents": [' + b", ".join(_event(i) for i in range(3000)) + b"], " + second + b": [" + _event(9999) + b"]}"
    (tmp_path / "t.json").write_bytes(doc)
    e = _same_answer(tmp_path / "t.json")
    assert "a second 'traceEvents' key" in e.message and e.loc == (1, doc.rindex(second) + 1), e.format()


def test_a_second_events_key_is_located_at_the_top_level(tmp_path):
    """A ``traceEvents`` key nested in another key's value before the second one is not it."""
    doc = (b'{"traceEvents": [' + b", ".join(_event(i) for i in range(2)) + b'], "x": {"traceEvents": 1}, "traceEvents": []}')
    (tmp_path / "t.json").write_bytes(doc)
    e = _same_answer(tmp_path / "t.json")
    assert e.loc == (1, doc.rindex(b'"traceEvents"') + 1), e.format()
    nested = b'{"traceEvents": [' + _event(1) + b'], "x": {"traceEvents": [1]}, "y": ["traceEvents"]}'
    (tmp_path / "nested.json").write_bytes(nested)  # a key of another object: no second events array
    assert read_kineto(tmp_path / "nested.json", chunk=300).meta["events"] == 1 == read_kineto(tmp_path / "nested.json").meta["events"]


@pytest.mark.parametrize("end", [b", ]}", b', {"ph": 1}]}'], ids=["trailing comma", "wrong type in the last event"])
def test_an_error_at_the_end_of_the_json_before_a_broken_gzip_stream(tmp_path, end):
    """The JSON's error within a line's quote of where the compressed stream breaks: quoting the
    line read on into the broken stream, and said the gzip error instead."""
    data = b'{"traceEvents": [' + b", ".join(_event(i) for i in range(20)) + end
    (tmp_path / "plain.json").write_bytes(data)
    with pytest.raises(ParseError) as plain:
        read_kineto(tmp_path / "plain.json")
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(data) + b"\x00garbage" * 10)
    e = _same_answer(tmp_path / "t.json.gz")
    assert (e.message, e.loc) == (plain.value.message, plain.value.loc), e.format()


@pytest.mark.parametrize("broken", ["garbage after the stream", "the stream cut short"])
@pytest.mark.parametrize("bad_event", [True, False])
def test_the_first_error_before_a_broken_compressed_stream(tmp_path, broken, bad_event):
    """A gzip file broken at its end, its JSON broken before that (``"ts": tru``): the JSON's
    error, which comes first in the file, whatever the piece size (a large piece size held the
    text until the stream broke, and said the gzip error); with sound JSON, the gzip error."""
    events = [_event(i) for i in range(20)]
    if bad_event:
        events[3] = b'{"ph": "X", "cat": "kernel", "ts": tru}'
    data = b'{"traceEvents": [' + b", ".join(events) + b"]}"
    packed = gzip.compress(data)
    (tmp_path / "t.json.gz").write_bytes(packed + b"\x00garbage" * 10 if broken == "garbage after the stream" else packed[:-10])
    e = _same_answer(tmp_path / "t.json.gz")
    if bad_event:
        (tmp_path / "plain.json").write_bytes(data)  # the same text, not compressed: the same error
        with pytest.raises(ParseError) as plain:
            read_kineto(tmp_path / "plain.json")
        assert "invalid character" in e.message and (e.message, e.loc) == (plain.value.message, plain.value.loc), e.format()
    else:
        assert "gzip" in e.message, e.format()


@pytest.mark.parametrize("space", [b"\x0b", b"\x0c", b"\xc2\xa0"], ids=["vertical tab", "form feed", "no-break space"])
@pytest.mark.parametrize("chunk", [300, 1 << 16, kineto.CHUNK])
def test_whitespace_json_does_not_allow_between_events_is_an_error(tmp_path, space, chunk):
    """A character a regex takes for whitespace but JSON does not, between two events: the same
    error at its place however the text is cut into pieces (a cut once let it through)."""
    doc = _big_trace(3000)
    at = doc.index(b"}, {", len(doc) // 3) + 2
    (tmp_path / "t.json").write_bytes(doc[:at] + space + doc[at:])
    with pytest.raises(ParseError) as e:
        read_kineto(tmp_path / "t.json", chunk=chunk)
    assert e.value.loc == (1, at + 1) and "invalid character" in e.value.message, e.value.format()


@pytest.mark.parametrize("shape", ["a list of 400,000 objects", "a list of 1,000,000 numbers", "a 6 MB name", "6 MB of whitespace"])
def test_a_long_event_is_decoded_a_few_times(tmp_path, decoded, shape):
    """A stretch with no event end in it is not tried again until twice as much has arrived."""
    doc = _big_trace(2000)
    at = doc.index(b'"args": {', len(doc) // 2) + len(b'"args": {')
    insert = {"a list of 400,000 objects": b'"x": [' + b", ".join([b'{"a": 1}'] * 400_000) + b"], ",
              "a list of 1,000,000 numbers": b'"x": [' + b", ".join([b"-1.25e-3"] * 1_000_000) + b"], ",
              "a 6 MB name": b'"x": "' + b"}, {" * (2 << 20) + b'", ',
              "6 MB of whitespace": b" " * (6 << 20)}[shape]
    (tmp_path / "t.json").write_bytes(doc[:at] + insert + doc[at:])
    t = read_kineto(tmp_path / "t.json")
    assert len(t.kernels) == 2000
    assert decoded[0] <= 5 * (len(doc) + len(insert)), (decoded[0], len(doc) + len(insert))


# -- errors at their place in big files ------------------------------------------------------------


def test_errors_located_after_a_100kb_name_and_at_the_end_of_10mb(tmp_path):
    """The byte, line and column of an error, on one long line after a 100 KB kernel name, and
    on the last line of a 10 MB indented trace."""
    doc = _big_trace(100, lambda i: "k" * 100_000 if i == 50 else f"k{i}")
    at = doc.index(b'"ts": ', doc.index(b"k" * 100_000)) + len(b'"ts": ')
    (tmp_path / "long.json").write_bytes(doc[:at] + b"@" + doc[at + 1 :])
    with pytest.raises(ParseError) as e:
        read_kineto(tmp_path / "long.json")
    assert e.value.loc == (1, at + 1)
    _, quoted, caret = e.value.format().split("\n")
    assert quoted[caret.index("^")] == "@"

    doc = json.dumps(json.loads(_big_trace(46_000)), indent=1).encode()
    assert len(doc) > 10_000_000
    at = doc.rindex(b'"ts": ') + len(b'"ts": ')
    bad = doc[:at] + b"#" + doc[at + 1 :]
    (tmp_path / "big.json").write_bytes(bad)
    with pytest.raises(ParseError) as e:
        read_kineto(tmp_path / "big.json")
    line = doc.count(b"\n", 0, at) + 1
    column = at - doc.rfind(b"\n", 0, at)
    assert e.value.loc == (line, column) and "invalid character" in e.value.message
    assert e.value.format().split("\n")[1:] == [bad.split(b"\n")[line - 1].decode(), " " * (column - 1) + "^"]


def test_a_wrong_type_names_its_event_and_field(tmp_path):
    """A field with a space in its name (``External id``) is located at its value."""
    doc = _big_trace(3000)
    at = doc.index(b'"correlation": 2500') + len(b'"correlation": ')
    (tmp_path / "t.json").write_bytes(doc[:at] + b"[2500]" + doc[at + 4 :])
    with pytest.raises(ParseError) as e:
        read_kineto(tmp_path / "t.json")
    assert "`$.traceEvents[2500].args.correlation`" in e.value.message and e.value.loc == (1, at + 1)
    events = _kernels(3)
    events[2]["args"]["External id"] = {"x": 1}
    (tmp_path / "e.json").write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(ParseError) as e:
        read_kineto(tmp_path / "e.json")
    text = (tmp_path / "e.json").read_bytes()
    assert "`$.traceEvents[2].args.External id`" in e.value.message
    assert e.value.loc == (1, text.index(b'"External id": ') + len(b'"External id": ') + 1)


# -- gzip bombs and stretches too long to hold -----------------------------------------------------


def _members(head: bytes, unit: bytes, total: int, tail: bytes = b"") -> bytes:
    """``head``, ``unit`` repeated to ``total`` bytes, ``tail``: concatenated gzip members, the
    repeated one compressed once (a 1 GB bomb in about 1 MB)."""
    block = gzip.compress(unit * ((16 << 20) // len(unit)), 9)
    return gzip.compress(head) + block * (total // (16 << 20)) + gzip.compress(tail)


def test_gzip_bomb_of_events_stops_at_the_decompression_limit():
    """1.3 MB of gzip that inflates to 512 MB of events: the default limit, max(256 MiB, 100 x
    the file), stops it with the error that says so."""
    event = json.dumps({"ph": "i", "cat": "cpu_instant_event", "name": "x" * 1000, "ts": 1.0}).encode() + b","
    data = _members(b'{"traceEvents": [', event, 512 << 20, b"{}]}")
    assert len(data) < 2 << 20
    rc, err = check_cli(data, "bomb.json.gz")
    assert rc == 1 and "gzip data inflates past 256.0 MB" in err


@pytest.mark.parametrize("what", ["whitespace", "an unclosed [{},", "one event"])
def test_gzip_bombs_of_what_no_trace_holds_stop_early(what):
    """1 GB of spaces, of ``[{},`` or inside one event: an error long before the limit."""
    head, unit, message = {"whitespace": (b'{"traceEvents": [', b" ", "of whitespace where an event should begin"),
                           # the first event is an array: its type is the first error, before its depth
                           "an unclosed [{},": (b"[", b"[{},", "1:2: error: unexpected event field: Expected `object`, got `array`"),
                           "one event": (b'[{"name": "', b"k", "not followed by ',' or ']' within 64.0 MB")}[what]
    rc, err = check_cli(_members(head, unit, 1 << 30), "bomb.json.gz")
    assert rc == 1 and message in err


def test_an_event_larger_than_the_bound_is_a_located_error(seeds):
    """An event larger than MAX_EVENT (a kernel's name) is refused at the event's first byte."""
    doc = seeds[0]
    start = doc.index(b'{"ph":"X","cat":"kernel"')
    name = doc.index(b'"name":"', start) + len(b'"name":"')
    data = gzip.compress(doc[:name], 1) + gzip.compress(b"k" * (MAX_EVENT + (1 << 20)), 1) + gzip.compress(doc[name:], 1)
    rc, err = check_cli(data, "t.json.gz")
    first = err.splitlines()[0]
    assert rc == 1 and first.endswith(f"t.json.gz:1:{start + 1}: error: the event that begins here is not followed by "
                                      "',' or ']' within 64.0 MB (a profiler event is a few KB: a broken trace?)"), first
