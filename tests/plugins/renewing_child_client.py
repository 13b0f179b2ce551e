"""The helper process of :mod:`plugins.renewing_child`: a lock client that renews its own leases.

Run as ``python renewing_child_client.py NODE_URL [--escape]``; requests and replies are JSON lines
on stdin/stdout, one reply per request:

- ``{"op": "acquire", "key": K, "ttl_ms": T}`` → ``{"ok": true, "owner": O, "t0": NS}`` (SET NX PX,
  then a renewal thread: owner-checked PEXPIRE every T/3) or ``{"ok": false, "reason": "held"}``
- ``{"op": "release", "key": K, "owner": O}`` → ``{"released": bool}`` (renewals stop first)
- ``{"op": "events"}`` → ``{"events": [...]}``: the renewal records since the last ask, in the
  format of :class:`lockcompare.backends.renewals.RenewalLog` (times on CLOCK_MONOTONIC, one
  clock for every process of the machine)
- ``{"op": "close"}`` or end of input: exit.

It says ``{"ready": true}`` first, once it is ready for requests.

``--escape`` makes the client leave its parent's process group first (``os.setsid()``), as a
daemonising library would: a pause of the worker then no longer stops it. ``--double-fork``
daemonises fully (fork, setsid, fork): the serving process is no descendant of the worker at all. ``--linger``
makes a helper that outlives its worker unless its process group is ended: it does not ask to
die with its parent and stays after the end of its input.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time

import redis

from lockcompare.backends.renewals import RenewalLog
from lockcompare.infra.lifecycle import die_with_parent

RENEW_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  return 0
end
"""
RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
else
  return 0
end
"""


def renew_until_stopped(
    renew: redis.commands.core.Script, *, key: str, owner: str, ttl_ms: int, log: RenewalLog, stop: threading.Event
) -> None:
    # Event.wait times out on the monotonic clock: after a freeze the renewal comes at once.
    while not stop.wait(ttl_ms / 3 / 1000):
        t0 = time.monotonic_ns()
        try:
            extended = renew(keys=[key], args=[owner, ttl_ms])
        except redis.RedisError:
            log.failed(owner=owner, t0=t0, t1=time.monotonic_ns(), reason="error")
            continue
        if not extended:
            log.failed(owner=owner, t0=t0, t1=time.monotonic_ns(), reason="lost")
            return
        log.renewed(owner=owner, t0=t0, t1=time.monotonic_ns(), valid_until_ns=t0 + ttl_ms * 1_000_000)


def double_fork() -> None:
    """Daemonise the classic way: fork, ``setsid()``, fork again; the first two processes exit and
    the grandchild (no descendant of the worker any more, in no group of its) goes on with the pipes."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)


def main() -> None:
    if "--double-fork" in sys.argv[2:]:
        double_fork()
    if "--escape" in sys.argv[2:]:
        os.setsid()  # leaves the worker's process group: what this variant is for
    linger = "--linger" in sys.argv[2:]
    if not linger:
        die_with_parent()  # the worker's end: even if nobody closes our stdin
    client = redis.Redis.from_url(sys.argv[1], socket_timeout=0.5, socket_connect_timeout=0.5)
    renew, release = client.register_script(RENEW_SCRIPT), client.register_script(RELEASE_SCRIPT)
    log = RenewalLog()
    renewers: dict[str, tuple[threading.Event, threading.Thread]] = {}
    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()

    def stop_renewing(owner: str) -> None:
        stop, thread = renewers.pop(owner, (None, None))
        if stop is not None and thread is not None:
            stop.set()
            thread.join()

    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "acquire":
            key, ttl_ms, owner = request["key"], int(request["ttl_ms"]), secrets.token_hex(16)
            t0 = time.monotonic_ns()
            try:
                granted = client.set(key, owner, nx=True, px=ttl_ms)
            except redis.RedisError:
                reply: dict[str, object] = {"ok": False, "reason": "error"}
            else:
                if granted:
                    stop = threading.Event()
                    thread = threading.Thread(
                        target=renew_until_stopped,
                        kwargs={"renew": renew, "key": key, "owner": owner, "ttl_ms": ttl_ms, "log": log, "stop": stop},
                        daemon=True,
                    )
                    renewers[owner] = (stop, thread)
                    thread.start()
                    reply = {"ok": True, "owner": owner, "t0": t0}
                else:
                    reply = {"ok": False, "reason": "held"}
        elif op == "release":
            stop_renewing(request["owner"])
            try:
                reply = {"released": bool(release(keys=[request["key"]], args=[request["owner"]]))}
            except redis.RedisError:
                reply = {"released": False}
        elif op == "events":
            reply = {"events": log.drain()}
        else:  # close
            break
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    for owner in list(renewers):
        stop_renewing(owner)
    if linger:
        time.sleep(3600)


if __name__ == "__main__":
    main()
