"""``layerc optrace`` on hostile sources: mutated copies of tests/optrace_pkg (flipped bytes, cut
modules, injected nesting and cycles, special files and links) and wheels (bombs, damaged and
truncated archives, members that climb out of the package).

Every run is a child process capped in memory (RLIMIT_AS) and time (its process group killed
past the limit). Whatever the input, the command exits 0, 1 or 2, never with an internal error;
an error's first line names the package or one of its modules (``file:line:col: error: ...``);
and no input changes by a byte.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import struct
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.conftest import TESTS
from layerc.grammar.pysource import MAX_NESTING, SourceSet
from layerc.passes.pipeline import run_passes
from layerc.passes import optrace, pyresolve
from layerc.passes.optrace_passes import CrossValidateKernels, OpTraceModule, TraceOps
from tests import capped

PKG = TESTS / "optrace_pkg" / "tinyllm"
ENTRY = "TinyForCausalLM"
MEMORY = 2 << 30  #: address space of a child run
TIMEOUT = 60  #: seconds a child run may take (a normal one takes half a second)
MODULES = sorted(p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py"))
ENTRY_MODULE = "models/tiny.py"


# -- running the command on an input ------------------------------------------------------------

def optrace_run(source: Path, *extra: str, entry: str = ENTRY) -> tuple[int, str]:
    """``layerc optrace SOURCE --entry ENTRY``: (exit status, stderr), the report written beside
    the source, in a capped child (tests/capped.py) that a hang or a bomb cannot outlive."""
    argv = ["optrace", source, "--entry", entry, "-o", source.parent / "report.md", *extra]
    done = capped.run(argv, memory=MEMORY, timeout=TIMEOUT, cwd=source.parent)
    return done.returncode, done.stderr


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry below ``root`` (or the file itself): links by their target, special files by
    their kind, regular files by their bytes."""
    if root.is_file() and not root.is_symlink():
        return {root.name: ("file", root.read_bytes())}
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p).encode())
            elif p.is_file():
                out[rel] = ("file", p.read_bytes())
            elif not p.is_dir():
                out[rel] = ("special", b"")
    return out


def check_outcome(rc: int, err: str, source: Path) -> None:
    """The contract for any input: a clean exit, and an error that names the source or a module."""
    assert rc in (0, 1, 2), f"exit {rc}: {err[-2000:]}"
    assert "internal error" not in err and "Traceback" not in err, err[-2000:]
    if rc == 1:
        first = err.splitlines()[0] if err else ""
        names = [re.escape(str(source)), re.escape(str(source.resolve())) + r"/[\w/]+\.py", r"[\w/]+\.py"]
        assert re.match(rf"^(?:{'|'.join(names)})(:\d+(:\d+)?)?: error: ", first), err[-2000:]


def run_checked(source: Path, *extra: str, entry: str = ENTRY, watch: tuple[Path, ...] = ()) -> tuple[int, str]:
    """``optrace_run`` with the contract checked, and the source (and ``watch``) unchanged after."""
    before = [snapshot(p) for p in (source, *watch)]
    rc, err = optrace_run(source, *extra, entry=entry)
    check_outcome(rc, err, source)
    assert [snapshot(p) for p in (source, *watch)] == before, "an input changed"
    return rc, err


def copy_package(where: Path) -> Path:
    shutil.copytree(PKG, where / "tinyllm", ignore=shutil.ignore_patterns("__pycache__"))
    return where / "tinyllm"


# -- what a mutation can inject -------------------------------------------------------------------

NESTINGS = {  # expressions nested ``k`` deep, each the way a parser recurses differently
    "parens": lambda k: "(" * k + "1" + ")" * k,
    "attribute": lambda k: "a" + ".b" * k,
    "call": lambda k: "f" + "()" * k,
    "unary": lambda k: "-" * k + "a",
    "not": lambda k: "not " * k + "a",
    "binop": lambda k: " + ".join(["a"] * (k + 1)),
    "ifexp": lambda k: "a if b else " * k + "c",
    "lambda": lambda k: "lambda: " * k + "0",
    "subscript": lambda k: "x" + "[0]" * k,
    "list": lambda k: "[" * k + "]" * k,
}


def nested_defs(k: int) -> str:
    return "".join(" " * i + f"def f{i}():\n" for i in range(k)) + " " * k + "pass\n"


def elif_chain(k: int) -> str:
    return "def g(x):\n    if x == 0:\n        return 0\n" + "".join(f"    elif x == {i}:\n        return {i}\n"
                                                              for i in range(1, k))


CYCLES = {  # appended to a module (``{mod}``: its dotted name)
    "inheritance": "\n\nclass CycA(CycB):\n    pass\n\n\nclass CycB(CycA):\n    pass\n\n\n"
                   "class CycSelf(CycSelf):\n    pass\n",
    "aliases": "\nalias_a = alias_b\nalias_b = alias_a\nalias_self = alias_self\n",
    "star import of itself": "\nfrom {mod} import *\n",
    "import of itself": "\nimport {mod} as me\nfrom {mod} import *\nme_again = me.me_again\n",
    "recursive calls": "\n\ndef ping(x):\n    return pong(x)\n\n\ndef pong(x):\n    return ping(ping(x))\n",
    "self attribute": "\n\nclass Loop:\n    def __init__(self):\n        self.a = self.b\n        self.b = self.a\n\n"
                      "    def forward(self, x):\n        return self.a(self.b(x))\n",
}


def dotted(rel: str) -> str:
    """The module name of a file of the package (``models/tiny.py`` → ``tinyllm.models.tiny``)."""
    parts = ["tinyllm", *rel[:-3].split("/")]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@st.composite
def mutations(draw):
    """One change to one module of the package: (kind, module, parameters)."""
    kind = draw(st.sampled_from(["flip", "truncate", "bytes", "nest", "defs", "elif", "cycle", "encoding", "special"]))
    module = draw(st.sampled_from(MODULES))
    if kind == "flip":
        return kind, module, draw(st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 7)),
                                           min_size=1, max_size=6))
    if kind == "truncate":
        return kind, module, draw(st.floats(0, 1))
    if kind == "bytes":
        return kind, module, (draw(st.floats(0, 1)), draw(st.sampled_from(
            [b"\xff", b"\xc3(", b"\x00", b"\xef\xbb\xbf", b"\xed\xa0\x80", b"\r", b"\t \x0c", b"'''", b"\\"])))
    if kind == "nest":
        return kind, module, (draw(st.sampled_from(sorted(NESTINGS))),
                              draw(st.sampled_from([MAX_NESTING - 10, MAX_NESTING + 1, 300, 3000, 100_000])),
                              draw(st.floats(0, 1)))
    if kind in ("defs", "elif"):
        return kind, module, draw(st.sampled_from([50, 99, 101, 1000]))
    if kind == "cycle":
        return kind, module, draw(st.sampled_from(sorted(CYCLES)))
    if kind == "encoding":
        return kind, module, draw(st.sampled_from(["latin-1", "utf-16", "no-such-codec", "ascii"]))
    return kind, module, draw(st.sampled_from(["fifo", "link out", "dangling link", "link loop", "directory"]))


def mutate(pkg: Path, mutation, outside: Path) -> None:
    kind, module, p = mutation
    path = pkg / module
    if not path.is_file() or path.is_symlink():
        return  # an earlier mutation made it something else
    data = bytearray(path.read_bytes())
    if kind == "flip" and data:
        for at, bit in p:
            data[int(at * len(data))] ^= 1 << bit
    elif kind == "truncate":
        data = data[: int(p * len(data))]
    elif kind == "bytes":
        at = int(p[0] * len(data))
        data[at:at] = p[1]
    elif kind == "nest":
        lines = data.split(b"\n")
        at = int(p[2] * len(lines))
        indent = re.match(rb"[ \t]*", lines[at]).group(0) if at < len(lines) else b""
        lines.insert(at, indent + b"deep = " + NESTINGS[p[0]](p[1]).encode())
        data = bytearray(b"\n".join(lines))
    elif kind == "defs":
        data += b"\n" + nested_defs(p).encode()
    elif kind == "elif":
        data += b"\n" + elif_chain(p).encode()
    elif kind == "cycle":
        data += CYCLES[p].format(mod=dotted(module)).encode()
    elif kind == "encoding":
        data[0:0] = f"# -*- coding: {p} -*-\n".encode()
    elif kind == "special":
        path.unlink()
        if p == "fifo":
            os.mkfifo(path)
        elif p == "link out":
            os.symlink(outside, path)
        elif p == "dangling link":
            os.symlink(path.parent / "no_such_file.py", path)
        elif p == "link loop":
            os.symlink(path.name, path)
        else:
            path.mkdir()
        return
    path.write_bytes(bytes(data))


def zip_package(pkg: Path, archive: Path, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(pkg.rglob("*")):
            if f.is_file() and not f.is_symlink():
                z.write(f, f.relative_to(pkg.parent).as_posix())
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return archive


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A file outside every package, that a link in one may point at (and that must stay unread)."""
    f = tmp_path_factory.mktemp("outside") / "secret.py"
    f.write_text("raise SystemExit('read through a link out of the package')\n")
    return f


# -- the mutator -----------------------------------------------------------------------------------

@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(mutations(), min_size=1, max_size=3), as_wheel=st.booleans(),
       qualified=st.booleans(), damage=st.sampled_from([None, "flip", "truncate", "bomb"]))
def test_mutated_packages_exit_cleanly_and_leave_inputs_alone(tmp_path_factory, outside, changes, as_wheel, qualified,
                                                              damage):
    work = tmp_path_factory.mktemp("mutant")
    pkg = copy_package(work)
    for change in changes:
        mutate(pkg, change, outside)
    entry = f"tinyllm.models.tiny:{ENTRY}" if qualified else ENTRY
    if not as_wheel:
        run_checked(pkg, entry=entry, watch=(outside,))
        return
    bomb = {"tinyllm/layers/zbomb.py": b"#" * (4 << 20)} if damage == "bomb" else None  # read by a class search
    archive = zip_package(pkg, work / "tinyllm.whl", bomb)
    if damage in ("flip", "truncate"):
        data = bytearray(archive.read_bytes())
        if damage == "flip":
            for i in range(len(data) // 3, len(data) // 3 + 16):
                data[i] ^= 0xA5
        else:
            data = data[: len(data) * 2 // 3]
        archive.write_bytes(bytes(data))
    run_checked(archive, *(("--max-decompressed", "1M") if damage == "bomb" else ()), entry=entry)


# -- each hostile input on its own -----------------------------------------------------------------

def test_deep_nesting_in_the_entry_module_is_a_located_error(tmp_path):
    pkg = copy_package(tmp_path)
    entry = pkg / ENTRY_MODULE
    lines = entry.read_text().splitlines()
    at = next(i for i, s in enumerate(lines) if s.startswith("class TinyForCausalLM"))
    for kind, depth in (("attribute", MAX_NESTING + 50), ("parens", 100_000), ("not", 100_000)):
        entry.write_text("\n".join(lines[:at] + ["deep = " + NESTINGS[kind](depth)] + lines[at:]) + "\n")
        rc, err = run_checked(pkg)
        assert rc == 1, err
        first = err.splitlines()[0]
        assert first.startswith(f"{entry}:{at + 1}:"), (kind, first)
        assert (f"nesting deeper than {MAX_NESTING}" in first or "too many nested parentheses" in first
                or f"more than {pyresolve.MAX_MODULE_TOKENS:,} tokens" in first), first  # 200,000 parentheses


def test_deep_nesting_elsewhere_skips_that_module_with_a_located_warning(tmp_path):
    pkg = copy_package(tmp_path)
    norm = pkg / "layers" / "norm.py"
    n = len(norm.read_text().splitlines())
    norm.write_text(norm.read_text() + "deep = " + NESTINGS["unary"](100_000) + "\n" + elif_chain(1000))
    rc, err = run_checked(pkg)
    assert rc == 0, err
    assert f"warning: tinyllm/layers/norm.py:{n + 1}:1: nesting deeper than {MAX_NESTING}; " \
           "module tinyllm.layers.norm skipped" in err, err


def test_a_broken_module_is_skipped_and_a_broken_entry_is_an_error(tmp_path):
    pkg = copy_package(tmp_path)
    moe = pkg / "layers" / "moe.py"
    moe.write_bytes(moe.read_bytes()[: moe.stat().st_size // 2])
    norm = pkg / "layers" / "norm.py"
    text = norm.read_bytes()
    at = text.index(b"from tinyllm") + 4
    norm.write_bytes(text[:at] + b"\xff" + text[at:])
    line, col = text[:at].count(b"\n") + 1, at - text[:at].rfind(b"\n")
    rc, err = run_checked(pkg)
    assert rc == 0, err
    assert re.search(r"warning: tinyllm/layers/moe\.py:\d+:\d+: invalid Python: .*; "
                     r"module tinyllm\.layers\.moe skipped", err), err
    assert (f"warning: tinyllm/layers/norm.py:{line}:{col}: invalid UTF-8 byte 0xff; "
            "module tinyllm.layers.norm skipped") in err, err
    entry = pkg / ENTRY_MODULE
    text = entry.read_bytes()
    entry.write_bytes(text.replace(b"def rotate(x):", b"def rotate(\xc3(x):", 1))
    line = text[: text.index(b"def rotate(x):")].count(b"\n") + 1
    rc, err = run_checked(pkg)
    assert rc == 1 and err.startswith(f"{entry}:{line}:12: error: invalid UTF-8 byte 0xc3"), err


def test_every_kind_of_cycle_terminates(tmp_path):
    pkg = copy_package(tmp_path)
    norm = pkg / "layers" / "norm.py"
    text = norm.read_text() + "".join(c.format(mod="tinyllm.layers.norm") for c in CYCLES.values())
    norm.write_text(text.replace("class RMSNorm(", "class RMSNorm(CycA, CycSelf, ", 1))
    (pkg / "layers" / "a.py").write_text("from tinyllm.layers.b import *\n")
    (pkg / "layers" / "b.py").write_text("from tinyllm.layers.a import *\n")
    entry = pkg / ENTRY_MODULE
    entry.write_text(entry.read_text().replace(
        "def rotate(x):\n", "def rotate(x):\n    from tinyllm.layers.a import missing\n    missing(x)\n"
                            "    from tinyllm.layers.norm import ping, alias_a, Loop\n    ping(alias_a(x))\n"
                            "    Loop()(x)\n", 1))
    rc, err = run_checked(pkg)
    assert rc == 0, err
    assert "class CycB derives from itself (through CycA); that base is left out" in err, err
    assert "class CycSelf derives from itself (through CycSelf)" in err, err


def test_special_files_and_links_out_of_the_package_are_not_read(tmp_path, outside):
    pkg = copy_package(tmp_path)
    (pkg / "layers" / "norm.py").unlink()
    os.mkfifo(pkg / "layers" / "norm.py")  # reading it would block: the run would time out
    (pkg / "layers" / "linear.py").unlink()
    (pkg / "layers" / "linear.py").symlink_to(outside)
    (pkg / "layers" / "quant.py").rename(pkg / "layers" / "quant_real.py")
    (pkg / "layers" / "quant.py").symlink_to("quant_real.py")  # inside the package: followed
    rc, err = run_checked(pkg, watch=(outside,))
    assert rc == 0, err
    assert "tinyllm/layers/norm.py: a FIFO (named pipe), not a regular file" in err, err
    assert f"tinyllm/layers/linear.py: a link out of the package (to {outside}); not followed" in err, err
    assert "quant.py" not in err, err
    for source in (tmp_path / "fifo.py", tmp_path / "notes.txt"):
        os.mkfifo(source) if source.suffix == ".py" else source.write_text("hello\n")
        rc, err = run_checked(source, entry="X")
        assert rc == 1 and err.startswith(f"{source}: error: "), err


def test_wheel_bombs_and_damage_are_errors_naming_archive_and_member(tmp_path):
    pkg = copy_package(tmp_path)
    archive = zip_package(pkg, tmp_path / "bomb.whl")
    with zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as z, z.open("tinyllm/layers/aaa.py", "w") as f:
        for _ in range(300):  # 300 MB of comment in a 300 KB archive
            f.write(b"#" * (1 << 20))
    rc, err = run_checked(archive)
    assert rc == 1 and err.startswith(f"{archive}: error: member tinyllm/layers/aaa.py "), err
    assert "decompression bomb" in err and "--max-decompressed" in err, err

    liar = tmp_path / "liar.whl"  # the same member, its records claiming 1,000 bytes
    liar.write_bytes(_claim_size(archive.read_bytes(), "tinyllm/layers/aaa.py", 1000))
    rc, err = run_checked(liar)
    assert rc == 1 and err.startswith(f"{liar}: error: member tinyllm/layers/aaa.py of the archive is damaged"), err

    good = zip_package(pkg, tmp_path / "good.whl")
    rc, err = run_checked(good, "--max-decompressed", "4K")
    assert rc == 1 and err.startswith(f"{good}: error: member tinyllm/") and "(4.0 KB in all)" in err, err

    data = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as z:
        info = z.getinfo("tinyllm/models/tiny.py")
    data[info.header_offset + 30 + len(info.filename) + len(info.extra) + 40] ^= 0xFF
    crc = tmp_path / "crc.whl"
    crc.write_bytes(bytes(data))
    rc, err = run_checked(crc)
    assert rc == 1 and err.startswith(f"{crc}: error: member tinyllm/models/tiny.py of the archive is damaged"), err

    cut = tmp_path / "cut.whl"
    cut.write_bytes(good.read_bytes()[:3000])
    rc, err = run_checked(cut)
    assert rc == 1 and err.startswith(f"{cut}: error: not a readable wheel or zip archive"), err


def _claim_size(archive: bytes, member: str, size: int) -> bytes:
    """The archive with ``member``'s inflated size rewritten in its local and central records."""
    out = bytearray(archive)
    # (signature, offset of the inflated size, of the name's length, of the name) in each record
    for signature, size_at, length_at, name_at in ((b"PK\x03\x04", 22, 26, 30), (b"PK\x01\x02", 24, 28, 46)):
        at = out.find(signature)
        while at >= 0:
            length = struct.unpack_from("<H", out, at + length_at)[0]
            if out[at + name_at:at + name_at + length] == member.encode():
                struct.pack_into("<I", out, at + size_at, size)
            at = out.find(signature, at + 4)
    return bytes(out)


def test_wheel_members_outside_the_package_are_not_modules(tmp_path):
    pkg = copy_package(tmp_path)
    evil = "raise SystemExit('read')\n"
    archive = zip_package(pkg, tmp_path / "escape.whl", {"../evil.py": evil, "/abs.py": evil,
                                                          "tinyllm/../../evil2.py": evil, "tinyllm/x-y.py": evil})
    rc, err = run_checked(archive)
    assert rc == 0, err
    sources = SourceSet(archive)
    assert set(sources.package_modules("tinyllm")) == set(SourceSet(PKG).package_modules("tinyllm"))
    assert sources.module("tinyllm...evil2") is None and sources.module("evil") is None


# -- the resolver's own bounds, in process (they are not about memory) ------------------------------

def _trace(root: Path, entry: str) -> OpTraceModule:
    module = OpTraceModule(SourceSet(root), entry)
    run_passes([TraceOps(), CrossValidateKernels()], module)
    return module


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "hostile"
    for rel, text in {"__init__.py": "", "models/__init__.py": "", "lib/__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def test_long_chains_are_cut_with_warnings_not_recursion(tmp_path):
    """Chains far longer than any bound: aliases, calls below an op, inheritance; each is cut
    where its bound says, with one warning, and the trace goes on."""
    n = 3000
    root = _package(tmp_path, {
        "lib/aliases.py": "import torch\na0 = torch.matmul\n" + "".join(f"a{i + 1} = a{i}\n" for i in range(n)),
        "lib/calls.py": "import torch\n" + "".join(f"def f{i}(x):\n    return f{i + 1}(x)\n" for i in range(n))
                        + f"def f{n}(x):\n    return torch.matmul(x, x)\n",
        "lib/classes.py": "from torch import nn\nclass C0(nn.Module):\n    def forward(self, x):\n        return x\n"
                          + "".join(f"class C{i + 1}(C{i}):\n    pass\n" for i in range(n)),
        "models/m.py": f"""
            import torch
            from torch import nn
            from hostile.lib.aliases import a{n}
            from hostile.lib.calls import f0
            from hostile.lib.classes import C{n}

            class M(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.deep = C{n}()

                def forward(self, x):
                    x = a{n}(x, x)
                    x = f0(x)
                    return self.deep(x)
            """})
    warnings = _trace(root, "M").tree.warnings
    assert any(f"resolution nests deeper than {pyresolve.MAX_RESOLVE_DEPTH}" in w for w in warnings), warnings
    assert any(f"calls nest deeper than {optrace.MAX_KERNEL_DEPTH}" in w for w in warnings), warnings
    assert any(f"class hierarchy deeper than {pyresolve.MAX_CLASS_DEPTH}" in w for w in warnings), warnings


def test_shared_callees_cannot_make_the_work_exponential(tmp_path, monkeypatch):
    """Each function calls the next ten times: the paths through the call graph (and the tree
    of a model calling it) number 10**depth. Both budgets end the growth, with a warning each."""
    fan = "".join(f"def f{k}(x):\n    return [" + ", ".join([f"f{k + 1}(x)"] * 10) + "]\n" for k in range(8))
    root = _package(tmp_path, {
        "lib/fan.py": "import torch\n" + fan + "def f8(x):\n    return torch.matmul(x, x)\n",
        "models/fan.py": "import torch\n" + fan + "def f8(x):\n    return torch.matmul(x, x)\n",
        "models/m.py": """
            import torch
            from torch import nn
            from hostile.lib import fan as lib
            from hostile.models import fan

            class M(nn.Module):
                def forward(self, x):
                    y = lib.f0(x).pick(x)
                    return fan.f0(y)
            """})
    monkeypatch.setattr(pyresolve, "MAX_CONTEXT_WORK", 20_000)
    monkeypatch.setattr(optrace, "MAX_TREE_CALLS", 2_000)
    module = _trace(root, "M")
    warnings = module.tree.warnings
    budget = module.tracer.r.context_budget()  # 20,000 and half a unit a byte of the source parsed so far
    said = [int(m.group(1).replace(",", "")) for w in warnings for m in [re.search(r"resolution took ([\d,]+) units of work", w)] if m]
    assert said and 20_000 < said[0] <= budget < 25_000, warnings
    assert any("the op tree reached 2000 call sites" in w for w in warnings), warnings
    assert module.tracer.examined <= 2_000 + 20  # the last call site's alternatives
    assert module.tracer.r.evaluations < 200_000  # linear past the budget: not 10**6 contexts
    assert module.tracer.r.work < module.tracer.r.work_budget()


# -- call fan-out: every kind of work that multiplies, counted ------------------------------------------

def fan_out_sources(family: str, k: int, depth: int, width: int) -> dict[str, str]:
    """A package whose call graph fans out: ``depth`` levels where each calls the next ``k`` times
    (every call site a new calling context), in one of the ways work multiplies:

    ``chain``    functions; ``methods`` bound methods (contexts by ``self`` too); ``args`` ``width``
                 arguments passed down (every context evaluates the chain of argument thunks);
    ``values``   each level also returns a list of ``width`` instances (values that grow: hashing,
                 deduping and keeping them is the work);
    ``kernels``  ``k`` out-of-scope module classes each launching ``width`` kernels, all called at
                 ``depth`` call sites (call sites × alternatives × kernels in the tree);
    ``targets``  the same classes in the model's own code (each alternative expanded as a branch).
    """
    lib = ["import torch", "from torch import nn"]
    forward = "y = lib.f0(x).pick(x)\n        return torch.matmul(y, y)"
    init = "pass"
    if family in ("chain", "values", "args"):
        params = ", ".join(f"a{j}" for j in range(width)) if family == "args" else "x, y"
        passed = params if family == "args" else "y, x"
        extra = " + ALL" if family == "values" else f" + [{params}]" if family == "args" else ""
        if family == "values":
            lib.append("class C:\n    def __call__(self, x):\n        return torch.matmul(x, x)")
            lib.append("ALL = [" + ", ".join(["C()"] * width) + "]")
        for d in range(depth):
            lib.append(f"def f{d}({params}):\n    return [" + ", ".join([f"f{d + 1}({passed})"] * k) + f"]{extra}")
        lib.append(f"def f{depth}({params}):\n    return torch.matmul(" + params.split(", ")[0] + ", x)" if family != "args"
                   else f"def f{depth}({params}):\n    return torch.matmul(a0, a0)")
        forward = f"y = lib.f0({', '.join(['x'] * (width if family == 'args' else 2))}).pick(x)\n        return torch.matmul(y, y)"
    elif family == "methods":
        methods = "".join(f"    def m{d}(self, x):\n        return [" + ", ".join([f"self.m{d + 1}(x)"] * k) + "]\n"
                          for d in range(depth))
        lib.append(f"class M0(nn.Module):\n{methods}    def m{depth}(self, x):\n        return torch.matmul(x, x)")
        forward = "y = lib.M0().m0(x).pick(x)\n        return torch.matmul(y, y)"
    files = {}
    if family in ("kernels", "targets"):
        where = "lib" if family == "kernels" else "blocks"
        classes = [f"class A{j}(nn.Module):\n    def forward(self, x):\n"
                   + "".join(f"        x = torch.ops.fan.k{j}_{i}(x)\n" for i in range(width)) + "        return x"
                   for j in range(k)]
        files[f"{'lib/fan' if where == 'lib' else 'models/blocks'}.py"] = "\n".join(lib + classes) + "\n"
        init = "super().__init__()\n        self.mods = nn.ModuleList([" + ", ".join(f"{where}.A{j}()" for j in range(k)) + "])"
        forward = "".join("for m in self.mods:\n            x = m(x)\n        " for _ in range(depth)) + "return x"
    else:
        files["lib/fan.py"] = "\n".join(lib) + "\n"
    files["models/m.py"] = (
        "import torch\nfrom torch import nn\nfrom hostile.lib import fan as lib\n"
        + ("from hostile.models import blocks\n" if family == "targets" else "")
        + f"\nclass M(nn.Module):\n    def __init__(self):\n        {init}\n\n"
        f"    def forward(self, x):\n        {forward}\n")
    return files


#: Each family past every budget as the code stood before work was counted honestly (CPU seconds
#: and peak RSS then, on the 2-core VM): chain 10x8 9+7.5 s 212 MB; methods 12 s; values 12 s;
#: kernels 300x300x30 killed at 120 s, 910 MB.
FAN_OUT_WORST = [("chain", 10, 8, 1), ("methods", 10, 8, 1), ("values", 10, 8, 50), ("args", 10, 8, 5),
                 ("kernels", 300, 300, 30), ("targets", 200, 200, 20), ("chain", 30, 5, 1)]
FAN_CPU_SECONDS = 10
FAN_PEAK_MB = 500
#: The child measures itself: CPU from getrusage, peak from VmHWM (ru_maxrss survives exec, so it
#: would report the forking pytest worker's size when that was larger).
_MEASURED = ("import re, resource, sys\nfrom layerc.tools.driver import main\nrc = main(sys.argv[1:])\n"
             "u = resource.getrusage(resource.RUSAGE_SELF)\n"
             "hwm = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
             "sys.stderr.write(f'MEASURED {u.ru_utime + u.ru_stime:.2f} {hwm // 1024}\\n')\nsys.exit(rc)\n")


def fan_out_run(root: Path) -> tuple[int, str, float, int]:
    """``layerc optrace`` on the package in a capped child (tests/capped.py): (exit status, stderr,
    CPU seconds, peak RSS in MB) as the child measured them."""
    argv = ["optrace", root, "--entry", "M", "-o", root.parent / "o.md"]
    done = capped.run(argv, memory=MEMORY, timeout=TIMEOUT, cwd=root.parent, program=(sys.executable, "-c", _MEASURED))
    m = re.search(r"^MEASURED ([\d.]+) (\d+)$", done.stderr, re.M)
    assert m, done.stderr[-2000:]
    return done.returncode, done.stderr[: m.start()], float(m.group(1)), int(m.group(2))


def check_fan_out(tmp_path: Path, family: str, k: int, depth: int, width: int) -> list[str]:
    root = _package(tmp_path, fan_out_sources(family, k, depth, width))
    before = snapshot(root)
    rc, err, cpu, peak = fan_out_run(root)
    shown = f"{family} k={k} depth={depth} width={width}: {cpu:.1f} s, {peak} MB\n{err[-2000:]}"
    assert rc in (0, 1), shown
    assert "internal error" not in err and "Traceback" not in err, shown
    if rc == 1:  # an error names its place
        assert re.match(rf"^{re.escape(str(root))}\S*: error: |^hostile/\S+:\d+:\d+: error: ", err), shown
    warnings = [line for line in err.splitlines() if line.startswith("layerc: warning: ")]
    for w in warnings:  # every cut is said where it happened
        assert re.match(r"^layerc: warning: hostile/[\w/]+\.py:\d+:\d+: ", w), w
    assert cpu < FAN_CPU_SECONDS, shown
    assert peak < FAN_PEAK_MB, shown
    assert snapshot(root) == before
    return warnings


@pytest.mark.parametrize("family,k,depth,width", FAN_OUT_WORST)
def test_call_fan_out_is_bounded_in_time_and_memory(tmp_path, family, k, depth, width):
    """The worst fan-out of each family: a bounded answer (a warning where a budget cut, located),
    in under 10 CPU seconds and 500 MB, in a child capped in memory and killed past the timeout."""
    warnings = check_fan_out(tmp_path, family, k, depth, width)
    assert any(re.search(r"units of work|op tree (reached|lists)|kernel search merged", w) for w in warnings), warnings


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(family=st.sampled_from(["chain", "methods", "values", "args", "kernels", "targets"]),
       k=st.integers(2, 40), depth=st.integers(2, 12), width=st.integers(1, 60))
def test_any_call_fan_out_is_bounded(tmp_path_factory, family, k, depth, width):
    """The class, not one sample: any family, any fan-out, any depth."""
    if family in ("kernels", "targets"):
        k, depth, width = k * 8, depth * 20, width  # up to 320 classes x 240 call sites x 60 kernels
    check_fan_out(tmp_path_factory.mktemp("fan"), family, k, depth, width)


#: Tokens a huge token makes (the fuzz's ``huge_token``: up to a megabyte): the parser alone held
#: 500 MB for the entry module's and took 6 CPU seconds before modules were counted first.
HUGE_TOKENS = {"comparisons": lambda n: "x<" * (n // 2) + "x", "calls": lambda n: "f(" * (n // 4) + ")" * (n // 4),
               "words": lambda n: "a " * (n // 2), "one name": lambda n: "A" * n}


@pytest.mark.parametrize("kind", HUGE_TOKENS)
@pytest.mark.parametrize("where", ["entry", "library"])
def test_modules_of_too_many_tokens_are_refused_before_parsing(tmp_path, kind, where):
    """A module of more than ``MAX_MODULE_TOKENS`` tokens is not parsed: the entry module is a
    located error, another module is skipped with a located warning; a single huge token (a name)
    is one token and parses. Each run in a capped child, with its CPU time and peak measured."""
    pkg = copy_package(tmp_path)
    rel = ENTRY_MODULE if where == "entry" else "layers/norm.py"
    text = (pkg / rel).read_text()
    at = text.index("return")  # inside a function body: the statement it starts is the huge one
    (pkg / rel).write_text(text[:at] + "y = " + HUGE_TOKENS[kind](1 << 20) + "\n        " + text[at:])
    before = snapshot(pkg)
    argv = ["optrace", pkg, "--entry", ENTRY, "-o", tmp_path / "o.md"]
    done = capped.run(argv, memory=MEMORY, timeout=TIMEOUT, program=(sys.executable, "-c", _MEASURED))
    m = re.search(r"^MEASURED ([\d.]+) (\d+)$", done.stderr, re.M)
    assert m, done.stderr[-2000:]
    err, cpu, peak = done.stderr[: m.start()], float(m.group(1)), int(m.group(2))
    check_outcome(done.returncode, err, pkg)
    assert snapshot(pkg) == before
    too_many = f"more than {pyresolve.MAX_MODULE_TOKENS:,} tokens"
    if kind == "one name":  # one token: it parses
        assert too_many not in err, err[:500]
    elif where == "entry":
        assert done.returncode == 1 and re.match(rf"^{re.escape(str(pkg / rel))}:\d+:\d+: error: {too_many}", err), err[:500]
    else:
        assert done.returncode == 0 and re.search(rf"^layerc: warning: tinyllm/{rel}:\d+:\d+: {too_many}.*skipped", err, re.M)
    assert cpu < FAN_CPU_SECONDS and peak < FAN_PEAK_MB, (cpu, peak, err[-1000:])


def test_string_annotations_and_text_scans_stay_bounded(tmp_path):
    """Text the resolver scans or re-parses: quoted annotations nested past the bound are not
    types; class lines left unclosed, enum-like conditions and long names cost linear time
    (the child is killed if any goes exponential or quadratic)."""
    code = textwrap.dedent("""
        import time
        from layerc.passes.pyresolve import _CLASS_RX
        from layerc.grammar.pysource import parse_expression
        from layerc.passes.optrace import annotation
        from layerc.passes.kernel_calls import kernel_calls
        t = time.perf_counter()
        assert parse_expression("X" + ".a" * 150) is None and parse_expression("(" * 300 + "X" + ")" * 300) is None
        assert parse_expression(" | ".join(["X"] * 5000)) is None
        assert parse_expression("Optional[X]") is not None
        assert len(list(_CLASS_RX.finditer("class A(B):\\n" * 40_000))) == 40_000
        list(_CLASS_RX.finditer("class A(\\n" * 40_000))  # never closed: each match stops at the next parenthesis
        assert annotation("x in (" + "A.BB" * 40 + " x").startswith("if ")
        assert annotation("m in (Mode.MHA, Mode.MLA,)") == "MHA / MLA path"
        assert kernel_calls().classify("mooncake." + "ep" * 100_000) is None
        print(time.perf_counter() - t)
        """)
    proc = capped.run([], memory=MEMORY, timeout=TIMEOUT, program=(sys.executable, "-c", code))
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout) < 10


def test_the_real_packages_stay_under_every_bound():
    """The bounds cut only hostile input: the small package traces with no warning at all."""
    module = _trace(PKG, ENTRY)
    assert module.tree.warnings == []
    assert max(_depth(ast.parse(p.read_text())) for p in PKG.rglob("*.py")) < MAX_NESTING


def _depth(tree: ast.AST) -> int:
    stack, best = [(tree, 1)], 0
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        stack += [(c, d + 1) for c in ast.iter_child_nodes(node)]
    return best
