"""The global model's test accuracy at the last evaluation and at the best one, per cell, mean ± std
over seeds (np.std, ddof 0), from an experiment's run histories.

FedMR's Table 1 does not say which of the two its "±" summarises (docs/fidelity.md): the suite
scores the final evaluation (protocol ``fedmr``) and offers the best-over-evaluations figure
(``fedmr_best``); this prints both side by side for runs made under either.

    python scripts/final_and_best.py results/fedmr_offline fmnist
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedbench.results.figures import load_histories  # noqa: E402


def final_and_best(histories):
    """One row per (partition, algorithm), in the order they first appear: final and best global
    accuracy (%), mean and std over seeds."""
    scored = histories.dropna(subset=["global_acc"])
    per_run = scored.sort_values("round", kind="stable").groupby(["partition", "algorithm", "seed"], sort=False)["global_acc"]
    runs = per_run.agg(final="last", best="max").mul(100).reset_index()
    summary = runs.groupby(["partition", "algorithm"], sort=False).agg(
        final_mean=("final", "mean"), final_std=("final", lambda v: v.std(ddof=0)),
        best_mean=("best", "mean"), best_std=("best", lambda v: v.std(ddof=0)), seeds=("seed", "count"))
    return summary.reset_index()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("experiment")
    args = parser.parse_args(argv)
    runs, diverged = [], []
    for metrics in sorted((args.results / "runs" / args.experiment).glob("**/metrics.json")):
        status = json.loads(metrics.read_text()).get("status", "completed")
        (diverged if status == "diverged" else runs).append(metrics.parent)
    table = final_and_best(load_histories(runs)).sort_values("partition", kind="stable")
    print("| partition | algorithm | final | best over evaluations | seeds |\n|---|---|---|---|---|")
    for row in table.itertuples():
        print(f"| {row.partition} | {row.algorithm} | {row.final_mean:.2f} ± {row.final_std:.2f} | "
              f"{row.best_mean:.2f} ± {row.best_std:.2f} | {row.seeds} |")
    for run in diverged:  # stopped at a NaN or infinite loss: no final model to score
        print(f"diverged, left out: {run.relative_to(args.results)}")


if __name__ == "__main__":
    main()
