"""A small client for etcd 3.5's JSON gateway (HTTP/1.1 on the client port): the calls a lock needs.

Why not a library: ``etcd3`` (gRPC) fails to import with protobuf >= 4 unless the pure-Python
protobuf is forced, and ``etcd3gw`` hides a failed acquire and pulls in ``requests`` and
``futurist``. The gateway is plain JSON over HTTP (keys and values base64), so ``http.client``
with a socket timeout is all a worker needs: no thread, no dependency, one persistent connection
per member.

Failing over between members: a connection that cannot be made (a crashed member refuses it) or
that dies before a reply moves the call to the next endpoint. A call that *times out* is not
retried anywhere: the request may have been applied, and a lock must not guess. Every failure is
an :class:`EtcdUnavailable` (nothing answered in time) or an :class:`EtcdRequestError` (a member
answered with an error, e.g. ``etcdserver: no leader``).

>>> client = EtcdClient(endpoints=("http://127.0.0.1:2379",), timeout_s=0.5)    # doctest: +SKIP
>>> client.call("/v3/lease/grant", {"TTL": 1})["TTL"]                            # doctest: +SKIP
'1'
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Sequence
from typing import Any

from lockcompare.errors import ClusterError, EtcdRequestError, EtcdUnavailable
from lockcompare.redaction import redact
from lockcompare.urls import parse_url

#: Errors of a connection that never delivered the request to a live etcd (refused, reset, closed
#: before a reply): safe to try the next member.
_NOT_DELIVERED = (ConnectionRefusedError, ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)


def b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def prefix_end(prefix: str) -> str:
    """The ``range_end`` (base64) that makes a range cover every key starting with ``prefix``."""
    raw = bytearray(prefix.encode())
    while raw and raw[-1] == 0xFF:
        raw.pop()
    if not raw:
        return b64(b"\0")
    raw[-1] += 1
    return b64(bytes(raw))


class EtcdClient:
    """JSON calls to an etcd cluster through ``endpoints`` (``http://127.0.0.1:PORT``), each bounded
    by ``timeout_s``. Not thread-safe: one per worker."""

    def __init__(self, *, endpoints: Sequence[str], timeout_s: float) -> None:
        if not endpoints:
            raise ValueError("an etcd client needs at least one endpoint")
        self._hosts = [_host_port(url) for url in endpoints]
        self._timeout_s = timeout_s
        self._conns: dict[int, http.client.HTTPConnection] = {}
        self._current = 0  # the member that answered last: tried first next time

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path`` on the first member that takes it; the decoded reply."""
        problems = []
        for step in range(len(self._hosts)):
            index = (self._current + step) % len(self._hosts)
            try:
                status, payload = self._post(index, path, body)
            except _NOT_DELIVERED as exc:
                self._drop(index)
                problems.append(f"{self._label(index)}: {exc.__class__.__name__}")
                continue
            except TimeoutError:
                self._drop(index)
                raise EtcdUnavailable(f"{self._label(index)} {path}: no reply within {self._timeout_s:g} s") from None
            except OSError as exc:
                self._drop(index)
                raise EtcdUnavailable(f"{self._label(index)} {path}: {exc}") from None
            self._current = index
            if status != 200:
                message = payload.get("message") or payload.get("error") or f"HTTP {status}"
                raise EtcdRequestError(f"{self._label(index)} {path}: {message}")
            return payload
        raise EtcdUnavailable(f"no etcd member took {path}: {'; '.join(problems)}")

    def close(self) -> None:
        for index in list(self._conns):
            self._drop(index)

    def _post(self, index: int, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        conn = self._conns.get(index)
        if conn is None:
            host, port = self._hosts[index]
            conn = self._conns[index] = http.client.HTTPConnection(host, port, timeout=self._timeout_s)
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            payload = {"message": raw[:200].decode(errors="replace")}
        return response.status, payload

    def _drop(self, index: int) -> None:
        conn = self._conns.pop(index, None)
        if conn is not None:
            conn.close()

    def _label(self, index: int) -> str:
        host, port = self._hosts[index]
        return f"etcd {host}:{port}"


def _host_port(url: str) -> tuple[str, int]:
    address = parse_url(url)  # never raises (a full-width character, a bracket: issue 38)
    if address.problem or address.scheme != "http" or not address.host or not address.port:
        raise ClusterError(f"not an etcd client URL (http://HOST:PORT): {redact(url)!r}")
    return address.host, address.port


def is_healthy(url: str, *, timeout_s: float = 0.5) -> bool:
    """True if the member at ``url`` answers ``/health`` with a leader (a member cut off from its
    quorum answers false, or not at all)."""
    host, port = _host_port(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", "/health")
        response = conn.getresponse()
        return response.status == 200 and json.loads(response.read() or b"{}").get("health") == "true"
    except (OSError, ValueError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def delete_prefix(endpoints: Sequence[str], prefix: str, *, timeout_s: float = 1.0) -> None:
    """Delete every key starting with ``prefix`` (``""``: every key) and, with ``""``, revoke every
    lease too. Members that are down are skipped; raises :class:`ClusterError` when no member could
    do it (a cluster without quorum)."""
    client = EtcdClient(endpoints=endpoints, timeout_s=timeout_s)
    try:
        client.call("/v3/kv/deleterange", {"key": b64(prefix or b"\0"), "range_end": prefix_end(prefix)})
        if not prefix:
            for lease in client.call("/v3/lease/leases", {}).get("leases", []):
                try:
                    client.call("/v3/lease/revoke", {"ID": lease["ID"]})
                except EtcdRequestError:
                    pass  # expired meanwhile
    finally:
        client.close()
