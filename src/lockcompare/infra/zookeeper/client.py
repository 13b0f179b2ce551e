"""The harness's own ZooKeeper calls (kazoo): empty lockcompare's path, delete a trial's znodes, read a lock.

Only znodes under :data:`~lockcompare.infra.zookeeper.server.CHROOT` are ever touched, so an external
ensemble (``--zookeeper``) keeps everything else. kazoo is imported lazily: it is the optional extra
``lockcompare[zookeeper]``, and the cluster module imports this one on every machine.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any

from lockcompare.errors import BackendNotViableError, ClusterError
from lockcompare.infra.zookeeper.server import CHROOT, hosts_of

HOW_TO_GET_KAZOO = "pip install 'lockcompare[zookeeper]' (kazoo)"

#: The harness's sessions: long enough to outlive a slow call, far below a trial.
ADMIN_SESSION_S = 10.0

#: The shortest session a kazoo client keeps alive by itself. kazoo's connection loop waits for a
#: reply or its next ping for a random 10-400 ms (``random.randint(1, 40) / 100``, whatever the
#: session timeout), so a session must outlast 400 ms without a ping; the server ends it at most a
#: tick past its timeout. Measured here (one standalone server, an idle client holding an ephemeral
#: znode for 3 s): sessions of 150 and 300 ms expired under their live client 5 of 5 times, 400 ms
#: 0 of 6, 500 ms 0 of 5. 500 leaves a 100 ms margin for a loaded machine.
KAZOO_MIN_SESSION_MS = 500

#: kazoo logs every dropped connection at WARNING; without a handler Python prints them all.
logging.getLogger("kazoo").addHandler(logging.NullHandler())


def kazoo_client_class() -> Any:
    try:
        from kazoo.client import KazooClient
    except ImportError:
        raise BackendNotViableError(f"kazoo is not installed: {HOW_TO_GET_KAZOO}") from None
    return KazooClient


@contextlib.contextmanager
def admin_session(urls: Sequence[str], *, timeout_s: float = 2.0) -> Iterator[Any]:
    """A started kazoo client on ``urls``, stopped and closed however the block ends."""
    from kazoo.exceptions import KazooException

    client = kazoo_client_class()(hosts=hosts_of(urls), timeout=ADMIN_SESSION_S)
    try:
        client.start(timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - kazoo raises its handler's timeout type, not a KazooException
        client.close()
        raise ClusterError(f"ZooKeeper {hosts_of(urls)} does not answer: {exc or type(exc).__name__}") from None
    try:
        yield client
    except KazooException as exc:
        raise ClusterError(f"ZooKeeper {hosts_of(urls)}: {type(exc).__name__} {exc}") from None
    finally:
        client.stop()
        client.close()


def delete_children_containing(urls: Sequence[str], text: str) -> None:
    """Delete the znodes under CHROOT whose names contain ``text`` ("" : all of them), recursively."""
    with admin_session(urls) as client:
        if client.exists(CHROOT) is None:
            return
        for child in client.get_children(CHROOT):
            if text in child:
                client.delete(f"{CHROOT}/{child}", recursive=True)


#: A lock contender's znode name: kazoo's Lock recipe (``<uuid>__lock__<seq>``) or Curator's
#: InterProcessMutex (``_c_<uuid>-lock-<seq>``, clients/java); both end in the server's 10-digit sequence.
_CONTENDER = re.compile(r"(?:__lock__|-lock-)(\d{10})$")


def contenders(client: Any, path: str) -> list[str]:
    """The lock's contender znodes under ``path``, lowest sequence (the holder) first."""
    from kazoo.exceptions import NoNodeError

    try:
        children = client.get_children(path)
    except NoNodeError:
        return []
    sequences = {c: found.group(1) for c in children if (found := _CONTENDER.search(c))}
    return sorted(sequences, key=sequences.__getitem__)
