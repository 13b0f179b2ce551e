#!/usr/bin/env python3
"""A reference external lock client in plain Python (stdlib only, its own RESP client): proof that
the protocol (docs/clients.md) needs nothing from lockcompare. It is NOT lockcompare code: it never
imports it, and could be any language.

The lock: SET <key> <owner> NX PX <ttl> on lock node 0 and an owner-checked delete (Lua), the
``single`` design. ``--hash`` stores it Redisson-style instead, as a hash ``<key>:h`` whose field
is the owner (``HSET`` + ``PEXPIRE`` in one script), to exercise hash-key fault targeting.

``--misbehave MODE`` breaks the protocol on purpose, for lockcompare's tests: ``garbage`` (acquire
answers a line that is not JSON), ``late`` (acquire answers after ``--delay-s``), ``die`` (the
process exits in the middle of an acquire), ``clock`` (hello reports the wall clock instead of
CLOCK_MONOTONIC), ``exit-holding`` (exits ``--delay-s`` after a grant, as redis-semaphore does on a
lost lock), ``slow-pipe`` (each acquire waits ``--delay-s`` before its library call begins, as if the
request had waited that long in the pipe: the TTL and ``library_ns`` count from after the wait),
``overstate`` (a lease's ``valid_until`` ``--delay-s`` later than its TTL allows).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import sys
import threading
import time
from urllib.parse import urlparse

ACQUIRE = (
    "if redis.call('exists', KEYS[1]) == 0 then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end "
    "return 0"
)
ACQUIRE_HASH = (
    "if redis.call('exists', KEYS[1]) == 0 then redis.call('hset', KEYS[1], ARGV[1], 1) "
    "redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end return 0"
)
RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
RELEASE_HASH = "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then return redis.call('del', KEYS[1]) end return 0"
OWNS = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pttl', KEYS[1]) end return -3"
OWNS_HASH = "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then return redis.call('pttl', KEYS[1]) end return -3"


class Resp:
    """The smallest RESP2 client that works: one connection, one command at a time."""

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlparse(url)
        self.sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=timeout_s)
        self.file = self.sock.makefile("rb")
        db = (parts.path or "/0").lstrip("/") or "0"
        if db != "0":
            self.call("SELECT", db)

    def call(self, *args: object) -> object:
        out = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = str(arg).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(out))
        return self._read()

    def _read(self) -> object:
        line = self.file.readline()
        if not line:
            raise ConnectionError("connection closed")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self.file.read(size + 2)[:-2]
            return data.decode()
        if kind == b"*":
            return [self._read() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hash", action="store_true")
    parser.add_argument("--misbehave", default="")
    parser.add_argument("--delay-s", type=float, default=5.0)
    opts = parser.parse_args()
    node: Resp | None = None
    url, timeout_s = "", 2.0
    held: dict[str, str] = {}  # owner -> stored key

    def stored(key: str) -> str:
        return f"{key}:h" if opts.hash else key

    def reply(message: dict[str, object]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        request = json.loads(line)
        rid, op = request.get("id"), request.get("op")
        t0 = time.monotonic_ns()
        try:
            if op == "hello":  # connect at the first lock call: a node that is down is a refusal, not a failed start
                url, timeout_s = request["nodes"][0], request.get("request_timeout_ms", 2000) / 1000
                now = time.time_ns() if opts.misbehave == "clock" else time.monotonic_ns()
                reply({"id": rid, "ok": True, "protocol": 1, "library": "refclient", "version": "1",
                       "runtime": f"python {sys.version.split()[0]}", "monotonic_ns": now})  # fmt: skip
                continue
            if node is None:
                node = Resp(url, timeout_s=timeout_s)
            if op == "acquire":
                if opts.misbehave == "garbage":
                    sys.stdout.write("this is not a JSON reply\n")
                    sys.stdout.flush()
                    continue
                if opts.misbehave == "die":
                    sys.stderr.write("refclient: dying in the middle of an acquire, on purpose\n")
                    sys.stderr.flush()
                    os._exit(3)
                if opts.misbehave == "late":
                    time.sleep(opts.delay_s)
                if opts.misbehave == "slow-pipe":
                    time.sleep(opts.delay_s)
                    t0 = time.monotonic_ns()
                owner = secrets.token_hex(16)
                key = stored(request["key"])
                granted = node.call("EVAL", ACQUIRE_HASH if opts.hash else ACQUIRE, 1, key, owner, request["ttl_ms"])
                if granted != 1:
                    reply({"id": rid, "ok": False, "reason": "held", "library_ns": time.monotonic_ns() - t0})
                    continue
                held[owner] = key
                overstated = round(opts.delay_s * 1e9) if opts.misbehave == "overstate" else 0
                reply({"id": rid, "ok": True, "owner": owner,
                       "valid_until": t0 + request["ttl_ms"] * 1_000_000 + overstated,
                       "granted_by": [0], "library_ns": time.monotonic_ns() - t0})  # fmt: skip
                if opts.misbehave == "exit-holding":
                    threading.Timer(opts.delay_s, os._exit, args=(1,)).start()
            elif op == "release":
                key = held.pop(request["owner"], stored(request.get("key", "")))
                deleted = node.call("EVAL", RELEASE_HASH if opts.hash else RELEASE, 1, key, request["owner"])
                reply({"id": rid, "ok": True, "released": deleted == 1, "library_ns": time.monotonic_ns() - t0})
            elif op == "check":
                key = held.get(request["owner"], "")
                pttl = node.call("EVAL", OWNS_HASH if opts.hash else OWNS, 1, key, request["owner"])
                if not isinstance(pttl, int) or pttl < 0:
                    reply({"id": rid, "ok": True, "valid": False, "reason": "lost"})
                else:
                    reply({"id": rid, "ok": True, "valid": True, "valid_until": t0 + pttl * 1_000_000})
            elif op == "events":
                reply({"id": rid, "ok": True, "events": []})
            elif op == "close":
                reply({"id": rid, "ok": True})
                return
            else:
                reply({"id": rid, "ok": False, "error": f"unknown op {op!r}"})
        except (OSError, RuntimeError, KeyError, UnboundLocalError) as exc:
            node = None  # reconnect at the next call (a node that restarted)
            reply({"id": rid, "ok": False, "reason": "error", "error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    main()
