"""Python source of a model package, by dotted module name, from a directory, one ``.py``
file inside its package, or a wheel (read as a zip, never installed).

Modules are read and parsed (``ast``) on first use only: a model touches a few dozen modules
of a package that has thousands. A module that cannot be read as Python (a syntax error, a byte
its encoding does not decode, nesting deeper than ``MAX_NESTING``, a special file, a link out of
the package) keeps a located ``ParseError`` that its ``tree`` raises: the resolver skips such a
module with a warning, the entry module is the user's error.

Hostile inputs stay bounded: a wheel's members inflate within the decompression limit of
``layerc.grammar.inputs`` (counted as read, not trusted from the archive's directory), a damaged
member is an error that names the archive and the member, and a module is read only where its
path is a chain of identifiers that stays inside its package.
"""

from __future__ import annotations

import ast
import io
import lzma
import os
import re
import tokenize
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from layerc.grammar import inputs
from layerc.ir.diagnostics import LayercError, Location, ParseError, source_line_at

#: The deepest a module's syntax tree may nest (statements and expressions together). Real model
#: code stays under 40 (sglang, transformers); every walk over a tree recurses along its depth.
MAX_NESTING = 100

_READ_PIECE = 1 << 16  #: bytes inflated from a wheel member at a time


@dataclass(eq=False)
class SourceModule:
    """One module: its dotted name, where it is shown from (``pkg/sub/mod.py``), its text and tree."""

    name: str
    path: str  #: display path, relative to the source root
    text: str
    is_package: bool
    real_path: str | None = None  #: the file on disk, when there is one
    error: ParseError | None = None  #: why the module cannot be read as Python (``tree`` raises it)
    _tree: ast.Module | None = field(default=None, init=False, repr=False)

    @property
    def where(self) -> str:
        """The path errors name: the file on disk, else the display path."""
        return self.real_path or self.path

    @property
    def tree(self) -> ast.Module:
        """The module's syntax tree; a ``ParseError`` at the offending place when there is none."""
        if self._tree is None and self.error is None:
            try:
                self._tree = parse_module(self.text, self.where)
            except ParseError as e:
                self.error = e
        if self.error is not None:
            raise self.error.with_traceback(None)
        assert self._tree is not None  # parsed above, or the error raised
        return self._tree

    @property
    def package(self) -> str:
        """The package relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


# -- parsing --------------------------------------------------------------------------------

def parse_module(text: str, path: str) -> ast.Module:
    """``ast.parse`` with every way it fails as a located ``ParseError``; a tree that nests deeper
    than ``MAX_NESTING`` is one too."""
    try:
        tree = _parse(text, path)
    except (SyntaxError, ValueError) as e:
        if "\0" in text:  # the parser refuses NUL bytes before reading, and says not where
            loc = _location_of(text, text.find("\0"))
            message = "a NUL byte"
        else:
            loc = Location(max(getattr(e, "lineno", None) or 1, 1), max(getattr(e, "offset", None) or 1, 1))
            message = getattr(e, "msg", str(e))
        raise ParseError(f"invalid Python: {message}", path, loc, source_line_at(text, loc.line)) from None
    except (RecursionError, MemoryError):  # the parser's own stack: nesting, not the file's length
        line = _first_line_the_parser_gives_up_at(text, path)
        raise ParseError(f"nesting deeper than {MAX_NESTING}", path, Location(line, 1),
                         source_line_at(text, line)) from None
    check_nesting(tree, text, path)
    return tree


def parse_expression(text: str) -> ast.expr | None:
    """A Python expression written in a string (a quoted annotation), or None when it is not one
    or nests deeper than ``MAX_NESTING``."""
    try:
        tree = _parse(text, "<annotation>", mode="eval")
        check_nesting(tree, text, "<annotation>")
    except (SyntaxError, ValueError, RecursionError, MemoryError, ParseError):
        return None
    return tree.body


def _parse(text: str, path: str, mode: str = "exec"):
    with warnings.catch_warnings():  # invalid escapes and the like: not ours to report
        warnings.simplefilter("ignore")
        return ast.parse(text, filename=path, mode=mode)


def check_nesting(tree: ast.AST, text: str, path: str) -> None:
    """A ``ParseError`` at the first node (in source order) deeper than ``MAX_NESTING``. Iterative:
    this is what makes every recursive walk over the tree afterwards safe."""
    stack: list[tuple[ast.AST, int, ast.AST]] = [(tree, 1, tree)]
    while stack:
        node, depth, located = stack.pop()
        if hasattr(node, "lineno"):
            located = node
        if depth > MAX_NESTING:
            line = getattr(located, "lineno", 1)
            raise ParseError(f"nesting deeper than {MAX_NESTING}", path,
                             Location(line, getattr(located, "col_offset", 0) + 1), source_line_at(text, line))
        children = list(ast.iter_child_nodes(node))
        stack.extend((c, depth + 1, located) for c in reversed(children))


def _first_line_the_parser_gives_up_at(text: str, path: str) -> int:
    """The line where nesting outgrows the parser (which does not say): the shortest prefix of
    whole lines that it cannot parse for depth, found by bisection."""
    lines = text.split("\n")
    lo, hi = 1, len(lines)
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            _parse("\n".join(lines[:mid]), path)
            gives_up = False
        except (RecursionError, MemoryError):
            gives_up = True
        except (SyntaxError, ValueError):  # a prefix that stops inside a statement
            gives_up = False
        if gives_up:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _location_of(text: str, index: int) -> Location:
    before = text[: max(index, 0)]
    return Location(before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1)


def decode_source(data: bytes | bytearray, path: str) -> str:
    """Python source text in the encoding its BOM or coding line names (PEP 263; UTF-8 without
    one); a byte that does not decode is an error at its line and column."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        text = inputs.decode(data, path)  # a bad byte in the first two lines: located there
        line = 2 if "coding" not in text.split("\n", 1)[0] else 1
        raise ParseError(f"invalid Python: {e.msg}", path, Location(line, 1), source_line_at(text, line)) from None
    if encoding in ("utf-8", "utf-8-sig"):
        return inputs.decode(data[3:] if data[:3] == b"\xef\xbb\xbf" else data, path)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        text = data.decode(encoding, errors="replace")
        loc = _location_of(text, len(data[: e.start].decode(encoding, errors="replace")))
        raise ParseError(f"invalid {encoding} byte 0x{data[e.start]:02x}", path, loc,
                         source_line_at(text, loc.line)) from None
    except (UnicodeError, ValueError) as e:
        raise ParseError(f"cannot decode as {encoding}: {e}", path, Location(1, 1)) from None


def module_parts(rel: str) -> list[str] | None:
    """The dotted-name parts of a ``.py`` path (``pkg/sub/__init__.py`` → ``pkg, sub, __init__``),
    or None when the path is no module path: every part an identifier, nothing else (no ``..``,
    no absolute path, no ``-``), so no module name can reach outside its package."""
    if not rel.endswith(".py"):
        return None
    parts = rel[:-3].split("/")
    return parts if all(p.isidentifier() for p in parts) else None


# -- the modules under one root -----------------------------------------------------------------

class SourceSet:
    """The modules below one root (see the module docstring). ``entry_module`` is the module a
    file argument names (None for a directory or a wheel)."""

    def __init__(self, path: str | os.PathLike):
        p = inputs.check_file(path, directory=True)
        self.label = str(path)
        self.entry_module: str | None = None
        self._zip: zipfile.ZipFile | None = None
        self._cache: dict[str, SourceModule | None] = {}
        self._top: tuple[str, ...] = ()
        self._inflated = 0  #: bytes read out of the wheel so far
        p = Path(os.path.realpath(p))  # a link to the source reads the source, whose package is where it lies
        if p.is_file() and p.suffix != ".py":
            self._open_archive(p, str(path))
            self.root = p
        elif p.is_file():
            self.root = _package_root(p.parent)
            self.entry_module = ".".join(p.relative_to(self.root).with_suffix("").parts)
        else:
            self.root = _package_root(p)
            self._top = p.relative_to(self.root).parts  # the package asked for
        self._root_real = self.root if self._zip is None else None

    def _open_archive(self, p: Path, label: str) -> None:
        if p.suffix not in (".whl", ".zip") and not zipfile.is_zipfile(p):
            raise LayercError("expected a Python file, a package directory or a wheel (a zip archive)", label)
        try:
            self._zip = zipfile.ZipFile(p)
            names = self._zip.namelist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
            raise ParseError(f"not a readable wheel or zip archive: {e}", label) from None
        self._members = {n for n in names if module_parts(n) is not None}
        self._limit = inputs.limit_for(os.path.getsize(p))

    # -- lookup ---------------------------------------------------------------------------

    def module(self, name: str) -> SourceModule | None:
        """The module ``name`` (``pkg.sub.mod``), or None when the root has no such module."""
        if name in self._cache:
            return self._cache[name]
        found = None
        rel = name.replace(".", "/")
        if all(part.isidentifier() for part in name.split(".")):
            for candidate, is_pkg in ((f"{rel}.py", False), (f"{rel}/__init__.py", True)):
                found = self._load(name, candidate, is_pkg)
                if found is not None:
                    break
        self._cache[name] = found
        return found

    def _load(self, name: str, rel: str, is_pkg: bool) -> SourceModule | None:
        """The module in file ``rel``; None when there is no such file; one that keeps its read
        error when the file is there but cannot be read as Python text."""
        real: Path | None = None
        data: bytes | bytearray | None = None
        try:
            if self._zip is not None:
                data = self._read_member(rel)
            else:
                real = self._root_real / rel
                data = self._read_file(real, name.split(".")[0])
            if data is None:
                return None
            text = decode_source(data, str(real or rel))
        except ParseError as e:
            text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else ""
            return SourceModule(name, rel, text, is_pkg, str(real) if real else None, error=e)
        return SourceModule(name, rel, text, is_pkg, str(real) if real else None)

    def _read_file(self, f: Path, top: str) -> bytes | None:
        """A module file's bytes; None when absent. A special file or a link that leads out of the
        package ``top`` is a ParseError (the module is skipped), never read."""
        if not os.path.lexists(f):
            return None
        target = Path(os.path.realpath(f))
        if not self._inside_package(target, top):
            raise ParseError(f"a link out of the package (to {target}); not followed", str(f))
        if not target.exists():
            raise ParseError("a link that leads nowhere (dangling, or a loop)", str(f))
        try:
            checked = inputs.check_file(target, what="module file")
        except LayercError as e:
            raise ParseError(e.message, str(f)) from None
        try:
            return checked.read_bytes()
        except OSError as e:
            raise ParseError(f"cannot read: {e.strerror}", str(f)) from None

    def _inside_package(self, target: Path, top: str) -> bool:
        top_dir = self._root_real / top
        return target == self._root_real / f"{top}.py" or top_dir in target.parents

    def _read_member(self, rel: str) -> bytearray | None:
        """A member's bytes, inflated in pieces that count against the archive's decompression
        limit (the size the archive declares is checked first, and not trusted after). A member
        that does not inflate, or fails its CRC, is an error naming the archive and the member."""
        if rel not in self._members:
            return None
        assert self._zip is not None  # only an archive has _members
        info = self._zip.getinfo(rel)
        self._check_budget(rel, self._inflated + info.file_size, declared=True)
        data = bytearray()
        try:
            with self._zip.open(info) as f:
                while piece := f.read(_READ_PIECE):
                    data += piece
                    self._check_budget(rel, self._inflated + len(data))
        except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError, ValueError, NotImplementedError,
                RuntimeError) as e:  # RuntimeError: an encrypted member
            raise LayercError(f"member {rel} of the archive is damaged: {e}", self.label) from None
        self._inflated += len(data)
        return data

    def _check_budget(self, rel: str, total: int, declared: bool = False) -> None:
        if self._limit and total > self._limit:
            what = "declares more" if declared else "inflates past"
            raise LayercError(
                f"member {rel} {what} than the archive may inflate to ({inputs.human_size(self._limit)} in all): "
                "a decompression bomb, or a larger input than expected; raise the limit with --max-decompressed SIZE",
                self.label)

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
                dirnames[:] = sorted(d for d in dirnames if d.isidentifier() and d != "__pycache__")
                rel_dir = Path(dirpath).relative_to(self._root_real)
                rels += [(rel_dir / f).as_posix() for f in sorted(filenames) if f.endswith(".py")]
        names = []
        for rel in rels:
            parts = module_parts(rel)
            if parts is None:
                continue
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
        return sorted(d.name for d in self._root_real.iterdir()
                      if d.name.isidentifier() and (d / "__init__.py").is_file())

    def find_classes(self, name: str, within: list[str]) -> list[str]:
        """Modules below the packages ``within`` whose text defines ``class name`` (a text scan
        first, so only candidates are parsed)."""
        rx = re.compile(rf"^[ \t]*class[ \t]+{re.escape(name)}\b", re.M)
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


def _package_root(directory: Path) -> Path:
    """The directory that holds the outermost package around ``directory`` (itself when it is
    no package)."""
    root = directory
    while (root / "__init__.py").is_file() and root.parent != root:
        root = root.parent
    return root


def first_line(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
    """The line CPython reports as the function's first (``co_firstlineno``): its first decorator."""
    return min([node.lineno] + [d.lineno for d in node.decorator_list])
