"""The papers' claims as data, checked against the runs: one verdict per claim and cell.

A config's ``claims:`` section maps a claim id to what the paper says and how to test it on one
experiment of the same config:

* a **comparison** (``better`` vs ``than``, two algorithm entries): the per-seed difference
  ``better - than`` of ``metric`` in every selected cell (dataset, partition, model);
* a **threshold** (``algorithm`` and ``at_least``): ``metric`` of one algorithm, e.g. ARI >= 0.9.

``source`` quotes or cites the paper; ``published`` (comparisons) names the rows of
``config/published_results.csv`` whose difference is the paper's margin, so the margin is
computed, never typed in; ``margin`` (text) states it where the paper gives no table difference.

Statistic: a Student-t interval over seeds (scipy.stats) -- paired by default (the two algorithms'
runs on the same partition and seed), Welch's unpaired interval only where a claim sets ``pairing:
unpaired``; a threshold's is the one-sample interval of the metric.  Not a bootstrap: with 3-10
seeds a percentile bootstrap has a handful of distinct resamples and its interval is too narrow.
Verdicts come from the group-sequential design of :mod:`fedbench.results.sequential` (the config's
``claims_design``: looks, error rate ``alpha``, smallest difference that matters ``delta``, a claim's
own ``delta`` over it, and the ``spending`` function that spends alpha across the looks -- Hwang, Shih &
DeCani 1990 with gamma = -2 by default, Lan & DeMets 1983's O'Brien-Fleming type, or Bonferroni): holds,
does not hold, **equivalent** (inside +-delta) or inconclusive with the smallest effect its seeds could
have detected, each look's interval at the boundary's critical t for that look.  Without ``claims_design`` there is one look at the
config's seeds with ``alpha = 0.025``: the 95 % interval.  The config's ``seeds`` are the pilot; the
workflow adds the next seeds (:func:`design_seeds`) to claims still undecided, look by look.  A pilot
run that is missing is an error (:class:`ClaimError`); a diverged run (no number) leaves its seed out
and is counted.  A claim on a tuned experiment (``tune:``, :mod:`fedbench.tuning.trials`) is read twice:
at the paper's setting and tuned (``setting``), side by side.

The workflow's rule ``paper_claims`` writes each paper's table from its runs (:func:`write_claims`);
``python -m fedbench.results.claims CONFIG...`` writes ``reports/claims.md`` from whatever runs are on
disk, naming the command for the claims not yet measured (:func:`write_report`).

Layer 6 (results); one module per idea:

* :mod:`.spec` -- what a claim is: its metrics, cells, published margin, design and the seeds it may add;
* :mod:`.statistics` -- the t intervals and the sequential verdict of one claim in one cell;
* :mod:`.evaluation` -- claims read off the runs' files: one paper's table, one look of the design;
* :mod:`.table` -- the table as shown: both settings side by side, the legend, a verdict's reading;
* :mod:`.report` -- the committed ``reports/claims.md``; :mod:`.__main__` its command line.

The names below are importable from the package itself, each loaded from its module on first use (so
that planning, which reads a claim's cells and seeds, never loads the statistics)."""


import importlib

PUBLIC = {
    **dict.fromkeys(("METRICS", "CELL_AXES", "DEFAULT_ALPHA", "DEFAULT_DELTA", "SETTINGS", "REACHED", "ClaimError",
                     "claim_algorithms", "claim_cells", "published_margins", "margin_text", "check_claims",
                     "metric_column", "claims_design", "claim_design", "design_seeds", "check_design",
                     "evaluated_claims"), "spec"),
    **dict.fromkeys(("CONFIDENCE", "verdict", "compare", "threshold", "decide_claim"), "statistics"),
    **dict.fromkeys(("CLAIM_COLUMNS", "evaluate_claims", "protocol_global_accuracy", "write_claims", "look_state",
                     "statistic", "_runs_with_global"), "evaluation"),
    **dict.fromkeys(("KEY", "VERDICT_LEGEND", "SPENDING_CITATIONS", "side_by_side", "to_markdown", "reading",
                     "boundary_title", "boundary_markdown", "boundary_text"), "table"),
    **dict.fromkeys(("REPORT_TITLE", "LOOKS_MARK", "BOUNDARY_MARK", "REREAD", "setting_root", "report_rows",
                     "report_sections", "boundary_spec", "section_design", "section_status", "write_report"), "report"),
    **dict.fromkeys(("HOLDS", "FAILS", "EQUIVALENT", "INCONCLUSIVE", "NOT_COMPARABLE", "Design", "DEFAULT_SPENDING",
                     "spending_function", "critical_values"), "sequential"),
}
__all__ = sorted(name for name in PUBLIC if not name.startswith("_"))


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = "fedbench.results.sequential" if PUBLIC[name] == "sequential" else f"{__name__}.{PUBLIC[name]}"
    return getattr(importlib.import_module(module), name)
