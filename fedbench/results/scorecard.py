"""Paper vs reproduction: every published number an experiment links to, next to what its runs gave.

For each link (:mod:`fedbench.results.published`) the reproduced figure is computed from every
seed's ``history.csv`` under the experiment's protocol, with the link's ``scored`` model and
``rounds`` horizon, in percent, then mean and population standard deviation over seeds (as the
papers' scripts).  The difference is reproduced mean minus published value.  A link whose runs
are absent (e.g. the MNIST half without MNIST), or shorter than the link's T, is listed with no
reproduced number (and a note saying why); a link that
matches no published accuracy, or several, is an error naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import pandas as pd

from fedbench.data.partition_file import atomic_write
from fedbench.protocols import PROTOCOLS
from fedbench.results.published import links, published_rows
from fedbench.results.tables import format_mean_std

COLUMNS = [
    "paper", "table", "dataset", "model", "partition", "method", "setting",
    "published", "published_std", "reproduced", "reproduced_std", "difference", "seeds",
    "experiment", "config_model", "algorithm", "scored", "rounds", "protocol", "note",
]


def _runs(run_dirs: Iterable[str | Path]) -> pd.DataFrame:
    """One row per run directory (holding ``metrics.json`` and ``history.csv``): its cell and paths."""
    rows = []
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        metrics = json.loads((run_dir / "metrics.json").read_text())
        rows.append({**metrics["cell"], "protocol": metrics["protocol"], "history": run_dir / "history.csv"})
    return pd.DataFrame(rows, columns=["experiment", "dataset", "partition", "model", "algorithm", "seed", "protocol", "history"])


def scorecard(config: dict, run_dirs: Iterable[str | Path], published: pd.DataFrame) -> pd.DataFrame:
    runs = _runs(run_dirs)
    only = config.get("only_experiments")
    histories: dict[Path, pd.DataFrame] = {}
    out = []
    for name, experiment in config.get("experiments", {}).items():
        if only is not None and name not in only:
            continue
        models = [m for block in experiment.get("grid", []) for m in block["models"]]
        for link in links(experiment):
            for model in dict.fromkeys(models):
                paper = published_rows(experiment, link, published, model)
                paper = paper[paper["metric"] == link.metric]
                if len(paper) != 1:
                    raise ValueError(
                        f"experiments.{name}.published: {link.algorithm} -> {link.method!r} / {link.setting!r} "
                        f"(model {model}) matches {len(paper)} published {link.metric} rows, expected 1"
                    )
                row = paper.iloc[0]

                def accuracies(algorithm: str) -> tuple[dict[int, float], str]:
                    """Reproduced accuracy (%) of every seed of ``algorithm`` in this experiment and model."""
                    mine = runs[(runs["experiment"] == name) & (runs["algorithm"] == algorithm) & (runs["model"] == model)]
                    out, note = {}, ""
                    for _, run in mine.iterrows():
                        if run["history"] not in histories:
                            histories[run["history"]] = pd.read_csv(run["history"])
                        history = histories[run["history"]]
                        trained = int(history["round"].max())
                        if link.rounds is not None and trained < link.rounds:
                            note = f"runs end at round {trained} < T = {link.rounds}: not comparable"
                            continue
                        if "cfl_splits" in history and history["cfl_splits"].max() == 0:
                            note = "CFL never split (= FedAvg)"
                        final = PROTOCOLS[run["protocol"]].final(history, link.scored, link.rounds)
                        out[int(run["seed"])] = 100 * final["accuracy"] if final["accuracy"] is not None else float("nan")
                    return out, note

                mine, note = accuracies(link.algorithm)
                if link.relative_to is not None:  # a difference, seed by seed
                    base, _ = accuracies(link.relative_to)
                    mine = {seed: value - base[seed] for seed, value in mine.items() if seed in base}
                values = list(mine.values())
                reproduced = pd.Series(values, dtype=float)
                mean = reproduced.mean() if len(reproduced) else float("nan")
                out.append({
                    "paper": row["paper"], "table": row["table"], "dataset": row["dataset"], "model": row["model"],
                    "partition": row["partition"], "method": link.method, "setting": link.setting,
                    "published": row["value"], "published_std": row["std"],
                    "reproduced": mean, "reproduced_std": reproduced.std(ddof=0) if len(reproduced) else float("nan"),
                    "difference": mean - row["value"], "seeds": len(reproduced),
                    "experiment": name, "config_model": model, "algorithm": link.algorithm,
                    "scored": link.scored, "rounds": link.rounds, "protocol": experiment.get("protocol", "mean_client_last"),
                    "note": note,
                })
    return pd.DataFrame(out, columns=COLUMNS)


def to_markdown(card: pd.DataFrame) -> str:
    """One Markdown table per paper table and dataset/model: published vs reproduced (%) and the difference."""
    parts = [
        "# Scorecard: published vs reproduced",
        "",
        "Accuracy (%). Published: as printed (± as printed). Reproduced: mean ± std over seeds under the",
        "experiment's protocol; difference = reproduced − published.  Empty: not run here.",
        "",
    ]
    for (paper, table, dataset, model), group in card.groupby(["paper", "table", "dataset", "model"], sort=False):
        # two runs linked to one published row (two readings of a method): name the run in the cell
        shared = group.duplicated(["method", "setting"], keep=False)
        view = pd.DataFrame({
            "method": [f"{m} [{a}]" if s else m for m, a, s in zip(group["method"], group["algorithm"], shared)],
            "setting": group["setting"],
            "published": [format_mean_std(v, s if pd.notna(s) else 0.0) for v, s in zip(group["published"], group["published_std"])],
            "reproduced": [format_mean_std(v, s) if n else "" for v, s, n in zip(group["reproduced"], group["reproduced_std"], group["seeds"])],
            "difference": [f"{d:+.2f}" if pd.notna(d) else "" for d in group["difference"]],
            "seeds": group["seeds"],
            "note": group["note"],
        })
        parts += [f"## {paper} {table}: {dataset}, {model}", "", view.to_markdown(index=False, disable_numparse=True), ""]
    return "\n".join(parts)


def write_scorecard(config: dict, run_dirs: Iterable[str | Path], published: pd.DataFrame, csv_path, md_path) -> pd.DataFrame:
    card = scorecard(config, run_dirs, published)
    atomic_write(csv_path, lambda p: card.to_csv(p, index=False))
    atomic_write(md_path, lambda p: Path(p).write_text(to_markdown(card)))
    return card
