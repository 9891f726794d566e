"""Small configuration files (HF ``config.json``, hardware and preset TOML) read with their
positions, so a bad value is reported as ``file:line:col: error:`` at the value, with its line.

The stdlib parsers do the parsing (``json`` keeps line and column in its errors, ``tomllib``
in its message); a key's position is found in the text afterwards, only when a value is wrong.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def read_json_config(path: str | Path) -> ConfigFile:
    text = _read(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(f"invalid JSON: {e.msg}", str(path), Location(e.lineno, e.colno),
                         source_line_at(text, e.lineno)) from None
    if not isinstance(doc, dict):
        raise ParseError("a config must be a JSON object ({...})", str(path), Location(1, 1), source_line_at(text, 1))
    return ConfigFile(str(path), text, doc)


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
    return ConfigFile(str(path), text, doc)


def _read(path: str | Path) -> str:
    p = Path(path)
    if not p.is_file():
        raise LayercError(f"no such file: {p}", str(p))
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LayercError(f"cannot read {p}: {e}", str(p)) from None


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
