"""Re-read the claims decided under Bonferroni over the looks at the alpha-spending boundary, without new runs.

    python benchmarks/reread_claims.py                       # the Bonferroni sections of reports/claims.md
    python benchmarks/reread_claims.py --rev 83bceab --runs config/experiments/flt_claims.yaml
        # every section as committed before the spending boundary, and FLT from its runs on disk too

From a report's own numbers (every section decided under Bonferroni: no boundary mark,
:data:`fedbench.results.claims.BOUNDARY_MARK`).  Per claim, cell and setting the section shows the mean,
the interval ``[low, high]``, the seeds read and the look that gave the verdict.  The interval was
``mean +- c_old se`` with ``c_old = t(1 - alpha / L, n - 1)`` (``n``: the look's seed count -- the
seeds column names the most seeds any cell of the claim read -- less the seeds a diverged run left
out, named in the reading), so ``se = (high - low) / (2 c_old)``; the re-read interval
at that look is ``mean +- c_new se``, ``c_new = t(1 - p_k, n - 1)`` with ``p_k`` the spending boundary's
nominal level at the look (:meth:`fedbench.results.sequential.Design.look_alpha`: its critical t at the
look's seed count), and is decided again by :func:`fedbench.results.sequential.decide` with the claim's
delta and threshold from its config.  A cell still undecided at a look before the last would, under the
new boundary, have drawn the next look's seeds, which were not run for it: **needs more seeds (not
run)**, not a verdict.  Not comparable (no number) and a look without an interval stay as they were.

What the report's numbers cannot say: a cell the report shows at a later look was undecided at the
earlier ones under Bonferroni; where the new boundary is narrower at an earlier look (7 seeds of
3/5/7/10), the new design might have stopped it there, on seeds the report does not show.  The re-read
decides it at the look shown.  The numbers are printed to 2 decimals, so a cell whose re-read verdict
would change were either end 0.01 higher or lower is flagged (``near``).

``--runs CONFIG``: the same config's claims read from its runs on disk (``results:``) twice, with its
``claims_design`` and with ``spending: bonferroni`` -- the measured before and after, which the
re-read from the report's numbers can be checked against.  A cell the new boundary leaves open at a
look whose seeds are not on disk is again "needs more seeds (not run)".

Prints, per paper and setting (the paper's setting, tuned), the verdict counts before and after, and
every cell whose verdict moves.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pandas as pd
import yaml
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fedbench.config.files import load_yaml_strict  # noqa: E402
from fedbench.results.claims import (BOUNDARY_MARK, LOOKS_MARK, claim_design, report_rows,  # noqa: E402
                                     report_sections)
from fedbench.results.published import load_published  # noqa: E402
from fedbench.results.sequential import (DECIDED, EQUIVALENT, FAILS, HOLDS, INCONCLUSIVE, NOT_COMPARABLE,  # noqa: E402
                                         Design, decide)

CONFIGS = {"FeMAM": "config/experiments/femam_offline.yaml", "FedMR": "config/experiments/fedmr_claims.yaml",
           "FLT": "config/experiments/flt_claims.yaml", "pFedMT": "config/experiments/pfedmt.yaml"}
NOT_RUN = "needs more seeds (not run)"
ORDER = (HOLDS, FAILS, EQUIVALENT, INCONCLUSIVE, NOT_COMPARABLE, NOT_RUN)
ROUNDING = 0.01  # the report's 2 decimals: an end this close to a decision line may fall either side
MEASURED = re.compile(r"^([+-]?\d+\.\d+) \[([+-]?\d+\.\d+), ([+-]?\d+\.\d+)\]")
SEEDS = re.compile(r"^(?P<seeds>[\d, ]+) \(\d+ of \d+\); look (?P<look>\d+) of (?P<looks>\d+)")


# ---- reading a section ---------------------------------------------------------------------


def section_rows(text: str) -> list[dict]:
    """The claims table of one section as dicts keyed by its header (cells stripped, bold removed)."""
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[1:]:  # the separator (|:---) is not a "| " line
        cells = [cell.strip().replace("**", "") for cell in line.strip("|").split("|")]
        rows.append(dict(zip(header, cells)))
    return rows


def left_out(reading: str) -> set[int]:
    """The seeds a diverged run (or one that never reached its target, left out) took out of the pairs."""
    if "left out:" not in reading and not reading.startswith("no seed to compare"):
        return set()
    text = reading.split("left out:", 1)[-1]
    return {int(s) for group in re.findall(r"\(seed ([\d, ]+)\)", text) for s in group.split(",")}


def cell_reading(measured: str, seeds: str, verdict: str, reading: str, looks: tuple[int, ...]) -> dict | None:
    """Mean, interval, seeds with a number, look (0-based) and verdict of one setting's cell (``looks``:
    its design's seed counts); None where the cell was not measured at that setting."""
    match = SEEDS.match(seeds)
    if not verdict or match is None:
        return None
    look = int(match["look"]) - 1
    # the seeds column names the most seeds any of the claim's cells read; this cell read its look's
    read = [int(s) for s in match["seeds"].split(",")][:looks[look]]
    out = {"verdict": verdict, "look": look, "n": len(set(read) - left_out(reading)), "seeds": len(read)}
    numbers = MEASURED.match(measured)
    if numbers:
        out.update(mean=float(numbers[1]), low=float(numbers[2]), high=float(numbers[3]))
    return out


# ---- re-reading one cell at the spending boundary ----------------------------------------


def reread(cell: dict, design: Design, reference: float, threshold: bool) -> dict:
    """The cell's verdict at the spending boundary from its Bonferroni interval (the module's rule)."""
    out = {"before": cell["verdict"], "after": cell["verdict"], "near": False, "low_new": None, "high_new": None}
    if cell["verdict"] == NOT_COMPARABLE or "low" not in cell or cell["n"] < 2:
        if cell["verdict"] == INCONCLUSIVE and cell["look"] < len(design.looks) - 1:
            out["after"] = NOT_RUN
        return out
    c_old = stats.t.ppf(1 - design.alpha / len(design.looks), cell["n"] - 1)
    c_new = stats.t.ppf(1 - design.look_alpha(cell["look"]), cell["n"] - 1)
    se = (cell["high"] - cell["low"]) / (2 * c_old)
    low, high = cell["mean"] - c_new * se, cell["mean"] + c_new * se
    delta = float("inf") if threshold else design.delta
    verdict = decide(low, high, delta, reference, threshold)
    if verdict not in DECIDED and cell["look"] < len(design.looks) - 1:
        verdict = NOT_RUN
    nearby = {decide(low + a, high + b, delta, reference, threshold) for a in (-ROUNDING, ROUNDING)
              for b in (-ROUNDING, ROUNDING)}
    near = len(nearby) > 1  # moving an end by the report's rounding would change the verdict
    return {**out, "after": verdict, "near": bool(near), "low_new": low, "high_new": high, "c_old": c_old, "c_new": c_new}


def claim_of(config: dict, name: str) -> tuple[Design, float, bool]:
    """The claim's design at the spending boundary (its config's looks, alpha, spending and its delta),
    its reference line (0 for a comparison, ``at_least`` for a threshold) and whether it is a threshold."""
    claim = config["claims"][name]
    return claim_design(config, claim), float(claim.get("at_least", 0.0)), "better" not in claim


def reread_section(paper: str, text: str) -> pd.DataFrame:
    """Every cell of one Bonferroni section re-read (one row per claim, cell and setting)."""
    config = load_yaml_strict(REPO / CONFIGS[paper])
    rows = []
    for row in section_rows(text):
        design, reference, threshold = claim_of(config, row["claim"])
        for setting, measured, seeds, verdict in (("paper", "at the paper's setting", "seeds", "verdict"),
                                                  ("tuned", "tuned", "tuned seeds", "tuned verdict")):
            cell = cell_reading(row.get(measured, ""), row.get(seeds, ""), row.get(verdict, ""), row.get("reading", ""),
                                design.looks)
            if cell is None:
                continue
            result = reread(cell, design, reference, threshold)
            rows.append({"paper": paper, "setting": setting, "claim": row["claim"], "cell": row["cell"],
                         "look": cell["look"] + 1, "n": cell["n"], "measured": row[measured], **result})
    return pd.DataFrame(rows)


# ---- from the runs on disk -----------------------------------------------------------------


def from_runs(config_path: str) -> pd.DataFrame:
    """The config's claims read from its runs twice: Bonferroni (before) and its own design (after)."""
    config = yaml.safe_load((REPO / config_path).read_text())
    tables = {}
    with tempfile.TemporaryDirectory() as tmp:
        for when, spending in (("before", "bonferroni"), ("after", config["claims_design"].get("spending", "hsd(-2)"))):
            path = Path(tmp) / Path(config_path).name
            path.write_text(yaml.safe_dump({**config, "claims_design": {**config["claims_design"], "spending": spending}}))
            table = report_rows(path, load_published())
            verdict = table["verdict"].where(~(table["pending"].fillna(False).astype(bool)
                                               & (table["verdict"] == INCONCLUSIVE)), NOT_RUN)
            tables[when] = table.assign(verdict=verdict)
    key = ["claim", "setting", "experiment", "dataset", "partition", "model"]
    both = tables["before"][key + ["paper", "verdict"]].merge(tables["after"][key + ["verdict", "difference", "low", "high",
                                                                                       "seeds_run"]],
                                                              on=key, suffixes=("_before", "_after"))
    both["cell"] = both["experiment"] + " / " + both["dataset"] + " / " + both["partition"] + " / " + both["model"]
    from fedbench.results.papers import PAPERS
    return both.rename(columns={"verdict_before": "before", "verdict_after": "after"}).assign(
        paper=both["paper"].map(PAPERS))


# ---- output --------------------------------------------------------------------------------


def counts(verdicts: pd.Series) -> str:
    """``17 hold, 14 do not hold, ...`` in the order of :data:`ORDER`, zeros left out."""
    tally = Counter(verdicts)
    names = {HOLDS: "hold", FAILS: "do not hold", EQUIVALENT: "equivalent", INCONCLUSIVE: "inconclusive",
             NOT_COMPARABLE: "not comparable", NOT_RUN: NOT_RUN}
    return ", ".join(f"{tally[v]} {names[v]}" for v in ORDER if tally[v]) or "none"


def summary(table: pd.DataFrame, title: str) -> str:
    """Per paper and setting: cells, verdicts before and after, and (report re-read) the cells near a line."""
    lines = [f"### {title}", "", "| paper | setting | cells | before (Bonferroni) | after (spending boundary) | moved |"
             + (" near a line |" if "near" in table else ""),
             "|---|---|---:|---|---|---:|" + ("---:|" if "near" in table else "")]
    for (paper, setting), group in table.groupby(["paper", "setting"], sort=False):
        moved = int((group["before"] != group["after"]).sum())
        near = f" {int(group['near'].sum())} |" if "near" in group else ""
        lines.append(f"| {paper} | {'paper' if setting == 'paper' else 'tuned'} | {len(group)} | {counts(group['before'])} "
                     f"| {counts(group['after'])} | {moved} |{near}")
    return "\n".join(lines)


def moves(table: pd.DataFrame) -> str:
    """Every cell whose verdict moves, with its interval before and (report re-read) after."""
    lines = []
    for row in table[table["before"] != table["after"]].itertuples():
        after = ""
        if getattr(row, "low_new", None) is not None and pd.notna(getattr(row, "low_new", None)):
            after = f" -> [{row.low_new:+.2f}, {row.high_new:+.2f}]"
        elif hasattr(row, "low") and pd.notna(row.low):
            after = f" -> {row.difference:+.2f} [{row.low:+.2f}, {row.high:+.2f}] at {int(row.seeds_run)} seeds"
        near = " (near a line)" if getattr(row, "near", False) else ""
        measured = f" {row.measured}" if hasattr(row, "measured") else ""
        look = f", look {row.look}" if hasattr(row, "look") else ""
        lines.append(f"- {row.paper} {row.setting}: {row.claim} ({row.cell}{look}):{measured}{after}: "
                     f"{row.before} -> {row.after}{near}")
    return "\n".join(lines)


def report_text(rev: str | None, path: Path) -> str:
    """The report as committed at ``rev`` (``git show``), else the file at ``path``."""
    if rev is None:
        return path.read_text(encoding="utf-8")
    return subprocess.run(["git", "show", f"{rev}:reports/claims.md"], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=REPO / "reports" / "claims.md")
    parser.add_argument("--rev", help="read reports/claims.md as committed at this git revision instead")
    parser.add_argument("--runs", nargs="*", default=[], metavar="CONFIG",
                        help="also read these configs' claims from their runs on disk, both boundaries")
    args = parser.parse_args(argv)
    sections = report_sections(report_text(args.rev, args.report))
    bonferroni = {name: text for name, text in sections.items() if LOOKS_MARK in text and BOUNDARY_MARK not in text}
    table = pd.concat([reread_section(name, text) for name, text in bonferroni.items()], ignore_index=True)
    source = f"reports/claims.md at {args.rev}" if args.rev else str(args.report.relative_to(REPO)
                                                                        if args.report.is_relative_to(REPO) else args.report)
    print(summary(table, f"Re-read from the report's numbers ({source}: {', '.join(bonferroni)})"), "\n")
    print(moves(table), "\n")
    for config_path in args.runs:
        runs = from_runs(config_path)
        print(summary(runs, f"From the runs on disk ({config_path})"), "\n")
        print(moves(runs), "\n")
        paper = runs["paper"].iloc[0]
        if paper in set(table["paper"]):
            mine = table[table["paper"] == paper]
            merged = mine.merge(runs, on=["setting", "claim", "cell"], suffixes=("_report", "_runs"))
            agree = int((merged["after_report"] == merged["after_runs"]).sum())
            print(f"{paper}: the report re-read and the runs agree on {agree} of {len(merged)} cells after, "
                  f"{int((merged['before_report'] == merged['before_runs']).sum())} before.")
            for row in merged[merged["after_report"] != merged["after_runs"]].itertuples():
                print(f"- {row.setting} {row.claim} ({row.cell}): report re-read {row.after_report}, runs {row.after_runs}")
            print()


if __name__ == "__main__":
    main(sys.argv[1:])
