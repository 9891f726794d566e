"""Python source of a model package, by dotted module name, from a directory, one ``.py``
file inside its package, or a wheel (read as a zip, never installed).

Modules are read and parsed (``ast``) on first use only: a model touches a few dozen modules
of a package that has thousands. A file that is not valid Python is a ``LayercError`` at its
line and column.
"""

from __future__ import annotations

import ast
import os
import re
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from layerc.ir.diagnostics import LayercError, Location, ParseError, source_line_at


@dataclass
class SourceModule:
    """One module: its dotted name, where it is shown from (``pkg/sub/mod.py``), its text and tree."""

    name: str
    path: str  #: display path, relative to the source root
    text: str
    is_package: bool
    real_path: str | None = None  #: the file on disk, when there is one

    @cached_property
    def tree(self) -> ast.Module:
        try:
            return ast.parse(self.text, filename=self.path)
        except SyntaxError as e:
            loc = Location(e.lineno or 1, e.offset or 1)
            raise ParseError(f"invalid Python: {e.msg}", self.real_path or self.path, loc,
                             source_line_at(self.text, loc.line)) from None

    @property
    def package(self) -> str:
        """The package relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


class SourceSet:
    """The modules below one root (see the module docstring). ``entry_module`` is the module a
    file argument names (None for a directory or a wheel)."""

    def __init__(self, path: str | os.PathLike):
        p = Path(path)
        self.label = str(path)
        self.entry_module: str | None = None
        self._zip: zipfile.ZipFile | None = None
        self._cache: dict[str, SourceModule | None] = {}
        self._top: tuple[str, ...] = ()
        if not p.exists():
            raise LayercError(f"no such file or directory: {path}")
        if p.is_file() and p.suffix in (".whl", ".zip"):
            try:
                self._zip = zipfile.ZipFile(p)
            except zipfile.BadZipFile:
                raise LayercError(f"{path}: not a wheel or zip archive") from None
            self._members = {n for n in self._zip.namelist() if n.endswith(".py")}
            self.root = p
        elif p.is_file():
            if p.suffix != ".py":
                raise LayercError(f"{path}: expected a Python file, a package directory or a wheel")
            root = p.parent
            while (root / "__init__.py").is_file():
                root = root.parent
            self.root = root
            rel = p.resolve().relative_to(root.resolve()).with_suffix("")
            self.entry_module = ".".join(rel.parts)
        else:
            root = p
            while (root / "__init__.py").is_file():
                root = root.parent
            self.root = root
            self._top = p.resolve().relative_to(root.resolve()).parts  # the package asked for
        self._root_real = self.root.resolve() if self._zip is None else None

    # -- lookup ---------------------------------------------------------------------------

    def module(self, name: str) -> SourceModule | None:
        """The module ``name`` (``pkg.sub.mod``), or None when the root has no such module."""
        if name in self._cache:
            return self._cache[name]
        found = None
        rel = name.replace(".", "/")
        for candidate, is_pkg in ((f"{rel}.py", False), (f"{rel}/__init__.py", True)):
            text = self._read(candidate)
            if text is not None:
                real = str(self._root_real / candidate) if self._root_real else None
                found = SourceModule(name, candidate, text, is_pkg, real)
                break
        self._cache[name] = found
        return found

    def _read(self, rel: str) -> str | None:
        if self._zip is not None:
            if rel not in self._members:
                return None
            return self._zip.read(rel).decode("utf-8", errors="replace")
        f = self._root_real / rel
        if not f.is_file():
            return None
        return f.read_text(encoding="utf-8", errors="replace")

    def package_modules(self, top: str) -> list[str]:
        """Every module name below the top-level package ``top`` (for class searches)."""
        if self._zip is not None:
            rels = sorted(m for m in self._members if m.startswith(top + "/") or m == f"{top}.py")
        else:
            base = self._root_real / top
            rels = []
            if (self._root_real / f"{top}.py").is_file():
                rels.append(f"{top}.py")
            for dirpath, dirnames, filenames in os.walk(base):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
                rel_dir = Path(dirpath).relative_to(self._root_real)
                rels += [str(rel_dir / f) for f in sorted(filenames) if f.endswith(".py")]
        names = []
        for rel in rels:
            parts = rel[:-3].split("/")
            if parts[-1] == "__init__":
                parts.pop()
            names.append(".".join(parts))
        return names

    def top_packages(self) -> list[str]:
        """The packages a directory or wheel argument stands for."""
        if self.entry_module:
            return [self.entry_module.split(".")[0]]
        if self._zip is not None:
            tops = {m.split("/")[0] for m in self._members if "/" in m}
            return sorted(t for t in tops if f"{t}/__init__.py" in self._members)
        if self._top:
            return [self._top[0]]
        return sorted(d.name for d in self._root_real.iterdir() if (d / "__init__.py").is_file())

    def find_classes(self, name: str, within: list[str]) -> list[str]:
        """Modules below the packages ``within`` whose text defines ``class name`` (a text scan
        first, so only candidates are parsed)."""
        rx = re.compile(rf"^\s*class\s+{re.escape(name)}\b", re.M)
        hits = []
        for top in within:
            for mod in self.package_modules(top):
                src = self.module(mod)
                if src is not None and rx.search(src.text):
                    hits.append(mod)
        return hits

    def link(self, mod: SourceModule | str, out_dir: str | None, prefix: str | None) -> str:
        """How the report links to a file: ``prefix`` + the display path when given, else the
        real file relative to the report's directory, else the display path."""
        path = mod.path if isinstance(mod, SourceModule) else mod
        if prefix is not None:
            return prefix + path
        if self._root_real is not None and out_dir is not None:
            return os.path.relpath(self._root_real / path, out_dir)
        return path

    def real_file(self, display_path: str) -> str | None:
        """The file on disk behind a display path (None inside a wheel)."""
        return str(self._root_real / display_path) if self._root_real is not None else None


def first_line(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
    """The line CPython reports as the function's first (``co_firstlineno``): its first decorator."""
    return min([node.lineno] + [d.lineno for d in node.decorator_list])
