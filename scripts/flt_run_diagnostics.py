"""Per-run diagnostics of FLT-style runs: what a scorecard's mean over seeds hides.

    python scripts/flt_run_diagnostics.py results/flt table1_mnist table2_mnist
    python scripts/flt_run_diagnostics.py results/flt table1_mnist --markdown > diagnostics.md

One row per finished run (``metrics.json``) of the experiments named: the final mean client accuracy
and the variance across clients (the paper's "var.", ``np.var`` of the per-client accuracies, %²),
the worst client's accuracy, and for the methods that group clients the grouping's ARI against the
partition's planted clusters (``group_cluster`` of the partition file), the number of groups and the
relatedness graph's density (linked share of off-diagonal pairs).  The grouping read is the one the
run trained with or recorded: ``clusters.npy`` (FLT's HC clusters, PCA+kM+HC's) or the last round of
``assignments.csv`` (FedSEM's k-means of the client models).
"""
import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import adjusted_rand_score


def grouping(run: Path) -> np.ndarray | None:
    """The clients' groups a run recorded (None: the method does not group clients)."""
    if (run / "clusters.npy").exists():
        return np.load(run / "clusters.npy")
    if (run / "assignments.csv").exists():
        assignments = pd.read_csv(run / "assignments.csv")
        last = assignments[assignments["round"] == assignments["round"].max()].sort_values("client")
        return last["cluster"].to_numpy()
    return None


def density(run: Path) -> float:
    """Linked share of the off-diagonal pairs of the run's relatedness graph (NaN: no graph)."""
    if not (run / "adjacency.npy").exists():
        return float("nan")
    graph = np.load(run / "adjacency.npy") != 0
    n = len(graph)
    return float((graph.sum() - np.trace(graph)) / (n * n - n))


def run_row(root: Path, metrics_path: Path) -> dict:
    """One run's diagnostics (see the module docstring)."""
    run = metrics_path.parent
    metrics = json.loads(metrics_path.read_text())
    cell, final = metrics["cell"], metrics["final"]
    planted = np.load(root / "partitions" / cell["dataset"] / cell["partition"] / f"seed{cell['seed']}.npz")["group_cluster"]
    groups = grouping(run)
    clients = pd.read_csv(run / "clients.csv")
    return {
        "experiment": cell["experiment"], "partition": cell["partition"], "algorithm": cell["algorithm"],
        "seed": cell["seed"], "accuracy %": 100 * final["accuracy"], "variance %²": 1e4 * final["variance"],
        "worst client %": 100 * clients["accuracy"].min(),
        "clients under 50 %": int((clients["accuracy"] < 0.5).sum()),
        "ARI vs planted": np.nan if groups is None else adjusted_rand_score(planted, groups),
        "groups": np.nan if groups is None else len(np.unique(groups)),
        "graph density": density(run),
    }


def diagnostics(root: Path, experiments: list[str]) -> pd.DataFrame:
    """Every finished run of ``experiments`` under the results root ``root``."""
    paths = sorted(p for e in experiments for p in (root / "runs" / e).glob("*/*/*/*/seed*/metrics.json"))
    if not paths:
        raise SystemExit(f"no finished runs of {', '.join(experiments)} under {root / 'runs'}")
    return pd.DataFrame([run_row(root, p) for p in paths]).sort_values(
        ["experiment", "partition", "algorithm", "seed"], ignore_index=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="the experiment config's results root")
    parser.add_argument("experiments", nargs="+")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table instead of plain text")
    args = parser.parse_args()
    table = diagnostics(args.root, args.experiments)
    if args.markdown:
        print(table.to_markdown(index=False, floatfmt=".2f"))
    else:
        with pd.option_context("display.width", 200, "display.max_rows", None):
            print(table.round(2).to_string(index=False))


if __name__ == "__main__":
    main()
