"""The claims' group-sequential design (fedbench.results.sequential): its error rates checked by
simulating 10,000 claims, its alpha-spending boundary checked against an independent simulation and
against hand formulas, the equivalence verdict on hand-made intervals at the boundary, and the looks'
bookkeeping.

By hand: one look with alpha = 0.025 is the 95 % interval; differences 2, 3, 4 (mean 3, sd 1) give
3 ± t(0.975, 2) · 1 / sqrt(3) = 3 ± 4.3027 / 1.7321 = 3 ± 2.4842.  Spending functions at information
fraction tau: Hwang-Shih-DeCani with gamma = -2 spends alpha (1 - e^{2 tau}) / (1 - e^2), at tau = 1/2
alpha / (1 + e); Lan-DeMets' O'Brien-Fleming type 2 - 2 Phi(z_{1 - alpha/2} / sqrt(tau)), at tau = 1/4
2 - 2 Phi(2 z_{1 - alpha/2}).

Monte-Carlo allowance: a share estimated from 10,000 simulated claims has a standard error of
sqrt(alpha (1 - alpha) / 10,000) (0.0022 at alpha = 0.05); the exact boundary spends all of alpha, so
an error rate is checked against alpha plus 3 of these."""

import math

import numpy as np
import pytest
from scipy import stats

from fedbench.results.sequential import (
    EQUIVALENT, FAILS, HOLDS, INCONCLUSIVE, NOT_COMPARABLE, SIMULATION_PATHS, Design, critical_values, decide,
    detectable, sequential_verdicts, spending_function, t_interval,
)

LOOKS = (3, 5, 7, 10)
CLAIMS = 10_000


def allowance(alpha: float, claims: int = CLAIMS) -> float:
    """Three Monte-Carlo standard errors of a share near ``alpha`` estimated from ``claims`` claims."""
    return 3 * math.sqrt(alpha * (1 - alpha) / claims)


def simulate(true_difference: float, alpha: float = 0.05, delta: float = 1.0, seed: int = 0,
             spending: str = "hsd(-2)", looks=LOOKS) -> dict[str, float]:
    """Share of each verdict over CLAIMS simulated claims with per-seed differences N(true, 1)."""
    values = np.random.default_rng(seed).normal(true_difference, 1.0, (CLAIMS, looks[-1]))
    verdicts = sequential_verdicts(values, Design(looks, alpha, delta, spending))["verdict"]
    return {v: float(np.mean(verdicts == v)) for v in (HOLDS, FAILS, EQUIVALENT, INCONCLUSIVE)}


@pytest.mark.parametrize("alpha", [0.05, 0.025])
def test_with_no_true_difference_a_directional_verdict_is_rare_however_many_looks(alpha):
    """Four looks, each free to stop the claim: 'holds' (and 'does not hold') stay at or below alpha
    (within the Monte-Carlo allowance), and at alpha = 0.05 the design uses its alpha: at least 0.045
    each (Bonferroni over the looks gave 0.034 and 0.036 on these claims)."""
    shares = simulate(0.0, alpha)
    assert shares[HOLDS] <= alpha + allowance(alpha) and shares[FAILS] <= alpha + allowance(alpha), shares
    if alpha == 0.05:
        assert shares[HOLDS] >= 0.045 and shares[FAILS] >= 0.045, shares


def test_without_an_equivalence_exit_the_boundary_spends_exactly_alpha():
    """Threshold claims (no equivalence verdict, so only the directional boundary can stop them), 100,000
    of them with no true difference: P(holds) is alpha within 3 Monte-Carlo standard errors (0.0021), for
    the default boundary over 3/5/7/10 seeds and over pFedMT's 5/7/10."""
    for looks, seed in ((LOOKS, 10), ((5, 7, 10), 11)):
        values = np.random.default_rng(seed).normal(0.0, 1.0, (100_000, looks[-1]))
        holds = np.mean(sequential_verdicts(values, Design(looks, 0.05), threshold=True)["verdict"] == HOLDS)
        assert abs(holds - 0.05) <= allowance(0.05, 100_000), (looks, holds)


def test_bonferroni_stays_available_and_wastes_alpha():
    """The former design, named: each look at 1 - 2 alpha / L.  Conservative (below 0.045 each way: alpha
    not used), while the unadjusted design (every look at the full alpha, i.e. Bonferroni at L alpha)
    says 'holds' more often than alpha allows -- which is why looks need a boundary at all."""
    shares = simulate(0.0, 0.05, spending="bonferroni")
    assert shares[HOLDS] < 0.045 and shares[FAILS] < 0.045, shares
    assert Design(LOOKS, 0.05, spending="bonferroni").look_confidence(2) == pytest.approx(1 - 2 * 0.05 / 4)
    assert Design(LOOKS, 0.05, spending="bonferroni").critical == tuple(stats.t.ppf(1 - 0.0125, n - 1) for n in LOOKS)
    naive = simulate(0.0, 0.05 * len(LOOKS), spending="bonferroni")
    assert naive[HOLDS] > 0.05 + allowance(0.05)


@pytest.mark.parametrize("true_difference", [1.0, -1.0])
def test_a_difference_of_exactly_delta_is_rarely_called_equivalent(true_difference):
    """TOST at the boundary: with |difference| = delta, 'equivalent' in at most alpha of the claims."""
    assert simulate(true_difference, alpha=0.05, delta=1.0, seed=1)[EQUIVALENT] <= 0.05 + allowance(0.05)


def test_a_large_difference_is_found_and_no_difference_is_called_equivalent():
    assert simulate(2.0, seed=2)[HOLDS] > 0.95  # 2 sd per seed: found by the cap nearly always
    tight = sequential_verdicts(np.random.default_rng(3).normal(0, 0.2, (CLAIMS, 10)), Design(LOOKS, 0.05, 1.0))
    assert np.mean(tight["verdict"] == EQUIVALENT) > 0.95


# ---- the boundary ----------------------------------------------------------------------------


def test_the_spending_functions_by_hand():
    alpha = 0.05
    hsd, obf = spending_function("hsd(-2)"), spending_function("obf")
    assert hsd.spent(alpha, 0.5) == pytest.approx(alpha / (1 + math.e))
    assert hsd.spent(alpha, 0.3) == pytest.approx(alpha * (1 - math.exp(0.6)) / (1 - math.exp(2)))
    assert obf.spent(alpha, 0.25) == pytest.approx(2 - 2 * stats.norm.cdf(2 * stats.norm.ppf(1 - alpha / 2)))
    assert spending_function("hsd(0)").spent(alpha, 0.3) == pytest.approx(0.3 * alpha)  # gamma = 0: linear
    for function in (hsd, obf, spending_function("hsd(1)")):
        assert function.spent(alpha, 1.0) == alpha  # all of alpha by the last look, exactly
    assert Design(LOOKS, alpha).spent == pytest.approx([hsd.spent(alpha, n / 10) for n in LOOKS])
    assert Design(LOOKS, alpha, spending="bonferroni").spent == pytest.approx([0.0125, 0.025, 0.0375, 0.05])


@pytest.mark.parametrize("spending", ["hsd(-2)", "obf", "bonferroni", "hsd(3)"])
@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_one_look_is_the_fixed_sample_t_quantile_exactly(spending, seeds):
    design = Design((seeds,), 0.05, spending=spending)
    assert design.critical == (stats.t.ppf(1 - 0.05, seeds - 1),)
    assert design.look_alpha(0) == 0.05 and design.look_confidence(0) == pytest.approx(0.9, abs=1e-15)


def independent_crossings(looks, critical, paths=2 ** 18, seed=12345) -> np.ndarray:
    """Cumulative share of paths whose one-sample t-statistic (scipy.stats.ttest_1samp on the first
    n_k of N(0, 1) values from a Mersenne-Twister generator, not the design's) has crossed +c_k by look
    k, averaged with the mirror share crossing -c_k (the two tails are disjoint events)."""
    x = np.random.Generator(np.random.MT19937(seed)).standard_normal((paths, looks[-1]))
    t = np.column_stack([stats.ttest_1samp(x[:, :n], 0.0, axis=1).statistic for n in looks])
    up = np.cumsum(t > np.asarray(critical), 1) > 0
    down = np.cumsum(-t > np.asarray(critical), 1) > 0
    return (up.mean(0) + down.mean(0)) / 2


@pytest.mark.parametrize("looks, spending", [(LOOKS, "hsd(-2)"), ((5, 7, 10), "hsd(-2)"), (LOOKS, "obf"),
                                             ((3, 5), "hsd(-4)")])
def test_the_critical_values_spend_alpha_look_by_look_on_an_independent_simulation(looks, spending):
    """At the design's critical values, the chance that the t-statistic has crossed by look k is the
    spent alpha(tau_k), measured on 2^18 paths of an independent generator and t-test (both tails).
    Tolerance: 4 standard errors of the two Monte-Carlo estimates, this test's (2 x 2^18 tail
    samples) and the design's own (its order statistics over 2 x SIMULATION_PATHS), sqrt(S (1 - S) / m)
    each.  Bonferroni's critical values, for contrast, spend visibly less than alpha by the last look."""
    design = Design(looks, 0.05, spending=spending)
    crossed = independent_crossings(looks, design.critical)
    spent = np.asarray(design.spent)
    tolerance = 4 * np.sqrt(spent * (1 - spent) * (1 / (2 * 2 ** 18) + 1 / (2 * SIMULATION_PATHS)))
    assert np.all(np.abs(crossed - spent) <= tolerance), (crossed, spent, tolerance)
    bonferroni = independent_crossings(looks, Design(looks, 0.05, spending="bonferroni").critical)
    assert bonferroni[-1] < 0.05 - 4 * tolerance[-1]


def test_the_boundary_is_deterministic_and_cached():
    """The same numbers on every call, recomputed from scratch (the cache bypassed) too; the second
    call of a design is a cache hit."""
    first = critical_values(LOOKS, 0.05, "hsd(-2)")
    hits = critical_values.cache_info().hits
    assert critical_values(LOOKS, 0.05, "hsd(-2)") == first and critical_values.cache_info().hits == hits + 1
    assert critical_values.__wrapped__(LOOKS, 0.05, "hsd(-2)") == first
    # a later look's critical value lies between the unadjusted quantile and the marginal one of its share
    design = Design(LOOKS, 0.05)
    for k in range(1, len(LOOKS)):
        share = design.spent[k] - design.spent[k - 1]
        assert stats.t.isf(design.spent[k], LOOKS[k] - 1) < design.critical[k] < stats.t.isf(share, LOOKS[k] - 1)


def test_one_look_at_alpha_0025_is_the_95_percent_interval():
    result = sequential_verdicts([[2.0, 3.0, 4.0]], Design((3,)))
    assert (result["low"][0], result["high"][0]) == pytest.approx((3 - 2.4842, 3 + 2.4842), abs=1e-4)
    assert result["verdict"][0] == HOLDS and result["n"][0] == 3 and not result["pending"][0]


def test_a_look_reads_its_interval_at_its_critical_value():
    """Differences with mean 0.5, sd 1 over 10 seeds, undecided until the cap: the last look's interval
    is 0.5 ± c_4 / sqrt(10) and its detectable effect (c_4 + t(0.8, 9)) / sqrt(10)."""
    values = np.array([[0.5 + v for v in (1, -1, 1, -1, 1, -1, 1, -1, 0, 0)]])
    values = 0.5 + (values - 0.5) / np.std(values - 0.5, ddof=1)  # sd exactly 1
    design = Design(LOOKS, 0.05, delta=0.1)
    result = sequential_verdicts(values, design)
    c4 = design.critical[3]
    assert result["look"][0] == 3 and result["verdict"][0] == INCONCLUSIVE
    assert (result["low"][0], result["high"][0]) == pytest.approx((0.5 - c4 / 10 ** 0.5, 0.5 + c4 / 10 ** 0.5))
    assert result["detectable"][0] == pytest.approx((c4 + stats.t.ppf(0.8, 9)) / 10 ** 0.5)


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
    ({"looks": (3,), "spending": "pocock"}, r"spending must be one of hsd\(GAMMA\), obf, bonferroni"),
    ({"looks": (3,), "spending": "hsd(-41)"}, r"spending must be one of"),
    ({"looks": (5, 3)}, "looks must be increasing"),
    ({"looks": ()}, "looks must be increasing"),
    ({"looks": (3,), "alpha": 0.6}, "alpha must be in"),
    ({"looks": (3,), "delta": 0}, "delta must be > 0"),
])
def test_a_bad_design_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Design(**kwargs)


def test_a_spending_function_is_named_canonically():
    assert Design((3,), spending=" HSD( -2.0 )").spending == "hsd(-2)"
    assert Design((3,), spending="OBF").spending == "obf"


def test_a_look_that_spends_too_little_to_simulate_takes_the_marginal_quantile():
    """hsd(-40) over 2/3/12 seeds spends about alpha e^-30 by the second look: far fewer crossings than
    the simulation could resolve, so that look takes t(1 - share, 2), the marginal quantile, which is
    never below the exact one (crossing after not crossing is rarer than crossing)."""
    design = Design((2, 3, 12), 0.05, spending="hsd(-40)")
    share = design.spent[1] - design.spent[0]
    assert share * 2 * SIMULATION_PATHS < 100
    assert design.critical[1] == stats.t.isf(share, 2)
    assert design.critical[0] == stats.t.isf(design.spent[0], 1)  # 1 - 1.7e-16 would lose the spent alpha's digits
