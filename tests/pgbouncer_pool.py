"""PgBouncer in front of a PostgreSQL server: the deployment mistake a session lock does not survive.

In ``pool_mode = transaction`` PgBouncer lends a server session to a client for one transaction
only: ``pg_try_advisory_lock`` takes the lock on whichever server session ran it, the next
statement of the same client may run on another one (its ``pg_advisory_unlock`` then releases
nothing), and the session holding the lock is lent to the next client, whose ``pg_try_advisory_lock``
succeeds (advisory locks are re-entrant within a session). A real, common set-up (Debian's
``pgbouncer`` 1.18 here; ``apt-get install -y pgbouncer``).

:func:`running_pgbouncer` starts one as a child process on a free loopback port, its config and
auth file in a private temp dir, and always stops it (by its pid) and removes the dir. PgBouncer
refuses to run as root; as root it is started with ``-u nobody`` (it drops to that user after
reading its files).

Run as a script, it starts an embedded PostgreSQL and a PgBouncer in front of it and prints both
URLs until Ctrl-C or SIGTERM — for ``lockcompare ... --postgres URL`` by hand::

    python tests/pgbouncer_pool.py &      # then: kill $!   (both servers stop, their dirs go)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

#: Where Debian puts it (not on a non-root PATH).
DEBIAN_BINARY = "/usr/sbin/pgbouncer"
HOW_TO_GET_IT = "apt-get install -y pgbouncer"
_START_TIMEOUT_S = 10.0


def pgbouncer_binary() -> str | None:
    """The pgbouncer executable, or None where it is not installed."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return DEBIAN_BINARY if os.access(DEBIAN_BINARY, os.X_OK) else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(*, server_host: str, server_port: int, port: int, directory: Path, pool_mode: str) -> str:
    return f"""[databases]
postgres = host={server_host} port={server_port} dbname=postgres user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory / "users.txt"}
pool_mode = {pool_mode}
default_pool_size = 10
max_client_conn = 200
ignore_startup_parameters = extra_float_digits,options
"""


@contextlib.contextmanager
def running_pgbouncer(
    *, server_port: int, server_host: str = "127.0.0.1", pool_mode: str = "transaction"
) -> Iterator[str]:
    """A PgBouncer in ``pool_mode`` in front of the server at ``server_host:server_port`` (user
    ``postgres``, trusted); yields its URL. Stopped (SIGTERM, then SIGKILL) and its dir removed after."""
    binary = pgbouncer_binary()
    if binary is None:
        raise FileNotFoundError(f"pgbouncer is not installed ({HOW_TO_GET_IT})")
    directory = Path(tempfile.mkdtemp(prefix="lockcompare-pgbouncer-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        port = _free_port()
        (directory / "users.txt").write_text('"postgres" ""\n')
        ini = directory / "pgbouncer.ini"
        ini.write_text(
            _config(
                server_host=server_host, server_port=server_port, port=port, directory=directory, pool_mode=pool_mode
            )
        )
        directory.chmod(0o755)  # readable by the user it drops to
        as_user = ["-u", "nobody"] if os.geteuid() == 0 else []
        with (directory / "pgbouncer.log").open("wb") as log:
            proc = subprocess.Popen([binary, *as_user, str(ini)], stdout=log, stderr=subprocess.STDOUT)
        _wait_listening(port, proc, log=directory / "pgbouncer.log")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(directory, ignore_errors=True)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], *, log: Path) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited with {proc.returncode}: {log.read_text()[-500:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"pgbouncer did not listen on {port} within {_START_TIMEOUT_S:g} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (PgBouncer's fast exit), then SIGKILL; reaped either way."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> int:
    from lockcompare.infra.postgres.server import start_postgres

    if pgbouncer_binary() is None:
        print(f"pgbouncer is not installed ({HOW_TO_GET_IT})", file=sys.stderr)
        return 2
    # A background job of a script ignores SIGINT: SIGTERM ends it the same way (the finally blocks run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = start_postgres(name="pgbouncer-demo")
    try:
        assert server.port is not None
        with running_pgbouncer(server_port=server.port) as url:
            print(f"{'direct:':<33}{server.url}")
            print(f"{'through PgBouncer (transaction):':<33}{url}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    finally:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
