"""A report's tables as plain text, for a file or a pipe: the part of rich's API the reports use
(a console that prints lines and tables; a table with a title, columns justified left or right,
rows and a caption), without importing rich, a tenth of a small trace's whole run. A terminal
gets rich's tables.

A table is its title, a header line, one line per row and its caption, the columns two spaces
apart and as wide as their widest cell; the reports' own markup (``[bold]``, ``[red]``) is left
out."""

from __future__ import annotations

import re
import sys
from typing import IO, Any

#: the markup the reports write (a kernel's name or a path may hold other brackets: kept)
_MARKUP = re.compile(r"\[/?(?:bold|red)?\]")


def plain(text: Any) -> str:
    return _MARKUP.sub("", str(text))


class Table:
    def __init__(self, title: str | None = None, title_justify: str = "left"):
        self.title = title
        self.caption: str | None = None
        self.caption_justify = "left"
        self.headers: list[str] = []
        self.right: list[bool] = []
        self.rows: list[list[str]] = []

    def add_column(self, header: str, justify: str = "left") -> None:
        self.headers.append(plain(header))
        self.right.append(justify == "right")

    def add_row(self, *cells: Any) -> None:
        self.rows.append([plain(c) for c in cells])

    def lines(self) -> list[str]:
        body = [self.headers, *self.rows]
        width = [max(len(r[j]) for r in body if j < len(r)) for j in range(len(self.headers))]
        out = [plain(self.title)] if self.title else []
        for r in body:
            cells = [c.rjust(w) if right else c.ljust(w) for c, w, right in zip(r, width, self.right)]
            out.append("  ".join(cells).rstrip())
        if self.caption:
            out.append(plain(self.caption))
        return [*out, ""]


class Console:
    """Prints text and ``Table``\\ s on ``file`` (default: stdout)."""

    def __init__(self, file: IO[str] | None = None):
        self.file = file

    def print(self, thing: Any = "") -> None:
        out = self.file or sys.stdout
        out.write("\n".join(thing.lines() if isinstance(thing, Table) else [plain(thing)]) + "\n")
