"""Finding and reading dump files: ``NNN_<stage>_<transform>.txt`` in an AD_DUMP_GRAPHS_DIR,
or one file in either syntax (AutoDeploy dump or torch.fx print)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from layerc.grammar import inputs
from layerc.grammar.inputs import decode  # noqa: F401  (re-exported: readers of dump text use it)
from layerc.ir.diagnostics import LayercError, Location, ParseError
from layerc.ir.graph import Module

#: AutoDeploy's ``Stages`` enum, in pipeline order (transform/interface.py). Stage values
#: contain ``_``, so a file name is only split with this list.
STAGES = (
    "factory", "export", "post_export", "pattern_matcher", "sharding", "weight_load",
    "post_load_fusion", "visualize", "cache_init", "compile",
)
_NAME = re.compile(r"^(\d+)_(" + "|".join(sorted(STAGES, key=len, reverse=True)) + r")_(.+)\.txt$")


@dataclass(frozen=True)
class DumpName:
    counter: int
    stage: str
    transform: str


def parse_dump_name(filename: str) -> DumpName | None:
    m = _NAME.match(filename)
    return DumpName(int(m.group(1)), m.group(2), m.group(3)) if m else None


def dump_files(directory: Path) -> list[tuple[DumpName, Path]]:
    """The dump files of a directory in pipeline order."""
    found = []
    for p in directory.iterdir():
        name = parse_dump_name(p.name)
        if name is not None and p.is_file():
            found.append((name, p))
    found.sort(key=lambda item: item[0].counter)
    return found


def resolve_dump(path: str | Path, file: str | None = None) -> Path:
    """The file to read: ``path`` itself, or in a dump directory the file named by ``file``
    (a name or a counter such as ``42``), by default the last transform's (highest counter)."""
    path = inputs.check_file(path, directory=True)
    if path.is_file():
        if file is not None:
            raise LayercError("--file applies to a dump directory, not to a file", str(path))
        return path
    files = dump_files(path)
    if not files:
        raise LayercError(f"no dump files (NNN_<stage>_<transform>.txt) in directory {path}", str(path))
    if file is None:
        return files[-1][1]
    for name, p in files:
        if p.name == file or (file.isdigit() and name.counter == int(file)):
            return p
    raise LayercError(f"no dump file '{file}' in {path} (there are {len(files)}, {files[0][1].name} to {files[-1][1].name})", str(path))


def read_text(path: Path) -> str:
    return inputs.read_text(path)


def parse_and_verify(text: str, path: str | None = None, syntax: str = "auto") -> Module:
    """Parse, then verify; every failure is a LayercError that carries a location when it has one."""
    module = parse_text(text, path, syntax)
    try:
        module.verify()
    except LayercError as e:
        raise e.with_source(path, text) from None
    return module


def detect_syntax(text: str) -> str:
    """``fx`` for torch.fx's print (``graph(...):``), else ``ad``."""
    return "fx" if text.lstrip("\n").startswith("graph(") else "ad"


def parse_text(text: str, path: str | None = None, syntax: str = "auto") -> Module:
    if syntax == "auto":
        syntax = detect_syntax(text)
    if syntax == "fx":
        from layerc.grammar.fx import parse_fx

        return parse_fx(text, path)
    from layerc.grammar.autodeploy import parse_autodeploy

    return parse_autodeploy(text, path)


def load(path: str | Path, file: str | None = None, syntax: str = "auto", verify: bool = True) -> Module:
    """Read a dump file or directory into a verified Module."""
    target = resolve_dump(path, file)
    text = read_text(target)
    if not text.strip():
        raise ParseError("empty input", str(target), Location(1, 1))
    module = parse_and_verify(text, str(target), syntax) if verify else parse_text(text, str(target), syntax)
    name = parse_dump_name(target.name)
    if name is not None:
        module.counter = name.counter
    return module
