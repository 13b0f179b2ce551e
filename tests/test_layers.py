"""The layers: analysis and render (what the offline commands table, report, compare and history
compute with) import no redis and no runner, so results can be read and re-rendered anywhere."""

from __future__ import annotations

import subprocess
import sys

BLOCKER = """
import importlib, pkgutil, sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "redis" or name.startswith(("redis.", "lockcompare.runner", "lockcompare.infra.cluster")):
            raise ImportError(f"blocked: {name}")

sys.meta_path.insert(0, Block())
import lockcompare.analysis, lockcompare.render, lockcompare.spec
failed = []
for package in (lockcompare.analysis, lockcompare.render, lockcompare.spec):
    for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        try:
            importlib.import_module(module.name)
        except ImportError as exc:
            failed.append(f"{module.name}: {exc}")
print("\\n".join(failed) or "ok")
"""


def test_analysis_render_and_spec_import_without_redis_or_the_runner() -> None:
    out = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stdout + out.stderr


def test_the_blocker_would_notice_an_import_of_redis() -> None:
    """The check can fail: a module that imports redis is caught by the same blocker."""
    probe = BLOCKER.replace("import lockcompare.analysis,", "import lockcompare.infra.redisconn, lockcompare.analysis,")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode != 0 and "blocked: redis" in out.stderr
