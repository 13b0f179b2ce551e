"""An ordinary backend class built from a manifest: each instance drives one external client process.

The class carries the manifest's claims as the class attributes every backend declares
(``exclusive``, ``issues_fencing_tokens``, ``survives_minority_loss``, ``servers``, ``has_ttl``,
``min_ttl_ms``, ``ttl_step_ms``, ``expiry_lag_ms``, ``session_timeout_is_ttl``, ``client_timeout_s``),
plus ``renews`` / ``checks_lease`` and where the key lives (``key_pattern`` / ``key_type``, read by
the runner's fault targeting). So ``run``, ``matrix``, ``bench``, ``evaluate``, ``explore`` and the
battery use it like any other backend.

How each call maps onto the protocol (docs/clients.md):

- construction starts the client and says ``hello``: the protocol version must match and the
  client's ``monotonic_ns`` must lie between our send and receive times (± :data:`CLOCK_SLACK_NS`):
  every deadline it reports is on CLOCK_MONOTONIC, the clock of the history. A client that fails
  this is refused with one line (:class:`~lockcompare.errors.ExternalClientError`).
- ``acquire`` is one attempt; a refusal keeps the client's reason (``held``, ``no-quorum``…). A
  reply that is late, malformed, or never comes because the client exited is a refusal too
  (``late``, ``malformed``, ``client-exited``), counted in the acquire event's refusals, and
  recorded as a ``client-reply`` event with the detail.
- ``release`` returns the client's ``released``; any problem is a release that did not happen.
- ``before_write`` (only when the manifest claims ``checks_lease``) asks ``check``: the lease with
  the deadline the library now believes, or a refusal (``lost``…).
- ``drain_renewals`` asks ``events`` (only when the manifest claims ``renews``) and hands the
  history what the library reported, with the client's start (``client``: library, version,
  runtime and the optional ``versions`` map, from ``hello``: each row records them,
  backends/versions.py) and exit (``client-exit``).
- ``stop_renewal`` SIGSTOPs the client until its next request: a language-neutral way to stop a
  watchdog without releasing (the battery's "free again after the TTL").

A client that exits (redis-semaphore's default ``onLockLost`` ends the Node process) loses every
lease it held: a check or a release of one is refused at once (``client-exited``), the exit is
recorded with the last lines of its stderr, and the next acquire starts a new client, as a process
supervisor would. A client that cannot be started again makes that acquire raise
:class:`~lockcompare.errors.ExternalClientError`: the trial is ``unknown``, with the reason.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Any, ClassVar

from lockcompare.backends.base import BackendConfig, Lease, Refusal
from lockcompare.backends.external.manifest import Manifest
from lockcompare.backends.external.pipe import ClientProcess, ReplyProblem
from lockcompare.errors import BackendNotViableError, ExternalClientError, InvalidValueError

#: How long a client may take to start and answer ``hello`` (Node: ~0.2 s here; a loaded CI more).
HELLO_TIMEOUT_S = 10.0
#: A reply may take the library's request timeout plus this for the hop and the runtime itself.
REPLY_MARGIN_S = 1.0
#: How far outside [send, receive] the client's ``monotonic_ns`` may be: a different clock (realtime,
#: a process-relative timer) is off by seconds to decades; the same clock is inside the interval.
CLOCK_SLACK_NS = 10_000_000


def _ns(value: object) -> int | None:
    """A time in ns from a reply: an integer, or a decimal string (JavaScript's doubles cannot hold
    CLOCK_MONOTONIC nanoseconds exactly past 104 days of uptime); None when absent or not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


class Malformed(Exception):
    """A reply that parsed as JSON but does not say what the protocol says it must."""


class ExternalBackend:
    """The base of every manifest-built backend; see the module docstring."""

    manifest: ClassVar[Manifest]
    summary: ClassVar[str]
    exclusive: ClassVar[bool]
    issues_fencing_tokens: ClassVar[bool]
    survives_minority_loss: ClassVar[bool] = False
    renews: ClassVar[bool] = False
    checks_lease: ClassVar[bool] = False
    has_ttl: ClassVar[bool] = True
    servers: ClassVar[str] = "redis"
    min_ttl_ms: ClassVar[int] = 0
    ttl_step_ms: ClassVar[int] = 0
    expiry_lag_ms: ClassVar[int] = 0
    session_timeout_is_ttl: ClassVar[bool] = False
    key_pattern: ClassVar[str] = "*{key}"
    key_type: ClassVar[str] = "string"
    external: ClassVar[bool] = True

    @classmethod
    def check_viable(cls) -> None:
        """Refuse, with what to install, a client whose command or dependencies are missing here."""
        manifest = cls.manifest
        program = manifest.command[0]
        found = (
            (manifest.directory / program).is_file() and os.access(manifest.directory / program, os.X_OK)
            if "/" in program
            else shutil.which(program) is not None
        )
        # A built program the manifest also requires (clients/go's binary) is named once, as missing.
        missing = [] if found or program in manifest.requires else [f"{program!r} not found"]
        missing += [f"{path} missing" for path in manifest.requires if not (manifest.directory / path).exists()]
        if missing:
            hint = f" (install: {manifest.install})" if manifest.install else ""
            # No backend name in it: the clients of one directory share the line that skips them.
            raise BackendNotViableError(f"not viable here: {', '.join(missing)} in {manifest.directory}{hint}")

    @classmethod
    def check_ttl(cls, *, ttl_ms: int) -> None:
        if ttl_ms < cls.min_ttl_ms:
            raise InvalidValueError(
                f"backend {cls.manifest.name!r} needs a TTL of at least {cls.min_ttl_ms} ms (its library refuses "
                f"shorter ones); got {ttl_ms} ms"
            )
        if cls.ttl_step_ms and ttl_ms % cls.ttl_step_ms:
            raise InvalidValueError(
                f"backend {cls.manifest.name!r} takes TTLs in multiples of {cls.ttl_step_ms} ms (its library grants "
                f"nothing else); got {ttl_ms} ms (choose a --time-scale that makes the TTL one)"
            )

    def __init__(self, *, config: BackendConfig) -> None:
        manifest = self.manifest
        self._config = config
        urls = config.node_urls if config.node_count is None else config.node_urls[: config.node_count]
        self._nodes = tuple(urls)
        self._reply_timeout_s = manifest.reply_timeout_s or config.request_timeout_s + REPLY_MARGIN_S
        self._records: list[dict[str, Any]] = []
        self._generation = 0
        self._held: dict[str, int] = {}  # owner -> the generation of the client that holds it
        self._exit_recorded = True
        self._library_ns = 0
        self.hello: dict[str, Any] = {}
        self._client = self._start()

    # --- the client's life -----------------------------------------------------------------------

    def _start(self) -> ClientProcess:
        manifest = self.manifest
        label = f"client {manifest.name!r}"
        try:
            client = ClientProcess(command=manifest.command, cwd=manifest.directory, label=label)
        except OSError as exc:
            raise ExternalClientError(f"{label}: {exc}") from None
        t_send = time.monotonic_ns()
        reply = client.request(
            "hello",
            timeout_s=HELLO_TIMEOUT_S,
            protocol=manifest.protocol,
            nodes=list(self._nodes),
            request_timeout_ms=round(self._config.request_timeout_s * 1000),
        )
        t_recv = time.monotonic_ns()
        problem = _hello_problem(reply, protocol=manifest.protocol, t_send=t_send, t_recv=t_recv)
        if problem:
            client.kill()
            raise ExternalClientError(f"{label}: {problem}")
        assert isinstance(reply, dict)
        self.hello = {name: str(reply.get(name, "")) for name in ("library", "version", "runtime")}
        versions = reply.get("versions")  # optional (docs/clients.md): package -> version, what the row records
        if isinstance(versions, dict) and versions:
            self.hello["versions"] = {str(name): str(value) for name, value in list(versions.items())[:12]}
        self._generation += 1
        self._exit_recorded = False
        self._records.append({"kind": "client", "t0": t_send, "t1": t_recv, "pid": client.pid, **self.hello})
        return client

    def _alive(self) -> bool:
        """Is the client running? The first time its exit is seen, the exit and the leases it took
        with it are recorded (before a release forgets them)."""
        exit_ = self._client.exit
        if exit_ is None:
            return True
        if not self._exit_recorded:
            self._exit_recorded = True
            lost = [owner for owner, generation in self._held.items() if generation == self._generation]
            self._records.append(
                {"kind": "client-exit", "t0": exit_.at_ns, "code": exit_.code, "stderr": exit_.stderr, "holding": lost}
            )
            for owner in lost:  # the leases it kept are gone with it
                self._records.append(
                    {"t0": exit_.at_ns, "t1": exit_.at_ns, "ok": False, "owner": owner, "valid_until": None,
                     "reason": "client-exited"}
                )  # fmt: skip
        return False

    def _call(self, op: str, **fields: Any) -> dict[str, Any] | ReplyProblem:
        t0 = time.monotonic_ns()
        if not self._alive():
            reply: dict[str, Any] | ReplyProblem = ReplyProblem("exited", f"{self._client.label} has exited")
        else:
            reply = self._client.request(op, timeout_s=self._reply_timeout_s, **fields)
        if isinstance(reply, ReplyProblem):
            self._note(op, reply.kind, reply.detail, t0=t0)
        return reply

    def _note(self, op: str, problem: str, detail: str, *, t0: int) -> None:
        self._records.append(
            {
                "kind": "client-reply",
                "t0": t0,
                "t1": time.monotonic_ns(),
                "op": op,
                "problem": problem,
                "detail": detail,
            }
        )

    def _malformed(self, op: str, what: str, *, t0: int) -> Refusal:
        self._note(op, "malformed", what, t0=t0)
        return Refusal("malformed")

    def _count_library(self, reply: dict[str, Any]) -> None:
        spent = _ns(reply.get("library_ns"))
        if spent is not None and spent >= 0:
            self._library_ns += spent

    def take_library_ns(self) -> int:
        """Time spent inside the library (as the client reported it) since the last call: the bench's
        "library" column, beside the hop's cost."""
        spent, self._library_ns = self._library_ns, 0
        return spent

    # --- the backend protocol --------------------------------------------------------------------

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        if not self._alive():
            self._client.kill()
            self._client = self._start()  # a supervisor restarts what crashed; a failed restart raises
        t0 = time.monotonic_ns()
        reply = self._call("acquire", key=key, ttl_ms=ttl_ms)
        if isinstance(reply, ReplyProblem):
            if reply.kind == "exited":
                return Refusal("client-exited", str(reply.detail))
            return Refusal(reply.kind)  # late, malformed: their detail is a client-reply event already
        self._count_library(reply)
        ok = reply.get("ok")
        if ok is False:
            reason = reply.get("reason") or ("error" if reply.get("error") else "held")
            return Refusal(str(reason), str(reply.get("error") or ""))  # the client's own message, if any
        owner = reply.get("owner")
        if ok is not True or not isinstance(owner, str) or not owner:
            if isinstance(owner, str) and owner:  # a grant we cannot use: do not leave it behind
                self._client.notify("release", key=key, owner=owner)
            return self._malformed("acquire", f"no ok/owner in {str(reply)[:120]}", t0=t0)
        try:
            lease = Lease(
                key=key,
                owner=owner,
                valid_until_ns=self._deadline(reply),
                fencing_token=_optional_int(reply, "token"),
                granted_by=_granted_by(reply.get("granted_by"), nodes=len(self._nodes)),
            )
        except Malformed as exc:
            self._client.notify("release", key=key, owner=owner)
            return self._malformed("acquire", str(exc), t0=t0)
        self._held[owner] = self._generation
        return lease

    def _deadline(self, reply: dict[str, Any]) -> int | None:
        raw = reply.get("valid_until")
        deadline = _ns(raw)
        if deadline is None and (raw is not None or self.has_ttl):
            raise Malformed(f"valid_until {raw!r} is not a CLOCK_MONOTONIC time in ns")
        return deadline

    def _gone_with_client(self, lease: Lease) -> bool:
        """Did ``lease`` go with a client that exited (this one, or one before it)?"""
        generation = self._held.get(lease.owner)
        return not self._alive() or (generation is not None and generation != self._generation)

    def release(self, lease: Lease) -> bool:
        gone = self._gone_with_client(lease)
        self._held.pop(lease.owner, None)
        if gone:
            return False  # its client exited: the lease went with it
        t0 = time.monotonic_ns()
        reply = self._call("release", key=lease.key, owner=lease.owner)
        if isinstance(reply, ReplyProblem):
            return False
        self._count_library(reply)
        released = reply.get("released")
        if not isinstance(released, bool):
            self._malformed("release", f"released is {released!r}, expected true or false", t0=t0)
            return False
        return released

    def extend(self, lease: Lease, *, ttl_ms: int) -> Lease | Refusal:
        """One extension of ``lease`` by ``ttl_ms`` (the library's own extend), if the client has one."""
        if self._gone_with_client(lease):
            return Refusal("client-exited")
        t0 = time.monotonic_ns()
        reply = self._call("extend", key=lease.key, owner=lease.owner, ttl_ms=ttl_ms)
        if isinstance(reply, ReplyProblem):
            return Refusal("client-exited" if reply.kind == "exited" else reply.kind)
        if reply.get("ok") is not True:
            return Refusal(str(reply.get("reason") or "error"))
        try:
            return dataclasses.replace(lease, valid_until_ns=self._deadline(reply))
        except Malformed as exc:
            return self._malformed("extend", str(exc), t0=t0)

    def drain_renewals(self) -> list[dict[str, Any]]:
        """What the library reported since the last call (``events``), with the client's starts,
        exits, late grants and reply problems, oldest first; each record becomes a history event."""
        if self.renews and self._alive():
            t0 = time.monotonic_ns()
            reply = self._call("events")
            if isinstance(reply, dict):
                self._records.extend(self._renewals(reply, t0=t0))
        for grant in self._client.late_grants:
            self._records.append({"kind": "client-late-grant", **grant})
        self._client.late_grants.clear()
        self._alive()  # records an exit not seen yet
        records, self._records = sorted(self._records, key=lambda r: r["t0"]), []
        return records

    def _renewals(self, reply: dict[str, Any], *, t0: int) -> list[dict[str, Any]]:
        events = reply.get("events")
        if not isinstance(events, list):
            self._note("events", "malformed", f"events is {str(events)[:80]}, expected a list", t0=t0)
            return []
        records = []
        for event in events:
            start = _ns(event.get("t0")) if isinstance(event, dict) else None
            ok = event.get("ok") if isinstance(event, dict) else None
            if start is None or not isinstance(ok, bool):
                self._note("events", "malformed", f"an event without t0/ok: {str(event)[:80]}", t0=t0)
                continue
            assert isinstance(event, dict)
            reason = event.get("reason")
            records.append(
                {
                    "t0": start,
                    "t1": _ns(event.get("t1")) or start,
                    "ok": ok,
                    "owner": str(event.get("owner", "")),
                    "valid_until": _ns(event.get("valid_until")) if ok else None,
                    # A renewal may say what it was (a heartbeat: "ping"); a loss always says why.
                    "reason": (str(reason) if reason else None) if ok else str(reason or "lost"),
                }
            )
        return records

    def stop_renewal(self, lease: Lease) -> None:
        """Freeze the client (SIGSTOP) until its next request: its renewals stop, nothing is released."""
        self._client.stop()

    def close(self) -> None:
        self._client.close(timeout_s=self._reply_timeout_s)


class CheckingExternalBackend(ExternalBackend):
    """A manifest that claims ``checks_lease``: the worker asks ``check`` right before its write."""

    def before_write(self, lease: Lease) -> Lease | Refusal:
        if self._gone_with_client(lease):
            return Refusal("client-exited")
        t0 = time.monotonic_ns()
        reply = self._call("check", key=lease.key, owner=lease.owner)
        if isinstance(reply, ReplyProblem):
            return Refusal("client-exited" if reply.kind == "exited" else reply.kind)
        valid = reply.get("valid")
        if not isinstance(valid, bool):
            return self._malformed("check", f"valid is {valid!r}, expected true or false", t0=t0)
        if not valid:
            return Refusal(str(reply.get("reason") or "lost"))
        try:
            return dataclasses.replace(lease, valid_until_ns=self._deadline(reply))
        except Malformed as exc:
            return self._malformed("check", str(exc), t0=t0)


def _optional_int(reply: dict[str, Any], name: str) -> int | None:
    value = reply.get(name)
    if value is None:
        return None
    number = _ns(value)
    if number is None:
        raise Malformed(f"{name} {value!r} is not an integer")
    return number


def _granted_by(value: object, *, nodes: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(i, int) and 0 <= i < nodes for i in value):
        raise Malformed(f"granted_by {value!r} is not a list of node indices below {nodes}")
    return tuple(value)


def _hello_problem(reply: dict[str, Any] | ReplyProblem, *, protocol: int, t_send: int, t_recv: int) -> str:
    """Why the handshake fails ("" if it passes)."""
    if isinstance(reply, ReplyProblem):
        return f"no hello: {reply.detail if reply.kind != 'late' else f'no reply within {HELLO_TIMEOUT_S:g} s'}"
    if reply.get("ok") is not True:
        return f"hello refused: {str(reply.get('error') or reply)[:160]}"
    if reply.get("protocol") != protocol:
        return f"speaks protocol {reply.get('protocol')!r}, the manifest says {protocol}"
    now = _ns(reply.get("monotonic_ns"))
    if now is None:
        return f"hello has no monotonic_ns (got {reply.get('monotonic_ns')!r})"
    if not t_send - CLOCK_SLACK_NS <= now <= t_recv + CLOCK_SLACK_NS:
        off_ms = (now - (t_send + t_recv) // 2) / 1e6
        return (
            f"its clock is not CLOCK_MONOTONIC: it reported {now} ns, {off_ms:+.1f} ms from ours "
            f"(bound ±{CLOCK_SLACK_NS / 1e6:g} ms); every deadline it reports would be wrong"
        )
    return ""


def backend_class(manifest: Manifest) -> type[ExternalBackend]:
    """A backend class for ``manifest``: its claims as the class attributes the harness reads."""
    traits = manifest.traits()
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": f"{manifest.summary}\n\nAn external client: {' '.join(manifest.command)} ({manifest.path}).",
        "manifest": manifest,
        # Declared as any backend declares them (docs/plugins.md), so traits_of reads them the same way.
        **{name: value for name, value in vars(traits).items() if value is not None},
    }
    base = CheckingExternalBackend if traits.checks_lease else ExternalBackend
    name = "".join(part.capitalize() for part in manifest.name.replace("_", "-").split("-") if part) or "External"
    return type(name, (base,), attrs)
