"""The wheel: ``python -m build`` makes it without a warning, with every source and data file of
the package inside; installed in a clean virtual environment, outside the checkout, its
``layerc trace`` writes what the checkout writes (the golden output)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib.util import find_spec
from pathlib import Path

import pytest

from tests.conftest import ROOT, SHARED

pytestmark = pytest.mark.skipif(find_spec("build") is None, reason="needs the build package (the dev extra)")

#: the package folders and the names they install as
FOLDERS = {"layerc": "layerc", "ir": "layerc/ir", "grammar": "layerc/grammar", "passes": "layerc/passes",
           "backends": "layerc/backends", "tools": "layerc/tools"}
SAMPLE = "hf_bert-small_h100"


def _sources() -> list[str]:
    """What a checkout holds: tracked files, and new ones git does not ignore."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                         capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in _sources():
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / name).read_bytes())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(src / "dist")],
                          cwd=src, capture_output=True, text=True, env=env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert [line for line in log.splitlines() if "warning" in line.lower()] == []
    (found,) = (src / "dist").glob("layerc-*.whl")
    return found


def test_the_wheel_holds_every_package_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for name in _sources():
        folder, _, rest = name.partition("/")
        if folder in FOLDERS and rest and not rest.endswith((".pyc",)) and "__pycache__" not in rest:
            expected.add(f"{FOLDERS[folder]}/{rest}")
    assert sorted(expected - names) == []
    assert "layerc/py.typed" in names and "layerc/passes/data/kernels/vllm.toml" in names


def test_the_wheel_installs_and_runs_trace_in_a_clean_venv(wheel, tmp_path, shared):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    # its dependencies come from this environment's site-packages (no download); layerc itself only from the wheel
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run([str(py), "-c", "import layerc.tools.driver as d; print(d.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(site)), where
    sample = SHARED / "data" / "traces" / "torch" / f"{SAMPLE}.json.gz"
    out = tmp_path / "t.json"
    proc = subprocess.run([str(venv / "bin" / "layerc"), "trace", str(sample), "--json", str(out)], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    golden = (ROOT / "tests" / "golden" / "commands" / f"trace-{SAMPLE}" / "out" / "t.json").read_bytes()
    assert out.read_bytes().replace(str(SHARED / "data").encode(), b"$DATA") == golden
