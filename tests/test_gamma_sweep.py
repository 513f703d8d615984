"""FLT's γ sweep (fedbench.results.gamma_sweep): graph statistics against γ by hand, one sweep per
shared signature, and the workflow's figure rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedbench.results.gamma_sweep import accuracy_points, graph_sweep, plot_gamma_sweep, sweep_runs

# Four clients, k = 2 centres on a line, ground truth {0, 1}, {2, 3}:
#   min over pairs: d01 = d23 = 1, d12 = 80, d13 = 81, d02 = 90, d03 = 91;
#   matching: d01 = d23 = sqrt(1^2 + 10^2) / 2 = 5.02, every cross pair > 60.
POINTS = np.array([[[0, 0], [10, 0]], [[1, 0], [20, 0]], [[100, 0], [110, 0]], [[101, 0], [120, 0]]], dtype=float)
TRUTH = [0, 0, 1, 1]


def row(frame, distance, gamma):
    return frame[(frame["distance"] == distance) & np.isclose(frame["gamma"], gamma)].iloc[0]


def test_graph_statistics_against_gamma_by_hand():
    frame = graph_sweep(POINTS, TRUTH, [2.0, 10.0, 85.0, 1000.0], num_clusters=2)
    assert len(frame) == 8
    # gamma 2: the paper's distance links 0-1 and 2-3 (4 of the 12 ordered pairs), none across
    paper = row(frame, "min", 2.0)
    assert (paper["ari"], paper["adj_density"], paper["adj_cross_group"]) == (1.0, 4 / 12, 0.0)
    # ... the code's distance links nothing: density 0, no cross share, and no ARI (HC meets only ties)
    code = row(frame, "matching", 2.0)
    assert code["adj_density"] == 0.0 and np.isnan(code["adj_cross_group"]) and np.isnan(code["ari"])
    code = row(frame, "matching", 10.0)
    assert (code["ari"], code["adj_density"], code["adj_cross_group"]) == (1.0, 4 / 12, 0.0)
    # gamma 85: min also links 1-2 and 1-3 (80, 81): 8 of 12 pairs, 4 of those 8 across
    paper = row(frame, "min", 85.0)
    assert (paper["adj_density"], paper["adj_cross_group"]) == (8 / 12, 0.5)
    # gamma 1000: everything linked; 8 of the 12 ordered pairs are across groups
    for distance in ("min", "matching"):
        dense = row(frame, distance, 1000.0)
        assert (dense["adj_density"], dense["adj_cross_group"]) == (1.0, 8 / 12)


def test_entries_sharing_signatures_are_swept_once_per_seed():
    paper = {"method": "flt", "encoder": "enc1", "gamma": 1.0}
    code = {**paper, "distance": "matching", "aggregation": "in_place", "gamma": 4.0}
    tuned = {**paper, "finetune_epochs": 5}
    runs = [{"entry": e, "seed": s, "centres_2d": POINTS, "truth": TRUTH, "accuracy": a}
            for e, s, a in [(paper, 0, 0.5), (code, 0, 0.7), (paper, 1, 0.6), (tuned, 0, 0.4)]]
    graph = sweep_runs(runs, gammas=[2.0])
    # gammas swept: the grid's 2 plus the entries' 1 and 4; both distances; (enc1, seed 0), (enc1, seed 1), (enc1 J=5, seed 0)
    assert sorted(graph["gamma"].unique()) == [1.0, 2.0, 4.0]
    assert len(graph) == 3 * 2 * 3
    assert sorted(set(zip(graph["signature"], graph["seed"]))) == [("enc1", 0), ("enc1", 1), ("enc1 (J=5)", 0)]
    points = accuracy_points(runs)
    assert points["reading"].tolist() == ["min, simultaneous", "matching, in place", "min, simultaneous", "min, simultaneous"]
    assert points["gamma"].tolist() == [1.0, 4.0, 1.0, 1.0]


def test_figure_is_written(tmp_path, saved_figures):
    """The figure draws, against the swept γ, each distance's graph statistics (here the density, by
    hand from POINTS) and each reading's final accuracy in %, with the paper's γ = 1 marked."""
    runs = [{"entry": {"encoder": "enc1", "gamma": g, "distance": d}, "seed": 0, "centres_2d": POINTS, "truth": TRUTH,
             "accuracy": a} for g, d, a in [(1.0, "min", 0.8), (4.0, "min", 0.7), (1.0, "matching", 0.75)]]
    plot_gamma_sweep(sweep_runs(runs, gammas=[0.5, 2.0, 100.0]), accuracy_points(runs), tmp_path / "g.png", "title")
    assert (tmp_path / "g.png").stat().st_size > 1000
    ari_ax, cross_ax, density_ax, accuracy_ax = saved_figures[-1].axes
    gammas = [0.5, 1.0, 2.0, 4.0, 100.0]  # the grid plus the entries' own γ
    # density = linked ordered pairs / 12, a pair linked when its distance < γ: min links 0-1 and 2-3
    # (distance 1) from γ = 2 on and everything (<= 91) at 100; matching links nothing below 5.02 and
    # everything (cross pairs < 75) at 100
    density = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in density_ax.lines[:2]}
    assert density == {
        "min over pairs (paper), enc1": (gammas, pytest.approx([0, 0, 4 / 12, 4 / 12, 1])),
        "matching (code), enc1": (gammas, [0, 0, 0, 0, 1]),
    }
    accuracy = {c.get_label(): (list(c.lines[0].get_xdata()), list(c.lines[0].get_ydata())) for c in accuracy_ax.containers}
    assert accuracy == {"min, simultaneous, enc1": ([1.0, 4.0], [80.0, 70.0]), "matching, simultaneous, enc1": ([1.0], [75.0])}
    for ax in (ari_ax, cross_ax, density_ax, accuracy_ax):
        assert list(ax.lines[-1].get_xdata()) == [1.0, 1.0]  # the dotted γ = 1 line


def test_the_tables_target_plans_one_sweep_figure_per_flt_block(tmp_path):
    import yaml
    from test_workflow import TINY_CONFIG, planned_jobs, snakemake, write_config

    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["datasets"]["digits28"] = {"source": "digits", "size": 28, "test_fraction": 0.2}
    config["encoders"] = {"enc": {"dataset": "digits28", "epochs": 1}}
    config["algorithms"]["flt"] = {"method": "flt", "encoder": "enc"}
    config["algorithms"]["flt_code"] = {"method": "flt", "encoder": "enc", "distance": "matching", "gamma": 4.0}
    config["experiments"]["tiny"]["grid"].append(
        {"datasets": ["digits28"], "partitions": ["iid"], "models": ["mlr"], "algorithms": ["flt", "flt_code"]})
    process = snakemake(tmp_path, "-n", "tables", configfile=write_config(tmp_path / "config.yaml", config))
    assert planned_jobs(process.stdout)["gamma_sweep_figure"] == 1
    assert "figures/gamma/tiny/digits28_iid_mlr.png" in process.stdout
