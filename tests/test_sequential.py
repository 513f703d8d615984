"""The claims' group-sequential design (fedbench.results.sequential): its error rates checked by
simulating 10,000 claims, the equivalence verdict on hand-made intervals at the boundary, and the
looks' bookkeeping.

By hand: one look with alpha = 0.025 is the 95 % interval; differences 2, 3, 4 (mean 3, sd 1) give
3 ± t(0.975, 2) · 1 / sqrt(3) = 3 ± 4.3027 / 1.7321 = 3 ± 2.4842."""

import numpy as np
import pytest
from scipy import stats

from fedbench.results.sequential import (
    EQUIVALENT, FAILS, HOLDS, INCONCLUSIVE, NOT_COMPARABLE, Design, decide, detectable, sequential_verdicts, t_interval,
)

LOOKS = (3, 5, 7, 10)
CLAIMS = 10_000


def simulate(true_difference: float, alpha: float = 0.05, delta: float = 1.0, seed: int = 0) -> dict[str, float]:
    """Share of each verdict over CLAIMS simulated claims with per-seed differences N(true, 1)."""
    values = np.random.default_rng(seed).normal(true_difference, 1.0, (CLAIMS, LOOKS[-1]))
    verdicts = sequential_verdicts(values, Design(LOOKS, alpha, delta))["verdict"]
    return {v: float(np.mean(verdicts == v)) for v in (HOLDS, FAILS, EQUIVALENT, INCONCLUSIVE)}


@pytest.mark.parametrize("alpha", [0.05, 0.025])
def test_with_no_true_difference_a_directional_verdict_is_rare_however_many_looks(alpha):
    """Four looks, each free to stop the claim: 'holds' (and 'does not hold') stay at or below alpha."""
    shares = simulate(0.0, alpha)
    assert shares[HOLDS] <= alpha and shares[FAILS] <= alpha, shares
    # the looks are not wasted: a design without the Bonferroni split (each look at the full alpha)
    # would say 'holds' more often than alpha allows, which is why the split is there
    naive = sequential_verdicts(np.random.default_rng(0).normal(0, 1, (CLAIMS, 10)), Design(LOOKS, alpha * len(LOOKS)))
    assert np.mean(naive["verdict"] == HOLDS) > alpha


@pytest.mark.parametrize("true_difference", [1.0, -1.0])
def test_a_difference_of_exactly_delta_is_rarely_called_equivalent(true_difference):
    """TOST at the boundary: with |difference| = delta, 'equivalent' in at most alpha of the claims."""
    assert simulate(true_difference, alpha=0.05, delta=1.0, seed=1)[EQUIVALENT] <= 0.05


def test_a_large_difference_is_found_and_no_difference_is_called_equivalent():
    assert simulate(2.0, seed=2)[HOLDS] > 0.95  # 2 sd per seed: found by the cap nearly always
    tight = sequential_verdicts(np.random.default_rng(3).normal(0, 0.2, (CLAIMS, 10)), Design(LOOKS, 0.05, 1.0))
    assert np.mean(tight["verdict"] == EQUIVALENT) > 0.95


def test_one_look_at_alpha_0025_is_the_95_percent_interval():
    result = sequential_verdicts([[2.0, 3.0, 4.0]], Design((3,)))
    assert (result["low"][0], result["high"][0]) == pytest.approx((3 - 2.4842, 3 + 2.4842), abs=1e-4)
    assert result["verdict"][0] == HOLDS and result["n"][0] == 3 and not result["pending"][0]
    assert Design((3, 5, 7, 10), alpha=0.05).confidence == pytest.approx(1 - 2 * 0.05 / 4)


@pytest.mark.parametrize("low, high, verdict", [
    (-0.9, 0.9, EQUIVALENT),      # inside +-1 and straddling 0
    (-1.0, 0.5, INCONCLUSIVE),    # touches -delta: not strictly inside
    (-0.5, 1.0, INCONCLUSIVE),    # touches +delta
    (0.2, 0.8, HOLDS),            # inside +-delta but above 0: a real (if small) difference holds
    (-0.8, -0.1, FAILS),
    (-2.0, 2.0, INCONCLUSIVE),
    (0.0, 0.5, EQUIVALENT),       # 0 itself is not above 0
    (float("nan"), float("nan"), INCONCLUSIVE),
])
def test_equivalence_at_the_boundary(low, high, verdict):
    assert decide(low, high, delta=1.0) == verdict


def test_hand_made_seeds_just_inside_and_just_outside_delta():
    """Differences 0.1, -0.1, 0.1, -0.1, 0 (mean 0, sd 0.1, n 5): one look at 95 %, half-width
    t(0.975, 4) · 0.1 / sqrt(5) = 2.7764 · 0.04472 = 0.12417: equivalent with delta 0.13, not with 0.12."""
    values = [[0.1, -0.1, 0.1, -0.1, 0.0]]
    inside = sequential_verdicts(values, Design((5,), delta=0.13))
    assert inside["high"][0] == pytest.approx(0.12417, abs=1e-5) and inside["verdict"][0] == EQUIVALENT
    assert sequential_verdicts(values, Design((5,), delta=0.12))["verdict"][0] == INCONCLUSIVE


def test_thresholds_have_no_equivalence():
    assert decide(0.85, 0.95, delta=1.0, reference=0.9, threshold=True) == INCONCLUSIVE
    assert decide(0.9, 0.95, delta=1.0, reference=0.9, threshold=True) == HOLDS  # at the threshold counts


def test_the_first_look_that_decides_ends_the_claim():
    """Seeds 0-2 hold clearly; seeds 3-9 would pull the mean below 0: the claim stays decided at look 1."""
    values = [[5.0, 5.1, 5.2] + [-20.0] * 7]
    result = sequential_verdicts(values, Design(LOOKS, 0.05))
    assert (result["verdict"][0], result["look"][0], result["n"][0]) == (HOLDS, 0, 3)


def test_an_undecided_claim_is_pending_until_its_seeds_reach_the_next_look():
    values = np.array([[1.0, -1.0, 0.5, 2.0, -2.0]])  # 5 seeds: looks 3 and 5 are read, 7 is not reached
    result = sequential_verdicts(values, Design(LOOKS, 0.05))
    assert (result["verdict"][0], result["look"][0], result["pending"][0]) == (INCONCLUSIVE, 1, True)
    done = sequential_verdicts(np.tile(values, 2), Design(LOOKS, 0.05))  # 10 seeds: the cap is reached
    assert done["look"][0] == 3 and not done["pending"][0]
    partial = sequential_verdicts([[1.0, 2.0]], Design(LOOKS, 0.05))  # a pilot still running
    assert partial["n"][0] == 2 and partial["pending"][0]


def test_a_diverged_seed_is_left_out_of_its_look():
    result = t_interval([[1.0, np.nan, 3.0]], 0.95)
    assert result["n"][0] == 2 and result["mean"][0] == pytest.approx(2.0)
    # sd sqrt(2), se 1, t(0.975, 1) = 12.706
    assert result["high"][0] == pytest.approx(2 + 12.7062, abs=1e-3)


def test_a_look_with_no_number_is_not_comparable_and_draws_no_more_seeds():
    """Every pilot seed diverged (NaN): no interval, and more seeds cannot narrow one -- the claim closes
    at the pilot, not comparable, not pending; one seed with a number keeps it open (inconclusive)."""
    result = sequential_verdicts([[np.nan] * 3, [np.nan, 1.0, np.nan]], Design(LOOKS, 0.05))
    assert (result["verdict"][0], result["look"][0], result["n"][0], result["pending"][0]) == (NOT_COMPARABLE, 0, 0, False)
    assert (result["verdict"][1], result["pending"][1]) == (INCONCLUSIVE, True)
    later = sequential_verdicts([[np.nan] * 3 + [1.0, 2.0]], Design(LOOKS, 0.05))  # later seeds are never read
    assert (later["verdict"][0], later["look"][0]) == (NOT_COMPARABLE, 0)


def test_the_detectable_effect_by_hand():
    """se 1, df 9, per-look alpha 0.0125: t(0.9875, 9) + t(0.8, 9) = 2.6850 + 0.8834."""
    expected = stats.t.ppf(1 - 0.0125, 9) + stats.t.ppf(0.8, 9)
    assert detectable(1.0, 9, 0.0125) == pytest.approx(expected)
    assert expected == pytest.approx(2.6850 + 0.8834, abs=2e-3)


@pytest.mark.parametrize("kwargs, message", [
    ({"looks": (5, 3)}, "looks must be increasing"),
    ({"looks": ()}, "looks must be increasing"),
    ({"looks": (3,), "alpha": 0.6}, "alpha must be in"),
    ({"looks": (3,), "delta": 0}, "delta must be > 0"),
])
def test_a_bad_design_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Design(**kwargs)
