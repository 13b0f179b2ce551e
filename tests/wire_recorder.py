"""A loopback TCP relay that records the bytes a client sends to each server, for tests that must
show what went on the wire (the requests, byte for byte), not what a library says it sent.

Each target URL gets a listening socket on 127.0.0.1; every connection to it is relayed to the
target both ways by two threads, and what the client wrote is appended to that target's record.
A relay copies each chunk before forwarding it, so by the time a client has read its reply, the
request that caused it is in the record.

    >>> with WireRecorder(["redis://127.0.0.1:6379/0"]) as wire:      # doctest: +SKIP
    ...     client = connect(wire.urls[0]); client.ping()
    ...     wire.sent(0)
    b'*1\\r\\n$4\\r\\nPING\\r\\n'
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from types import TracebackType
from urllib.parse import urlsplit

import hiredis


class WireRecorder:
    """One recording relay per target URL; ``urls`` are the relays' URLs, in the same order."""

    def __init__(self, targets: Sequence[str]) -> None:
        self._targets = [urlsplit(url) for url in targets]
        self._listeners: list[socket.socket] = []
        self._records: list[bytearray] = [bytearray() for _ in targets]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        self.urls: list[str] = []

    def __enter__(self) -> WireRecorder:
        for index, target in enumerate(self._targets):
            listener = socket.create_server(("127.0.0.1", 0))
            self._listeners.append(listener)
            port = listener.getsockname()[1]
            self.urls.append(target._replace(netloc=f"127.0.0.1:{port}").geturl())
            threading.Thread(target=self._accept, args=(index, listener), daemon=True).start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._closed = True
        with self._lock:
            for sock in [*self._listeners, *self._sockets]:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def sent(self, index: int) -> bytes:
        """Everything clients wrote to target ``index`` so far."""
        with self._lock:
            return bytes(self._records[index])

    def commands(self, index: int) -> list[list[bytes]]:
        """What clients wrote to target ``index``, parsed as RESP requests (arrays of bulk strings)."""
        reader = hiredis.Reader()
        reader.feed(self.sent(index))
        parsed = []
        while (command := reader.gets()) is not False:
            parsed.append(command)
        return parsed

    def clear(self) -> None:
        with self._lock:
            for record in self._records:
                record.clear()

    def _accept(self, index: int, listener: socket.socket) -> None:
        target = self._targets[index]
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection((target.hostname or "127.0.0.1", target.port or 6379))
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, index), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, None), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, record: int | None) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                for sock in (source, sink):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            if record is not None:
                with self._lock:
                    self._records[record] += data
            try:
                sink.sendall(data)
            except OSError:
                return
