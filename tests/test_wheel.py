"""Issue 43.1: a wheel carries everything a user outside the checkout needs.

Built as CI builds it (``python -m build``: the sdist, then the wheel from the sdist, so both carry
the clients and the revision; ``pip wheel --no-deps`` where ``build`` is not installed), checked by
``twine check`` where twine is installed, installed into a fresh venv in a temporary directory (the
wheel with ``--no-deps``; its dependencies are this venv's, by a .pth line: no network, no
download), and run from a directory outside the checkout: ``lockcompare clients install`` fills a
private cache, and one Node cell's rows carry the revision the wheel was built from.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.full

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 900

if shutil.which("node") is None or shutil.which("npm") is None:
    pytest.skip("node and npm not found (apt-get install -y nodejs npm)", allow_module_level=True)


def _run(command: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    if importlib.util.find_spec("build") is not None:
        _run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], cwd=out)
    else:
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), str(REPO)], cwd=out)
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout holding the wheel; its dependencies are this venv's."""
    root = tmp_path_factory.mktemp("venv")
    # Without a pip of its own (ensurepip: ~5 s alone, ~9 s under load): this venv's pip installs into it.
    _run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root)
    python = root / "bin" / "python"
    (wheel,) = dist.glob("lockcompare-*.whl")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index",
          str(wheel)], cwd=root)  # fmt: skip
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=root).strip()
    # Appended after the venv's own site-packages, and .pth files of these directories are not run:
    # the checkout's editable install (a .pth naming src/) stays out, the wheel's lockcompare is found.
    (Path(purelib) / "lockcompare-test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return root


def test_the_wheel_and_sdist_pass_twine_check(dist: Path) -> None:
    if importlib.util.find_spec("twine") is None:
        pytest.skip("twine not installed (pip install twine)")
    said = _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))], cwd=dist)
    assert said.count("PASSED") == len(list(dist.iterdir())), said


def test_the_wheel_carries_the_clients_sources_and_its_revision(dist: Path) -> None:
    (wheel,) = dist.glob("lockcompare-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ["node/package.json", "node/package-lock.json", "node/redlock4.js", "node/redlock.toml",
                    "go/main.go", "go/build.sh", "java/CuratorMutexClient.java", "python/refclient.py"]:  # fmt: skip
        assert f"lockcompare/_clients/{shipped}" in names
    assert not [n for n in names if "node_modules" in n or "/build/" in n]  # installed per machine, never shipped
    assert "lockcompare/_docs/verdicts.md" in names  # the pages the help texts name (lockcompare docs PAGE)
    info = json.loads(zipfile.ZipFile(wheel).read("lockcompare/_build_info.json"))
    assert len(info["revision"]) == 40 and isinstance(info["dirty"], bool), info


def test_from_a_fresh_venv_outside_the_checkout_clients_install_and_a_node_cell_record_the_revision(
    dist: Path, venv: Path, tmp_path: Path
) -> None:
    (wheel,) = dist.glob("lockcompare-*.whl")
    info = json.loads(zipfile.ZipFile(wheel).read("lockcompare/_build_info.json"))
    revision = info["revision"] + ("+dirty" if info["dirty"] else "")
    env = {k: v for k, v in os.environ.items() if k not in ("LOCKCOMPARE_CLIENTS_DIR", "PYTHONPATH")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    # The Go client still compiles from the wheel's main.go; a copy of the checkout's Go build cache
    # (where it was built) spares recompiling etcd's client and gRPC from Debian's sources (~18 s alone).
    checkout_cache = REPO / "clients" / "go" / "build" / ".gocache"
    if checkout_cache.is_dir():
        env["GOCACHE"] = str(shutil.copytree(checkout_cache, tmp_path / "gocache"))
    lockcompare = str(venv / "bin" / "lockcompare")
    where = _run([str(venv / "bin" / "python"), "-c", "import lockcompare; print(lockcompare.__file__)"], cwd=tmp_path)
    assert where.startswith(str(venv)), where  # the wheel runs, not the checkout

    before = _run([lockcompare, "clients", "list"], cwd=tmp_path, env=env)
    assert "(not installed)" in before and "node-redlock" in before and "clients install" in before, before
    installed = _run([lockcompare, "clients", "install"], cwd=tmp_path, env=env)
    lines = {line.split()[0]: line for line in installed.splitlines()[1:]}
    assert lines["node"].split()[1] == "done" and "failed" not in installed, installed
    assert (tmp_path / "cache" / "lockcompare" / "clients" / "node" / "node_modules").is_dir()
    after = _run([lockcompare, "clients", "list"], cwd=tmp_path, env=env)
    assert "(the per-user cache)" in after and "node-redlock               viable" in after, after

    out = tmp_path / "r.csv"
    _run([lockcompare, "matrix", "--backends", "node-redlock,redlock", "--experiments", "client-pause",
          "--trials", "1", "--time-scale", "0.1", "--out", str(out)], cwd=tmp_path, env=env)  # fmt: skip
    rows = list(csv.DictReader(out.open()))
    assert sorted(r["backend"] for r in rows) == ["node-redlock", "redlock"]
    assert {r["source_revision"] for r in rows} == {revision}
