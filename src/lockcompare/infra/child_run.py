"""A child process a command waits on (a toolchain's build, npm ci, initdb), ended with the command.

``subprocess.run`` waits inside the subprocess module, which lifecycle's signal handler must not
unwind (it may hold a lock there, see ``_UNSAFE_MODULES``): a Ctrl-C, SIGTERM or SIGHUP was held
back until the child ended — up to 15 minutes for a client's build — and then lost, the command
going on to exit 1 without a word (issue 49). :func:`run_child` starts the child in a process
group of its own and waits in a loop of its own, where the handler's exception lands at once;
the child's whole group is then ended (SIGTERM, SIGKILL after a grace) before the exception goes
on to the command's one line and its exit code (130, 143, 129).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lockcompare.infra.procgroup import sweep_group

#: How often the wait looks at the child: also the longest a signal waits to be acted on.
POLL_S = 0.05
#: How long the child's group has to end after SIGTERM before it is SIGKILLed.
GRACE_S = 2.0


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


def run_child(
    command: Sequence[str],
    *,
    timeout_s: float,
    cwd: Path | None = None,
    user: int | None = None,
    group: int | None = None,
) -> Finished:
    """Run ``command`` (in ``cwd``, as ``user``:``group`` if given) to its end, its output captured;
    :class:`subprocess.TimeoutExpired` after ``timeout_s`` (its group ended). Any exception while
    it runs — the signal handler's KeyboardInterrupt or Terminated — ends its group first and then
    goes on."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            list(command), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
            user=user, group=group,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + timeout_s
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(list(command), timeout_s)
                time.sleep(POLL_S)
        except BaseException:
            end_group(proc)
            raise
        sweep_group(proc.pid)  # a helper it left behind in its group
        out.seek(0)
        err.seek(0)
        return Finished(proc.returncode, _text(out.read()), _text(err.read()))


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """End the group ``proc`` leads: SIGTERM (npm and the builds clean up after it), SIGKILL after
    :data:`GRACE_S`, then reap it."""
    try:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
    finally:  # a second Ctrl-C cuts the grace short, never the kill
        sweep_group(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


def _text(data: bytes) -> str:
    return data.decode(errors="replace")
