#!/usr/bin/env python3
"""CPU-seconds of one refused acquire attempt, per backend: where a waiting worker's CPU goes.

A waiting worker retries its acquire every ``retry_delay_ms`` (1 ms at the README's ``--time-scale
0.1``, jittered ±50 %) while its rival holds the lock: about half of each worker's rounds, ~2 400
attempts in a 40-round trial of two workers. This script measures what one such attempt costs this
process on an embedded cluster, against a lock another client holds, two ways:

- ``tight``: attempts back to back (caches warm: the least an attempt can cost);
- ``paced``: one attempt per jittered millisecond, as a trial's waiting worker makes them (each
  attempt after a sleep: the wake-up and cold caches are part of what the machine pays);

and, for scale, a bare ``time.sleep(0.001)``. A benchmark, not a test: run it on a quiet machine.

    .venv/bin/python scripts/attempt_cpu.py [--attempts 2000] [BACKEND ...]   (default: single redlock)
"""

from __future__ import annotations

import argparse
import random
import time

from lockcompare.backends import BackendConfig, load_backend
from lockcompare.infra.cluster import open_cluster


def per_attempt_us(attempt: object, *, attempts: int, paced: bool) -> float:
    rng = random.Random(0)
    started = time.process_time()
    for _ in range(attempts):
        attempt()  # type: ignore[operator]
        if paced:
            time.sleep(0.001 * (1 + 0.5 * (2 * rng.random() - 1)))
    return (time.process_time() - started) / attempts * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attempts", type=int, default=2000, help="attempts per measurement (default 2000)")
    parser.add_argument("backends", nargs="*", default=["single", "redlock"])
    args = parser.parse_args()
    print(f"{'backend':<14} {'tight µs':>9} {'paced µs':>9}   (CPU per refused attempt; {args.attempts} attempts each)")
    with open_cluster() as cluster:
        config = BackendConfig(node_urls=cluster.node_urls)
        for name in args.backends:
            cls = load_backend(name)
            holder, waiter = cls(config=config), cls(config=config)
            key = f"lockcompare:attempt-cpu:{name}"
            lease = holder.acquire(key=key, ttl_ms=600_000)
            if not lease:
                raise SystemExit(f"attempt_cpu.py: {name}: the holder was refused: {lease}")
            try:

                def attempt(waiter: object = waiter, key: str = key, name: str = name) -> None:
                    if waiter.acquire(key=key, ttl_ms=100):  # type: ignore[attr-defined]
                        raise SystemExit(f"attempt_cpu.py: {name}: an attempt was granted while the lock was held")

                tight = per_attempt_us(attempt, attempts=args.attempts, paced=False)
                paced = per_attempt_us(attempt, attempts=args.attempts, paced=True)
                print(f"{name:<14} {tight:>9.0f} {paced:>9.0f}")
            finally:
                holder.release(lease)
                holder.close()
                waiter.close()
    bare = per_attempt_us(lambda: None, attempts=args.attempts, paced=True)
    print(f"{'(sleep only)':<14} {'':>9} {bare:>9.0f}")


if __name__ == "__main__":
    main()
