"""Connections to Redis servers that fail fast: the only way lockcompare opens one.

redis-py retries a failed connection by default (exponential backoff, ten times: a PING to a dead
port took 3.9 s on the measuring machine). In a timing experiment a hidden retry is a hidden pause,
so every connection here has retries off and short socket timeouts. redis-py itself is imported
when a connection is opened: checking a URL or naming the password variable (the CLI's options)
needs no client library.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import parse_qs, urlsplit

from lockcompare.errors import ConfigError, InvalidURLError, NodeUnreachableError
from lockcompare.redaction import redact, shown  # the one redaction function (others import it from here too)
from lockcompare.urls import parse_url

if TYPE_CHECKING:
    import redis

_SCHEMES = ("redis", "rediss", "unix")
#: A lock node behind Sentinel: redis+sentinel://HOST:PORT/MASTER?sentinels=P1,P2,P3 (infra/sentinel/).
SENTINEL_SCHEME = "redis+sentinel"

#: Default socket timeout: generous next to a loopback round trip (~0.15 ms), small next to a run.
DEFAULT_TIMEOUT_S = 2.0


def is_redis_url(url: str) -> bool:
    """Whether ``url`` names a Redis-protocol server by its scheme (what the redis kind owns).

    >>> is_redis_url("redis://127.0.0.1:7000/0"), is_redis_url("unix:///tmp/r.sock"), is_redis_url("postgresql://x/y")
    (True, True, False)
    """
    return url.startswith(tuple(f"{scheme}://" for scheme in _SCHEMES))


def validate_url(url: str) -> str:
    """Return ``url`` if it is a usable redis URL, else raise :class:`InvalidURLError`.

    >>> validate_url("redis://127.0.0.1:7000/0")
    'redis://127.0.0.1:7000/0'
    """
    address = parse_url(url)
    if address.scheme not in _SCHEMES:
        raise InvalidURLError(f"not a redis URL: {shown(url)!r} (expected e.g. redis://127.0.0.1:6379/0)")
    if address.scheme == "unix":
        if not address.path:
            raise InvalidURLError(f"unix URL without a socket path: {shown(url)!r}")
        return url.strip()
    if address.problem == "bad port":
        raise InvalidURLError(f"bad port in redis URL: {shown(url)!r}")
    if address.problem:
        raise InvalidURLError(f"bad redis URL ({address.problem}): {shown(url)!r}")
    if not address.host or address.port is None:
        raise InvalidURLError(f"redis URL needs a host and a port: {shown(url)!r}")
    db = address.path.lstrip("/")
    if db and not (db.isascii() and db.isdigit()):
        raise InvalidURLError(f"bad database number in redis URL: {shown(url)!r}")
    return url.strip()


def parse_url_list(text: str) -> list[str]:
    """Split a comma-separated list of redis URLs, validating each; the same server twice is refused
    (five copies of one node are not five nodes: a Redlock over them can never reach a quorum)."""
    urls = [u for u in (part.strip() for part in text.split(",")) if u]
    if not urls:
        raise InvalidURLError("empty list of redis URLs")
    seen: set[str] = set()
    for url in urls:
        validate_url(url)
        if url in seen:
            raise InvalidURLError(f"{redact(url)} is listed twice: give each lock node once")
        seen.add(url)
    return urls


#: A password for the user's servers whose URLs carry none (as redis-cli's REDISCLI_AUTH), so that
#: it appears on no command line ``ps`` shows; lockcompare never writes it anywhere.
PASSWORD_ENV = "LOCKCOMPARE_REDIS_PASSWORD"


def with_env_password(url: str) -> str:
    """``url`` with ``$LOCKCOMPARE_REDIS_PASSWORD`` as its password when it has none (redis/rediss).

    The URL lives in memory only: messages show it through :func:`redact`, the registry and the
    CSV never hold it.
    """
    password = os.environ.get(PASSWORD_ENV)
    address = parse_url(url)
    if not password or address.scheme not in ("redis", "rediss") or address.password is not None:
        return url
    return replace(address, password=password).to_url()


def connect(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> redis.Redis:
    """A client for ``url`` with no retries and ``timeout_s`` socket timeouts (on a ``redis+sentinel://``
    URL: on the master its sentinels name, asked again on every new connection: infra/sentinel/)."""
    if url.startswith(f"{SENTINEL_SCHEME}://"):
        return _master_client(url, timeout_s=timeout_s)
    import redis  # here, not at the top: parsing a URL or reading a results file needs no client library
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # Not redis-py's from_url: urllib's parser under it raises on a full-width character in a
    # password (issue 38); the one parser here never does, and validate_url checked the rest.
    address = parse_url(url)
    where: dict[str, object] = (
        {"unix_socket_path": address.path}
        if address.scheme == "unix"
        else {"host": address.host, "port": address.port or 6379, "ssl": address.scheme == "rediss"}
    )
    db = address.query_value("db") if address.scheme == "unix" else address.path.lstrip("/")
    return redis.Redis(
        **where,  # type: ignore[arg-type]
        db=int(db) if db and db.isascii() and db.isdigit() else 0,
        username=address.user or address.query_value("username") or None,
        password=address.password or address.query_value("password") or None,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        decode_responses=False,
        health_check_interval=0,
    )


def sentinel_url(*, service: str, ports: Sequence[int]) -> str:
    return f"{SENTINEL_SCHEME}://127.0.0.1:{ports[0]}/{service}?sentinels={','.join(map(str, ports))}"


def parse_sentinel_url(url: str) -> tuple[str, list[tuple[str, int]]]:
    """(service name, sentinel addresses) of a ``redis+sentinel://`` URL."""
    parts = urlsplit(url)
    service = parts.path.strip("/")
    host = parts.hostname or "127.0.0.1"
    ports = parse_qs(parts.query).get("sentinels", [""])[0]
    addresses = [(host, int(p)) for p in ports.split(",") if p.strip().isdigit()] or [(host, parts.port or 26379)]
    if not service:
        raise ConfigError(
            f"a {SENTINEL_SCHEME}:// URL names its master: {SENTINEL_SCHEME}://HOST:PORT/NAME, got {url!r}"
        )
    return service, addresses


def _master_client(url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> redis.Redis:
    """A redis-py client on the master the sentinels name now (asked again on every new connection);
    no retries and ``timeout_s`` socket timeouts, as :func:`connect`."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redis.sentinel import Sentinel

    service, addresses = parse_sentinel_url(url)
    sentinel = Sentinel(
        addresses,
        sentinel_kwargs={
            "socket_timeout": timeout_s,
            "socket_connect_timeout": timeout_s,
            "retry": Retry(NoBackoff(), 0),
        },
    )
    return sentinel.master_for(
        service,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        retry_on_timeout=False,
        health_check_interval=0,
    )


T = TypeVar("T")

#: How many servers' admin clients :func:`admin_call` keeps (least recently used dropped first): a
#: few clusters in flight and their spares, 6 servers each; a client of a server stopped since
#: holds a closed socket until it is dropped.
ADMIN_CLIENTS_KEPT = 48
_admin_clients: OrderedDict[tuple[str, float], redis.Redis] = OrderedDict()
_admin_lock = threading.Lock()


def admin_call(url: str, call: Callable[[redis.Redis], T], *, timeout_s: float) -> T:
    """``call(client)`` on a client of ``url`` kept for the runner's own short commands (health
    PINGs, FLUSHALL, a trial's key clean-up), so a check costs one round trip, not a new connection
    with its handshake (profiled: ~40 connections per trial, 0.4 ms of the runner's CPU each).

    A kept connection that the server closed (it was stopped, crashed or restarted on its port) is
    opened again once before the error counts, so the answer is what a new connection would get;
    a timeout is not retried (a frozen server is judged as fast as before). A ``redis+sentinel://``
    URL gets a new connection every time: its master is asked again on each one.
    """
    import redis

    if url.startswith("redis+sentinel://"):
        client = connect(url, timeout_s=timeout_s)
        try:
            return call(client)
        finally:
            client.close()
    key = (url, timeout_s)
    with _admin_lock:
        client = _admin_clients[key] if key in _admin_clients else connect(url, timeout_s=timeout_s)
        _admin_clients[key] = client
        _admin_clients.move_to_end(key)  # the most recently used last
        dropped = [
            _admin_clients.popitem(last=False)[1] for _ in range(max(0, len(_admin_clients) - ADMIN_CLIENTS_KEPT))
        ]
    for old in dropped:
        old.close()
    try:
        return call(client)
    except redis.TimeoutError:
        raise
    except redis.ConnectionError:  # a connection closed since its last use: the pool opens a new one
        return call(client)


def ping(url: str, *, timeout_s: float = 1.0) -> None:
    """Raise :class:`NodeUnreachableError` unless the server at ``url`` answers PING."""
    import redis

    client = connect(url, timeout_s=timeout_s)
    try:
        client.ping()
    except (redis.AuthenticationError, redis.AuthenticationWrongNumberOfArgsError) as exc:
        raise NodeUnreachableError(f"redis server {redact(url)} refuses the password: {exc}") from None
    except redis.ResponseError as exc:  # NOAUTH (a password needed), or a database number it lacks
        raise NodeUnreachableError(f"redis server {redact(url)} refuses the connection: {exc}") from None
    except redis.RedisError as exc:
        raise NodeUnreachableError(f"redis server {redact(url)} does not answer: {exc}") from None
    finally:
        client.close()


def server_run_id(url: str) -> str:
    """The ``run_id`` a server reports in ``INFO server`` (one per redis-server process), or ""."""
    import redis

    client = connect(url, timeout_s=1.0)
    try:
        return str(client.info("server").get("run_id", ""))
    except redis.RedisError:
        return ""
    finally:
        client.close()
