"""The signal that ends this command, remembered: a library that swallows the exception it raised
does not make the command go on as if none came.

lifecycle's handler turns SIGINT into KeyboardInterrupt and SIGTERM, SIGHUP and SIGQUIT into
:class:`~lockcompare.errors.Terminated`, raised wherever the main thread is. Library code may catch
it: matplotlib's import machinery, caught mid-import, turned a SIGTERM into a finished report and
exit 0, or into an ImportError and the false "plots need matplotlib" (issue 49). So the handler
notes each signal here first, the one place every layer may ask (standard library and errors.py
only): a step whose failure could be the interrupt's doing asks :func:`raise_if_received`, and
the command line ends with the signal's exit code whatever came after it.
"""

from __future__ import annotations

import signal

from lockcompare.errors import Terminated

_received: list[int] = []


def note(signum: int) -> None:
    """Remember that ``signum`` arrived (the first one decides the exit)."""
    if not _received:
        _received.append(signum)


def clear() -> None:
    """Forget earlier signals (a new command starts; tests run several in one process)."""
    _received.clear()


def received() -> int | None:
    """The signal that arrived during this command, if any."""
    return _received[0] if _received else None


def exception_for(signum: int) -> BaseException:
    """What a signal becomes: KeyboardInterrupt for SIGINT, else :class:`Terminated` (exit 128+N).

    >>> exception_for(signal.SIGHUP).exit_code
    129
    """
    if signum == signal.SIGINT:
        return KeyboardInterrupt()
    name = signal.Signals(signum).name
    return Terminated(f"terminated by {name}; servers and workers stopped", exit_code=128 + signum)


def raise_if_received() -> None:
    """Raise the remembered signal's exception again, if one arrived (see the module's doc)."""
    signum = received()
    if signum is not None:
        raise exception_for(signum)
