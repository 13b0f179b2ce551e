"""The pause point inside an acquire: after the acquire's requests went out, before their replies are
read and used — Kleppmann's "pause during the acquire" (the replies wait in the socket while the
client is stopped; the client then reads grants that were given long ago).

Only a backend whose acquire sends and reads in steps of its own can offer it, and it says so with
the trait ``pauses_inside_acquire`` (backends/base.py's Traits): Redlock's fan-out (all SETs sent,
no reply read, the validity not yet computed: backends/redis_fanout.py) and ``single``'s held
connection (SET NX PX written, its reply not yet read: backends/redis_direct.py), with the
backends built on it that keep its acquire (single-renew, sentinel-single). The others cannot: a
Lua script through redis-py (fenced), a library's own acquire (pottery, redis-py's Lock,
python-redis-lock), a gRPC call (etcd), kazoo's recipe on its own thread (ZooKeeper), one psycopg
call (PostgreSQL), or a client in another process (Node, Go, Java, .NET) — the request and the use
of its reply happen inside one call the harness cannot stop in the middle; the plan leaves those
cells out with that reason (runner/plan.py).

The worker arms the point for the rounds it pauses in (``--pause-point in-acquire``); the backend
calls :func:`inside_acquire` at that moment of each acquire attempt, and the first call after
arming runs the pause (then disarms). Not armed, the call returns at once. One worker per process
drives its backend from one thread: a module-level hook is enough.
"""

from __future__ import annotations

from collections.abc import Callable


class _Point:
    """The pause to run at the point (given how many requests are in flight), or None."""

    armed: Callable[[int], None] | None = None


_POINT = _Point()


def arm(pause: Callable[[int], None]) -> None:
    """Run ``pause(requests_in_flight)`` at the next acquire's pause point (once)."""
    _POINT.armed = pause


def disarm() -> bool:
    """Forget an armed pause; True if it was still armed (no acquire reached the point)."""
    armed, _POINT.armed = _POINT.armed, None
    return armed is not None


def inside_acquire(*, in_flight: int) -> None:
    """Called by a backend's acquire once its ``in_flight`` requests are sent and before it reads a
    reply: runs the armed pause, if any."""
    pause, _POINT.armed = _POINT.armed, None
    if pause is not None:
        pause(in_flight)
