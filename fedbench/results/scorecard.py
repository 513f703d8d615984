"""Paper vs reproduction: every published number an experiment links to, next to what its runs gave.

A link (:mod:`fedbench.results.published`) scores every published row of its method and setting,
whatever the metric: test accuracy, macro-F1, train accuracy and the variance of accuracy across
clients (FLT's fairness column), all from the same runs.  Each figure is read from every seed's
``history.csv`` at the round the experiment's protocol reports (with the link's ``scored`` model
and ``rounds`` horizon; under ``pooled_max`` the best round, as pFedMe's ``average_data``), in
the paper's units: accuracy and macro-F1 in %, variance in %² (FLT prints ``np.var`` of per-client
accuracies in %), train numbers at the same round as the test ones.

Runs are grouped by cell (experiment, dataset, partition, model and algorithm entry; the seeds
are the sample): runs of different cells never share a row.  A grid that trains one linked
algorithm on two datasets or partitions gives two rows for the published number, one per cell.  Beside the published number and its "±", each row states the
paper's statistic (:mod:`fedbench.results.agreement`: standard error or standard deviation), the
reproduced mean and the same statistic over seeds, the difference reproduced − published, ``z``
and the agreement flag, the published row's ``notes`` (FLAG remarks included) and a ``note`` on
the reproduction (absent runs, runs shorter than the link's T, the algorithm's remark on a run's
history: :meth:`~fedbench.algorithms.base.Algorithm.history_note`, e.g. CFL that never split).

A published difference (``accuracy_delta``, FeMAM's Table 2) is scored only as a difference: by a
link with ``relative_to``, seed by seed; a plain link scores the other metrics of its method and
setting and leaves the difference rows to those links (the "+0.00" of the default row is the
default against itself, 0 by definition).  A cell the paper prints in two tables with two different
numbers (FeMAM's Tiny ImageNet client-wise FeSEM+ and FeMAM, Table 1 vs Table C.3; three FLT cells,
Tables 2/3 vs 8/9) is one row, under the experiment's own table (the first link), scored against
that table's number; the other number is beside it (``also_published``) with its notes, so a
reader sees one verdict rather than a guaranteed disagreement (:func:`one_row_per_contradiction`).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

import pandas as pd

from fedbench.registry.algorithms import algorithm_class
from fedbench.registry.plugins import load_plugins
from fedbench.data.partition_file import atomic_write
from fedbench.registry.protocols import PROTOCOLS, Protocol
from fedbench.results.agreement import STD_ERROR, agreement, spread, statistic_of
from fedbench.results.published import Link, links, published_rows
from fedbench.results.tables import format_mean_std

COLUMNS = [
    "paper", "table", "dataset", "model", "partition", "method", "setting", "metric", "split",
    "published", "published_std", "statistic", "reproduced", "reproduced_spread", "difference",
    "combined_se", "z", "agreement", "seeds", "diverged",
    "experiment", "config_dataset", "config_partition", "config_model", "algorithm", "scored", "rounds", "relative_to",
    "protocol", "published_row", "also_published", "also_published_row", "notes", "note",
]
NUMBER_COLUMNS = {"published", "published_std", "reproduced", "reproduced_spread", "difference", "combined_se", "z",
                  "seeds", "diverged", "rounds", "published_row"}
TEXT_COLUMNS = [c for c in COLUMNS if c not in NUMBER_COLUMNS]
"""Blank in the card; a CSV reads them back as NaN (and groupby drops NaN keys), so readers fill them with ''."""

UNITS = {"accuracy": 100.0, "macro_f1": 100.0, "accuracy_delta": 100.0, "variance": 100.0 ** 2}
"""History columns hold fractions (variance: fraction²); the papers print % (variance: %²)."""

_TRAIN_COLUMNS = {"accuracy": "train_acc_mean", "variance": "train_acc_var"}


def _runs(run_dirs: Iterable[str | Path]) -> pd.DataFrame:
    """One row per run directory (holding ``metrics.json`` and ``history.csv``): its cell and paths."""
    rows = []
    for run_dir in run_dirs:
        run_dir = Path(run_dir)
        metrics = json.loads((run_dir / "metrics.json").read_text())
        rows.append({**metrics["cell"], "protocol": metrics["protocol"], "history": run_dir / "history.csv",
                     "diverged": metrics.get("status") == "diverged"})
    columns = ["experiment", "dataset", "partition", "model", "algorithm", "seed", "protocol", "history", "diverged"]
    return pd.DataFrame(rows, columns=columns)


def reported_number(history: pd.DataFrame, protocol: Protocol, link: Link, metric: str, split: str) -> float:
    """One run's figure for a published ``metric`` and ``split``, in the paper's units, at the round
    the protocol reports (for the link's scored model and horizon); NaN where the run does not record it."""
    final = protocol.final(history, link.scored, link.rounds)
    if split == "test":
        key = "accuracy" if metric == "accuracy_delta" else metric
        if key not in final:
            raise ValueError(f"the scorecard cannot score metric {metric!r}")
        value = final[key]
    elif split == "train":
        if metric not in _TRAIN_COLUMNS:
            raise ValueError(f"the scorecard cannot score train {metric!r}")
        column = _TRAIN_COLUMNS[metric]
        if link.scored != "personal" or column not in history:
            value = None  # the global model's train accuracy is not recorded
        else:
            value = history.set_index("round").loc[final["round"], column]
            value = None if pd.isna(value) else float(value)
    else:
        raise ValueError(f"published split must be 'test' or 'train', got {split!r}")
    return math.nan if value is None else UNITS[metric] * value


class _Cell(NamedTuple):
    """One cell of an experiment's grid but the seed, and the algorithm entries it trains."""

    experiment: str
    dataset: str
    partition: str
    model: str
    algorithms: list[str]


def _cells(name: str, experiment: dict) -> list[_Cell]:
    """Each cell of experiment ``name``'s grid but the seed, in the grid's order."""
    cells: dict[tuple[str, str, str], list[str]] = {}
    for block in experiment.get("grid", []):
        for key in itertools.product(block["datasets"], block["partitions"], block["models"]):
            known = cells.setdefault(key, [])
            known += [a for a in block["algorithms"] if a not in known]
    return [_Cell(name, *key, algorithms) for key, algorithms in cells.items()]


class _Sources:
    """What the card is scored from: the published numbers with each paper table's statistic, the
    runs (each history read once) and the config's algorithm entries (for their history notes)."""

    def __init__(self, config: dict, run_dirs: Iterable[str | Path], published: pd.DataFrame):
        self.runs = _runs(run_dirs)
        self.published = published if "notes" in published else published.assign(notes="")
        self.statistics = {key: statistic_of(group["notes"]) for key, group in self.published.groupby(["paper", "table"])}
        self._entries = config.get("algorithms", {})
        load_plugins(config.get("plugins") or ())  # a plugin algorithm's history_note
        self._histories: dict[Path, pd.DataFrame] = {}
        self._notes: dict[str, Callable[[pd.DataFrame], str]] = {}

    def runs_of(self, cell: _Cell, algorithm: str) -> pd.DataFrame:
        runs = self.runs
        return runs[(runs["experiment"] == cell.experiment) & (runs["dataset"] == cell.dataset)
                    & (runs["partition"] == cell.partition) & (runs["model"] == cell.model) & (runs["algorithm"] == algorithm)]

    def history(self, path: Path) -> pd.DataFrame:
        if path not in self._histories:
            self._histories[path] = pd.read_csv(path)
        return self._histories[path]

    def history_note(self, algorithm: str) -> Callable[[pd.DataFrame], str]:
        """The ``history_note`` hook of the algorithm entry's class (no note for an entry the config
        does not define)."""
        if algorithm not in self._notes:
            method = self._entries.get(algorithm, {}).get("method")
            self._notes[algorithm] = _no_note if method is None else algorithm_class(method).history_note
        return self._notes[algorithm]


def _no_note(history: pd.DataFrame) -> str:
    return ""


def scorecard(config: dict, run_dirs: Iterable[str | Path], published: pd.DataFrame) -> pd.DataFrame:
    """The card (module doc): one row per published number that a link of an experiment scores in
    one of its cells, in the order of the experiments, their cells and their links."""
    sources = _Sources(config, run_dirs, published)
    only = config.get("only_experiments")
    rows = []
    for name, experiment in config.get("experiments", {}).items():
        if only is None or name in only:
            rows += [row for cell in _cells(name, experiment) for row in _cell_rows(sources, experiment, cell)]
    return one_row_per_contradiction(pd.DataFrame(rows, columns=COLUMNS))


def _cell_rows(sources: _Sources, experiment: dict, cell: _Cell) -> list[dict]:
    """The rows of one cell: those of every link to an algorithm the cell trains."""
    return [row for link in links(experiment) if link.algorithm in cell.algorithms
            for row in _link_rows(sources, experiment, cell, link)]


def _link_rows(sources: _Sources, experiment: dict, cell: _Cell, link: Link) -> list[dict]:
    """The rows of one link in one cell: one per published number it scores."""
    protocol = experiment.get("protocol", "mean_client_last")
    return [_card_row(sources, cell, link, protocol, index, row)
            for index, row in _scored_rows(experiment, cell, link, sources.published).iterrows()]


def _scored_rows(experiment: dict, cell: _Cell, link: Link, published: pd.DataFrame) -> pd.DataFrame:
    """The published rows ``link`` scores in ``cell``: the difference alone for a ``relative_to``
    link, else every metric of its method and setting but the differences.  Exactly one of them must
    be the link's test metric."""
    paper = published_rows(experiment, link, published, cell.model)
    primary = paper[(paper["metric"] == link.metric) & (paper["split"] == "test")]
    if len(primary) != 1:
        raise ValueError(
            f"experiments.{cell.experiment}.published: {link.algorithm} -> {link.method!r} / {link.setting!r} "
            f"(model {cell.model}) matches {len(primary)} published test {link.metric} rows, expected 1"
        )
    if link.relative_to is not None:  # a table of differences: only the difference is printed
        return primary
    return paper[~paper["metric"].str.endswith("_delta")]  # a difference is scored by a relative_to link only


def _card_row(sources: _Sources, cell: _Cell, link: Link, protocol: str, index, row: pd.Series) -> dict:
    """The published number ``row`` (row ``index`` of the published table) against the seeds' figures."""
    values, note, diverged = _reproduced_figures(sources, cell, link, row["metric"], row["split"])
    statistic = sources.statistics[(row["paper"], row["table"])]
    mean = float(pd.Series(values, dtype=float).mean()) if values else math.nan
    flag = agreement(row["value"], row["std"], statistic, row["notes"], values)
    return {
        "paper": row["paper"], "table": row["table"], "dataset": row["dataset"], "model": row["model"],
        "partition": row["partition"], "method": link.method, "setting": link.setting,
        "metric": row["metric"], "split": row["split"],
        "published": row["value"], "published_std": row["std"], "statistic": statistic,
        "reproduced": mean, "reproduced_spread": spread(values, statistic) if values else math.nan,
        "difference": mean - row["value"], **flag, "seeds": len(values), "diverged": diverged,
        "experiment": cell.experiment, "config_dataset": cell.dataset, "config_partition": cell.partition,
        "config_model": cell.model, "algorithm": link.algorithm,
        "scored": link.scored, "rounds": link.rounds, "relative_to": link.relative_to,
        "protocol": protocol, "published_row": index, "also_published": "", "also_published_row": "",
        "notes": row["notes"], "note": note,
    }


def _reproduced_figures(sources: _Sources, cell: _Cell, link: Link, metric: str, split: str) -> tuple[list[float], str, int]:
    """The recorded figures of the link's seeds (for a ``relative_to`` link, the seed-by-seed
    differences), a note on them, and how many seeds diverged."""
    values, note, diverged = _seed_figures(sources, cell, link.algorithm, link, metric, split)
    if link.relative_to is not None:  # a difference, seed by seed
        base, _, _ = _seed_figures(sources, cell, link.relative_to, link, metric, split)
        values = {seed: value - base[seed] for seed, value in values.items() if seed in base}
        if link.relative_to == link.algorithm:
            note = "; ".join(filter(None, [note, "the algorithm against itself: 0 by definition"]))
    if values and all(math.isnan(v) for v in values.values()):
        note = f"the runs do not record the {split} {metric} of the {link.scored} model"
    return [v for v in values.values() if not math.isnan(v)], note, diverged


def _seed_figures(sources: _Sources, cell: _Cell, algorithm: str, link: Link, metric: str, split: str
                  ) -> tuple[dict[int, float], str, int]:
    """Reproduced figure of every seed of ``algorithm`` in ``cell`` (NaN: not recorded), a note (runs
    shorter than the link's T; the algorithm's note on a history), and how many seeds diverged
    (NaN/inf loss: no figure, counted instead)."""
    mine = sources.runs_of(cell, algorithm)
    values, note = {}, ""
    for _, run in mine[~mine["diverged"].astype(bool)].iterrows():
        history = sources.history(run["history"])
        trained = int(history["round"].max())
        if link.rounds is not None and trained < link.rounds:
            note = f"runs end at round {trained} < T = {link.rounds}: not comparable"
            continue
        note = sources.history_note(algorithm)(history) or note
        values[int(run["seed"])] = reported_number(history, PROTOCOLS[run["protocol"]], link, metric, split)
    return values, note, int(mine["diverged"].sum())


_SAME_NUMBER = [
    "experiment", "config_dataset", "config_partition", "config_model", "algorithm", "scored", "rounds", "relative_to",
    "paper", "dataset", "model", "partition", "method", "setting", "metric", "split",
]
"""Rows that score one published number of one cell from the same runs, whatever table prints it."""


def one_row_per_contradiction(card: pd.DataFrame) -> pd.DataFrame:
    """Where the paper prints one cell's number in two tables with different values (module doc),
    keep the first link's row, scored against its own table's number, and put the other tables'
    numbers (``also_published``, ``Table 1: 60.46 ± 0.35``), their row indices and notes beside it.
    Numbers printed identically in two tables stay one row per table."""
    if card.empty:
        return card
    card = card.copy()
    dropped = []
    for _, group in card.groupby(_SAME_NUMBER, dropna=False, sort=False):
        if len(group) < 2 or group["published"].nunique() < 2:
            continue
        first, others = group.index[0], group.loc[group.index[1:]]
        card.at[first, "also_published"] = "; ".join(
            f"{t}: {_number(v, s)}" for t, v, s in zip(others["table"], others["published"], others["published_std"]))
        card.at[first, "also_published_row"] = ";".join(str(r) for r in others["published_row"])
        card.at[first, "notes"] = "; ".join(filter(None, [card.at[first, "notes"], *(
            f"{t}: {n}" for t, n in zip(others["table"], others["notes"]) if n)]))
        card.at[first, "note"] = "; ".join(filter(None, [card.at[first, "note"], (
            f"the paper prints this cell differently in {', '.join(others['table'])}: scored against {card.at[first, 'table']}")]))
        dropped += list(others.index)
    return card.drop(index=dropped).reset_index(drop=True)


STATISTIC_LABELS = {STD_ERROR: "± SE", "std": "± SD"}
METRIC_LABELS = {"accuracy": "acc. %", "macro_f1": "macro-F1 %", "variance": "var. %²", "accuracy_delta": "Δ acc. pp"}


def _number(value: float, std: float, digits: int = 2) -> str:
    if pd.isna(value):
        return ""
    return f"{value:.{digits}f}" if pd.isna(std) else format_mean_std(value, std, digits)


def _reproduced(value: float, spread_: float, seeds: int, diverged: int) -> str:
    """The reproduced cell: the number, "diverged" where every run diverged, the count where some did."""
    text = _number(value, spread_) if seeds else ""
    if not diverged:
        return text
    return f"{text} ({diverged}/{seeds + diverged} diverged)" if seeds else "diverged"


def _where_several(group: pd.DataFrame, names: pd.Series) -> list[str]:
    """``names`` on the rows whose published number is scored by several different ones, else ''."""
    several = group.assign(name=names).groupby(["method", "setting", "metric", "split"])["name"].transform("nunique") > 1
    return [name if flag else "" for name, flag in zip(names, several)]


def to_markdown(card: pd.DataFrame) -> str:
    """One Markdown table per paper table and dataset/model: published vs reproduced, each with the
    paper's statistic, the difference, z and the agreement flag, and the published row's notes."""
    parts = [
        "# Scorecard: published vs reproduced",
        "",
        "Published: as printed, ± the paper's statistic (column ±: SE = standard error, SD = standard",
        "deviation).  Reproduced: mean over seeds under the experiment's protocol, ± the same statistic",
        "(SE: sd(ddof=1)/√n over seeds; SD: np.std, ddof=0).  Accuracy and macro-F1 in %, variance across",
        "clients in %².  difference = reproduced − published; z = difference / combined standard error;",
        "agree: |z| ≤ 2 (docs: docs/user-guide.md, section Scorecard).  Empty: not run here.",
        "",
    ]
    for (paper, table, dataset, model), group in card.groupby(["paper", "table", "dataset", "model"], sort=False):
        # several cells linked to one published row (two readings of a method, or two partitions
        # of one grid): name what tells them apart
        cell = group["config_dataset"] + "/" + group["config_partition"]
        tags = [", ".join(filter(None, pair)) for pair in zip(_where_several(group, group["algorithm"]), _where_several(group, cell))]
        labels = [f"{method} [{tag}]" if tag else method for method, tag in zip(group["method"], tags)]
        view = pd.DataFrame({
            "method": labels,
            "setting": group["setting"],
            "metric": [f"{split} {METRIC_LABELS.get(metric, metric)}" for metric, split in zip(group["metric"], group["split"])],
            "±": [STATISTIC_LABELS[s] for s in group["statistic"]],
            "published": [" / ".join(filter(None, [_number(v, s), str(also) if also else ""]))
                          for v, s, also in zip(group["published"], group["published_std"],
                                                group.get("also_published", pd.Series("", index=group.index)).fillna(""))],
            "reproduced": [_reproduced(v, s, n, d) for v, s, n, d in
                           zip(group["reproduced"], group["reproduced_spread"], group["seeds"], group["diverged"])],
            "difference": [f"{d:+.2f}" if pd.notna(d) else "" for d in group["difference"]],
            "z": [f"{z:+.1f}" if pd.notna(z) else "" for z in group["z"]],
            "agree": group["agreement"],
            "seeds": group["seeds"],
            "notes": ["; ".join(filter(None, [n, m])) for n, m in zip(group["notes"], group["note"])],
        })
        heading = f"## {paper} {table}: {dataset}" + (f", {model}" if model else "")
        parts += [heading, "", view.to_markdown(index=False, disable_numparse=True), ""]
    return "\n".join(parts)


def write_scorecard(config: dict, run_dirs: Iterable[str | Path], published: pd.DataFrame, csv_path, md_path) -> pd.DataFrame:
    card = scorecard(config, run_dirs, published)
    atomic_write(csv_path, lambda p: card.to_csv(p, index=False))
    atomic_write(md_path, lambda p: Path(p).write_text(to_markdown(card)))
    return card
