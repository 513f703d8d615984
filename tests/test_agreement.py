"""The papers' "±" statistics and the agreement flag, on hand-made seeds and rows."""

import math

import pytest

from fedbench.results.agreement import AGREE, MISS, agreement, published_uncertainty, spread, statistic_of


def test_standard_error_and_standard_deviation_of_hand_made_seeds():
    seeds = [1.0, 2.0, 3.0, 4.0]  # mean 2.5; squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5
    assert spread(seeds, "std") == pytest.approx(math.sqrt(5 / 4))  # np.std, ddof=0 (pFedMe's average_data)
    assert spread(seeds, "std_error") == pytest.approx(math.sqrt(5 / 3) / 2)  # sd(ddof=1) / sqrt(4)
    assert math.isnan(spread([7.0], "std_error")) and spread([7.0], "std") == 0.0
    with pytest.raises(ValueError, match="statistic must be"):
        spread(seeds, "iqr")


def test_the_statistic_of_a_table_comes_from_its_notes():
    assert statistic_of(["std_error", "variance of accuracy across clients (fairness)"]) == "std_error"
    assert statistic_of(['caption says "% ± std." (not std. error); C=5']) == "std"
    assert statistic_of(["mean±std over 4 runs"]) == "std"


def test_published_uncertainty():
    assert published_uncertainty(0.38, "std_error", "std_error") == pytest.approx(0.38)
    assert published_uncertainty(0.8, "std", "mean±std over 4 runs") == pytest.approx(0.4)  # 0.8 / sqrt(4)
    assert published_uncertainty(0.8, "std", "mean±std") == pytest.approx(0.8)  # runs not stated: as printed
    assert published_uncertainty(float("nan"), "std_error", "variance") == 0.0


def test_agreement_flag_on_hand_made_rows():
    # published 50 ± 1 (SE); seeds 51, 53: mean 52, u_r = sqrt(2)/sqrt(2) = 1, u = sqrt(2), z = 2/sqrt(2)
    row = agreement(50.0, 1.0, "std_error", "std_error", [51.0, 53.0])
    assert (row["combined_se"], row["z"], row["agreement"]) == pytest.approx((math.sqrt(2), math.sqrt(2), AGREE))
    # seeds 52, 54: mean 53, z = 3/sqrt(2) > 2
    row = agreement(50.0, 1.0, "std_error", "std_error", [52.0, 54.0])
    assert row["z"] == pytest.approx(3 / math.sqrt(2)) and row["agreement"] == MISS
    # a std over 4 runs: u_p = 2/2 = 1; seeds 47, 49 (u_r = 1): z = -2/sqrt(2), agree; below by 2.9 -> miss
    assert agreement(50.0, 2.0, "std", "mean±std over 4 runs", [47.0, 49.0])["agreement"] == AGREE
    assert agreement(50.0, 2.0, "std", "mean±std over 4 runs", [46.1, 48.1])["agreement"] == MISS
    # exactly two combined standard errors is within: u_p = 0 (nothing printed), seeds 11, 13: u = 1, z = 2
    row = agreement(10.0, None, "std_error", "variance", [11.0, 13.0])
    assert row["z"] == pytest.approx(2.0) and row["agreement"] == AGREE
    # one seed, or no spread at all: no flag
    assert agreement(50.0, 1.0, "std_error", "std_error", [50.0])["agreement"] == ""
    assert agreement(50.0, None, "std", "", [50.0, 50.0])["agreement"] == ""


def test_a_row_without_a_flag_has_the_same_three_keys_as_one_with():
    """With fewer than two seeds there is no flag (module doc), but the row still carries the three
    columns the scorecard writes, ``combined_se``, ``z`` and ``agreement``, as NaN, NaN and ''."""
    for values in ([], [50.0]):
        row = agreement(50.0, 1.0, "std", "mean±std over 4 runs", values)
        assert sorted(row) == ["agreement", "combined_se", "z"]
        assert math.isnan(row["combined_se"]) and math.isnan(row["z"]) and row["agreement"] == ""


def test_a_standard_error_table_uses_its_printed_plus_minus_even_where_the_notes_state_runs():
    """u_p (module doc): a standard-error table's "±" is already the mean's standard error, so it is
    not divided by sqrt(runs) where the notes name a number of runs (a standard deviation is).  Published
    50 ± 2, seeds 51 and 53 (mean 52, u_r = sd(ddof=1)/sqrt(2) = sqrt(2)/sqrt(2) = 1):
    SE table: u = sqrt(2^2 + 1) = sqrt(5), z = 2/sqrt(5); SD table over 4 runs: u_p = 2/2 = 1,
    u = sqrt(2), z = sqrt(2)."""
    se = agreement(50.0, 2.0, "std_error", "std_error; over 4 runs", [51.0, 53.0])
    assert (se["combined_se"], se["z"]) == pytest.approx((math.sqrt(5), 2 / math.sqrt(5)), rel=1e-12)
    sd = agreement(50.0, 2.0, "std", "mean±std over 4 runs", [51.0, 53.0])
    assert (sd["combined_se"], sd["z"]) == pytest.approx((math.sqrt(2), math.sqrt(2)), rel=1e-12)


def test_statistics_are_taken_in_double_precision_whatever_the_seeds_dtype():
    """Seeds handed over as float32 (2^24 and 2^24 + 2, both exact in float32) are averaged in double
    precision: mean 2^24 + 1 (float32 cannot hold it and would round it to 2^24), deviations -1 and +1,
    so np.std (ddof=0) = 1 and sd(ddof=1)/sqrt(2) = sqrt(2)/sqrt(2) = 1; against a published 2^24 with
    nothing printed, u = 1 and z = (2^24 + 1 - 2^24) / 1 = 1."""
    import numpy as np

    seeds = np.array([2.0**24, 2.0**24 + 2], dtype=np.float32)
    assert spread(seeds, "std") == 1.0 and spread(seeds, "std_error") == pytest.approx(1.0, rel=1e-15)
    row = agreement(2.0**24, None, "std", "", seeds)
    assert (row["combined_se"], row["z"]) == pytest.approx((1.0, 1.0), rel=1e-15)


def test_spread_of_too_few_seeds_is_nan_without_numpy_warnings():
    """No statistic from too few seeds: the standard error needs two, the standard deviation one; the
    answer is NaN, reached without asking numpy for the std of an empty or one-element sample (which
    would warn "Degrees of freedom <= 0" / "Mean of empty slice" in every scorecard build)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(spread([], "std")) and math.isnan(spread([], "std_error"))
        assert math.isnan(spread([7.0], "std_error")) and spread([7.0], "std") == 0.0
