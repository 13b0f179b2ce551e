"""setup.py stamps a build with its revision by loading ``infra/provenance.py`` alone, in a build
environment where no lockcompare package exists: its top level may import the standard library only.
An import of another lockcompare module there broke every sdist and wheel build (a full-tier test
found it; this one is fast)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROVENANCE = Path(__file__).resolve().parents[1] / "src" / "lockcompare" / "infra" / "provenance.py"

# -I: isolated (no user site, no PYTHONPATH); -S: no site-packages, where the editable install lives.
_LOAD_ALONE = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("_lockcompare_provenance", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(callable(module.revision_of))
"""


def test_provenance_loads_without_the_lockcompare_package() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _LOAD_ALONE, str(PROVENANCE)],
        capture_output=True, text=True, timeout=60, check=False, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"
