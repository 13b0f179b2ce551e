"""Building a shipped lock client (clients/<language>/build.sh) once per test session, in place,
when one of its sources is newer than what the build made (the Go and Java clients' tests)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path


def build_if_stale(*, script: Path, output: Path, sources: Sequence[Path], timeout_s: float) -> None:
    """Run ``bash script`` unless ``output`` is at least as new as every one of ``sources``; a failed
    build fails the test with the end of its stderr."""
    if output.is_file() and output.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
        return
    done = subprocess.run(["bash", str(script)], check=False, capture_output=True, text=True, timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-2000:]
