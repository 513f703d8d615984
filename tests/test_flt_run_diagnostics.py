"""scripts/flt_run_diagnostics.py on a hand-made results folder: accuracy and variance as recorded, the
worst client, ARI of the recorded grouping against the planted clusters, the graph's density."""
import json

import numpy as np
import pandas as pd
import pytest

from conftest import load_script

flt_run_diagnostics = load_script("flt_run_diagnostics")


def _run(root, algorithm, accuracies, groups=None, assignments=None, adjacency=None):
    run = root / "runs" / "t1" / "mnist" / "s1" / "mlp" / algorithm / "seed0"
    run.mkdir(parents=True)
    acc = np.asarray(accuracies)
    (run / "metrics.json").write_text(json.dumps({
        "cell": {"experiment": "t1", "dataset": "mnist", "partition": "s1", "model": "mlp", "algorithm": algorithm, "seed": 0},
        "final": {"accuracy": float(acc.mean()), "variance": float(acc.var())}}))
    pd.DataFrame({"client": range(len(acc)), "accuracy": acc}).to_csv(run / "clients.csv", index=False)
    if groups is not None:
        np.save(run / "clusters.npy", np.asarray(groups))
    if assignments is not None:
        assignments.to_csv(run / "assignments.csv", index=False)
    if adjacency is not None:
        np.save(run / "adjacency.npy", np.asarray(adjacency))


def test_rows_read_the_recorded_grouping_against_the_planted_clusters(tmp_path):
    (tmp_path / "partitions" / "mnist" / "s1").mkdir(parents=True)
    np.savez(tmp_path / "partitions" / "mnist" / "s1" / "seed0.npz", group_cluster=np.array([0, 0, 1, 1]))
    _run(tmp_path, "local", [1.0, 0.9, 0.8, 0.7])
    # one client of the second planted cluster put with the first: ARI of [5,5,5,7] against [0,0,1,1]
    _run(tmp_path, "pca", [1.0, 1.0, 0.0, 1.0], groups=[5, 5, 5, 7],
         adjacency=[[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]])
    # FedSEM's assignments: only the last round counts (round 2 recovers the planted clusters)
    _run(tmp_path, "fedsem", [0.9] * 4, assignments=pd.DataFrame(
        {"round": [1] * 4 + [2] * 4, "client": [0, 1, 2, 3] * 2, "cluster": [0, 1, 0, 1, 3, 3, 4, 4]}))
    table = flt_run_diagnostics.diagnostics(tmp_path, ["t1"]).set_index("algorithm")
    assert table.loc["local", "accuracy %"] == pytest.approx(85.0)
    assert table.loc["local", "variance %²"] == pytest.approx(125.0)     # np.var of 100, 90, 80, 70
    assert table.loc["local", "worst client %"] == pytest.approx(70.0)
    assert np.isnan(table.loc["local", "ARI vs planted"]) and np.isnan(table.loc["local", "graph density"])
    assert table.loc["pca", "clients under 50 %"] == 1
    # contingency [[2, 0], [1, 1]]: index sum C(n_ij, 2) = 1; planted rows C(2,2) + C(2,2) = 2; found columns
    # C(3,2) + C(1,2) = 3; expected 2 * 3 / C(4,2) = 1, max (2 + 3) / 2: ARI = (1 - 1) / (2.5 - 1) = 0
    assert table.loc["pca", "ARI vs planted"] == pytest.approx(0.0)
    assert (table.loc["pca", "groups"], table.loc["pca", "graph density"]) == (2, pytest.approx(4 / 12))
    assert table.loc["fedsem", "ARI vs planted"] == pytest.approx(1.0)


def test_no_runs_is_an_error_naming_the_folder(tmp_path):
    with pytest.raises(SystemExit, match="no finished runs of t9"):
        flt_run_diagnostics.diagnostics(tmp_path, ["t9"])
