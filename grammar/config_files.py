"""Small configuration files (HF ``config.json``, hardware and preset TOML) read with their
positions, so a bad value is reported as ``file:line:col: error:`` at the value, with its line.

The stdlib parsers do the parsing (``json`` keeps line and column in its errors, ``tomllib``
in its message); a key's position is found in the text afterwards, only when a value is wrong.
"""

from __future__ import annotations

import json
import math
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerc.grammar import inputs
from layerc.ir.diagnostics import LayercError, Location, ParseError, source_line_at


@dataclass
class ConfigFile:
    """A parsed document and the text it came from (``path`` is what messages name)."""

    path: str
    text: str
    doc: dict[str, Any]

    def error(self, message: str, key: str | None = None, table: str | None = None) -> LayercError:
        """An error at ``key``'s value (inside ``[table]`` for TOML), else at the top of the file."""
        loc = key_location(self.text, key, table) if key else None
        loc = loc or Location(1, 1)
        return LayercError(message, self.path, loc, source_line_at(self.text, loc.line))


def finite_number(value) -> float | None:
    """A JSON or TOML number as a finite float; None for anything else (a bool, a string, NaN,
    Infinity, an integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def shown(value) -> str:
    """A config value as a message quotes it: short, whatever its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_json_config(path: str | Path) -> ConfigFile:
    text = _read(path)
    doc = parse_json(text, path)
    if not isinstance(doc, dict):
        raise ParseError("a config must be a JSON object ({...})", str(path), Location(1, 1), source_line_at(text, 1))
    return ConfigFile(str(path), text, doc)


def parse_json(text: str, path: str | Path) -> Any:
    """JSON text as Python values; every failure a located ParseError (a syntax error, nesting
    past the parser's depth, an integer past Python's digit limit)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(f"invalid JSON: {e.msg}", str(path), Location(e.lineno, e.colno),
                         source_line_at(text, e.lineno)) from None
    except RecursionError:
        raise _too_deep(path, text) from None
    except ValueError:  # json.JSONDecodeError is one, caught above: this is int()'s digit limit
        raise _too_long_number(path, text) from None


_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


def read_toml_config(path: str | Path, text: str | None = None) -> ConfigFile:
    text = _read(path) if text is None else text
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = _TOML_AT.search(str(e))
        loc = Location(int(m.group(1)), int(m.group(2))) if m else Location(1, 1)
        message = _TOML_AT.sub("", str(e)).strip()
        raise ParseError(f"invalid TOML: {message}", str(path), loc, source_line_at(text, loc.line)) from None
    except RecursionError:
        raise _too_deep(path, text) from None
    except ValueError:  # tomllib.TOMLDecodeError is one, caught above: this is int()'s digit limit
        raise _too_long_number(path, text) from None
    return ConfigFile(str(path), text, doc)


def _too_deep(path: str | Path, text: str) -> ParseError:
    """Arrays or tables nested past what the stdlib parser follows: no config nests like that."""
    return ParseError("the file nests arrays or objects deeper than the parser follows", str(path), Location(1, 1),
                      source_line_at(text, 1))


def _too_long_number(path: str | Path, text: str) -> ParseError:
    """An integer longer than Python converts (``sys.get_int_max_str_digits``), at its first digit."""
    m = re.search(rf"\d{{{sys.get_int_max_str_digits() + 1},}}", text)
    at = m.start() if m else 0
    line = text.count("\n", 0, at) + 1
    loc = Location(line, at - (text.rfind("\n", 0, at) + 1) + 1)
    return ParseError(f"a number of more than {sys.get_int_max_str_digits()} digits", str(path), loc,
                      source_line_at(text, line))


def _read(path: str | Path) -> str:
    """The file's text through the shared input checks (a directory, a FIFO, bad UTF-8: a
    located error; a compressed file inflates within the limit)."""
    return inputs.read_text(path)


def key_location(text: str, key: str, table: str | None = None) -> Location | None:
    """Where ``key``'s value starts: ``"key": value`` (JSON) or ``key = value`` (TOML, inside
    ``[table]`` when given). None when the text does not have it."""
    start = 0
    if table is not None:
        header = re.search(rf'^\s*\[\s*"?{re.escape(table)}"?\s*\]\s*$', text, re.M)
        if header is None:
            return None
        start = header.end()
    rx = re.compile(rf'(?:"{re.escape(key)}"\s*:|^\s*"?{re.escape(key)}"?\s*=)\s*', re.M)
    m = rx.search(text, start)
    if m is None:
        return None
    line = text.count("\n", 0, m.end()) + 1
    column = m.end() - (text.rfind("\n", 0, m.end()) + 1) + 1
    return Location(line, column)
