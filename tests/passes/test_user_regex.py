"""Regexes users write, wherever they write them (a kernel-table entry, a tag-weights pattern):
Python's warnings about them never reach the screen, and one that cannot compile is an error
that names where it came from."""

from __future__ import annotations

import json

import pytest

from layerc.ir.diagnostics import LayercError
from layerc.passes.user_regex import compile_user_regex
from tests.layerc_cli import run_layerc

#: compile, but Python warns ("possible nested set", "possible set difference")
WARNED = ["[[:alpha:]]+", "[[a]", "[a&&b]", "x[[]", "[a||b]", "[a~~b]"]
#: do not compile, each for another reason
BROKEN = {"[a--b]x": "not a regular expression", "(" * 2000 + "a" + ")" * 2000: "nest too deep",
          "a{99999999999}": "does not compile", "(?P<x": "not a regular expression"}


@pytest.mark.parametrize("text", WARNED)
def test_warned_patterns_compile_silently(text, recwarn):
    compile_user_regex(text)
    assert not recwarn.list


@pytest.mark.parametrize("text,why", list(BROKEN.items()), ids=["set", "nesting", "repetition", "group"])
def test_broken_patterns_say_why(text, why):
    with pytest.raises(LayercError) as e:
        compile_user_regex(text)
    assert why in e.value.message


def _table(tmp_path, match: str):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "mine.toml").write_text(f'family = "mine"\norder = 1\n\n[[kernel]]\nmatch = {json.dumps(match)}\nshort = "k"\n')
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k1", "ts": 1, "dur": 2, "pid": 0, "tid": 7,
                                                  "args": {"stream": 7, "correlation": 1}}]}))
    return tables, trace


@pytest.mark.parametrize("match", WARNED + list(BROKEN))
def test_kernel_tables_of_any_regex_answer_without_python_warnings(tmp_path, match):
    tables, trace = _table(tmp_path, match)
    rc, _, err = run_layerc("trace", trace, "--kernel-tables", tables)
    assert "Warning" not in err and "internal error" not in err, err
    if match in BROKEN:
        assert rc == 1 and err.startswith(f"{tables / 'mine.toml'}: error: bad kernel table entry 1 "), err
        assert BROKEN[match] in err
    else:
        assert rc == 0, err
