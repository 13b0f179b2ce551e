"""The tinylock server: a lock service that speaks a line protocol of its own (stdlib only).

Run as ``python server.py --port N``. One request per line, one reply per line:

    PING                         -> PONG
    VERSION                      -> tinylock 1.0
    ACQUIRE <key> <owner> <ttl>  -> OK <token> (token: a counter, never reused) | HELD
    RELEASE <key> <owner>        -> 1 (released) | 0 (not the owner's)
    CHECK <key> <owner>          -> <ms left> | -1 (not the owner's)
    FLUSH                        -> OK (every lock gone)
    DELPREFIX <prefix>           -> <count> (locks whose key starts with prefix gone)

Leases expire on the server's monotonic clock. Nothing is kept on disk: a restart forgets every
lock. The server exits on its own when the process that started it goes away, so that no test
leaves one behind.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socketserver
import threading
import time

VERSION = "tinylock 1.0"


class Locks:
    def __init__(self) -> None:
        self._held: dict[str, tuple[str, float]] = {}
        self._tokens = itertools.count(1)
        self._mutex = threading.Lock()

    def _live(self, key: str, now: float) -> tuple[str, float] | None:
        held = self._held.get(key)
        if held is not None and held[1] <= now:
            del self._held[key]
            return None
        return held

    def answer(self, words: list[str]) -> str:
        op = words[0].upper() if words else ""
        now = time.monotonic()
        with self._mutex:
            if op == "PING":
                return "PONG"
            if op == "VERSION":
                return VERSION
            if op == "ACQUIRE" and len(words) == 4:
                key, owner, ttl_ms = words[1], words[2], int(words[3])
                if self._live(key, now) is not None:
                    return "HELD"
                self._held[key] = (owner, now + ttl_ms / 1000)
                return f"OK {next(self._tokens)}"
            if op == "RELEASE" and len(words) == 3:
                held = self._live(words[1], now)
                if held is None or held[0] != words[2]:
                    return "0"
                del self._held[words[1]]
                return "1"
            if op == "CHECK" and len(words) == 3:
                held = self._live(words[1], now)
                return "-1" if held is None or held[0] != words[2] else str(int((held[1] - now) * 1000))
            if op == "FLUSH":
                self._held.clear()
                return "OK"
            if op == "DELPREFIX" and len(words) == 2:
                gone = [key for key in self._held if key.startswith(words[1])]
                for key in gone:
                    del self._held[key]
                return str(len(gone))
        return f"ERR unknown request {' '.join(words)[:80]!r}"


LOCKS = Locks()


class Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for line in self.rfile:
            try:
                reply = LOCKS.answer(line.decode().split())
            except ValueError as exc:
                reply = f"ERR {exc}"
            self.wfile.write(reply.encode() + b"\n")
            self.wfile.flush()


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True  # a restart binds the same port at once
    daemon_threads = True


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    with Server(("127.0.0.1", port), Handler) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()
