"""Errors that carry a place in an input file, printed the way compilers print them.

``file:line:col: error: message``, then the source line and a caret under the column
(GNU and rustc convention; lines and columns count from 1).
"""

from __future__ import annotations

from typing import NamedTuple


class Location(NamedTuple):
    """A 1-based line and column. (A NamedTuple: the parser makes one per line, cheaply.)"""

    line: int
    column: int = 1


class LayercError(Exception):
    """Every error layerc reports to a user; the driver prints it and exits 1."""

    def __init__(
        self,
        message: str,
        path: str | None = None,
        loc: Location | None = None,
        source_line: str | None = None,
        severity: str = "error",
        source_from: int = 1,
    ):
        super().__init__(message)
        self.message = message
        self.path = path
        self.loc = loc
        self.source_line = source_line
        self.severity = severity
        #: the column of the line where ``source_line`` starts: a reader that cannot hold a whole
        #: line (a one-line 1 GB JSON trace) quotes a window of it
        self.source_from = source_from

    def with_source(self, path: str | None, text: str | None) -> "LayercError":
        """Fill in the file name and the quoted line, when the raiser did not know them."""
        if self.path is None:
            self.path = path
        if self.source_line is None and text is not None and self.loc is not None:
            self.source_line = source_line_at(text, self.loc.line)
        return self

    def format(self) -> str:
        where = self.path or "layerc"
        if self.loc is not None:
            where = f"{where}:{self.loc.line}:{self.loc.column}"
        out = f"{where}: {self.severity}: {self.message}"
        if self.source_line is not None and self.loc is not None:
            line = self.source_line
            col = max(self.loc.column, 1)
            if self.source_from > 1:  # a window that starts inside the line
                line, col = "..." + line, col - self.source_from + 4
            # Long lines (256-expert weight lists) are cut around the column.
            if len(line) > 200:
                start = max(0, col - 100)
                line = ("..." if start else "") + line[start : start + 200] + "..."
                col = col - start + (3 if start else 0)
            caret = "".join("\t" if ch == "\t" else " " for ch in line[: col - 1]) + "^"
            out += f"\n{line}\n{caret}"
        return out

    def __str__(self) -> str:
        return self.format()


class ParseError(LayercError):
    """Malformed input text."""


class VerifyError(LayercError):
    """IR that breaks an invariant (after parsing or after a pass)."""


def source_line_at(text: str, line: int) -> str | None:
    """The 1-based ``line`` of ``text`` without its newline, or None past the end."""
    if line < 1:
        return None
    start = 0
    for _ in range(line - 1):
        start = text.find("\n", start) + 1
        if start == 0:
            return None
    end = text.find("\n", start)
    return text[start : end if end >= 0 else len(text)]
