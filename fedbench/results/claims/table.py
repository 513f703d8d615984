"""The claims table as shown: the measured difference and seeds of a row, the paper's setting and the
tuned one side by side, the verdicts' legend, and the one-line reading of a verdict.

Layer 6 (results).
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import pandas as pd

from fedbench.results.sequential import EQUIVALENT, FAILS, HOLDS, INCONCLUSIVE, Design, spending_function

# ---- output -----------------------------------------------------------------------------


def _measured(row: pd.Series) -> str:
    """``+3.00 [+0.52, +5.48]``; an inconclusive one adds the smallest effect its seeds could have detected."""
    if row["verdict"] == "not yet measured":
        return "not yet measured"
    if math.isnan(row["difference"]):
        return "–"
    if math.isnan(row["low"]):
        return f"{row['difference']:+.2f} (no interval: {int(row['n'])} seed)"
    text = f"{row['difference']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}]"
    if row["verdict"] == INCONCLUSIVE and not pd.isna(row.get("detectable")):
        text += f"; detectable: ±{row['detectable']:.2f}"
    return text


def _seeds(row: pd.Series) -> str:
    """Which seeds (or how many) the verdict read, at which look, and whether the design plans more."""
    if row["verdict"] == "not yet measured":
        return row["seeds"]
    if pd.isna(row.get("seeds_run")):
        return ""
    which = row["seeds"] if isinstance(row.get("seeds"), str) else str(int(row["seeds_run"]))
    return f"{which}; look {row['look']}{'; more seeds planned' if row.get('pending') is True else ''}"


KEY = ["claim", "experiment", "dataset", "partition", "model"]


def side_by_side(table: pd.DataFrame) -> pd.DataFrame:
    """One row per claim and cell: the paper's setting and, where its experiment is tuned, the tuned
    setting (columns prefixed ``tuned_``), and whether the verdict survives tuning."""
    table = table.reindex(columns=table.columns.union(KEY + ["setting"], sort=False))
    table[KEY] = table[KEY].astype(object).fillna("")
    table["setting"] = table["setting"].fillna("paper")
    paper = table[table["setting"] == "paper"].drop(columns="setting")
    tuned = table[table["setting"] == "tuned"][[c for c in table.columns if c not in ("setting", "source", "paper")]]
    out = paper.merge(tuned.add_prefix("tuned_").rename(columns={f"tuned_{k}": k for k in KEY}), on=KEY, how="left")
    if "tuned_verdict" not in out:
        out["tuned_verdict"] = np.nan

    def survives(row) -> str:
        if pd.isna(row["tuned_verdict"]):
            return "not tuned"
        if row["verdict"] == row["tuned_verdict"]:
            return "yes"
        return f"no: {row['verdict']} → {row['tuned_verdict']}"

    out["survives_tuning"] = out.apply(survives, axis=1)
    return out


def _tuned(row: pd.Series) -> pd.Series:
    """The tuned columns of a :func:`side_by_side` row, unprefixed (for :func:`_measured` and :func:`_seeds`)."""
    return pd.Series({k[len("tuned_"):]: v for k, v in row.items() if k.startswith("tuned_")})


def _shown(rows: pd.DataFrame, reading_column: bool) -> pd.DataFrame:
    """The displayed table: per claim and cell the paper's setting and the tuned one side by side."""
    both = side_by_side(rows)
    tuned = both.apply(_tuned, axis=1) if both["tuned_verdict"].notna().any() else None
    shown = pd.DataFrame({
        "claim": both["claim"], "source": both["source"],
        "cell": both.apply(lambda r: " / ".join(x for x in (r["experiment"], r["dataset"], r["partition"], r["model"]) if x), axis=1),
        "comparison": both["comparison"] + " (" + both["metric"].fillna("accuracy") + ")",
        "paper's margin": both["paper_margin"].fillna(""),
        "at the paper's setting": both.apply(_measured, axis=1), "seeds": both.apply(_seeds, axis=1),
        "verdict": "**" + both["verdict"] + "**",
    })
    if tuned is not None:
        shown["tuned"] = [_measured(r) if isinstance(r["verdict"], str) else "" for _, r in tuned.iterrows()]
        shown["tuned seeds"] = [_seeds(r) if isinstance(r["verdict"], str) else "" for _, r in tuned.iterrows()]
        shown["tuned verdict"] = ["**" + v + "**" if isinstance(v, str) else "" for v in tuned["verdict"]]
        shown["survives tuning"] = both["survives_tuning"]
    if reading_column:
        shown["reading"] = both.apply(reading, axis=1)
    return shown


VERDICT_LEGEND = (
    "Measured: mean over seeds of the difference (a threshold claim: of the metric) [Student-t interval at the "
    "look's level of the design's boundary, paired over the same partition and seed unless stated]; accuracy in %.  "
    "Verdict: holds (interval above 0, or at/above the threshold), does not hold (below), equivalent (inside "
    "±delta, the smallest difference that matters, and straddling 0), inconclusive (none of these: *detectable* is "
    "the smallest difference its seeds would have found with 80 % power), not comparable (no seed gave a number "
    "to compare: a method's runs diverged on every seed of the look; more seeds are not drawn).  *seeds*: the seeds the verdict read and "
    "the look (fedbench.results.sequential: α is spent across the looks by the design's spending function, "
    "Hwang-Shih-DeCani with γ = −2 unless named otherwise, and each look's interval is mean ± c_k · se with c_k the "
    "look's critical t for the t-statistic at its seed count, so that a wrong directional verdict, or a wrong "
    "equivalent one, has probability at most α over all looks; the boundary per look is listed with the table).  "
    "*tuned*: the same claim after every method was tuned on "
    "validation rows with the same budget (fedbench.tuning.trials), re-run on seeds tuning never used.")

SPENDING_CITATIONS = {"hsd": "Hwang, Shih & DeCani 1990", "obf": "O'Brien-Fleming type, Lan & DeMets 1983",
                      "bonferroni": "Bonferroni over the looks: each at α / L, no spending function"}


def boundary_title(design: Design) -> str:
    """``looks at 3, 5, 7, 10 seeds, α = 0.05 each direction, hsd(-2) spending (Hwang, Shih & DeCani 1990)``."""
    name = spending_function(design.spending).name
    return (f"looks at {', '.join(map(str, design.looks))} seeds, α = {design.alpha:g} each direction, "
            f"{design.spending} spending ({SPENDING_CITATIONS[name]})")


def boundary_markdown(design: Design) -> str:
    """The boundary per look: seeds, critical t (df = seeds − 1), the look's one-sided nominal level and
    two-sided confidence, the α spent by then, and Bonferroni's critical t at the same look for comparison."""
    bonferroni = Design(design.looks, design.alpha, spending="bonferroni").critical
    rows = [{"look": f"{k + 1} of {len(design.looks)}", "seeds": look["seeds"], "critical t": f"{look['critical']:.3f}",
             "level (one-sided)": f"{look['level']:.4f}", "interval": f"{100 * (1 - 2 * look['level']):.2f} %",
             "α spent by then": f"{look['spent']:.4f}", "Bonferroni's critical t": f"{bonferroni[k]:.3f}"}
            for k, look in enumerate(design.boundary())]
    return pd.DataFrame(rows).to_markdown(index=False, disable_numparse=True)


def boundary_text(designs: Iterable[Design]) -> list[str]:
    """Markdown lines: each distinct boundary (looks, alpha, spending) with its per-look table."""
    lines, seen = [], set()
    for design in designs:
        key = (design.looks, design.alpha, design.spending)
        if key in seen:
            continue
        seen.add(key)
        lines += [f"Boundary: {boundary_title(design)}.", "", boundary_markdown(design), ""]
    return lines


def to_markdown(table: pd.DataFrame, designs: Iterable[Design] = ()) -> str:
    """The claims table: per claim and cell the paper's margin, the measured difference and verdict at the
    paper's setting and tuned, side by side, and whether the verdict survives tuning; after the legend,
    the boundary of each design given (:func:`boundary_text`)."""
    parts = ["# Claims", "", VERDICT_LEGEND, "", *boundary_text(designs)]
    if table.empty:
        return "\n".join(parts + ["No claim of this config's experiments.", ""])
    return "\n".join(parts + [_shown(table, reading_column=False).to_markdown(index=False), ""])


def reading(row: pd.Series) -> str:
    """One line: what the verdict says next to the paper's margin (and which runs diverged, left out)."""
    if row["verdict"] == "not yet measured":
        return f"`{row['command']}`"
    diverged, at_horizon = row.get("diverged"), row.get("at_horizon")
    horizon = f"; {at_horizon}" if isinstance(at_horizon, str) and at_horizon else ""
    if isinstance(diverged, str) and diverged:
        if row["n"] == 0:
            return f"no seed to compare: {diverged}"
        return f"{_reading(row)}; left out: {diverged}{horizon}"
    return _reading(row) + horizon


def _reading(row: pd.Series) -> str:
    if row["comparison"].count("≥"):
        return {HOLDS: "recovered: the whole interval is at or above the threshold",
                FAILS: "not recovered: the whole interval is below the threshold",
                INCONCLUSIVE: "the interval straddles the threshold (or too few seeds)"}[row["verdict"]]
    if row["verdict"] == INCONCLUSIVE and row["n"] == 2:
        return "2 seeds only: the paired t interval has 1 degree of freedom (t = 12.7) and is wide; more seeds narrow it"
    return {HOLDS: "the direction the paper reports, beyond the seed spread",
            FAILS: "the opposite of the paper's direction, beyond the seed spread",
            EQUIVALENT: f"no difference beyond ±{row['delta']:g}, the smallest that matters",
            INCONCLUSIVE: "the seeds cannot tell the two apart here"}[row["verdict"]]
