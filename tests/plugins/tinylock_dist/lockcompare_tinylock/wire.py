"""The tinylock protocol's client side (stdlib only): one connection, one request at a time.

Shared by the plug-in's kind and backend and by its external client (client.py), which imports it
from its own directory.
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

SCHEME = "tinylock"


class Conn:
    """A connection to the tinylock server at ``url`` (``tinylock://HOST:PORT``)."""

    def __init__(self, url: str, *, timeout_s: float) -> None:
        parts = urlparse(url)
        if parts.scheme != SCHEME or parts.port is None:
            raise ValueError(f"not a tinylock URL: {url!r}")
        self.sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port), timeout=timeout_s)
        self.file = self.sock.makefile("rb")

    def call(self, *words: object) -> str:
        self.sock.sendall(" ".join(map(str, words)).encode() + b"\n")
        line = self.file.readline()
        if not line:
            raise ConnectionError("the tinylock server closed the connection")
        reply = line.decode().strip()
        if reply.startswith("ERR "):
            raise RuntimeError(reply)
        return reply

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def ask(url: str, *words: object, timeout_s: float = 2.0) -> str:
    """One request on a connection of its own."""
    conn = Conn(url, timeout_s=timeout_s)
    try:
        return conn.call(*words)
    finally:
        conn.close()
