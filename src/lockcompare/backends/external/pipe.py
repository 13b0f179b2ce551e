"""The harness's side of the external-client protocol: one child process, JSON lines both ways.

One request at a time goes down the child's stdin as one JSON object per line with an ``id``; the
reply with the same ``id`` comes up its stdout. What can go wrong is never an exception that
escapes a backend call (see :class:`ReplyProblem`): a reply that does not come within the reply
timeout is *late*, a line that is not a JSON object with the request's ``id`` is *malformed*, and a
child that exits (or closes its stdout) has *exited*. A late reply that turns up later is read and
discarded (a late grant is released at once, since nobody will use it). The child's stderr is
drained by a thread (a Node stack trace never reaches the terminal) and its last lines name the
cause when the child exits.

The child inherits the worker's process group (a pause of the worker's group freezes it too) and
dies with the worker (PR_SET_PDEATHSIG, set between fork and exec).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockcompare.infra.lifecycle import die_with_parent

#: How many of the child's last stderr lines are kept to explain its exit.
STDERR_LINES = 20
#: A reply line longer than this is malformed (a client that floods stdout must not exhaust memory).
MAX_LINE_BYTES = 1 << 20
#: How long ``close`` waits for the child to exit by itself before it is killed.
CLOSE_GRACE_S = 1.0
#: How long a child whose stdout closed is given to report its exit code (describe_exit).
EXIT_GRACE_S = 1.0


@dataclass(frozen=True)
class ReplyProblem:
    """Why a request got no usable reply: ``late``, ``malformed`` or ``exited`` (with the detail)."""

    kind: str
    detail: str


@dataclass(frozen=True)
class Exit:
    """The child's end: its exit code (negative: the signal) and when it was seen (monotonic ns)."""

    code: int | None
    at_ns: int
    stderr: str


class ClientProcess:
    """One running client. Not thread-safe: the worker's thread makes every call."""

    def __init__(self, *, command: Sequence[str], cwd: Path, label: str) -> None:
        self.label = label
        self._next_id = 1
        self._buffer = b""
        self._abandoned: dict[int, str] = {}  # request id -> op, for requests given up on
        self.late_grants: list[dict[str, Any]] = []  # late acquire grants seen (released at once)
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._exit: Exit | None = None
        self._exit_lock = threading.Lock()
        self._stopped = False
        try:
            self._proc = subprocess.Popen(
                list(command),
                cwd=cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                bufsize=0,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - only prctl runs between fork and exec
            )
        except OSError as exc:
            raise OSError(f"cannot start {' '.join(command)!r} in {cwd}: {exc.strerror or exc}") from None
        self._stderr_thread = threading.Thread(target=self._drain_stderr, name=f"{label} stderr", daemon=True)
        self._stderr_thread.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def exit(self) -> Exit | None:
        """The child's exit once seen (its stderr closed and it was reaped), else None."""
        with self._exit_lock:
            return self._exit

    def _drain_stderr(self) -> None:
        stream = self._proc.stderr
        assert stream is not None
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip()
            if line:
                self._stderr.append(line)
        code = self._proc.wait()
        with self._exit_lock:
            self._exit = Exit(code=code, at_ns=time.monotonic_ns(), stderr=self.stderr_tail())

    def stderr_tail(self, lines: int = 2) -> str:
        """The child's last stderr lines, led by its last error message (a Node crash ends with a
        stack trace and a version line: the ``LostLockError: …`` line says why)."""
        kept = list(self._stderr)
        errors = [line for line in kept if "Error" in line and not line.lstrip().startswith("at ")]
        tail = kept[-lines:]
        if errors and errors[-1] not in tail:
            tail = [errors[-1], *tail[-1:]]
        return " | ".join(tail)

    def describe_exit(self) -> str:
        """How the child ended, once its stdout closed. A child that is exiting closes its stdout a
        moment before the kernel reports its exit code (a `false` client: "closed its stdout" one time
        in many under load), so its code is awaited for up to :data:`EXIT_GRACE_S`."""
        try:
            code = self._proc.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            return "closed its stdout"
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        tail = self.stderr_tail()
        return f"{how}" + (f" ({tail})" if tail else "")

    # --- requests --------------------------------------------------------------------------------

    def request(self, op: str, *, timeout_s: float, **fields: Any) -> dict[str, Any] | ReplyProblem:
        """Send one request and wait for its reply; a :class:`ReplyProblem` instead of raising."""
        self.resume()
        request_id = self._next_id
        self._next_id += 1
        try:
            self._send({"id": request_id, "op": op, **fields})
        except OSError:
            return ReplyProblem("exited", f"{self.label} {self.describe_exit()}")
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._read_line(deadline)
            if isinstance(line, ReplyProblem):
                if line.kind == "late":
                    self._abandoned[request_id] = op
                return line
            try:
                reply = json.loads(line)
            except ValueError:
                self._abandoned[request_id] = op
                return ReplyProblem("malformed", f"not JSON: {_clip(line)}")
            if not isinstance(reply, dict) or "id" not in reply:
                self._abandoned[request_id] = op
                return ReplyProblem("malformed", f"not an object with an id: {_clip(line)}")
            if reply["id"] == request_id:
                return reply
            self._stale(reply)  # a reply to a request given up on earlier

    def notify(self, op: str, **fields: Any) -> None:
        """Send a request whose reply nobody waits for (it is read and discarded later)."""
        request_id = self._next_id
        self._next_id += 1
        self._abandoned[request_id] = op
        with contextlib.suppress(OSError):
            self._send({"id": request_id, "op": op, **fields})

    def _send(self, message: dict[str, Any]) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def _stale(self, reply: dict[str, Any]) -> None:
        op = self._abandoned.pop(reply["id"], None) if isinstance(reply.get("id"), int) else None
        if op == "acquire" and reply.get("ok") is True and isinstance(reply.get("owner"), str):
            # Granted after we gave up: nobody holds it as far as the worker knows, so let it go.
            self.late_grants.append({"t0": time.monotonic_ns(), "owner": reply["owner"]})
            self.notify("release", key=reply.get("key", ""), owner=reply["owner"])

    def _read_line(self, deadline: float) -> str | ReplyProblem:
        """The next non-empty line of the child's stdout, or why there is none by ``deadline``."""
        stdout = self._proc.stdout
        assert stdout is not None
        fd = stdout.fileno()
        while True:
            if b"\n" in self._buffer:
                raw, _, self._buffer = self._buffer.partition(b"\n")
                line = raw.decode(errors="replace").strip()
                if line:
                    return line
                continue
            if len(self._buffer) > MAX_LINE_BYTES:
                self._buffer = b""
                return ReplyProblem("malformed", f"a reply line longer than {MAX_LINE_BYTES} bytes")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return ReplyProblem("late", f"{self.label} did not reply in time")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=0.5)  # so that the exit code can be named
                return ReplyProblem("exited", f"{self.label} {self.describe_exit()}")
            self._buffer += chunk

    # --- process control -------------------------------------------------------------------------

    def stop(self) -> None:
        """SIGSTOP the child (its timers and renewals freeze) until the next request resumes it."""
        if self._proc.poll() is None and not self._stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGSTOP)
            self._stopped = True

    def resume(self) -> None:
        if self._stopped:
            self._stopped = False
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGCONT)

    def close(self, *, timeout_s: float) -> None:
        """Ask the child to close, then make sure it is gone (killed after a grace period) and reaped."""
        if self._proc.poll() is None:
            reply = self.request("close", timeout_s=timeout_s)
            del reply  # whatever it says, the process ends here
        for stream in (self._proc.stdin,):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        try:
            self._proc.wait(timeout=CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            self.resume()
            self._proc.kill()
            self._proc.wait()
        self._stderr_thread.join(timeout=CLOSE_GRACE_S)
        with contextlib.suppress(OSError):
            if self._proc.stdout is not None:
                self._proc.stdout.close()

    def kill(self) -> None:
        if self._proc.poll() is None:
            self.resume()
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        self._proc.wait()
        self._stderr_thread.join(timeout=CLOSE_GRACE_S)


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
