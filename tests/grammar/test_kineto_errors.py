"""The Kineto reader on broken text: the first syntax error at its byte, in linear time, and no
unbounded buffer when no event boundary comes."""

from __future__ import annotations

import json

import msgspec
import pytest

from layerc.grammar import kineto
from layerc.ir.diagnostics import ParseError
from layerc.backends.synth.kineto import generate


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("k") / "t.json"
    generate(path, model="deepseek_v3", layers=16, prefill=1, decode=6, seed=1)
    data = path.read_bytes()
    assert len(data) > 1 << 20  # several pieces
    return data


class _Counting:
    """The reader's event decoder, counting the bytes it is given."""

    def __init__(self, inner):
        self.inner, self.bytes = inner, 0

    def decode(self, data):
        self.bytes += len(data)
        return self.inner.decode(data)


def _read_counting(path, monkeypatch) -> tuple[_Counting, Exception | None]:
    counter = _Counting(kineto._events)
    monkeypatch.setattr(kineto, "_events", counter)
    try:
        kineto.read_kineto(path)
        return counter, None
    except ParseError as e:
        return counter, e


@pytest.mark.parametrize("where", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("bad", [b"\x01", b"\xff"])
def test_one_bad_byte_is_found_at_its_place_in_linear_work(text, tmp_path, monkeypatch, where, bad):
    # a byte inside a kernel event's name, a place where any of these breaks the JSON
    at = text.index(b'"name":"', int(len(text) * where)) + len(b'"name":"') + 2
    broken = text[:at] + bad + text[at + 1:]
    path = tmp_path / "broken.json"
    path.write_bytes(broken)
    counter, error = _read_counting(path, monkeypatch)
    assert error is not None
    assert error.loc is not None
    line_start = broken.rfind(b"\n", 0, at) + 1
    assert (error.loc.line, error.loc.column) == (broken.count(b"\n", 0, at) + 1, at - line_start + 1 + (bad == b'"'))
    # each byte is decoded a bounded number of times, however far the error is: no rescans
    assert counter.bytes <= 3 * len(text), counter.bytes


def test_a_valid_trace_is_decoded_about_once(text, tmp_path, monkeypatch):
    path = tmp_path / "ok.json"
    path.write_bytes(text)
    counter, error = _read_counting(path, monkeypatch)
    assert error is None and counter.bytes <= 2 * len(text)


def test_no_event_boundary_for_long_is_an_error_not_a_growing_buffer(tmp_path, monkeypatch):
    monkeypatch.setattr(kineto, "MAX_EVENT", 4 << 20)
    path = tmp_path / "blank.json"
    path.write_bytes(b'{"traceEvents": [' + b" " * (16 << 20) + b"]}")
    with pytest.raises(ParseError, match="between (two )?events"):
        kineto.read_kineto(path)


def test_a_kernel_name_holding_separators_still_splits_right(tmp_path):
    """Split candidates inside strings fail and are never retried; the events come out whole."""
    name = 'k<"}, {">' + "}, {" * 20_000
    events = [{"ph": "X", "cat": "kernel", "name": name if i % 50 == 0 else f"k{i}", "pid": 0, "tid": 7,
               "ts": i * 10.0, "dur": 5.0, "args": {"device": 0, "stream": 7, "correlation": i}} for i in range(3000)]
    path = tmp_path / "names.json"
    path.write_bytes(msgspec.json.encode({"traceEvents": events}))
    trace = kineto.read_kineto(path)
    assert len(trace.kernels) == 3000
    assert trace.strings[int(trace.kernels.name[50])] == name
    json.loads(path.read_bytes())  # (the file is valid JSON)
