"""``zk-lock``, ``zk-lock-checked``, ``zk-fenced``: kazoo's lock recipe on ZooKeeper, as its users run it.

``kazoo.recipe.lock.Lock`` exactly as kazoo's documentation shows it::

    zk = KazooClient(hosts=..., timeout=...)
    zk.start()
    lock = zk.Lock("/lockpath", "my-identifier")
    lock.acquire(timeout=...)         # blocks on a watch of its predecessor, up to the timeout
    ...
    lock.release()

One attempt waits up to one TTL (kazoo wakes it the moment its predecessor's znode goes, as it wakes
its users), then gives up (``LockTimeout``: ``held``); the harness retries, as for every backend.
Not ``acquire(blocking=False)``: kazoo retries that without end while the client is disconnected
(its recipe's retry has no deadline unless given a timeout), so a server restart would hang it.

kazoo queues a request made while it reconnects until the connection is back or the session is
declared lost (a server restart: seconds). The harness stops a worker whose call does not return
within 5 s, so each call here is bounded: the recipe's ``acquire`` runs in a thread given one TTL
+ the request timeout (a grant that arrives later is released at once, by that thread: no orphan
znode); ``release`` is the recipe's delete, sent asynchronously and awaited for the request
timeout (if the session survives the outage, the queued delete still runs at reconnect).

The recipe creates an ephemeral sequential znode under the lock's path; the lowest sequence holds
the lock. The znode lives as long as the client's *session*, not a lease: no deadline is returned
(``valid_until_ns=None``), because the holder has none to believe. A session ends when the server
has not heard from its client for the session timeout — under a frozen client (``client-pause``),
behind a partition, or when the server ends it (``session-kill``) — and then the server deletes the
znode and tells the next waiter it holds the lock, while the old holder still believes it does.

Session timeout: kazoo's default is 10 s (``KazooClient(timeout=10.0)``); here it is the trial's
TTL, so ``--time-scale`` scales it as it scales every lease. The embedded servers grant 100 ms and
up (infra/zookeeper/server.py), but kazoo keeps no session shorter than 500 ms alive: it pings at
random intervals of up to 400 ms, so a shorter session expires under its live holder
(infra/zookeeper/client.py KAZOO_MIN_SESSION_MS; the conformance battery's claim checks failed for
it at 150 ms, issue 48.3). A TTL below that is refused up front by :meth:`check_ttl`, so ``evaluate``
moves an experiment to a scale where it holds. The negotiated timeout is checked: a server that
grants another is an error, never silently used.

- ``zk-lock``: the recipe alone. The holder writes whatever its session did meanwhile.
- ``zk-lock-checked``: the holder looks at its connection state before the write, as careful users
  do (kazoo's ``add_listener``: SUSPENDED = connection lost, the session may still live; LOST = the
  session expired; Curator's advice: stop at SUSPENDED). It refuses the write unless the client is
  CONNECTED on the session that took the lock and saw no SUSPENDED/LOST since. It asks no server:
  a client frozen past its session timeout wakes still reading CONNECTED.
- ``zk-fenced``: the lock znode's creation zxid (``czxid``) as the fencing token, checked by the
  resource on every access (Kleppmann's recommendation, literally). A zxid is 64-bit,
  ``(epoch << 32) | counter``, strictly increasing across holders and across leader changes; it is
  handed on as a Python int.

Every session state change the client sees is recorded (``drain_renewals``: the history's ``renew``
events, ``reason`` connected / suspended / lost, with the session id): a session is a lease its
client's heartbeats renew, so a lost session is a failed renewal, and the history shows when the
holder learnt of it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

from lockcompare.backends.base import BackendConfig, Lease, Refusal
from lockcompare.backends.single import new_owner_token
from lockcompare.errors import BackendNotViableError, InvalidValueError, ReleaseFailed
from lockcompare.infra.zookeeper.client import KAZOO_MIN_SESSION_MS, kazoo_client_class
from lockcompare.infra.zookeeper.server import (
    EXPIRY_LAG_MS,
    find_zookeeper,
    hosts_of,
    lock_path,
    session_timeout_ms,
)


class ZkLock:
    """kazoo's ``Lock`` recipe; the session timeout is the trial's TTL."""

    summary: ClassVar[str] = (
        "ZooKeeper, kazoo's Lock recipe (ephemeral sequential znode): held while the session lives, "
        "session timeout = the TTL (kazoo's default 10 s)"
    )
    exclusive: ClassVar[bool] = True
    issues_fencing_tokens: ClassVar[bool] = False
    libraries: ClassVar[tuple[str, ...]] = ("kazoo",)  # recorded with their versions in every row
    survives_minority_loss: ClassVar[bool] = True
    #: No lease deadline: the session is the lease (the battery's TTL properties are NOT CLAIMED).
    has_ttl: ClassVar[bool] = False
    #: ...but the server ends the session (and deletes the lock znode) once it has not heard from the
    #: client for the session timeout, which is the TTL; a server crash or restart alone does not
    #: (the client reconnects to the same session). The checker ends the lease accordingly.
    session_timeout_is_ttl: ClassVar[bool] = True
    #: kazoo's Lock.acquire(timeout=...) waits inside the call on a watch of the znode before its own
    #: (the timing sentinel does not read that wait as the machine's stall).
    acquire_waits: ClassVar[bool] = True
    servers: ClassVar[str] = "zookeeper"
    #: kazoo's shortest session, not the server's (MIN_SESSION_MS): see the module docstring.
    min_ttl_ms: ClassVar[int] = KAZOO_MIN_SESSION_MS
    expiry_lag_ms: ClassVar[int] = EXPIRY_LAG_MS

    @classmethod
    def check_viable(cls) -> None:
        try:
            find_zookeeper()
            kazoo_client_class()
        except BackendNotViableError as exc:
            raise BackendNotViableError(f"the zk backends are not viable here: {exc}") from None

    @classmethod
    def check_ttl(cls, *, ttl_ms: int) -> None:
        session_timeout_ms(ttl_ms)
        if ttl_ms < KAZOO_MIN_SESSION_MS:
            raise InvalidValueError(
                f"kazoo keeps no ZooKeeper session shorter than {KAZOO_MIN_SESSION_MS} ms alive (it pings up to "
                f"400 ms apart), not a TTL of {ttl_ms:g} ms (use a larger --time-scale)"
            )

    def __init__(self, *, config: BackendConfig) -> None:
        # No connection yet: the session timeout is the TTL, which only acquire is told.
        self._hosts = hosts_of(config.node_urls)
        self._request_timeout_s = config.request_timeout_s
        self._client: Any = None
        self._timeout_ms = 0
        self._held: dict[str, Any] = {}  # owner -> the kazoo Lock behind it (one object per lease)
        self._states: list[dict[str, Any]] = []
        self._states_lock = threading.Lock()
        self._trouble_ns: dict[int, int] = {}  # session -> the latest SUSPENDED/LOST seen on it
        self._granted_ns: dict[str, int] = {}  # owner -> when its acquire returned

    # -- the session --------------------------------------------------------------------------

    def _session(self, ttl_ms: int) -> Any:
        timeout_ms = session_timeout_ms(ttl_ms)
        if self._client is not None and self._timeout_ms == timeout_ms:
            return self._client
        self._close_client()
        client = kazoo_client_class()(hosts=self._hosts, timeout=timeout_ms / 1000)
        client.add_listener(self._on_state)
        try:
            client.start(timeout=max(self._request_timeout_s, 1.0))
        except Exception:  # noqa: BLE001 - kazoo's handler timeout type; the next attempt starts again
            client.close()
            return None
        negotiated = getattr(client, "_session_timeout", timeout_ms)
        if negotiated != timeout_ms:
            client.stop()
            client.close()
            raise InvalidValueError(f"ZooKeeper granted a {negotiated} ms session when asked for {timeout_ms} ms")
        self._client, self._timeout_ms = client, timeout_ms
        return client

    def _on_state(self, state: str) -> bool:
        """kazoo's listener (its own thread; must not block): record the change."""
        now = time.monotonic_ns()
        client = self._client
        session = client.client_id[0] if client is not None and client.client_id else None
        with self._states_lock:
            if state != "CONNECTED" and session is not None:
                self._trouble_ns[session] = now
            self._states.append({"t0": now, "ok": state == "CONNECTED", "reason": state.lower(),
                                 "session": f"{session:#x}" if session is not None else None})  # fmt: skip
        return False  # stay registered

    def drain_renewals(self) -> list[dict[str, Any]]:
        """Session state changes since the last call (the history's ``renew`` events)."""
        with self._states_lock:
            states, self._states = self._states, []
        return states

    # -- the lock -----------------------------------------------------------------------------

    def acquire(self, *, key: str, ttl_ms: int) -> Lease | Refusal:
        from kazoo.exceptions import KazooException, LockTimeout

        client = self._session(ttl_ms)
        if client is None or not client.connected:
            state = "no session" if client is None else f"the client is {str(client.state).lower()}"
            return Refusal("error", f"ZooKeeper: {state}")  # kazoo's recipe retries without end while disconnected
        owner = new_owner_token()
        lock = client.Lock(lock_path(key), owner)
        attempt = _Attempt(lock, wait_s=ttl_ms / 1000)
        outcome = attempt.result(within_s=ttl_ms / 1000 + self._request_timeout_s)
        if isinstance(outcome, LockTimeout):
            return Refusal("held")
        if outcome is not True:
            # kazoo gave up (the connection was lost meanwhile), or it is still waiting
            return (
                Refusal.failed(outcome)
                if isinstance(outcome, BaseException)
                else Refusal("error", "ZooKeeper: no answer in time")
            )
        try:
            token = self._token(client, lock, timeout_s=self._request_timeout_s) if self.issues_fencing_tokens else None
        except KazooException as exc:
            self._delete(lock)
            return Refusal.failed(exc)
        # The session the znode belongs to: read after the grant (kazoo re-creates the znode in a new
        # session when the old one expired during the attempt).
        session = client.client_id[0]
        owner = f"{owner}.{session:x}.{lock.node}"
        self._held[owner] = lock
        self._granted_ns[owner] = time.monotonic_ns()
        return Lease(key=key, owner=owner, fencing_token=token)

    @staticmethod
    def _token(client: Any, lock: Any, *, timeout_s: float) -> int:
        from kazoo.exceptions import NoNodeError, OperationTimeoutError

        try:
            stat = client.exists_async(f"{lock.path}/{lock.node}").get(timeout=timeout_s)
        except client.handler.timeout_exception:  # kazoo's handler's own type, not a KazooException
            raise OperationTimeoutError() from None
        if stat is None:
            raise NoNodeError(f"{lock.path}/{lock.node} went before its czxid was read")
        return int(stat.czxid)  # a 64-bit zxid, (epoch << 32) | counter: an exact int, never a float

    def _delete(self, lock: Any, *, unanswered_raises: bool = False) -> bool:
        """The recipe's release (delete our znode), awaited for the request timeout: True if deleted
        now, False if it was gone with its session. A request that got no answer (the connection
        lost, still queued behind a reconnect) is False too, or with ``unanswered_raises`` a
        :class:`~lockcompare.errors.ReleaseFailed`: deleted or not, it cannot tell."""
        from kazoo.exceptions import KazooException, NoNodeError, SessionExpiredError

        try:
            lock.client.delete_async(f"{lock.path}/{lock.node}").get(timeout=self._request_timeout_s)
        except (NoNodeError, SessionExpiredError):
            return False  # gone with its session
        except (KazooException, lock.client.handler.timeout_exception) as exc:
            if unanswered_raises:
                raise ReleaseFailed(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
            return False
        lock.is_acquired = False
        return True

    def release(self, lease: Lease) -> bool:
        """True if this call deleted our znode, False if the session had ended; ReleaseFailed when
        the delete got no answer in time (the history then says the unlock failed, not "not held")."""
        self._granted_ns.pop(lease.owner, None)
        lock = self._held.pop(lease.owner, None)
        return False if lock is None else self._delete(lock, unanswered_raises=True)

    def _close_client(self) -> None:
        client, self._client = self._client, None
        self._held.clear()
        self._granted_ns.clear()
        if client is not None:
            try:
                client.stop()
            finally:
                client.close()

    def close(self) -> None:
        self._close_client()


class _Attempt:
    """kazoo's ``lock.acquire(timeout=...)`` in a thread, so that the worker's call is bounded."""

    def __init__(self, lock: Any, *, wait_s: float) -> None:
        self._lock = lock
        self._wait_s = wait_s
        self._handoff = threading.Lock()
        self._outcome: object = None
        self._done = threading.Event()
        self._abandoned = False
        threading.Thread(target=self._run, name="zk-acquire", daemon=True).start()

    def _run(self) -> None:
        try:
            outcome: object = self._lock.acquire(timeout=self._wait_s)
        except Exception as exc:  # noqa: BLE001 - handed to the caller, which maps it to a refusal
            outcome = exc
        with self._handoff:
            self._outcome = outcome
            self._done.set()
            late = self._abandoned and outcome is True
        if late:
            try:
                self._lock.release()  # nobody holds this grant: give it back at once
            except Exception:  # noqa: BLE001 - the session is gone, and the znode with it
                pass

    def result(self, *, within_s: float) -> object:
        """True (granted), False, or the exception; None if it did not end in time (abandoned)."""
        self._done.wait(within_s)
        with self._handoff:
            if not self._done.is_set():
                self._abandoned = True
                return None
            return self._outcome


class ZkLockChecked(ZkLock):
    """``zk-lock`` + the holder checks its connection state right before the write."""

    summary: ClassVar[str] = (
        "zk-lock + the holder checks its session state before the write (refuses after SUSPENDED/LOST), "
        "session timeout = the TTL"
    )

    def before_write(self, lease: Lease) -> Lease | Refusal:
        """``lease`` while the client is CONNECTED on the session that took it and saw no trouble
        since; ``Refusal("suspended")`` / ``Refusal("lost")`` otherwise. No request is made."""
        client = self._client
        session = int(lease.owner.split(".")[1], 16)
        if client is None or not client.client_id or client.client_id[0] != session:
            return Refusal("lost")  # kazoo replaced the expired session with a new one
        if client.state != "CONNECTED":
            return Refusal(str(client.state).lower())
        with self._states_lock:
            trouble = self._trouble_ns.get(session)
        if trouble is not None and trouble >= self._granted_ns.get(lease.owner, 0):
            return Refusal("suspended")  # disconnected since the grant: the lock may have gone meanwhile
        return lease


class ZkFencedLock(ZkLock):
    """``zk-lock`` + the lock znode's czxid as the fencing token, checked by the resource."""

    summary: ClassVar[str] = (
        "zk-lock + the lock znode's creation zxid (czxid) as fencing token, checked by the resource; "
        "session timeout = the TTL"
    )
    issues_fencing_tokens: ClassVar[bool] = True
