"""Which processes had the CPU when the machine woke a sleeper late: a 10 Hz canary beside a command.

    python scripts/cpu_canary.py SAMPLES.jsonl -- lockcompare matrix ...   run the command beside it
    python scripts/cpu_canary.py SAMPLES.jsonl                             summarise a file written before

Every 100 ms the canary wakes from a sleep and writes one line: how late it woke, the run queue
(/proc/stat procs_running) and the CPU ticks each kind of process used since the last line (by
command name; Java processes named by what they run: ZooKeeper server, Curator client). A tick that
woke over 50 ms late is what a worker's sleep feels in a stall. The summary sets the CPU share of
each kind over the whole run beside its share in the second before each late tick, and counts the
processes born in those seconds: what a stall came with (docs/sentinel.md, "Stalls that came with
start-ups"). The canary reads every /proc/<pid>/stat ten times a second: a few percent of a core.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from lockcompare.infra.procgroup import process_table

LATE_MS = 50.0
TICK_S = 0.1


def _java_tag(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return "java"
    if b"QuorumPeerMain" in cmdline:
        return "java (ZooKeeper server)"
    return "java (Curator client)" if b"curator" in cmdline else "java"


def _snapshot(tags: dict[tuple[int, int], str]) -> dict[int, tuple[str, int, int]]:
    """pid -> (kind, CPU ticks, start time) for every process."""
    found = {}
    for pid, proc in process_table().items():
        kind = proc.comm
        if kind == "java":
            if (pid, proc.start_ticks) not in tags:  # its command line read once
                tags[pid, proc.start_ticks] = _java_tag(str(pid))
            kind = tags[pid, proc.start_ticks]
        found[pid] = (kind, proc.cpu_ticks, proc.start_ticks)
    return found


def _run_queue() -> int:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("procs_running"):
                return int(line.split()[1])
    return 0


def sample(path: str, command: list[str]) -> int:
    tags: dict[tuple[int, int], str] = {}
    proc = subprocess.Popen(command)
    previous = _snapshot(tags)
    due = time.monotonic() + TICK_S
    with open(path, "w") as out:
        while proc.poll() is None:
            time.sleep(max(0.0, due - time.monotonic()))
            now = time.monotonic()
            late = now - due
            due = now + TICK_S if late > TICK_S else due + TICK_S
            current = _snapshot(tags)
            cpu: dict[str, int] = {}
            born: dict[str, int] = {}
            for pid, (kind, ticks, started) in current.items():
                before = previous.get(pid)
                fresh = before is None or before[2] != started
                used = ticks if fresh else ticks - before[1]
                if fresh:
                    born[kind] = born.get(kind, 0) + 1
                if used:
                    cpu[kind] = cpu.get(kind, 0) + used
            previous = current
            line = {"t": round(now, 3), "late_ms": round(late * 1000, 1), "run": _run_queue(), "cpu": cpu, "new": born}
            out.write(json.dumps(line) + "\n")
    return proc.returncode


def summarise(path: str) -> None:
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    if not rows:
        print(f"{path}: no samples")
        return
    late = [i for i, row in enumerate(rows) if row["late_ms"] > LATE_MS]
    lateness = sorted(row["late_ms"] for row in rows)
    print(
        f"{path}: {len(rows)} ticks, {len(late)} woke over {LATE_MS:g} ms late; "
        f"latest {lateness[-1]:.0f} ms, p99 {lateness[int(len(rows) * 0.99)]:.0f} ms"
    )

    def shares(indices: list[int]) -> tuple[dict[str, float], dict[str, int]]:
        cpu: dict[str, int] = {}
        born: dict[str, int] = {}
        for i in indices:
            for kind, ticks in rows[i]["cpu"].items():
                cpu[kind] = cpu.get(kind, 0) + ticks
            for kind, n in rows[i]["new"].items():
                born[kind] = born.get(kind, 0) + n
        total = sum(cpu.values()) or 1
        return {kind: ticks / total for kind, ticks in cpu.items()}, born

    overall, _ = shares(list(range(len(rows))))
    window = sorted({j for i in late for j in range(max(0, i - 10), i + 1)})  # the second before each
    before_late, born = shares(window)
    print(f"  {'CPU share':<28}{'whole run':>10}{'1 s before a late tick':>24}")
    for kind in sorted(overall, key=lambda k: -max(overall[k], before_late.get(k, 0)))[:8]:
        print(f"  {kind:<28}{overall[kind]:>10.0%}{before_late.get(kind, 0):>24.0%}")
    most_born = sorted(born.items(), key=lambda item: -item[1])[:6]
    print("  born in those seconds: " + (", ".join(f"{kind} {n}" for kind, n in most_born) or "none"))


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    path, rest = argv[0], argv[1:]
    code = 0
    if rest:
        if rest[0] != "--" or len(rest) < 2:
            print("cpu_canary.py: the command comes after --", file=sys.stderr)
            return 2
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's to handle
        code = sample(path, rest[1:])
    summarise(path)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
