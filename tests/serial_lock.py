"""What ``@pytest.mark.serial`` asks (tests/conftest.py holds the lock around every test): where
pytest-xdist runs tests side by side in worker processes, a serial test runs with no other test
beside it. A serial test holds an exclusive flock on a file the workers share, every other test a
shared one; a turnstile (the gate) stops the other workers from taking the shared lock again and again
while a serial test waits for it. In one process (no xdist, or ``-n 0``) nothing is locked."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

#: The marker's name.
SERIAL = "serial"
#: What the marker means (pytest --markers).
SERIAL_HELP = (
    f"{SERIAL}: a test whose mechanism needs the machine's CPUs to itself (a race it must win or lose on "
    "time): where pytest-xdist runs tests side by side, no other test runs while it does"
)


def under_xdist() -> bool:
    """This process is a pytest-xdist worker (xdist sets the variable in each)."""
    return os.environ.get("PYTEST_XDIST_WORKER") is not None


@contextmanager
def held(run_dir: Path, *, exclusive: bool) -> Iterator[None]:
    """The lock for one test of the run whose workers share ``run_dir``: exclusive for a serial
    test, shared for any other."""
    with (run_dir / "serial.gate").open("a") as gate, (run_dir / "serial.lock").open("a") as lock:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        fcntl.flock(gate, mode)  # a serial test waiting holds the gate: no shared lock is taken meanwhile
        fcntl.flock(lock, mode)
        fcntl.flock(gate, fcntl.LOCK_UN)
        yield  # closing the files releases the lock


@pytest.fixture(autouse=True)
def alone_when_marked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test holds the lock: exclusive if marked ``serial``; under xdist only."""
    if not under_xdist():
        yield
        return
    run_dir = tmp_path_factory.getbasetemp().parent  # each worker's basetemp is a directory of the run's
    with held(run_dir, exclusive=request.node.get_closest_marker(SERIAL) is not None):
        yield
