"""Messages between the runner and its children, sent as whole bytes.

``Connection.send`` pickles into an ``io.BytesIO`` and writes a memoryview of it
(``multiprocessing.reduction.ForkingPickler.dumps``). A signal that unwinds a send leaves that view
in the traceback's frames; once the traceback is part of a reference cycle, the collector finalizes
the BytesIO while the view still exports it, and Python 3.13 prints ``Exception ignored in:
<_io.BytesIO ...> BufferError: Existing exports of data`` at exit, after the run's last line (CI, one
Ctrl-C in about 25). Sent as bytes, a message leaves no export behind: the copy costs a few KB.
``Connection.recv`` reads what :func:`send` wrote.
"""

from __future__ import annotations

import io
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler


def send(conn: Connection, message: object) -> None:
    """``conn.send(message)``, pickled the same way, written from bytes."""
    buffer = io.BytesIO()
    ForkingPickler(buffer).dump(message)
    conn.send_bytes(buffer.getvalue())
