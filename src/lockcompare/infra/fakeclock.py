"""A node's wall clock that a fault can move: libfaketime preloaded into a server process.

The node's process reads its offset from a timestamp file on every clock call
(``FAKETIME_NO_CACHE=1``): a jump takes effect on the node's next command, 0.4 ms from jump() to
PTTL -2 measured; caching would apply it up to a second late, and re-reading costs ~25-35 µs per
round trip (measured). A jump rewrites that file atomically (write a temp file, rename it over),
so the node never reads half an offset.

Only the wall clock moves. libfaketime fakes CLOCK_MONOTONIC too unless told not to (measured here:
without ``DONT_FAKE_MONOTONIC=1`` a process's monotonic clock reads the faked *realtime* value and
jumps with it); a real clock jump (NTP step, an operator's ``date -s``) leaves the monotonic clock
alone, so we do too. Redis 6.2 expires keys by ``mstime()`` (gettimeofday, the wall clock): a jump
of +20 s makes a key set with PX 10000 disappear, which
:func:`~lockcompare.infra.redis.clock_check.check_fake_clock_support` verifies on the actual binary
before any trial relies on it.
"""

from __future__ import annotations

import atexit
import importlib.util
import math
import os
import shutil
from pathlib import Path
from types import TracebackType

from lockcompare.errors import (
    FaultNotSupportedError,
    InvalidValueError,
)
from lockcompare.infra.lifecycle import owned_tempdir

ENV_LIBRARY = "LOCKCOMPARE_LIBFAKETIME"
DEBIAN_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
#: Where the PyPI package ``libfaketime`` keeps the library it builds, inside its package dir.
_PYPI_RELATIVE = Path("vendor/libfaketime/src/libfaketime.so.1")

HOW_TO_GET_IT = (
    "clock faults need libfaketime: pip install libfaketime (x86-64 Linux), "
    "or apt-get install libfaketime, or set LOCKCOMPARE_LIBFAKETIME to a libfaketime.so.1"
)


def find_libfaketime() -> Path:
    """Locate ``libfaketime.so.1``.

    Order: ``$LOCKCOMPARE_LIBFAKETIME`` (an explicit choice wins; it would otherwise never be
    consulted where the PyPI package, a dependency, is installed), the PyPI package ``libfaketime``,
    then Debian's package. Raises :class:`FaultNotSupportedError` saying what to install.
    """
    explicit = os.environ.get(ENV_LIBRARY)
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise FaultNotSupportedError(f"{ENV_LIBRARY}={explicit}: no such file")
        return path
    for candidate in (_pypi_library(), DEBIAN_LIBRARY):
        if candidate is not None and candidate.is_file():
            return candidate
    raise FaultNotSupportedError(HOW_TO_GET_IT)


def _pypi_library() -> Path | None:
    # find_spec locates the package without importing it: the Python half is not needed here.
    spec = importlib.util.find_spec("libfaketime")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / _PYPI_RELATIVE


class FakeClock:
    """The wall-clock offset of the node(s) started with :meth:`env`; starts at +0 s.

    >>> with FakeClock(library=Path("/lib/libfaketime.so.1")) as clock:
    ...     clock.jump(seconds=20)
    ...     clock.jump(seconds=0.5)
    ...     clock.offset_s
    20.5

    Owns a private directory holding the timestamp file; :meth:`close` removes it.
    """

    def __init__(self, *, library: Path | None = None) -> None:
        self.library = library if library is not None else find_libfaketime()
        self._dir = owned_tempdir("clock")
        _not_closed.add(self)
        self.timestamp_file = self._dir / "faketime"
        self._offset_s = 0.0
        self._write()

    @property
    def offset_s(self) -> float:
        """Seconds the node's wall clock is ahead of the real one (negative: behind)."""
        return self._offset_s

    def env(self) -> dict[str, str]:
        """Environment for ``RedisServer(env=...)``: preload libfaketime, read our file each time."""
        return {
            "LD_PRELOAD": str(self.library),
            "FAKETIME_TIMESTAMP_FILE": str(self.timestamp_file),
            "FAKETIME_NO_CACHE": "1",
            "DONT_FAKE_MONOTONIC": "1",
        }

    def jump(self, *, seconds: float) -> None:
        """Move the wall clock ``seconds`` further (cumulative; negative moves it back)."""
        if not math.isfinite(seconds):
            raise InvalidValueError(f"a clock jump needs a finite number of seconds, got {seconds}")
        self._offset_s += seconds
        self._write()

    def reset(self) -> None:
        """Back to the real time (offset 0)."""
        self._offset_s = 0.0
        self._write()

    def _write(self) -> None:
        # libfaketime parses "+20.500000" with atof; a unit letter (m, h, d, y) would multiply it,
        # so the value is always written as plain seconds.
        tmp = self._dir / "faketime.tmp"
        tmp.write_text(f"{self._offset_s:+.6f}\n")
        os.replace(tmp, self.timestamp_file)

    def close(self) -> None:
        """Remove the timestamp file. Nodes still running under it read offset 0 from then on
        (measured: TIME went from +60 s back to the real time)."""
        shutil.rmtree(self._dir, ignore_errors=True)
        _not_closed.discard(self)

    def __enter__(self) -> FakeClock:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


#: Clocks whose close() has not run (an interrupt between creating one and recording it): their
#: directories are removed when the interpreter exits, as spawned.py does for servers.
_not_closed: set[FakeClock] = set()


@atexit.register
def _close_leftovers() -> None:
    for clock in list(_not_closed):
        clock.close()
