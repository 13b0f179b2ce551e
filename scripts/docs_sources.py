"""One run feeds every table (issue 55): where README.md and docs/*.md read a file other than the
reproduction, and what becomes of each directive once the settled reproduction has run.

    python scripts/docs_sources.py README.md docs/*.md            # the list, by what becomes of each file
    python scripts/docs_sources.py --switch README.md docs/*.md   # after the run: repoint the SWITCH ones

Every ``<!-- table|value|excerpt|words|output: PATH ... -->`` directive whose PATH is not
``results/reproduction.csv`` is listed under one of:

- SWITCH: a run whose cells the reproduction now holds (same backends, experiments and settings):
  ``--switch`` points its table, value and words directives at ``results/reproduction.csv``, adding the
  old file's backends and experiments as filters where the directive names none (so a table keeps its
  cells, a ``rows`` count its rows). Its excerpts name a trial and a time window of the old run: they
  are listed for the lead to pick again in the new histories, never switched blindly.
- REGENERATED: a file ``scripts/reproduction.sh`` (its derived files: ``scripts/reproduction_derived.sh``)
  writes again at the run's revision (its derived tables, the contend workload, the lab loop, the
  fencing-depth sweep): nothing to switch; render.
- OTHER RUN: deliberately another run (a scale or timing study, explore's searches, an archived
  run); the sentence around it must say so.

A file that is in none of the three is UNCLASSIFIED, and the script exits 1: a new directive must be
sorted before the run's docs can be called one run's. Exit 2 on a file that cannot be read.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

REPRODUCTION = "results/reproduction.csv"

#: Runs the reproduction replaces: its cells hold theirs (it runs every backend x experiment).
SWITCH = {
    "results/consensus.csv": "every consensus backend x the role experiments and failover (a5a2178): settled cells now",
    "results/zookeeper.csv": "the ZooKeeper and etcd locks beside redlock and fenced (44abcca)",
    "results/node-clients.csv": "every Node client at the lesson's scale (44abcca)",
    "results/consensus-clients.csv": "the Java and Go clients beside kazoo and etcd (a5a2178)",
    "results/catalogue-51.csv": "issue 51's experiments (renewal-cut, the renewing role experiments, ...) (18dc0a2)",
}
#: Files scripts/reproduction.sh writes again from the same revision.
REGENERATED = {
    "results/contend.csv": "the contend workload beside the reproduction",
    "results/lab-loop.csv": "the lesson's rows A-E under the lab's own loop (--jitter 0 --think-ms 0)",
    "results/fencing.csv": "the fencing-depth sweep (scripts/fencing_story.sh: --fence writes,all,token)",
    "results/derived/reproduction-floor.txt": "the run's closing lines",
    "results/derived/reproduction-skipped.txt": "the cells the run left out",
    "results/derived/reproduction-timing-marked.txt": "scripts/timing_marked.py",
    "results/derived/reproduction-bare-majority.txt": "scripts/bare_majority.py",
    "results/derived/reproduction-pause-rivals.txt": "scripts/pause_rivals.py",
    "results/derived/contend-pause-rivals.txt": "scripts/pause_rivals.py on contend",
    "results/derived/contend-conflicts.csv": "scripts/contend_conflicts.py",
    "results/derived/bare-majority-leases.csv": "scripts/bare_majority_leases.py",
    "results/derived/lockstep-lab-loop.txt": "scripts/lockstep.py on the lab loop",
    "results/derived/lockstep-reproduction.txt": "scripts/lockstep.py on the reproduction",
    "results/derived/consensus-cells.txt": "scripts/cell_mechanisms.py on the reproduction, the consensus cells",
    "results/derived/reproduction-thin-cells.txt": "scripts/thin_cells.py: the cells under half their entries",
    "results/derived/reproduction-settled.txt": "scripts/settled_cells.py: the settled parts' cells after every pass",
    "results/derived/zk-lease-violated.txt": "scripts/zk_lease_violated.py, on the reproduction",
    "results/derived/consensus-clients-renewals.txt": "scripts/renewals_in_pauses.py, on the reproduction",
    "results/derived/node-clients-bare-majority.txt": "scripts/bare_majority_losses.py, on the reproduction",
    "results/derived/history-storage.txt": "scripts/history_storage.py, on the reproduction's histories",
    "results/derived/reproduction-compare-summary.txt": "lockcompare compare: the previous reproduction against it",
    "results/derived/consensus-compare-summary.txt": "lockcompare compare: the archived consensus run against it",
}
#: Deliberately other runs: their sentence says which run and why.
OTHER_RUN = {
    "results/derived/lesson.csv": "the lesson's own published figures, not a run",
    "results/derived/reproduction-removed.txt": "cells moved out of an earlier reproduction (history)",
    "results/derived/evaluate-quick.txt": "an evaluate card's output",
    "results/derived/main-pattern.txt": "the README's main command ten times (scripts/main_pattern.py)",
    "results/derived/main-pattern-reruns.txt": "the README's main command ten times, marked trials run again",
    "results/derived/zk-election.txt": "a ZooKeeper election timed with and without the peer links' refused wait",
    "results/derived/rejudged-timing.txt": "the timing sentinel's re-judging study",
    "results/derived/trial-cpu.csv": "a CPU-per-trial study of the README's main command (two revisions)",
    "results/derived/trials-per-hour.csv": "a throughput study over three runs",
    "results/derived/cpu-canary.txt": "a CPU canary beside the role cells (scripts/cpu_canary.py)",
    "results/derived/rerun-jobs.txt": "marked trials run again alone or 5 at once (scripts/rerun_jobs_study.py)",
    "results/dask-demo/": "the Dask demo (a scale study)",
    "results/sentinel/": "the timing sentinel's quiet/starved study",
    "results/explore/": "explore's searches",
    "results/redis-vs-valkey/": "Redis beside Valkey (a server comparison)",
    "results/node-before-pgroup/": "the Node clients before process-group pauses (history)",
    "results/archive/": "archived runs (results/archive/README.md)",
}

#: Directives of a SWITCH file that deliberately read that run (a cell the reproduction does not run,
#: a study of the run itself): they stay on it (the file stays in results/ for them), as OTHER RUN.
STUDIES_OF_A_RUN = {
    (
        "docs/experiments.md",
        "results/catalogue-51.csv",
    ): "the published argument's --fence all cell, which the reproduction does not run, and its run's provenance",
}

DIRECTIVE = re.compile(r"<!-- (?P<kind>table|value|excerpt|words|output): (?P<path>\S+)(?P<rest>[^>]*)-->")


def repo_path(doc: Path, path: str) -> str:
    """A directive's path as the repository names it (docs/ directives say ``../results/...``)."""
    resolved = (doc.parent / path).resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path


def classify(path: str) -> tuple[str, str]:
    for name, table in (("SWITCH", SWITCH), ("REGENERATED", REGENERATED), ("OTHER RUN", OTHER_RUN)):
        for key, why in table.items():
            if path == key or (key.endswith("/") and path.startswith(key)):
                return name, why
    return "UNCLASSIFIED", "sort it into SWITCH, REGENERATED or OTHER RUN (scripts/docs_sources.py)"


def cells_of(path: str) -> tuple[list[str], list[str]]:
    """The backends and experiments a results file holds, sorted."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return sorted({r["backend"] for r in rows}), sorted({r["experiment"] for r in rows})


def switched(match: re.Match[str], *, source: str) -> str:
    """The directive pointed at the reproduction, with the old file's cells as filters it lacks."""
    backends, experiments = cells_of(source)
    rest = match["rest"]
    filters = ""
    if " backend=" not in rest:
        filters += f" backend={','.join(backends)}"
    if " experiment=" not in rest:
        filters += f" experiment={','.join(experiments)}"
    new_path = match["path"].replace(Path(source).name, Path(REPRODUCTION).name)
    head, _, stat = rest.rstrip().rpartition(" ")
    if match["kind"] == "value":  # the statistic stays last
        return f"<!-- value: {new_path}{head}{filters} {stat} -->"
    return f"<!-- {match['kind']}: {new_path}{filters}{rest}-->"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("docs", nargs="+", type=Path)
    parser.add_argument("--switch", action="store_true", help="point the SWITCH directives at the reproduction")
    options = parser.parse_args(argv)
    found: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    repick: list[str] = []
    for doc in options.docs:
        try:
            text = doc.read_text()
        except OSError as exc:
            print(f"docs_sources.py: {doc}: {exc.strerror}", file=sys.stderr)
            return 2
        new_text = text
        for match in DIRECTIVE.finditer(text):
            path = repo_path(doc, match["path"])
            if path == REPRODUCTION:
                continue
            kind, why = classify(path)
            study = [
                why
                for (name, text), why in STUDIES_OF_A_RUN.items()
                if doc.as_posix().endswith(name) and text in match[0]
            ]
            if study:
                kind, why = "OTHER RUN", study[0]
            found[(kind, path)][why].append(f"{doc}:{text.count(chr(10), 0, match.start()) + 1} {match['kind']}")
            if kind == "SWITCH" and match["kind"] == "excerpt":
                repick.append(f"{doc}:{text.count(chr(10), 0, match.start()) + 1}: {match[0][:120]}")
            elif kind == "SWITCH" and options.switch:
                new_text = new_text.replace(match[0], switched(match, source=path), 1)
        if new_text != text:
            doc.write_text(new_text)
    for kind in ("SWITCH", "REGENERATED", "OTHER RUN", "UNCLASSIFIED"):
        entries = sorted((path, whys) for (k, path), whys in found.items() if k == kind)
        if not entries:
            continue
        print(f"{kind}:")
        for path, whys in entries:
            for why, where in whys.items():
                print(f"  {path} ({why}): {len(where)} directive(s): {', '.join(where)}")
    if repick:
        print("excerpts of SWITCH files to pick again in the new histories (not switched):")
        print("\n".join(f"  {line}" for line in repick))
    return 1 if any(kind == "UNCLASSIFIED" for kind, _ in found) else 0


if __name__ == "__main__":
    sys.exit(main())
