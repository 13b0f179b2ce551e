"""A report's independent pieces of work (a timeline PNG, a cell's HTML pages) spread over the CPUs.

The report of the reproduction draws about a hundred and fifty timeline PNGs and writes some three
thousand trial pages; on one core of a 2-core machine that took over two minutes. Each piece writes
its own files and returns what the report needs to say about them, so processes can do them side by
side; a file is the same bytes whichever process wrote it (tests/test_render_pool.py). A small report is
rendered in this process: starting a process (its imports, matplotlib's among them) costs more than
a few pieces.

The processes are spawned (no state of this process is inherited), die with this process and ignore
Ctrl-C (the command handles it: lifecycle.py). An interrupted or failed rendering waits for the
pieces under way, so that none is written after the caller removed its half-written folder.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from lockcompare.processes import die_with_parent
from lockcompare.scenario.limits import usable_cpus

T = TypeVar("T")

#: Fewer pieces than this are done in this process.
MIN_PIECES = 16


def _child() -> None:
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def run_pieces(work: Callable[..., T], pieces: Sequence[tuple[object, ...]], *, jobs: int | None = None) -> list[T]:
    """``work(*piece)`` for every piece, in order; side by side on ``jobs`` processes (None: this
    process's CPUs) when there are at least :data:`MIN_PIECES`. ``work`` must be a module-level
    function and the pieces picklable. An exception in a piece is raised here."""
    jobs = usable_cpus() if jobs is None else jobs
    if jobs <= 1 or len(pieces) < MIN_PIECES:
        return [work(*piece) for piece in pieces]
    workers = min(jobs, len(pieces))
    executor = ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_child
    )
    try:
        # Chunks of a few pieces: fewer round trips than one at a time, and a short wait at the end.
        done = list(executor.map(work, *zip(*pieces, strict=True), chunksize=max(1, len(pieces) // (workers * 32))))
    finally:
        # On an error or an interrupt, the pieces not started are dropped and the running ones end
        # (a chunk: seconds at most) before the caller removes the folder they write into.
        executor.shutdown(wait=True, cancel_futures=True)
    return done
