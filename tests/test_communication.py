"""Bytes each method sends, by hand from parameter counts; rounds and bytes to a target accuracy on
hand-made histories; time-to-target claims (fewer is better); the per-round bytes in a run's outputs
and, where the tensorboard package is installed, its TensorBoard events read back.

The hand counts: multinomial logistic regression on 5 features and 3 classes (``zero_mlr``) has
5 * 3 + 3 = 18 float32 entries = 72 bytes; the digits MLP with 8 hidden units (64 inputs, 10 classes)
64 * 8 + 8 + 8 * 10 + 10 = 610 float32 = 2,440 bytes."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from conftest import make_data, make_federation, tiny_digits_config
from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.ifca import CLUSTER_ID_BYTES
from fedbench.config.cells import Cell
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.traffic import Traffic
from fedbench.engine.weights import broadcast, model_weights
from fedbench.results.claims import HOLDS, INCONCLUSIVE, _runs_with_global, evaluate_claims, metric_column, reading
from fedbench.results.convergence import reach, time_to_target
from fedbench.results.published import load_published

MLR_BYTES = (5 * 3 + 3) * 4  # 72
LOCAL = LocalSGD(epochs=1, batch_size=8, lr=0.1)


def zero_mlr(dim=5, classes=3) -> nn.Module:
    model = nn.Sequential(nn.Flatten(), nn.Linear(dim, classes))
    nn.init.zeros_(model[1].weight)
    nn.init.zeros_(model[1].bias)
    return model


def federation(participation=0.5, model=None, **kwargs):
    return make_federation(make_data([12, 9, 10, 11]), model or zero_mlr(), LOCAL, participation=participation, **kwargs)


def one_round(algorithm, fed, state, round_) -> tuple[dict, Traffic]:
    """A round as the pipeline runs it: the sampled clients reset, the round, the hook."""
    fed.sampled = None
    after, _ = algorithm.round(fed, state, round_)
    return after, algorithm.communication(fed, state, after, round_)


def sampled(traffic: Traffic) -> np.ndarray:
    return np.flatnonzero(traffic.downlink + traffic.uplink)


# ---- bytes per method ------------------------------------------------------------------------


def test_fedavg_sends_one_model_down_and_one_up_per_sampled_client():
    fed = federation(participation=0.5)
    algorithm = ALGORITHMS["fedavg"]()
    state = algorithm.init(fed, model_weights(fed.model))
    for t in (1, 2):
        state, traffic = one_round(algorithm, fed, state, t)
        chosen = fed.sampled.numpy()
        assert len(chosen) == 2 and sampled(traffic).tolist() == chosen.tolist()
        assert traffic.downlink[chosen].tolist() == [MLR_BYTES] * 2 and traffic.uplink[chosen].tolist() == [MLR_BYTES] * 2
        assert (traffic.down_total, traffic.up_total) == (2 * MLR_BYTES, 2 * MLR_BYTES)


def test_local_sends_nothing():
    fed = federation(participation=1.0)
    algorithm = ALGORITHMS["local"]()
    state = algorithm.init(fed, model_weights(fed.model))
    _, traffic = one_round(algorithm, fed, state, 1)
    assert traffic.down_total == traffic.up_total == 0


def test_ifca_sends_its_k_models_down_and_one_model_with_the_cluster_id_up():
    fed = federation(participation=1.0)
    algorithm = ALGORITHMS["ifca"](num_clusters=3, warmup_rounds=1)
    state = algorithm.init(fed, model_weights(fed.model))
    state, warmup = one_round(algorithm, fed, state, 1)  # FedAvg's round: one model each way
    assert warmup.downlink.tolist() == [MLR_BYTES] * 4 and warmup.uplink.tolist() == [MLR_BYTES] * 4
    _, clustered = one_round(algorithm, fed, state, 2)
    assert clustered.downlink.tolist() == [3 * MLR_BYTES] * 4  # 216: all three cluster models
    assert clustered.uplink.tolist() == [MLR_BYTES + CLUSTER_ID_BYTES] * 4  # 80: its model and an int64


def test_femam_sends_the_newest_level_to_and_from_its_holders():
    """Two levels held; client 1 pruned level 2: it receives and sends nothing, the others level 2's
    model each way (the frozen level 1 they hold is not sent again; FeMAM Sec. 5.5)."""
    fed = federation(participation=1.0)
    algorithm = ALGORITHMS["femam"]()
    level = broadcast(model_weights(fed.model), 4)
    before = {"levels": [level, level], "kept": np.array([[1, 1], [1, 0], [1, 1], [1, 1]], dtype=bool), "complete": False}
    traffic = algorithm.communication(fed, before, before, 7)
    assert traffic.downlink.tolist() == [MLR_BYTES, 0, MLR_BYTES, MLR_BYTES] == traffic.uplink.tolist()


def test_fedmr_sends_each_sampled_client_its_recombined_model_and_takes_one_back():
    for entry in ({}, {"models": 3}):  # m from the participation, or its own m (sampled by FedMR itself)
        fed = federation(participation=0.5)
        algorithm = ALGORITHMS["fedmr"](**entry)
        state = algorithm.init(fed, model_weights(fed.model))
        _, traffic = one_round(algorithm, fed, state, 1)
        m = entry.get("models", 2)
        assert len(sampled(traffic)) == m and traffic.down_total == traffic.up_total == m * MLR_BYTES


def test_flt_sends_its_signature_once():
    """PCA+kM+HC on 5 features, k = 2: each client's signature is 2 centres of 5 PCA components in
    float64 (80 bytes), sent in the first round only; no encoder to download."""
    fed = federation(participation=0.5)
    algorithm = ALGORITHMS["pca_km_hc"](k=2, clusters=2)
    state = algorithm.init(fed, model_weights(fed.model))
    assert state["signature_bytes"].tolist() == [2 * 5 * 8] * 4
    state, first = one_round(algorithm, fed, state, 1)
    chosen = fed.sampled.numpy()
    up = np.full(4, 80)
    up[chosen] += MLR_BYTES
    down = np.zeros(4, dtype=int)
    down[chosen] = MLR_BYTES
    assert first.uplink.tolist() == up.tolist() and first.downlink.tolist() == down.tolist()
    _, second = one_round(algorithm, fed, state, 2)
    assert second.up_total == second.down_total == 2 * MLR_BYTES  # the signature is not sent again


def test_flt_encoder_goes_down_once_with_the_signature_up():
    fed = federation(participation=0.5)
    algorithm = ALGORITHMS["pca_km_hc"]()  # FLT's hook; the state as the encoder variant leaves it
    fed.sampled = torch.tensor([1, 3])
    before = {"encoder_bytes": 1000, "signature_bytes": np.array([40, 40, 60, 60])}
    first = algorithm.communication(fed, before, before, 1)
    assert first.downlink.tolist() == [1000, 1000 + MLR_BYTES, 1000, 1000 + MLR_BYTES]
    assert first.uplink.tolist() == [40, 40 + MLR_BYTES, 60, 60 + MLR_BYTES]
    assert algorithm.communication(fed, before, before, 2).uplink.tolist() == [0, MLR_BYTES, 0, MLR_BYTES]


@pytest.mark.parametrize("bn_aggregation, expected", [
    ("average", 188 + 32 + 8),  # weights, running mean and variance (4 + 4 float32), num_batches_tracked (int64)
    ("local_stats", 188),  # the running statistics stay on the client
    ("local", 188 - 32),  # BatchNorm's weight and bias stay too
])
def test_batchnorm_buffers_are_counted_when_they_are_averaged(bn_aggregation, expected):
    """Linear(5, 4) + BatchNorm1d(4) + Linear(4, 3): 20 + 4 + 4 + 4 + 12 + 3 = 47 float32 = 188 bytes
    of parameters; BatchNorm's buffers travel exactly when the server averages them."""
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Linear(4, 3))
    fed = make_federation(make_data([12, 8, 16, 12]), model, LocalSGD(epochs=1, batch_size=4, lr=0.1), participation=1.0)
    fed.bn_aggregation = bn_aggregation
    assert fed.model_bytes() == expected
    algorithm = ALGORITHMS["fedavg"]()
    _, traffic = one_round(algorithm, fed, algorithm.init(fed, model_weights(fed.model)), 1)
    assert traffic.downlink.tolist() == [expected] * 4 == traffic.uplink.tolist()


def test_sampling_with_replacement_counts_a_client_twice():
    traffic = Traffic.to(3, torch.tensor([0, 2, 2]), 10, 1)
    assert traffic.downlink.tolist() == [10, 0, 20] and traffic.uplink.tolist() == [1, 0, 2]


# ---- rounds and bytes to target --------------------------------------------------------------


def test_target_reached_between_two_evaluations_is_interpolated_and_rounded_up():
    # evaluated every 10 rounds, 100 bytes a round: 0.50 at round 10, 0.70 at round 20 -> 0.65 is crossed
    # at 10 + (0.15 / 0.20) * 10 = 17.5 -> round 18, 1,800 bytes
    rounds, accuracy, sent = [10, 20, 30], [0.50, 0.70, 0.60], [1000, 2000, 3000]
    assert reach(rounds, accuracy, sent, 0.65) == (18.0, 1800.0)
    assert reach(rounds, accuracy, sent, 0.70) == (20.0, 2000.0)  # exactly at an evaluation
    assert reach(rounds, accuracy, sent, 0.40) == (10.0, 1000.0)  # already at the first evaluation
    every = reach([1, 2, 3], [0.2, 0.4, 0.6], [5, 10, 15], 0.5)
    assert every == (3.0, 15.0)  # every round evaluated: the first round at or above it, exactly


def test_the_first_crossing_counts_when_accuracy_falls_back_and_crosses_again():
    """Evaluated every 5 rounds: 0.40, 0.70, 0.55, 0.58, 0.75 at rounds 5-25, bytes sent 0.6, 1.3, 2.1,
    3.0, 4.0 MB (downlink 0.5 MB a round block, uplink growing).  Target 60 %: first crossed between rounds
    5 and 10 at 5 + (0.60 - 0.40) / (0.70 - 0.40) * 5 = 8.33 -> round 9, with 0.6 + (9 - 5) / 5 * (1.3 -
    0.6) = 1.16 MB sent (0.29 MB per client of 4).  Accuracy then falls back below 60 % (rounds 15, 20)
    and crosses again between 20 and 25 (at 20 + 0.02 / 0.17 * 5 = 20.6 -> round 21, 3.2 MB): that
    second crossing, the last one, must not count.  The same as a fraction of the final accuracy (0.8 x
    0.75 = 0.60) and at the horizon (the run reached it)."""
    rounds, accuracy = [5, 10, 15, 20, 25], [0.40, 0.70, 0.55, 0.58, 0.75]
    down, up = [0.5e6, 1.0e6, 1.5e6, 2.0e6, 2.5e6], [0.1e6, 0.3e6, 0.6e6, 1.0e6, 1.5e6]
    sent = [d + u for d, u in zip(down, up)]
    assert reach(rounds, accuracy, sent, 0.60) == pytest.approx((9.0, 1.16e6))
    history = pd.DataFrame({"round": rounds, "acc_mean": accuracy, "downlink_bytes_total": down, "uplink_bytes_total": up})
    expected = {"rounds_to_target": 9, "mb_to_target": 1.16, "client_mb_to_target": 0.29, "reached": True}
    assert time_to_target(history, "mean_client_last", 4, target=60) == pytest.approx(expected)
    assert time_to_target(history, "mean_client_last", 4, fraction=0.8) == pytest.approx(expected)
    assert time_to_target(history, "mean_client_last", 4, target=60, at_horizon=True) == pytest.approx(expected)
    # only the rows from the fall-back on: the second crossing, round 21 and 3.0 + 1 / 5 * 1.0 = 3.2 MB
    assert reach(rounds[2:], accuracy[2:], sent[2:], 0.60) == pytest.approx((21.0, 3.2e6))


def test_target_never_reached_is_nan():
    assert all(math.isnan(v) for v in reach([10, 20], [0.5, 0.6], [1, 2], 0.65))


def test_a_run_that_never_reaches_the_target_counts_its_last_round_at_the_horizon():
    """min(tau, T): 85 % is never reached; at the horizon the run counts round 30 and the 6 MB sent by
    then (1.5 per client) and says it did not reach it; without, NaN."""
    history = pd.DataFrame({"round": [10, 20, 30], "acc_mean": [0.50, 0.70, 0.80],
                            "downlink_bytes_total": [1e6, 2e6, 3e6], "uplink_bytes_total": [1e6, 2e6, 3e6]})
    at_horizon = time_to_target(history, "mean_client_last", 4, target=85, at_horizon=True)
    assert at_horizon == pytest.approx({"rounds_to_target": 30, "mb_to_target": 6.0, "client_mb_to_target": 1.5,
                                        "reached": False})
    assert time_to_target(history, "mean_client_last", 4, target=65, at_horizon=True)["reached"] is True
    assert time_to_target(history, "mean_client_last", 4, target=65, at_horizon=True)["rounds_to_target"] == 18


def test_time_to_target_absolute_and_as_a_fraction_of_the_final_accuracy():
    history = pd.DataFrame({"round": [10, 20, 30], "acc_mean": [0.50, 0.70, 0.80],
                            "downlink_bytes_total": [1e6, 2e6, 3e6], "uplink_bytes_total": [1e6, 2e6, 3e6]})
    absolute = time_to_target(history, "mean_client_last", num_clients=4, target=65)
    assert absolute == pytest.approx({"rounds_to_target": 18, "mb_to_target": 3.6, "client_mb_to_target": 0.9,
                                      "reached": True})
    # 90 % of the final 0.80 = 0.72: crossed at 20 + (0.02 / 0.10) * 10 = 22 -> round 22, 4.4 MB
    fraction = time_to_target(history, "mean_client_last", num_clients=4, fraction=0.9)
    assert fraction["rounds_to_target"] == 22 and fraction["mb_to_target"] == pytest.approx(4.4)
    assert math.isnan(time_to_target(history, "mean_client_last", 4, target=85)["rounds_to_target"])


def test_fewer_rounds_is_better_in_a_claim():
    """better ``a`` reaches the target in 10, 12, 14 rounds, ``b`` in 20, 25, 30: than - better = 10, 13,
    16 (mean 13, sd 3 -> 13 ± 4.3027 * 3 / sqrt(3) = 13 ± 7.45): holds.  A seed where ``a`` never got
    there is left out of the pairs and named."""
    claim = {"source": "hand-made", "experiment": "e", "better": "a", "than": "b", "metric": "rounds_to_target", "target": 80}
    grid = [{"datasets": ["d"], "partitions": ["p"], "models": ["m"], "algorithms": ["a", "b"]}]
    config = {"seeds": [0, 1, 2], "experiments": {"e": {"grid": grid}}, "claims": {"c": claim}}
    column = metric_column(claim)
    assert column == "rounds_to_target@80 %"

    def runs(a):
        rows = [{"experiment": "e", "dataset": "d", "partition": "p", "model": "m", "algorithm": name, "seed": s, column: v}
                for name, values in (("a", a), ("b", [20, 25, 30])) for s, v in enumerate(values)]
        return pd.DataFrame(rows)

    row = evaluate_claims(config, runs([10, 12, 14]), load_published()).iloc[0]
    assert row["verdict"] == HOLDS and row["difference"] == pytest.approx(13.0)
    assert (row["low"], row["high"]) == pytest.approx((13 - 7.4525, 13 + 7.4525), abs=1e-3)
    assert row["comparison"] == "b − a, to 80 %" and row["delta"] == 5.0  # DEFAULT_DELTA: 5 rounds
    missing = evaluate_claims(config, runs([10, 12, np.nan]), load_published()).iloc[0]
    assert missing["n"] == 2 and missing["diverged"] == "a did not reach the target or diverged (seed 2)"


def test_a_method_that_never_reaches_the_target_loses_at_the_horizon_instead_of_dropping_out(tmp_path):
    """Runs of 30 rounds evaluated every 10 (hand_run): ``a`` reaches 65 % at round 18 (17.5 rounded up) on
    every seed; ``b`` reaches it at round 28 on seed 0 and never on seeds 1, 2 (counted at round 30).
    At the horizon: b - a = 10, 12, 12 -> mean 11.33, sd 1.155, t(0.975, 2) = 4.3027: 11.33 ± 2.87,
    holds.  Left out (``not_reached: leave_out``): only seed 0 pairs, no interval, inconclusive."""
    for seed in range(3):
        hand_run(tmp_path / "e" / "d" / "p" / "m", "a", seed, [0.5, 0.7, 0.8], 1000)
        hand_run(tmp_path / "e" / "d" / "p" / "m", "b", seed, [0.3, 0.5, 0.7 if seed == 0 else 0.6], 1000)
    paths = sorted(tmp_path.glob("e/d/p/m/*/seed*/metrics.json"))
    claim = {"source": "hand-made", "experiment": "e", "better": "a", "than": "b", "metric": "rounds_to_target", "target": 65}
    grid = [{"datasets": ["d"], "partitions": ["p"], "models": ["m"], "algorithms": ["a", "b"]}]
    config = {"seeds": [0, 1, 2], "experiments": {"e": {"grid": grid}}, "claims": {"c": claim}}
    row = evaluate_claims(config, _runs_with_global(config, paths), load_published()).iloc[0]
    assert row["verdict"] == HOLDS and row["n"] == 3 and row["difference"] == pytest.approx(34 / 3)
    assert (row["low"], row["high"]) == pytest.approx((34 / 3 - 4.3027 * 1.1547 / 3 ** 0.5,
                                                       34 / 3 + 4.3027 * 1.1547 / 3 ** 0.5), abs=1e-3)
    assert row["at_horizon"] == "b did not reach the target (seed 1, 2: counted at its last round)"
    assert row["diverged"] == "" and "counted at its last round" in reading(row)
    config["claims"]["c"] = {**claim, "not_reached": "leave_out"}
    left_out = evaluate_claims(config, _runs_with_global(config, paths), load_published()).iloc[0]
    assert left_out["n"] == 1 and left_out["verdict"] == INCONCLUSIVE and left_out["at_horizon"] == ""
    assert left_out["diverged"] == "b did not reach the target or diverged (seed 1, 2)"


# ---- a run's outputs -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_partition(tmp_path_factory):
    from fedbench.run.partition_job import build_partition

    config = tiny_digits_config()
    root = tmp_path_factory.mktemp("partition")
    build_partition(config, "digits", "dir", 0, root / "seed0.npz", root / "seed0.json")
    return root / "seed0.npz"


def run_tiny(tmp_path, partition, **top):
    from fedbench.run.job import cell_job
    from fedbench.run.stages import run_cell

    config = tiny_digits_config(rounds=3, local_epochs=1, batch_size=16, lr=0.1, participation=0.5, eval_every=2)
    config.update(top)
    cell = Cell("tiny", "digits", "dir", "mlp", "fedavg", 0)
    metrics = run_cell(cell_job(config, cell), partition, tmp_path / "run")
    return metrics, pd.read_csv(tmp_path / "run" / "history.csv")


def test_history_and_metrics_record_the_bytes(tmp_path, tiny_partition):
    """FedAvg, 2 of 4 clients a round, 2,440 bytes a model: 4,880 each way a round; rows at rounds 2
    (two rounds since the start) and 3 (one)."""
    metrics, history = run_tiny(tmp_path, tiny_partition)
    assert history["round"].tolist() == [2, 3]
    assert history["downlink_bytes"].tolist() == [9760, 4880] == history["uplink_bytes"].tolist()
    assert history["downlink_bytes_total"].tolist() == [9760, 14640] == history["uplink_bytes_total"].tolist()
    sent = metrics["communication"]
    assert (sent["downlink_bytes"], sent["uplink_bytes"], sent["bytes"]) == (14640, 14640, 29280)
    assert sent["bytes_per_client"] == 29280 / 4 and sent["model_bytes"] == 2440
    assert sent["batchnorm"].startswith("counted")


def test_tensorboard_events_equal_the_history(tmp_path, tiny_partition):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fedbench.run.tracking import tag

    metrics, history = run_tiny(tmp_path, tiny_partition, tensorboard=True)
    runs = list((tmp_path / "run" / "tensorboard").iterdir())
    assert [r.name for r in runs] == [metrics["provenance"]["code_hash"][:12]]  # one run, named by the code hash
    events = EventAccumulator(str(runs[0]))
    events.Reload()
    for column in ("acc_mean", "train_loss", "downlink_bytes", "uplink_bytes_total"):
        scalars = events.Scalars(tag(column))
        assert [s.step for s in scalars] == history["round"].tolist()
        assert [s.value for s in scalars] == pytest.approx(history[column].tolist(), rel=1e-6)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["communication"]["bytes"] == 29280


# ---- the report's figure and table -----------------------------------------------------------


def hand_run(root, algorithm, seed, accuracy, per_round_bytes, rounds=(10, 20, 30)):
    """A finished run directory: history every 10 rounds, ``per_round_bytes`` each way per round."""
    run = root / algorithm / f"seed{seed}"
    run.mkdir(parents=True)
    cell = {"experiment": "e", "dataset": "d", "partition": "p", "model": "m", "algorithm": algorithm, "seed": seed}
    (run / "metrics.json").write_text(json.dumps({"cell": cell, "protocol": "mean_client_last", "num_clients": 4,
                                                  "status": "completed", "final": {"accuracy": accuracy[-1]}}))
    total = [per_round_bytes * r for r in rounds]
    pd.DataFrame({"round": rounds, "acc_mean": accuracy, "downlink_bytes_total": total,
                  "uplink_bytes_total": total}).to_csv(run / "history.csv", index=False)
    return run


def test_the_table_and_figure_of_rounds_and_bytes_to_target(tmp_path, saved_figures):
    from fedbench.results.convergence import plot_accuracy_vs_bytes, target_table

    runs = [hand_run(tmp_path, "fast", s, [0.5, 0.7, 0.8], 50_000) for s in (0, 1)]
    runs += [hand_run(tmp_path, "slow", 0, [0.3, 0.5, 0.6], 250_000), hand_run(tmp_path, "slow", 1, [0.3, 0.5, 0.7], 250_000)]
    table = target_table(runs, [{"target": 65}]).set_index("algorithm")
    # fast: 65 % crossed at 17.5 -> round 18, 18 * 100 kB = 1.8 MB (0.45 per client), both seeds
    assert table.loc["fast", ["reached", "rounds_to_target", "mb_to_target", "client_mb_to_target"]].tolist() == [
        "2/2", "18.0 ± 0.0", "1.80 ± 0.00", "0.450 ± 0.000"]
    # slow: seed 1 crosses at 20 + 0.15 / 0.2 * 10 = 27.5 -> round 28, 28 * 500 kB = 14 MB; seed 0 never
    assert table.loc["slow", ["reached", "rounds_to_target", "mb_to_target"]].tolist() == ["1/2", "28.0 ± 0.0", "14.00 ± 0.00"]
    plot_accuracy_vs_bytes(runs, tmp_path / "bytes.png")
    left, right = saved_figures[-1].axes[:2]
    fast_left, fast_right = left.get_lines()[0], right.get_lines()[0]
    assert fast_left.get_xdata().tolist() == pytest.approx([1.0, 2.0, 3.0])  # MB at rounds 10, 20, 30
    assert fast_right.get_xdata().tolist() == [10, 20, 30]
    assert fast_left.get_ydata().tolist() == pytest.approx([50, 70, 80])
