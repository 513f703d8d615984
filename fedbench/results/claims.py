"""The papers' claims as data, checked against the runs: one verdict per claim and cell.

A config's ``claims:`` section maps a claim id to what the paper says and how to test it on one
experiment of the same config:

* a **comparison** (``better`` vs ``than``, two algorithm entries): the per-seed difference
  ``better - than`` of ``metric`` in every selected cell (dataset, partition, model);
* a **threshold** (``algorithm`` and ``at_least``): ``metric`` of one algorithm, e.g. ARI >= 0.9.

``source`` quotes or cites the paper; ``published`` (comparisons) names the rows of
``config/published_results.csv`` whose difference is the paper's margin, so the margin is
computed, never typed in; ``margin`` (text) states it where the paper gives no table difference.

Statistic: a 95 % Student-t interval over seeds (scipy.stats) -- paired by default (the two
algorithms' runs on the same partition and seed: ``ttest_rel``), Welch's unpaired interval
(``ttest_ind(equal_var=False)``) only where a claim sets ``pairing: unpaired``; a threshold's is
the one-sample interval of the metric (``ttest_1samp``).  Not a bootstrap: with 3-5 seeds a
percentile bootstrap has a handful of distinct resamples and its interval is too narrow, while
the t interval widens honestly with few seeds.  Verdicts (a comparison's reference is 0, a
threshold's ``at_least``): **holds** when the whole interval lies above it (a threshold: at or
above), **does not hold** when the whole interval lies below it, **inconclusive** when it
straddles it or there are fewer than 2 seeds (no interval).  Seeds whose numbers agree exactly
have a zero-width interval.  A run that is missing is an error (:class:`ClaimError`); a
diverged run (no number) leaves its seed out and is counted.

The workflow's rule ``paper_claims`` writes each paper's table from its runs (:func:`write_claims`);
``python -m fedbench.results.claims CONFIG...`` writes ``reports/claims.md`` from whatever runs are on
disk, naming the command for the claims not yet measured (:func:`write_report`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from scipy import stats

from fedbench.data.partition_file import atomic_write
from fedbench.protocols import PROTOCOLS
from fedbench.results.papers import PAPERS as PAPER_NAMES
from fedbench.results.papers import experiment_paper
from fedbench.results.published import load_published
from fedbench.results.tables import CELL_COLUMNS, PERCENT_METRICS, load_metrics
from fedbench.validation import load_yaml_strict

METRICS = ("accuracy", "global_accuracy", "macro_f1", "ari", "nmi", "ari_planted")
"""What a claim may compare (columns of :func:`fedbench.results.tables.load_metrics`; ``global_accuracy``
is the global model's at the round the experiment's protocol picks for it, :func:`protocol_global_accuracy`).
``ari``: the algorithm's recovered clusters as it reports them (FLT: Ward on Ã's rows with the C that HC
chooses itself, or the entry's ``clusters``); ``ari_planted``: the same tree cut at the planted number of
clusters (:meth:`fedbench.algorithms.base.Algorithm.planted_clusters`), so a claim can read structure
recovery without HC's choice of C."""
CELL_AXES = ("datasets", "partitions", "models")
CONFIDENCE = 0.95
HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"


class ClaimError(ValueError):
    """A claim names something its config does not have, or a run it needs is missing."""


# ---- the claim's cells and published margin --------------------------------------------


def _grid_cells(experiment: dict) -> set[tuple[str, str, str, str]]:
    """(dataset, partition, model, algorithm) of every cell of an experiment's grid."""
    return {
        (d, p, m, a)
        for block in experiment.get("grid", [])
        for d in block["datasets"] for p in block["partitions"] for m in block["models"] for a in block["algorithms"]
    }


def claim_algorithms(claim: dict) -> list[str]:
    """The algorithm entries a claim reads: ``[better, than]`` or ``[algorithm]``."""
    return [claim["better"], claim["than"]] if "better" in claim else [claim["algorithm"]]


def claim_cells(config: dict, name: str) -> list[tuple[str, str, str]]:
    """The (dataset, partition, model) cells claim ``name`` is tested on: those of its experiment
    that the ``cells`` filter keeps and that hold every algorithm it reads, in sorted order."""
    claim = config["claims"][name]
    where = f"claims.{name}"
    experiments = config.get("experiments", {})
    if claim["experiment"] not in experiments:
        raise ClaimError(f"{where}.experiment: {claim['experiment']!r} is not declared under 'experiments'; "
                         f"declared: {', '.join(experiments) or '(none)'}")
    grid = _grid_cells(experiments[claim["experiment"]])
    for key in ("better", "than", "algorithm"):
        if key in claim and claim[key] not in {c[3] for c in grid}:
            raise ClaimError(f"{where}.{key}: {claim[key]!r} is not an algorithm of experiment "
                             f"{claim['experiment']!r}; its algorithms: {', '.join(sorted({c[3] for c in grid}))}")
    wanted = claim.get("cells", {})
    for i, axis in enumerate(CELL_AXES):
        present = {c[i] for c in grid}
        for value in wanted.get(axis, []):
            if value not in present:
                raise ClaimError(f"{where}.cells.{axis}: {value!r} is not in experiment {claim['experiment']!r}'s grid; "
                                 f"its {axis}: {', '.join(sorted(present))}")
    algorithms = claim_algorithms(claim)
    cells = sorted(
        {c[:3] for c in grid if all(c[i] in wanted.get(axis, [c[i]]) for i, axis in enumerate(CELL_AXES))}
    )
    cells = [c for c in cells if all((*c, a) in grid for a in algorithms)]
    if not cells:
        raise ClaimError(f"{where}: no cell of experiment {claim['experiment']!r} runs {' and '.join(algorithms)} "
                         f"within cells {wanted or '(all)'}")
    return cells


def _published_value(published: pd.DataFrame, keys: dict, where: str) -> float:
    mask = pd.Series(True, index=published.index)
    for column, value in keys.items():
        mask &= published[column].astype(str) == str(value)
    rows = published[mask]
    if len(rows) != 1:
        raise ClaimError(f"{where}: {len(rows)} rows of the published table match {keys} (need exactly 1)")
    return float(rows["value"].iloc[0])


def published_margins(claim: dict, published: pd.DataFrame, where: str = "claim") -> list[tuple[str, float]]:
    """(label, published better - than) for every ``published`` entry of a comparison claim."""
    entries = claim.get("published", [])
    out = []
    for i, entry in enumerate(entries if isinstance(entries, list) else [entries]):
        common = {k: v for k, v in entry.items() if k not in ("better", "than", "better_setting", "than_setting")}
        common.setdefault("metric", "accuracy")
        common.setdefault("split", "test")
        sides = []
        for side in ("better", "than"):
            keys = {**common, "method": entry[side]}
            if f"{side}_setting" in entry:
                keys["setting"] = entry[f"{side}_setting"]
            sides.append(_published_value(published, keys, f"{where}.published[{i}].{side}"))
        label = f"{entry['table']}, {entry['dataset']} {entry.get('model', '')} {entry['partition']}".replace("  ", " ")
        out.append((label, sides[0] - sides[1]))
    return out


def margin_text(claim: dict, published: pd.DataFrame, where: str = "claim") -> str:
    """The paper's margin as shown: every published difference with its table and cell, else the claim's ``margin``."""
    margins = published_margins(claim, published, where) if "better" in claim else []
    return "; ".join(f"{value:+.2f} ({label})" for label, value in margins) or claim.get("margin", "")


def check_claims(config: dict, published: pd.DataFrame | None = None) -> None:
    """Every claim names a declared experiment, algorithms and cells of its grid, a known metric,
    and (``published`` given) rows that resolve one each; raises :class:`ClaimError` at the first problem."""
    for name, claim in (config.get("claims") or {}).items():
        if claim.get("metric", "accuracy") not in METRICS:
            raise ClaimError(f"claims.{name}.metric: {claim['metric']!r} unknown; valid choices: {', '.join(METRICS)}")
        claim_cells(config, name)
        if published is not None and "better" in claim:
            published_margins(claim, published, f"claims.{name}")


# ---- evaluation ----------------------------------------------------------------------------


def verdict(low: float, high: float, reference: float = 0.0, at_least: bool = False) -> str:
    """holds (interval above ``reference``; with ``at_least``, a threshold's, its lower end may equal
    it), does not hold (interval below), inconclusive (it straddles ``reference``, or there is no interval)."""
    if math.isnan(low) or math.isnan(high):
        return INCONCLUSIVE
    if low > reference or (at_least and low >= reference):
        return HOLDS
    if high < reference:
        return FAILS
    return INCONCLUSIVE


def _interval(result, values: np.ndarray) -> tuple[float, float]:
    """The test's 95 % interval; a point where the values do not vary; NaN below 2 values."""
    if len(values) < 2:
        return math.nan, math.nan
    if np.ptp(values) == 0:
        return float(values[0]), float(values[0])
    ci = result.confidence_interval(CONFIDENCE)
    return float(ci.low), float(ci.high)


def _per_seed_text(seeds, values) -> str:
    return ", ".join(f"{v:+.2f} (seed {s})" for s, v in zip(seeds, values))


def compare(better: pd.Series, than: pd.Series, pairing: str = "paired") -> dict:
    """Difference ``better - than`` of two per-seed series (indexed by seed): mean, 95 % t interval, n.
    Paired: the seeds both have, difference per seed; unpaired: Welch's interval of the two means."""
    if pairing == "paired":
        both = pd.concat([better, than], axis=1, keys=["a", "b"]).dropna()
        diffs = (both["a"] - both["b"]).to_numpy(float)
        result = stats.ttest_rel(both["a"], both["b"]) if len(diffs) >= 2 and np.ptp(diffs) > 0 else None
        low, high = _interval(result, diffs)
        return {"difference": float(diffs.mean()) if len(diffs) else math.nan, "low": low, "high": high, "n": len(diffs),
                "per_seed": _per_seed_text(both.index, diffs)}
    if pairing != "unpaired":
        raise ClaimError(f"pairing must be 'paired' or 'unpaired', got {pairing!r}")
    a, b = better.dropna().to_numpy(float), than.dropna().to_numpy(float)
    difference = a.mean() - b.mean() if len(a) and len(b) else math.nan
    if min(len(a), len(b)) < 2:
        return {"difference": difference, "low": math.nan, "high": math.nan, "n": min(len(a), len(b))}
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return {"difference": difference, "low": difference, "high": difference, "n": min(len(a), len(b))}
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(CONFIDENCE)
    return {"difference": float(difference), "low": float(ci.low), "high": float(ci.high), "n": min(len(a), len(b)),
            "per_seed": f"{_per_seed_text(better.dropna().index, a)} vs {_per_seed_text(than.dropna().index, b)}"}


def threshold(values: pd.Series, at_least: float) -> dict:
    """Mean of a per-seed series and its one-sample 95 % t interval, against ``at_least``."""
    v = values.dropna().to_numpy(float)
    result = stats.ttest_1samp(v, at_least) if len(v) >= 2 and np.ptp(v) > 0 else None
    low, high = _interval(result, v)
    return {"difference": float(v.mean()) if len(v) else math.nan, "low": low, "high": high, "n": len(v),
            "per_seed": _per_seed_text(values.dropna().index, v)}


def _per_seed(runs: pd.DataFrame, experiment: str, cell: tuple, algorithm: str, metric: str,
              seeds: list[int], where: str) -> pd.Series:
    """``metric`` of one algorithm in one cell, per seed; a missing seed is a :class:`ClaimError`."""
    d, p, m = cell
    rows = runs[(runs["experiment"] == experiment) & (runs["dataset"] == d) & (runs["partition"] == p)
                & (runs["model"] == m) & (runs["algorithm"] == algorithm)]
    missing = sorted(set(seeds) - set(rows["seed"]))
    if missing:
        raise ClaimError(f"{where}: no run of {experiment}/{d}/{p}/{m}/{algorithm} for seed(s) "
                         f"{', '.join(map(str, missing))}; run that cell before evaluating the claim")
    series = rows.set_index("seed").loc[seeds, metric].astype(float)
    return series * (100 if metric in PERCENT_METRICS else 1)


def evaluated_claims(config: dict, paper: str | None = None) -> list[str]:
    """The claims whose experiment the config runs (``only_experiments``), of one ``paper`` or all."""
    only = config.get("only_experiments")
    return [
        name for name, claim in (config.get("claims") or {}).items()
        if (only is None or claim["experiment"] in only)
        and (paper is None or experiment_paper(config, claim["experiment"]) == paper)
    ]


def evaluate_claims(config: dict, runs: pd.DataFrame, published: pd.DataFrame, paper: str | None = None) -> pd.DataFrame:
    """One row per claim (:func:`evaluated_claims`) and cell: the paper's margin, the measured mean
    and 95 % interval over the config's seeds, the verdict."""
    seeds = [int(s) for s in config["seeds"]]
    rows = []
    for name in evaluated_claims(config, paper):
        claim = config["claims"][name]
        metric = claim.get("metric", "accuracy")
        pairing = claim.get("pairing", "paired")
        paper_margin = margin_text(claim, published, f"claims.{name}")
        for cell in claim_cells(config, name):
            where = f"claims.{name}"
            series = [_per_seed(runs, claim["experiment"], cell, a, metric, seeds, where) for a in claim_algorithms(claim)]
            if "better" in claim:
                result, reference = compare(*series, pairing=pairing), 0.0
                comparison = f"{claim['better']} − {claim['than']}"
            else:
                result, reference = threshold(series[0], claim["at_least"]), float(claim["at_least"])
                comparison = f"{claim['algorithm']} ≥ {claim['at_least']:g}"
                pairing = "one-sample"
            diverged = "; ".join(f"{a} diverged (seed {', '.join(map(str, per.index[per.isna()]))})"
                                 for a, per in zip(claim_algorithms(claim), series) if per.isna().any())
            rows.append({
                "claim": name, "paper": experiment_paper(config, claim["experiment"]), "source": claim["source"],
                "experiment": claim["experiment"], "dataset": cell[0], "partition": cell[1], "model": cell[2],
                "metric": metric, "comparison": comparison, "paper_margin": paper_margin, **result,
                "seeds_left_out": len(seeds) - result["n"], "diverged": diverged, "statistic": f"{pairing} t, {CONFIDENCE:.0%}",
                "verdict": verdict(result["low"], result["high"], reference, at_least="better" not in claim),
            })
    columns = ["claim", "paper", "source", "experiment", "dataset", "partition", "model", "metric", "comparison",
               "paper_margin", "difference", "low", "high", "n", "per_seed", "seeds_left_out", "diverged", "statistic",
               "verdict"]
    return pd.DataFrame(rows, columns=columns)


# ---- output -----------------------------------------------------------------------------


def _measured(row: pd.Series) -> str:
    if math.isnan(row["difference"]):
        return "–"
    if math.isnan(row["low"]):
        return f"{row['difference']:+.2f} (no interval: {int(row['n'])} seed)"
    return f"{row['difference']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}]"


def to_markdown(table: pd.DataFrame) -> str:
    """The claims table: claim, source, cell, paper's margin, measured difference [95 % interval], verdict."""
    parts = ["# Claims", "",
             "Measured: mean over seeds of the difference (a threshold claim: of the metric) [95 % Student-t "
             "interval: paired over the same partition and seed unless stated]; accuracy in %.  Verdict: holds "
             "(interval above 0, or at/above the threshold), does not hold (below), inconclusive (straddles).", ""]
    if table.empty:
        return "\n".join(parts + ["No claim of this config's experiments.", ""])
    shown = pd.DataFrame({
        "claim": table["claim"], "source": table["source"],
        "cell": table["dataset"] + " / " + table["partition"] + " / " + table["model"],
        "comparison": table["comparison"] + " (" + table["metric"] + ")",
        "paper's margin": table["paper_margin"].fillna(""),
        "measured": table.apply(_measured, axis=1), "per seed": table["per_seed"], "seeds": table["n"],
        "left out": table["diverged"], "statistic": table["statistic"], "verdict": "**" + table["verdict"] + "**",
    })
    return "\n".join(parts + [shown.to_markdown(index=False), ""])


def protocol_global_accuracy(metrics_path: str | Path, protocol: str) -> float:
    """The global model's accuracy at the round ``protocol`` reports for it (e.g. pooled_max: the best
    round, as the scorecard's GM rows), from the ``history.csv`` beside ``metrics_path``."""
    history = pd.read_csv(Path(metrics_path).with_name("history.csv"))
    value = PROTOCOLS[protocol].final(history, "global")["accuracy"]
    return math.nan if value is None else value


def _runs_with_global(config: dict, metrics_paths: Iterable[str | Path]) -> pd.DataFrame:
    """:func:`load_metrics` of the runs; where a claim compares ``global_accuracy``, the protocol's reading of it."""
    paths = list(metrics_paths)
    runs = load_metrics(paths)
    if not any(c.get("metric") == "global_accuracy" for c in (config.get("claims") or {}).values()):
        return runs
    runs = runs.set_index(CELL_COLUMNS)
    for path in paths:
        metrics = json.loads(Path(path).read_text())
        key = tuple(metrics["cell"][c] for c in CELL_COLUMNS)
        runs.loc[key, "global_accuracy"] = protocol_global_accuracy(path, metrics["protocol"])
    return runs.reset_index()


def write_claims(config: dict, metrics_paths: Iterable[str | Path], published: pd.DataFrame, csv_path, md_path,
                 paper: str | None = None) -> pd.DataFrame:
    """Evaluate the config's claims (of ``paper``) on the runs' ``metrics.json``; write the table (CSV, Markdown)."""
    table = evaluate_claims(config, _runs_with_global(config, metrics_paths), published, paper)
    atomic_write(csv_path, lambda p: table.to_csv(p, index=False, float_format="%.4f"))
    atomic_write(md_path, lambda p: Path(p).write_text(to_markdown(table), encoding="utf-8"))
    return table


# ---- the committed report (reports/claims.md): every paper's claims, measured where runs exist ----


def _metrics_paths(config: dict, name: str, seed: int) -> list[Path]:
    """``metrics.json`` of every run claim ``name`` reads for ``seed``, under the config's ``results``
    (the layout of :meth:`fedbench.config.Cell.run_dir`)."""
    claim = config["claims"][name]
    root = Path(config.get("results", "results")) / "runs" / claim["experiment"]
    return [root / d / p / m / a / f"seed{seed}" / "metrics.json"
            for d, p, m in claim_cells(config, name) for a in claim_algorithms(claim)]


def _measured_seeds(config: dict, name: str) -> list[int]:
    """The config's seeds for which every run claim ``name`` reads is on disk."""
    return [int(s) for s in config["seeds"] if all(path.exists() for path in _metrics_paths(config, name, int(s)))]


def report_rows(config_path: str | Path, published: pd.DataFrame) -> pd.DataFrame:
    """Every claim of one config file: measured (on the seeds whose runs all exist, named in
    ``seeds``) or, where none exist, ``not yet measured`` with the command that measures it."""
    config = load_yaml_strict(config_path)
    rows = []
    for name, claim in (config.get("claims") or {}).items():
        measured = _measured_seeds(config, name)
        if measured:
            paths = [path for seed in measured for path in _metrics_paths(config, name, seed)]
            one = {**config, "claims": {name: claim}, "seeds": measured, "only_experiments": None}
            table = evaluate_claims(one, _runs_with_global(one, paths), published)
            rows.append(table.assign(seeds=f"{', '.join(map(str, measured))} ({len(measured)} of {len(config['seeds'])})"))
            continue
        command = (f"snakemake --cores 2 --configfile {config_path} --replace-workflow-config "
                   f"--config 'only_experiments=[{claim['experiment']}]'")
        rows.append(pd.DataFrame([{
            "claim": name, "paper": experiment_paper(config, claim["experiment"]), "source": claim["source"],
            "experiment": claim["experiment"], "comparison": claim.get("better", claim.get("algorithm")),
            "metric": claim.get("metric", "accuracy"),
            "paper_margin": margin_text(claim, published, f"claims.{name}"),
            "verdict": "not yet measured", "seeds": f"none (0 of {len(config['seeds'])})", "command": command,
        }]))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def reading(row: pd.Series) -> str:
    """One line: what the verdict says next to the paper's margin (and which runs diverged, left out)."""
    if row["verdict"] == "not yet measured":
        return f"`{row['command']}`"
    diverged = row.get("diverged")
    if isinstance(diverged, str) and diverged:
        if row["n"] == 0:
            return f"no seed to compare: {diverged}"
        return f"{_reading(row)}; left out: {diverged}"
    return _reading(row)


def _reading(row: pd.Series) -> str:
    if row["comparison"].count("≥"):
        return {HOLDS: "recovered: the whole interval is at or above the threshold",
                FAILS: "not recovered: the whole interval is below the threshold",
                INCONCLUSIVE: "the interval straddles the threshold (or too few seeds)"}[row["verdict"]]
    if row["verdict"] == INCONCLUSIVE and row["n"] == 2:
        return "2 seeds only: the paired t interval has 1 degree of freedom (t = 12.7) and is wide; more seeds narrow it"
    return {HOLDS: "the direction the paper reports, beyond the seed spread",
            FAILS: "the opposite of the paper's direction, beyond the seed spread",
            INCONCLUSIVE: "the seeds cannot tell the two apart here"}[row["verdict"]]


REPORT_TITLE = "# The papers' claims, tested on the offline analogues"


def report_sections(text: str) -> dict[str, str]:
    """An existing ``reports/claims.md`` cut at its ``## <paper>`` headings: paper name -> that section's text."""
    sections: dict[str, str] = {}
    name = None
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            name = line[3:].strip()
            sections[name] = ""
        if name is not None:
            sections[name] += line
    return sections


def _section(paper: str, rows: pd.DataFrame, config_paths: list[str], note: str) -> str:
    """One paper's section: the command that wrote it, ``note``, the claims table."""
    # no per-seed column while none of the paper's claims is measured
    rows = rows.reindex(columns=rows.columns.union(["per_seed"], sort=False)).astype({"per_seed": object})
    shown = pd.DataFrame({
        "claim": rows["claim"], "source": rows["source"],
        "cell": rows.apply(lambda r: f"{r['experiment']}" + (f" / {r['partition']}" if isinstance(r.get("partition"), str) else ""), axis=1),
        "paper's margin": rows["paper_margin"].fillna(""),
        "measured": rows.apply(lambda r: _measured(r) if r["verdict"] != "not yet measured" else "not yet measured", axis=1),
        "per seed": rows["per_seed"].fillna(""), "seeds": rows["seeds"], "verdict": "**" + rows["verdict"] + "**",
        "reading": rows.apply(reading, axis=1),
    })
    written = f"Written by `python -m fedbench.results.claims --update {' '.join(config_paths)}` from the runs on disk."
    return "\n".join([f"## {PAPER_NAMES[paper]}", "", written, *([note] if note else []), "",
                      shown.to_markdown(index=False), "", ""])


def write_report(config_paths: Iterable[str | Path], out: str | Path, published: pd.DataFrame, note: str = "",
                 update: bool = False) -> pd.DataFrame:
    """``reports/claims.md``: per paper, every claim of the given config files (:func:`report_rows`), each
    paper's section naming the command that wrote it and ``note``.  ``update``: rewrite only the sections
    of the papers these configs test and keep the report's other sections as they are (each paper's
    analogue is measured on its own, at its own time)."""
    config_paths = [str(path) for path in config_paths]
    table = pd.concat([report_rows(path, published) for path in config_paths], ignore_index=True)
    sections = report_sections(Path(out).read_text(encoding="utf-8")) if update and Path(out).exists() else {}
    for paper in table["paper"].unique():
        sections[PAPER_NAMES[paper]] = _section(paper, table[table["paper"] == paper], config_paths, note)
    order = [PAPER_NAMES[paper] for paper in ("femam", "fedmr", "flt", "pfedmt", "default")]
    header = [REPORT_TITLE, "",
              "Each paper's section is written by `python -m fedbench.results.claims --update CONFIG...` from the "
              "runs on disk under the config's `results:` directory (none typed in) and names its command; "
              "`--update` rewrites only the sections of the configs given.  Measured: mean over seeds of the "
              "difference (a threshold claim: of the metric), accuracy in %, [95 % Student-t interval, paired over "
              "the same partition and seed]; *seeds* = the seeds whose runs all exist (how many of the config's "
              "seeds).  Verdict: holds (interval above 0, or at/above the threshold), does not hold (below), "
              "inconclusive (straddles).  A claim with no runs yet says so, with the command that measures it.", "", ""]
    body = [sections[name] for name in sorted(sections, key=lambda n: order.index(n) if n in order else len(order))]
    atomic_write(out, lambda p: Path(p).write_text("\n".join(header) + "".join(body).rstrip("\n") + "\n", encoding="utf-8"))
    return table


def main(argv: list[str]) -> None:
    """``python -m fedbench.results.claims [--update] CONFIG... [--out reports/claims.md] [--note TEXT]``."""
    options = {"--out": "reports/claims.md", "--note": ""}
    for option in options:
        if option in argv:
            i = argv.index(option)
            options[option], argv = argv[i + 1], argv[:i] + argv[i + 2:]
    update = "--update" in argv
    argv = [arg for arg in argv if arg != "--update"]
    table = write_report(argv, options["--out"], load_published(), options["--note"], update=update)
    print(table[["claim", "verdict", "seeds"]].to_string())


__all__ = ["ClaimError", "check_claims", "claim_cells", "compare", "threshold", "verdict", "evaluated_claims",
           "evaluate_claims", "published_margins", "to_markdown", "write_claims", "report_rows", "report_sections",
           "write_report"]


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
