"""A lock whose client runs in a helper process that renews the lease: what a plug-in driving a
Node or Java lock client over a pipe looks like, in Python (plugins/renewing_child_client.py).

``RenewingChildLock``: SET NX PX on lock node 0 and owner-checked PEXPIRE renewals every TTL/3,
all made by the helper process; the worker only asks for them over stdin/stdout. The helper stays
in the worker's process group, so a pause of the worker freezes its renewals too.
``EscapingChildLock``: the same, but the helper calls ``os.setsid()`` first — a pause no longer
reaches it, and it renews the lease of a frozen holder (the false ``exclusive`` of issue 25).

Renewals are recorded by the helper (:class:`~lockcompare.backends.renewals.RenewalLog`) and
handed to the worker by :meth:`RenewingChildLock.drain_renewals`, which puts them into the
history as ``renew`` events like any renewing backend's.

Used by spec: ``plugins.renewing_child:RenewingChildLock`` (tests/ is on sys.path; from a shell,
``--plugin-path tests``).
"""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

from lockcompare.backends import BackendConfig, Lease, Refusal
from lockcompare.backends.base import first_node
from lockcompare.errors import BackendError

CLIENT = Path(__file__).with_name("renewing_child_client.py")
#: How long the helper may take to start (an interpreter importing redis-py) and to answer.
START_S = 30.0


class HelperFailed(BackendError):
    """The helper process did not answer (it died, or took longer than the deadline)."""


class RenewingChildLock:
    summary: ClassVar[str] = (
        "SET NX PX + owner-checked PEXPIRE every ttl/3, made by a helper process driven over a pipe"
    )
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    #: Extra arguments of the helper's command line.
    helper_args: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, config: BackendConfig) -> None:
        self._timeout_s = config.request_timeout_s + 1.0
        self._proc = subprocess.Popen(
            [sys.executable, str(CLIENT), first_node(config.node_urls), *self.helper_args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            self._reply("start", timeout_s=START_S)  # started when construct returns: before the trial's go
        except BaseException:
            self.close()
            raise

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise HelperFailed(f"the helper process is gone (exit code {self._proc.poll()})") from None
        return self._reply(request["op"], timeout_s=self._timeout_s)

    def _reply(self, op: str, *, timeout_s: float) -> dict[str, Any]:
        assert self._proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout_s):
                raise HelperFailed(f"the helper process did not answer {op} within {timeout_s:g} s")
        line = self._proc.stdout.readline()
        if not line:
            raise HelperFailed(f"the helper process exited (exit code {self._proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        reply = self._ask({"op": "acquire", "key": key, "ttl_ms": ttl_ms})
        if not reply["ok"]:
            return Refusal(reply["reason"])
        # Valid for a TTL from the request's start; renewals move the deadline the helper believes.
        return Lease(key=key, owner=reply["owner"], valid_until_ns=int(reply["t0"]) + ttl_ms * 1_000_000)

    def release(self, lease: Lease) -> bool:
        return bool(self._ask({"op": "release", "key": lease.key, "owner": lease.owner})["released"])

    def drain_renewals(self) -> list[dict[str, Any]]:
        """The helper's renewal records since the last call (the ``renew`` events of the history)."""
        events: list[dict[str, Any]] = self._ask({"op": "events"})["events"]
        return events

    def close(self) -> None:
        try:
            if self._proc.poll() is None and self._proc.stdin is not None:
                self._proc.stdin.write(json.dumps({"op": "close"}) + "\n")
                self._proc.stdin.close()
            self._proc.wait(timeout=2)
        except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


class EscapingChildLock(RenewingChildLock):
    summary: ClassVar[str] = (
        "as plugins.renewing_child:RenewingChildLock, but the helper calls os.setsid() (leaves the worker's group)"
    )
    helper_args: ClassVar[tuple[str, ...]] = ("--escape",)


class LingeringChildLock(RenewingChildLock):
    summary: ClassVar[str] = (
        "as plugins.renewing_child:RenewingChildLock, but the helper outlives its worker unless its group is ended"
    )
    helper_args: ClassVar[tuple[str, ...]] = ("--linger",)

    def close(self) -> None:
        """Leave the helper running, as a careless plug-in would: the runner must end it."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
