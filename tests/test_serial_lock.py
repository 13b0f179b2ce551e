"""The ``serial`` marker under pytest-xdist (tests/serial_lock.py): a real pytest run in two worker
processes, whose tests write down when each ran; the serial one ran with nothing beside it while the
others did run side by side."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

CONFTEST = """
from serial_lock import SERIAL_HELP, alone_when_marked  # noqa: F401


def pytest_configure(config):
    config.addinivalue_line("markers", SERIAL_HELP)
"""

#: Eight plain tests around a serial one, each writing "name start end" (monotonic seconds).
BODY = """
import os, time
import pytest

def _ran(name):
    start = time.monotonic()
    time.sleep(0.4)
    with open(os.environ["SERIAL_LOG"], "a") as log:
        log.write(f"{name} {start} {time.monotonic()}\\n")

@pytest.mark.parametrize("i", range(4))
def test_before(i):
    _ran(f"before{i}")

@pytest.mark.serial
def test_alone():
    _ran("serial")

@pytest.mark.parametrize("i", range(4))
def test_after(i):
    _ran(f"after{i}")
"""


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_a_serial_test_runs_alone_while_the_others_run_side_by_side(tmp_path: Path) -> None:
    pytest.importorskip("xdist", reason="needs pytest-xdist: pip install -e '.[test]'")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_body.py").write_text(BODY)
    log = tmp_path / "ran.log"
    env = os.environ | {"PYTHONPATH": str(TESTS), "SERIAL_LOG": str(log)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "load",
         "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "base"), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    spans = {name: (float(t0), float(t1)) for name, t0, t1 in (line.split() for line in log.read_text().splitlines())}
    assert len(spans) == 9, spans
    serial = spans.pop("serial")
    assert not [name for name, span in spans.items() if _overlap(span, serial)], (serial, spans)
    # The run was parallel at all: without that, "nothing beside it" would say nothing.
    plain = sorted(spans.values())
    assert any(_overlap(a, b) for i, a in enumerate(plain) for b in plain[i + 1 :]), spans
