"""sigma_d of every paired claim, read from two versions of reports/claims.md: before and after a change
of design (common random numbers, the spending boundary), without the runs.

    python benchmarks/claims_spread.py --section FeMAM 3aa041b --section FedMR 519124b \\
        --section pFedMT c4c6f95 --section "FLT on MNIST" FLT@f15767b

``--section AFTER BEFORE``: the section ``AFTER`` of the report now (``--report``, default
reports/claims.md; ``--rev`` a committed one) against the section of the report as committed at
``BEFORE`` (``NAME@REV`` reads another section there, e.g. an earlier analogue of the same claims).

A claim ``better - than`` is decided on its per-seed differences d_s; its interval at a look is
``mean +- c se`` with ``se = sigma_d / sqrt(n)`` and ``c = t(1 - p_k, n - 1)`` the look's critical t (``p_k``
the look's one-sided level: :meth:`fedbench.results.sequential.Design.look_alpha`; ``alpha / L`` in a
section decided under Bonferroni over the looks), so ``sigma_d = (high - low) sqrt(n) / (2 c)``, where ``n``
is the seeds the cell read at the look the section shows (benchmarks/reread_claims.py's reading, less the
seeds a diverged run left out).  Threshold claims (one method's metric against a line) have no pair and
are left out.  Cells are matched on claim, setting, partition and model (the dataset and experiment may
differ: an analogue against the paper's own data).  The report prints 2 decimals: a sigma_d is good to
about ``0.01 sqrt(n) / c``.

Prints, per pair of sections, every matched cell's sigma_d before and after (and its n, the metric's
unit in the comparison), then per setting the median of the after/before ratios over the cells whose
comparison is an accuracy (rounds or MB to a target have their own units).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path

import pandas as pd
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fedbench.config.files import load_yaml_strict  # noqa: E402
from fedbench.results.claims import LOOKS_MARK, report_sections  # noqa: E402
from fedbench.results.claims.report import section_design  # noqa: E402
from fedbench.results.sequential import Design  # noqa: E402

_spec = importlib.util.spec_from_file_location("reread_claims", Path(__file__).with_name("reread_claims.py"))
reread = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reread)

# the config whose claims_design a Bonferroni section (no boundary mark) was decided with
CONFIGS = {**reread.CONFIGS, "FLT on MNIST": "config/experiments/flt_claims_mnist.yaml"}
SETTINGS = (("paper", "at the paper's setting", "seeds", "verdict"), ("tuned", "tuned", "tuned seeds", "tuned verdict"))


def section_of(text: str, name: str) -> tuple[str, Design]:
    """A section's text and the design it was decided with: its boundary mark's, else (looks and
    tuning, written before the boundary) its config's looks under Bonferroni."""
    sections = report_sections(text)
    if name not in sections:
        raise SystemExit(f"no section {name!r} in the report (it has: {', '.join(sections)})")
    section = sections[name]
    design = section_design(section)
    if design is None:
        if LOOKS_MARK not in section:
            raise SystemExit(f"section {name!r} predates looks (one 95 % look per cell): not read here")
        looks = load_yaml_strict(REPO / CONFIGS[name])["claims_design"]
        design = Design(tuple(looks["looks"]), float(looks.get("alpha", 0.05)), spending="bonferroni")
    return section, design


def sigma_d(low: float, high: float, n: int, look: int, design: Design) -> float:
    """The sd of the per-seed differences behind the interval ``[low, high]`` read at ``look`` (0-based) on ``n`` seeds."""
    if n < 2:
        return math.nan
    c = stats.t.ppf(1 - design.look_alpha(look), n - 1)
    return (high - low) * math.sqrt(n) / (2 * c)


def spreads(text: str, name: str) -> pd.DataFrame:
    """One row per paired claim, cell and setting of section ``name``: sigma_d, n, look, unit."""
    section, design = section_of(text, name)
    rows = []
    for row in reread.section_rows(section):
        if " − " not in row["comparison"]:
            continue  # a threshold: one method's metric, no pair
        dataset_partition_model = row["cell"].split(" / ")
        for setting, measured, seeds, verdict in SETTINGS:
            cell = reread.cell_reading(row.get(measured, ""), row.get(seeds, ""), row.get(verdict, ""),
                                       row.get("reading", ""), design.looks)
            if cell is None or "low" not in cell:
                continue
            rows.append({"claim": row["claim"], "setting": setting, "partition": dataset_partition_model[-2],
                         "model": dataset_partition_model[-1], "unit": row["comparison"].rsplit("(", 1)[-1].rstrip(")"),
                         "n": cell["n"], "look": cell["look"] + 1,
                         "sigma_d": sigma_d(cell["low"], cell["high"], cell["n"], cell["look"], design)})
    return pd.DataFrame(rows)


def compare(after: pd.DataFrame, before: pd.DataFrame) -> pd.DataFrame:
    key = ["claim", "setting", "partition", "model"]
    both = after.merge(before, on=key, how="outer", suffixes=("_after", "_before"))
    both["unit"] = both["unit_after"].fillna(both["unit_before"])
    both["ratio"] = both["sigma_d_after"] / both["sigma_d_before"]
    return both


def markdown(both: pd.DataFrame, title: str) -> str:
    lines = [f"### {title}", "", "| claim | setting | partition | unit | sigma_d before (n) | sigma_d after (n) | after / before |",
             "|:--|:--|:--|:--|--:|--:|--:|"]

    def shown(value, n):
        return "–" if pd.isna(value) else f"{value:.2f} ({int(n)})"

    for row in both.sort_values(["setting", "claim", "partition"]).itertuples():
        ratio = "" if pd.isna(row.ratio) or row.sigma_d_before == 0 else f"{row.ratio:.2f}"
        lines.append(f"| {row.claim} | {row.setting} | {row.partition} | {row.unit} | "
                     f"{shown(row.sigma_d_before, row.n_before)} | {shown(row.sigma_d_after, row.n_after)} | {ratio} |")
    lines.append("")
    accuracy = both[both["unit"].str.contains("accuracy") & both["ratio"].notna() & (both["sigma_d_before"] > 0)]
    for setting, group in accuracy.groupby("setting", sort=False):
        lines.append(f"- {setting}: median sigma_d over the {len(group)} matched accuracy pairs "
                     f"{group['sigma_d_before'].median():.2f} before, {group['sigma_d_after'].median():.2f} after; "
                     f"median ratio {group['ratio'].median():.2f}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=REPO / "reports" / "claims.md")
    parser.add_argument("--rev", help="read the 'after' report as committed at this revision")
    parser.add_argument("--section", nargs=2, action="append", required=True, metavar=("AFTER", "BEFORE"),
                        help="a section now and the revision (or NAME@REV) of its 'before'")
    args = parser.parse_args(argv)
    now = reread.report_text(args.rev, args.report)
    for after_name, before_spec in args.section:
        before_name, _, rev = before_spec.rpartition("@")
        before_name = before_name or after_name
        both = compare(spreads(now, after_name), spreads(reread.report_text(rev, args.report), before_name))
        print(markdown(both, f"{after_name} (now) against {before_name} at {rev}"), "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
