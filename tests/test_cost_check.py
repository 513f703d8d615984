"""``make cost CHECK=<results root>``: the cost model's estimate of finished runs against their measured
wall time, on a hand-made results root of known FLOPs, throughputs and times."""

import json

import pytest

import fedbench.planning.cost_report as cost_report
from fedbench.planning.cost_report import check_runs, cpu_seconds, last_cpu_sample, median_error

# two clients of 50 training and 10 test rows, 4 features, 3 classes: MLR (Linear(4, 3)), 48 FLOPs a
# trained sample, 24 a scored one
SUMMARY = {"num_clients": 2, "train_client_sizes": [50, 50], "test_samples": 20, "val_samples": 0,
           "input_shape": [4], "num_classes": 3, "spec": {"kind": "iid"}}
TRAINING = {"rounds": 10, "local_epochs": 1, "batch_size": 10, "participation": 1.0, "eval_every": 5}
# training 10 rounds x 2 clients x 50 rows x 48 = 48,000 FLOPs at 480 FLOP/s = 100 s; evaluation
# 2 x (2 models x 20 test rows + 100 training rows) x 24 = 6,720 FLOPs at 67.2 FLOP/s = 100 s; + 50 s a job
TABLE = {"job_overhead_s": 50, "safety_factor": 2.0,
         "cpu": {"assumed": 1.0, "round_overhead_s": 0.0, "families": {"mlp": {"train": 480.0, "eval": 67.2}}}}
PREDICTED = 250.0


def write_run(root, rel, method, wall, status="completed", bench=None):
    run = root / rel
    run.mkdir(parents=True)
    cell = {"experiment": "e", "dataset": "toy", "partition": "iid", "model": "mlr", "algorithm": method, "seed": 0}
    metrics = {"cell": cell, "status": status, "device": "cpu", "wall_time_s": wall, "hyperparameters": {
        "dataset": {"source": "digits"}, "partition": {"kind": "iid", "num_clients": 2}, "model": {"arch": "mlr"},
        "algorithm": {"method": method}, "training": TRAINING}}
    (run / "metrics.json").write_text(json.dumps(metrics))
    if bench is not None:
        parts = rel.split("/")
        kind, rest = ("train", parts[1:]) if parts[0] == "runs" else ("tune", parts[2:])
        tsv = root / "benchmarks" / kind / ("/".join(rest) + ".tsv")
        tsv.parent.mkdir(parents=True)
        tsv.write_text("s\th:m:s\tmax_rss\tcpu_time\n" + f"{bench[0]}\t0:00:00\t100\t{bench[1]}\n")


@pytest.fixture
def results(tmp_path):
    (tmp_path / "partitions" / "toy" / "iid").mkdir(parents=True)
    (tmp_path / "partitions" / "toy" / "iid" / "seed0.json").write_text(json.dumps(SUMMARY))
    # the job's benchmark (200 s, 150 of them on the CPU) covers the run (190 s since loading its data)
    write_run(tmp_path, "runs/e/toy/iid/mlr/fedavg/seed0", "fedavg", 190.0, bench=(200.0, 150.0))
    # a job resumed from its checkpoint: its benchmark saw the last attempt only (40 s), metrics.json all 500 s
    write_run(tmp_path, "tuning/trials/e/toy/iid/mlr/fedprox/trial0/seed0", "fedprox", 500.0, bench=(40.0, 39.0))
    write_run(tmp_path, "runs/e/toy/iid/mlr/fedmut/seed0", "fedmut", 3.0, status="diverged")
    return tmp_path


def test_check_compares_predicted_with_measured_seconds_by_hand(results):
    rows, skipped = check_runs(results, TABLE)
    by_method = {row["algorithm"]: row for row in rows}
    assert set(by_method) == {"fedavg", "fedprox"} and skipped == ["runs/e/toy/iid/mlr/fedmut/seed0: diverged"]
    fedavg, fedprox = by_method["fedavg"], by_method["fedprox"]
    assert fedavg["predicted"] == pytest.approx(PREDICTED) and fedprox["predicted"] == pytest.approx(PREDICTED)
    assert (fedavg["measured"], fedavg["source"], fedavg["cpu_share"]) == (200.0, "benchmark", 0.75)
    # the benchmark's last CPU sample of a 200 s job was at 17 + 6 x 30 = 197 s: 150 s x 200 / 197
    assert fedavg["cpu_s"] == pytest.approx(150 * 200 / 197)
    assert (fedprox["measured"], fedprox["source"], fedprox["cpu_share"], fedprox["cpu_s"]) == (500.0, "wall_time_s", None, None)
    assert fedavg["ratio"] == pytest.approx(1.25) and fedprox["ratio"] == pytest.approx(0.5)
    assert not fedavg["estimated"] and fedavg["calibrated"]  # the partition's summary, a measured family
    assert median_error(rows) == pytest.approx((0.25 + 0.5) / 2)


def test_cost_command_prints_the_check(results, capsys, monkeypatch):
    monkeypatch.setattr(cost_report, "throughputs", lambda: TABLE)
    assert cost_report.main(["--check", str(results)]) == 0
    out = capsys.readouterr().out
    assert "2 finished runs" in out and "skipped runs/e/toy/iid/mlr/fedmut/seed0: diverged" in out
    assert "by algorithm: fedavg 25 % (1), fedprox 50 % (1)" in out
    assert "over all 2 runs: 37.5 %" in out
    # against the CPU time where the benchmark has it: 250 s predicted, 152.3 s on the CPU (150 s sampled at 197 s)
    assert "median |predicted/CPU time - 1| over the 1 runs with a benchmark's CPU time: 64.2 %" in out
    assert "median |predicted/CPU time - 1| by algorithm: fedavg 64 % (1)" in out
    assert "against the benchmark's cpu_time as recorded (its last sample), 1 runs: 66.7 %" in out  # 250 / 150
    assert cost_report.main(["--check", str(results), "--check", str(results)]) == 0
    assert "over all 4 runs of the 2 roots: 37.5 %" in capsys.readouterr().out


def test_the_benchmarks_cpu_time_is_its_last_sample_extrapolated_to_the_jobs_end():
    # samples every 0.5 s for the first 17 s, then at 47, 77, 107 s, ...
    assert last_cpu_sample(10.0) == 10.0 and last_cpu_sample(46.6) == 17.0 and last_cpu_sample(48.5) == 47.0
    assert last_cpu_sample(106.0) == 77.0 and last_cpu_sample(137.5) is None  # 0.5 s after 137 s: taken or not?
    # a job of 44 s whose benchmark says 13 s of CPU (its sample at 17 s): 13 x 44 / 17
    assert cpu_seconds(44.0, 13.0) == pytest.approx(33.647, abs=1e-3)
    assert cpu_seconds(80.0, 70.0) == pytest.approx(70 * 80 / 77) and cpu_seconds(47.5, 40.0) is None


def test_job_time_by_stage_sums_every_benchmark_extrapolated_by_hand(results, capsys, monkeypatch):
    # a stage with no run of its own (a partition job) and a job whose last sample is ambiguous (47.5 s:
    # due at 47 s, taken or not): its recorded 40 s count, a lower bound
    tsv = results / "benchmarks" / "partition" / "toy" / "iid" / "seed0.tsv"
    tsv.parent.mkdir(parents=True)
    tsv.write_text("s\th:m:s\tmax_rss\tcpu_time\n47.5\t0:00:47\t100\t40.0\n")
    stages = {row["stage"]: row for row in cost_report.stage_times(results)}
    assert list(stages) == ["partition", "train", "tune"]
    assert stages["train"] == {"stage": "train", "jobs": 1, "wall_s": 200.0, "cpu_s": pytest.approx(150 * 200 / 197),
                               "ambiguous": 0}
    # the resumed trial's benchmark: 40 s, last sampled at 17 s with 39 s -> 39 x 40 / 17
    assert stages["tune"]["cpu_s"] == pytest.approx(39 * 40 / 17)
    assert (stages["partition"]["cpu_s"], stages["partition"]["ambiguous"]) == (40.0, 1)
    monkeypatch.setattr(cost_report, "throughputs", lambda: TABLE)
    assert cost_report.main(["--check", str(results)]) == 0
    total = (150 * 200 / 197 + 39 * 40 / 17 + 40) / 3600
    assert f"all 3 jobs {total:.2f} CPU-h ({287.5 / 3600:.2f} h wall" in capsys.readouterr().out
