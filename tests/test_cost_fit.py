"""``python -m fedbench.planning.cost_report --fit``: the overhead constants fitted to finished runs' CPU time
(scipy's non-negative least squares on the relative error) recover constants planted in synthetic
runs, name the terms the runs cannot tell apart, and are written into the throughput file in place."""

import json

import numpy as np
import pytest
import yaml

import fedbench.planning.cost_report as cost_report
from fedbench.planning.cost_fit import fit_overheads, median_abs_error, parse_terms, predicted, write_constants
from fedbench.planning.cost_report import last_cpu_sample

PLANTED = {"job_overhead_s": 30.0, "round_overhead_s": 0.5, "step_overhead_s": 0.2, "eval_overhead_s": 1.0}


def synthetic_rows(counts, flop_seconds, constants=PLANTED, noise=None):
    rows = []
    for i, ((rounds, steps, evaluations), flops) in enumerate(zip(counts, flop_seconds)):
        row = {"device": "cpu", "root": "r", "flop_seconds": flops, "counts": {
            "job_overhead_s": 1.0, "round_overhead_s": rounds, "step_overhead_s": steps, "eval_overhead_s": evaluations}}
        row["cpu_s"] = predicted(row, constants) * (1 if noise is None else noise[i])
        rows.append(row)
    return rows


def test_the_fit_recovers_planted_constants():
    counts = [(10, 50, 2), (20, 200, 4), (10, 150, 10), (30, 150, 3), (600, 12_000, 600), (150, 2_500, 15)]
    rows = synthetic_rows(counts, [200, 600, 800, 450, 3, 52])
    fit = fit_overheads(rows, {"cpu": {}})
    assert fit.constants == pytest.approx(PLANTED, rel=1e-9) and not fit.inseparable and fit.runs == 6
    assert median_abs_error(rows, fit.constants) == pytest.approx(0, abs=1e-12)
    # a negative truth is clipped at 0 (non-negative least squares): no term may pay back time
    rows = synthetic_rows(counts, [200, 600, 800, 450, 3, 52], {**PLANTED, "eval_overhead_s": -0.5})
    assert fit_overheads(rows, {"cpu": {}}).constants["eval_overhead_s"] == 0


def test_the_relative_error_is_minimised():
    # two runs of 10 and 1000 s with nothing but a job overhead: least squares on the relative error
    # gives the k minimising (k / 10 - 1)^2 + (k / 1000 - 1)^2: (k / 10 - 1) / 10 + (k / 1000 - 1) / 1000 = 0,
    # k = (1/10 + 1/1000) / (1/100 + 1/1000000) = 10.099 (the shorter run weighs 10,000 times more;
    # unweighted least squares would give the mean, 505)
    rows = [{"device": "cpu", "root": "r", "flop_seconds": 0.0, "cpu_s": y, "counts": {"job_overhead_s": 1.0}} for y in (10, 1000)]
    fit = fit_overheads(rows, {"cpu": {}}, terms=("job_overhead_s",))
    assert fit.constants["job_overhead_s"] == pytest.approx((1 / 10 + 1 / 1000) / (1 / 100 + 1 / 1e6)) == pytest.approx(10.099, abs=1e-3)


def test_terms_the_runs_cannot_tell_apart_are_held_at_zero_and_named():
    # every run has 600 rounds, each evaluated: rounds and evaluations are 600 x the job's count
    counts = [(600, 12_000, 600), (600, 24_000, 600), (600, 60_000, 600), (600, 360_000, 600)]
    rows = synthetic_rows(counts, [3, 3, 4, 15])
    fit = fit_overheads(rows, {"cpu": {}})
    assert fit.fitted == ("job_overhead_s", "step_overhead_s")
    assert fit.inseparable == ("round_overhead_s", "eval_overhead_s")
    # the job absorbs them: 30 + 600 x (0.5 + 1.0) = 930 s; the steps are recovered
    assert fit.constants["job_overhead_s"] == pytest.approx(930) and fit.constants["step_overhead_s"] == pytest.approx(0.2)
    assert fit.constants["round_overhead_s"] == fit.constants["eval_overhead_s"] == 0


def test_terms_left_out_keep_the_files_values():
    counts = [(10, 50, 2), (20, 200, 4), (10, 150, 10), (30, 150, 3)]
    rows = synthetic_rows(counts, [200, 600, 800, 450])
    table = {"cpu": {"round_overhead_s": 0.5, "eval_overhead_s": 1.0}}
    fit = fit_overheads(rows, table, terms=parse_terms("job,step"))
    assert fit.constants == pytest.approx(PLANTED) and fit.fitted == ("job_overhead_s", "step_overhead_s")
    with pytest.raises(ValueError, match="unknown overhead terms"):
        parse_terms("job,warmup")


WRITTEN = ("# header comment, hand-written\nsafety_factor: 2.0\njob_overhead_s: 60\ncpu:\n  assumed: 2.0e9\n"
            "  round_overhead_s: 0.11  # old\n  families:\n    mlp: {train: 1.0, eval: 2.0}\ncuda:\n  assumed: 5.0e12\n"
            "  round_overhead_s: 0.05\n")


def test_writing_the_constants_keeps_every_other_line(tmp_path):
    path = tmp_path / "throughputs.yaml"
    path.write_text(WRITTEN)
    write_constants(path, "cpu", {"job_overhead_s": 29.71234, "round_overhead_s": 0.0, "step_overhead_s": 0.000543218})
    lines = path.read_text().splitlines()
    # the CPU's round overhead replaced on its own line (its comment kept); the job and step overheads,
    # which the CPU's block lacked, added after its `assumed`; the GPU's and the file's own untouched
    assert lines == ["# header comment, hand-written", "safety_factor: 2.0", "job_overhead_s: 60", "cpu:",
                     "  assumed: 2.0e9", "  job_overhead_s: 29.7", "  step_overhead_s: 0.000543",
                     "  round_overhead_s: 0.0  # old", "  families:", "    mlp: {train: 1.0, eval: 2.0}", "cuda:",
                     "  assumed: 5.0e12", "  round_overhead_s: 0.05"]
    table = yaml.safe_load(path.read_text())
    assert table["cpu"]["job_overhead_s"] == 29.7 and table["cuda"]["round_overhead_s"] == 0.05 and table["job_overhead_s"] == 60


# ---- end to end: a results root of runs made from planted constants ---------------------------------

# two clients of 50 training and 10 test rows, MLR on 4 features and 3 classes (48 FLOPs a trained
# sample, 24 a scored one); the figures make the FLOP seconds round numbers
SUMMARY = {"num_clients": 2, "train_client_sizes": [50, 50], "test_samples": 20, "val_samples": 0,
           "input_shape": [4], "num_classes": 3, "spec": {"kind": "iid"}}
TABLE = {"job_overhead_s": 60, "safety_factor": 2.0,
         "cpu": {"assumed": 1.0, "round_overhead_s": 0.11, "families": {"mlp": {"train": 480.0, "eval": 67.2}}}}
# (name, rounds, epochs, eval_every): every round both clients, 5 batches of 10 an epoch each, so
# steps = rounds x epochs x 5; training FLOPs rounds x 2 x 50 x epochs x 48 at 480 /s = 10 x rounds x
# epochs s; evaluation evaluations x (2 x 20 + 100) rows x 24 at 67.2 /s = 50 x evaluations s
RUNS = [("a", 10, 1, 5), ("b", 20, 2, 5), ("c", 10, 3, 1), ("d", 30, 1, 10), ("e", 40, 2, 20)]


def planted_seconds(rounds, epochs, every):
    evaluations = -(-rounds // every)
    flops = 10 * rounds * epochs + 50 * evaluations
    return flops + 30 + 0.5 * rounds + 0.2 * rounds * epochs * 5 + 1.0 * evaluations


def test_a_results_root_from_planted_constants_is_fitted_and_written(tmp_path, monkeypatch, capsys):
    (tmp_path / "partitions" / "toy" / "iid").mkdir(parents=True)
    (tmp_path / "partitions" / "toy" / "iid" / "seed0.json").write_text(json.dumps(SUMMARY))
    for name, rounds, epochs, every in RUNS:
        run = tmp_path / "runs" / "e" / "toy" / "iid" / "mlr" / name / "seed0"
        run.mkdir(parents=True)
        training = {"rounds": rounds, "local_epochs": epochs, "batch_size": 10, "participation": 1.0, "eval_every": every}
        metrics = {"cell": {"experiment": "e", "dataset": "toy", "partition": "iid", "model": "mlr", "algorithm": name, "seed": 0},
                   "status": "completed", "device": "cpu", "wall_time_s": 1.0, "hyperparameters": {
                       "dataset": {"source": "digits"}, "partition": {"kind": "iid", "num_clients": 2}, "model": {"arch": "mlr"},
                       "algorithm": {"method": "fedavg"}, "training": training}}
        (run / "metrics.json").write_text(json.dumps(metrics))
        cpu = planted_seconds(rounds, epochs, every)
        wall = cpu + 20  # a shared machine; the benchmark's last CPU sample before the job's end
        tsv = tmp_path / "benchmarks" / "train" / "e" / "toy" / "iid" / "mlr" / name / "seed0.tsv"
        tsv.parent.mkdir(parents=True)
        tsv.write_text("s\th:m:s\tmax_rss\tcpu_time\n" + f"{wall}\t0:00:00\t100\t{cpu * last_cpu_sample(wall) / wall}\n")
    throughputs = tmp_path / "throughputs.yaml"
    throughputs.write_text("# kept\n" + yaml.safe_dump(TABLE, sort_keys=False))
    monkeypatch.setattr(cost_report, "throughputs", lambda: TABLE)
    assert cost_report.main(["--fit", str(tmp_path), "--write", str(throughputs)]) == 0
    out = capsys.readouterr().out
    assert "fit of the cpu overheads to 5 runs' CPU time" in out
    assert "job_overhead_s             60 ->         30  (fitted)" in out
    assert "step_overhead_s             0 ->        0.2  (fitted)" in out
    assert "round_overhead_s         0.11 ->        0.5  (fitted)" in out
    assert "eval_overhead_s             0 ->          1  (fitted)" in out
    assert "-> 0.0 %" in out  # after: every run exactly
    table = yaml.safe_load(throughputs.read_text())
    assert table["cpu"] == {**TABLE["cpu"], **PLANTED} and throughputs.read_text().startswith("# kept\n")
    assert np.isclose(table["job_overhead_s"], 60)  # the file's top level (the GPU's) untouched
