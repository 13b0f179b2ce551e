#!/usr/bin/env python3
"""An external lock client for the tinylock server (docs/clients.md's JSON-lines protocol): ACQUIRE
on lock node 0 and an owner-checked RELEASE, with a lease check. It never imports lockcompare: only
the wire module beside it."""

from __future__ import annotations

import json
import secrets
import sys
import time

from wire import Conn


def main() -> None:
    node: Conn | None = None
    url, timeout_s = "", 2.0
    held: dict[str, str] = {}  # owner -> key

    def reply(message: dict[str, object]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        request = json.loads(line)
        rid, op = request.get("id"), request.get("op")
        t0 = time.monotonic_ns()
        try:
            if op == "hello":
                url, timeout_s = request["nodes"][0], request.get("request_timeout_ms", 2000) / 1000
                reply({"id": rid, "ok": True, "protocol": 1, "library": "tinylock-client", "version": "1",
                       "runtime": f"python {sys.version.split()[0]}", "monotonic_ns": time.monotonic_ns()})  # fmt: skip
                continue
            if node is None:
                node = Conn(url, timeout_s=timeout_s)
            if op == "acquire":
                owner = secrets.token_hex(16)
                answer = node.call("ACQUIRE", request["key"], owner, request["ttl_ms"])
                if not answer.startswith("OK "):
                    reply({"id": rid, "ok": False, "reason": "held", "library_ns": time.monotonic_ns() - t0})
                    continue
                held[owner] = request["key"]
                reply({"id": rid, "ok": True, "owner": owner, "valid_until": t0 + request["ttl_ms"] * 1_000_000,
                       "granted_by": [0], "library_ns": time.monotonic_ns() - t0})  # fmt: skip
            elif op == "release":
                key = held.pop(request["owner"], request.get("key", ""))
                released = node.call("RELEASE", key, request["owner"]) == "1"
                reply({"id": rid, "ok": True, "released": released, "library_ns": time.monotonic_ns() - t0})
            elif op == "check":
                left = int(node.call("CHECK", held.get(request["owner"], "-"), request["owner"]))
                if left < 0:
                    reply({"id": rid, "ok": True, "valid": False, "reason": "lost"})
                else:
                    reply({"id": rid, "ok": True, "valid": True, "valid_until": t0 + left * 1_000_000})
            elif op == "events":
                reply({"id": rid, "ok": True, "events": []})
            elif op == "close":
                reply({"id": rid, "ok": True})
                return
            else:
                reply({"id": rid, "ok": False, "error": f"unknown op {op!r}"})
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            node = None  # reconnect at the next call (a server that restarted)
            reply({"id": rid, "ok": False, "reason": "error", "error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    main()
