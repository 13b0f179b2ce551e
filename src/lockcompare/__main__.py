"""The ``lockcompare`` command (and ``python -m lockcompare``): signals answered from its first
line, then the command line interface.

Importing the interface takes about a second of CPU (typer, rich, redis, ...); a SIGTERM, SIGHUP or
SIGQUIT landing in it found Python's defaults and ended the command with no line at all, and a
Ctrl-C printed a traceback from whichever import it cut (issue 49). Nothing has been started
while the interface imports, so nothing needs stopping: :func:`main` first answers each of these
signals with one line and exit 128+N, and only then imports the rest. While a command runs,
lifecycle's handlers (``sigterm_unwinds``) take over, stop what it started and end it the same
way; they hand back to these when it is done. Only the interpreter's own start-up, before this
module runs, is left to the defaults (exit 128+N from the shell's view, no line).
"""

from __future__ import annotations

import os
import signal

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the first lines stay short
if TYPE_CHECKING:
    from types import FrameType

#: The signals lifecycle.UNWINDING_SIGNALS names, without importing it (it imports the world).
_EARLY_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _end_before_anything_started(signum: int, _frame: FrameType | None) -> None:
    """One line and exit 128+N, at once: there is nothing to stop yet (or nothing left)."""
    if signum == signal.SIGINT:
        line = "lockcompare: interrupted"
    else:
        line = f"lockcompare: error: terminated by {signal.Signals(signum).name}"
    try:
        os.write(2, f"{line}\n".encode())
    except OSError:  # a closed stderr still gets the exit code
        pass
    os._exit(128 + signum)


def answer_signals_early() -> None:
    """Install :func:`_end_before_anything_started` for every signal that ends a command."""
    for sig in _EARLY_SIGNALS:
        signal.signal(sig, _end_before_anything_started)


def main() -> None:
    answer_signals_early()
    from lockcompare.cli import main as command_line

    command_line()


if __name__ == "__main__":
    main()
