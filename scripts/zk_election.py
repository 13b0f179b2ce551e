#!/usr/bin/env python3
"""How long a five-server ZooKeeper ensemble takes to serve again after its leader and one follower
are killed, with the peer links' refused wait (infra/peerlinks.py ``REFUSED_WAIT_S``) at each value given.

    python scripts/zk_election.py --runs 10 --refused-wait 0 1

Each run starts a fresh ensemble (the pool's start_servers), waits a second, SIGKILLs node 0 (the
leader) and node 1, and reads every survivor's ``srvr`` each 100 ms until one leads with two following;
it prints the seconds from the kill. Runs of the values alternate. Needs ZooKeeper (apt-get install zookeeper).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from lockcompare.infra import peerlinks
from lockcompare.infra.zookeeper.server import start_servers

GIVE_UP_S = 60.0


def serves_again_after_s() -> float | None:
    """Seconds from the kill of the leader and a follower until the other three serve; None: not in a minute."""
    servers = start_servers(count=5)  # leader first
    try:
        time.sleep(1.0)
        killed_at = time.monotonic()
        servers[0].crash()
        servers[1].crash()
        while time.monotonic() - killed_at < GIVE_UP_S:
            modes = [s.mode() for s in servers[2:]]
            if modes.count("leader") == 1 and modes.count("follower") == 2:
                return time.monotonic() - killed_at
            time.sleep(0.1)
        return None
    finally:
        for server in servers:
            server.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per value (default 10)")
    parser.add_argument(
        "--refused-wait", type=float, nargs="+", default=[0.0, peerlinks.REFUSED_WAIT_S], metavar="S",
        help="the peer links' refused wait, in seconds (default: 0 and the shipped value)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    found: dict[float, list[float | None]] = {wait: [] for wait in args.refused_wait}
    for run in range(1, args.runs + 1):
        for wait in args.refused_wait:
            peerlinks.REFUSED_WAIT_S = wait
            took = serves_again_after_s()
            found[wait].append(took)
            shown = f"{took:.1f} s" if took is not None else f"not within {GIVE_UP_S:g} s"
            print(f"run {run}/{args.runs}, refused wait {wait:g} s: serving again after {shown}", flush=True)
    for wait, times in found.items():
        served = sorted(t for t in times if t is not None)
        middle = f"median {statistics.median(served):.1f} s, " if served else ""
        span = f"{served[0]:.1f}-{served[-1]:.1f} s" if served else "none"
        print(f"refused wait {wait:g} s: {middle}range {span}, {len(times) - len(served)} not within {GIVE_UP_S:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
