"""What ``evaluate`` and ``explore`` run unless told otherwise: constants only, so that the CLI's
help can show them without loading the runner (``lockcompare --help`` and the offline commands
import no server code)."""

from __future__ import annotations

#: evaluate: the built-ins run beside the backend under the same experiments.
DEFAULT_AGAINST = ("single", "redlock", "fenced")
#: evaluate: how the report card is printed.
CARD_FORMATS = ("markdown", "text")
#: evaluate ``--quick``: ten times faster, same ratios (measured: at 0.1 a 100 ms lease met a 120 ms
#: SIGSTOP in 40 of 40 runs, sleeps overshooting by p99 0.43 ms).
QUICK_TIME_SCALE = 0.1
QUICK_ROUNDS = 20
#: evaluate ``--quick``: the fewest rounds an experiment run at a larger scale keeps (a backend whose
#: TTLs are whole seconds runs short-ttl at x5: 20 rounds there cost fifty times the quick card's).
QUICK_MIN_ROUNDS = 5
#: evaluate: the search's budget; ``--quick`` scales it with its time scale (issue 38: the search's
#: two minutes were most of a "quick" card: 143 s of which 23 s were the battery and the experiments).
DEFAULT_SEARCH_BUDGET_S = 120.0
#: Where the help sends a reader for what a quick card takes: measured per backend, not typed here
#: (scripts/evaluate_quick.sh writes results/derived/evaluate-quick.txt; docs/plugins.md renders it).
QUICK_MEASURED = "what it took per backend, measured, is in docs/plugins.md"
#: explore: the scale of the searched trials: the lesson's timings halved keeps margins (hundreds of
#: ms) far above the stalls of a loaded 2-core machine (at ×0.1, write-only fencing lost one update to
#: a stall in one of two runs).
DEFAULT_TIME_SCALE = 0.5
