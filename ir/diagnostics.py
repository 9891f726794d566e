"""Diagnostics: what layerc says about an input, with its place in the file, printed the way
compilers print them, one engine for every reader, pass and emitter.

``file:line:col: error: message``, then the source line and a caret under the column
(GNU and rustc convention; lines and columns count from 1), then any notes. A ``Diagnostic``
is the fact; ``LayercError`` raises one; the ``DiagnosticEngine`` prints them as text or JSON,
turns warnings into errors (``--werror``); ``expected_diagnostics`` checks expected-diagnostic
comments (``--verify-diagnostics``, as MLIR's ``-verify-diagnostics``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import IO, Any, NamedTuple



def clip(text: str, limit: int = 60) -> str:
    """``text`` as a message quotes it: a hostile input's megabyte-long name by its start."""
    return text if len(text) <= limit else text[:limit] + "..."

class Location(NamedTuple):
    """A 1-based line and column. (A NamedTuple: the parser makes one per line, cheaply.)"""

    line: int
    column: int = 1


SEVERITIES = ("error", "warning", "note", "remark")


@dataclass
class Diagnostic:
    """One thing layerc reports: severity, message, where (file, line and column, the quoted
    line), and notes that add to it."""

    severity: str
    message: str
    path: str | None = None
    loc: Location | None = None
    notes: list[Diagnostic] = field(default_factory=list)
    source_line: str | None = None
    #: the column of the line where ``source_line`` starts: a reader that cannot hold a whole
    #: line (a one-line 1 GB JSON trace) quotes a window of it
    source_from: int = 1

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
        return "\n".join([out, *(n.format() for n in self.notes)])

    def to_json(self) -> dict[str, Any]:
        return {"severity": self.severity, "message": self.message, "file": self.path,
                "line": self.loc.line if self.loc else None, "column": self.loc.column if self.loc else None,
                "source_line": self.source_line, "notes": [n.to_json() for n in self.notes]}


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
        self.source_from = source_from

    def with_source(self, path: str | None, text: str | None) -> "LayercError":
        """Fill in the file name and the quoted line, when the raiser did not know them."""
        if self.path is None:
            self.path = path
        if self.source_line is None and text is not None and self.loc is not None:
            self.source_line = source_line_at(text, self.loc.line)
        return self

    def diagnostic(self) -> Diagnostic:
        return Diagnostic(self.severity, self.message, self.path, self.loc, [], self.source_line, self.source_from)

    def format(self) -> str:
        return self.diagnostic().format()

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


class DiagnosticEngine:
    """Where diagnostics go: printed as they come (``text``) or gathered into one JSON document
    (``json``) written by ``finish``; with ``werror`` a warning is an error. ``errors`` counts
    what makes the exit status 1."""

    def __init__(self, stream: IO[str] | None = None, fmt: str = "text", werror: bool = False):
        self.stream = stream if stream is not None else sys.stderr
        self.fmt = fmt
        self.werror = werror
        self.seen: list[Diagnostic] = []

    def emit(self, d: Diagnostic) -> None:
        if self.werror and d.severity == "warning":
            d = Diagnostic("error", d.message + " [-Werror]", d.path, d.loc, d.notes, d.source_line, d.source_from)
        self.seen.append(d)
        if self.fmt == "text":
            self.stream.write(d.format() + "\n")

    @property
    def errors(self) -> int:
        return sum(d.severity == "error" for d in self.seen)

    def finish(self) -> None:
        if self.fmt == "json":
            import orjson

            self.stream.write(orjson.dumps({"diagnostics": [d.to_json() for d in self.seen]},
                                           option=orjson.OPT_INDENT_2).decode() + "\n")


def warn(args: Any, message: str, path: str | None = None) -> None:
    """A warning through the run's engine (``args.diagnostics``, which the driver sets), or
    printed as text where there is none (a caller that built its own arguments)."""
    d = Diagnostic("warning", message, str(path) if path is not None else None)
    engine = getattr(args, "diagnostics", None)
    if isinstance(engine, DiagnosticEngine):
        engine.emit(d)
    else:
        sys.stderr.write(d.format() + "\n")
