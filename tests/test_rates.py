"""A cell's answer as a rate with an exact interval (analysis/intervals.py, analysis/rates.py), shown
wherever a cell is summarised: the table, the glance grid, the HTML cell page, `experiments --check`."""

from __future__ import annotations

import math

import pytest

from lockcompare.analysis.claims_check import check_claims
from lockcompare.analysis.intervals import binomial_cdf, clopper_pearson, fisher_exact, poisson_interval
from lockcompare.analysis.rates import damage_rate, violation_rate
from lockcompare.analysis.verdicts import UNOBSERVED, VERDICTS, VIOLATIONS
from lockcompare.render.glance import glance_grid
from lockcompare.render.table import DAMAGE_HEADER, VIOLATION_HEADER, render, summarize
from lockcompare.scenario.claims import EXPECTATIONS
from test_results import row


@pytest.mark.parametrize(
    ("violations", "trials", "low", "high"),
    [(0, 5, 0.0, 0.522), (0, 10, 0.0, 0.308), (0, 30, 0.0, 0.116), (0, 36, 0.0, 0.097), (0, 60, 0.0, 0.060),
     (3, 10, 0.067, 0.652), (5, 5, 0.478, 1.0), (1, 1, 0.025, 1.0)],
)  # fmt: skip
def test_clopper_pearson_gives_the_published_exact_bounds(
    violations: int, trials: int, low: float, high: float
) -> None:
    got = clopper_pearson(violations, trials)
    assert got == pytest.approx((low, high), abs=0.0006)


def test_a_clopper_pearson_bound_leaves_exactly_the_tail_on_its_side() -> None:
    # The mechanism, not only the numbers: at the upper bound, seeing k or fewer is 2.5% likely.
    low, high = clopper_pearson(3, 10)
    assert binomial_cdf(3, 10, high) == pytest.approx(0.025, abs=1e-9)
    assert 1 - binomial_cdf(2, 10, low) == pytest.approx(0.025, abs=1e-9)
    # 0 of n has the closed form 1 - 0.025^(1/n).
    assert clopper_pearson(0, 7)[1] == pytest.approx(1 - 0.025 ** (1 / 7), abs=1e-12)


def test_no_trial_gives_no_interval_and_bad_counts_are_refused() -> None:
    assert all(math.isnan(x) for x in clopper_pearson(0, 0))
    with pytest.raises(ValueError):
        clopper_pearson(6, 5)


@pytest.mark.parametrize(
    ("count", "low", "high"), [(0, 0.0, 3.689), (1, 0.0253, 5.572), (10, 4.795, 18.39), (100, 81.364, 121.627)]
)
def test_the_poisson_interval_is_garwoods(count: int, low: float, high: float) -> None:
    assert poisson_interval(count) == pytest.approx((low, high), abs=0.002)


@pytest.mark.parametrize(
    ("table", "p"),
    [((3, 2, 0, 5), 0.1667), ((5, 0, 0, 5), 0.00794), ((1, 4, 0, 5), 1.0), ((0, 5, 0, 5), 1.0),
     ((3, 2, 0, 3), 0.1964), ((8, 2, 1, 5), 0.0350), ((2, 3, 3, 2), 1.0)],
)  # fmt: skip
def test_fisher_exact_matches_r(table: tuple[int, int, int, int], p: float) -> None:
    # Values from R's fisher.test(matrix(c(a, c, b, d), 2)) (two-sided).
    assert fisher_exact(*table) == pytest.approx(p, abs=0.0005)


def test_the_violations_are_the_vocabularys_own() -> None:
    assert VIOLATIONS == tuple(v.name for v in VERDICTS if v.violation)
    assert {"lost-updates", "double-applied", "lease-violated"} == set(VIOLATIONS)
    assert set(UNOBSERVED) == {"unknown", "unavailable"}


def test_a_rate_counts_violations_over_observed_trials_and_unobserved_ones_apart() -> None:
    rows = [row(verdict=v) for v in ("lost-updates", "lease-violated", "conflicts-no-damage", "degraded", "exclusive")]
    rows += [row(verdict="unknown"), row(verdict="unavailable"), row(verdict="a-newer-word")]
    rate = violation_rate(rows)
    assert (rate.violations, rate.observed, rate.unobserved) == (2, 5, 3)
    assert (rate.low, rate.high) == clopper_pearson(2, 5)
    assert rate.text() == "2/5 40% [5.3–85.3%]"
    assert violation_rate([row(verdict="unknown")]).text() == "0/0 n/a"  # nothing observed: no rate, never 0%


def test_damage_is_lost_updates_per_struck_fault_where_faults_struck() -> None:
    struck = [row(verdict="lost-updates", lost_updates=4, fault_steps_struck=2), row(fault_steps_struck=3)]
    struck.append(row(verdict="unknown", lost_updates=9, fault_steps_struck=5))  # not observed: not counted
    damage = damage_rate(struck)
    assert damage is not None
    assert (damage.lost, damage.struck) == (4, 5)
    low, high = poisson_interval(4)
    assert (damage.low, damage.high) == (low / 5, high / 5)
    assert damage_rate([row(lost_updates=3, fault_steps_struck=0)]) is None  # nothing struck
    assert damage_rate([row(lost_updates=3, fault_steps_struck=-1)]) is None  # older than the column


def test_the_table_shows_the_rate_beside_the_lessons_conflicts_and_damage_where_faults_strike() -> None:
    rows = [row(backend="single", experiment="client-pause", verdict="lost-updates", lost_updates=2)]
    rows += [row(backend="single", experiment="client-pause") for _ in range(4)]
    headers, lines = summarize(rows)
    assert DAMAGE_HEADER not in headers  # no cell's injections struck
    assert headers.index(VIOLATION_HEADER) + 1 == headers.index("conflicts / entries (mean ±95% CI)")
    assert lines[0][headers.index(VIOLATION_HEADER)] == "1/5 20% [0.5–71.6%]"
    assert "Clopper–Pearson" in render(rows)
    crash = [
        row(backend="single", experiment="node-crash", lost_updates=3, fault_steps_struck=4, verdict="lost-updates")
    ]
    headers, lines = summarize(rows + crash)
    damage = headers.index(DAMAGE_HEADER)
    assert [line[damage] for line in lines] == ["—", "3/4 0.75 [0.15–2.2]"]


def test_the_glance_cell_and_the_claims_say_the_rate() -> None:
    rows = [row(backend="single", experiment="baseline", faults="", fault_nodes=0) for _ in range(5)]
    cell = glance_grid(rows).cells[("single", "baseline")]
    assert cell.rate_line == "0/5 [0–53%]"  # rounded outwards: never narrower than computed
    (outcome,) = [o for o in check_claims(rows, expectations=EXPECTATIONS[:1]) if o.backend == "single"]
    assert outcome.rate == "0/5 0% [0–52.2%]"
