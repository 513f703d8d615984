"""The committed report ``reports/claims.md``: every paper's claims of the given configs, measured on
the seeds whose runs are on disk (else the command that measures them), one section per paper;
``--update`` rewrites only the sections of the configs given.

Layer 6 (results).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from fedbench.config.files import load_yaml_strict
from fedbench.data.partition_file import atomic_write
from fedbench.results.claims.evaluation import _runs_with_global, evaluate_claims
from fedbench.results.claims.spec import (SETTINGS, claim_algorithms, claim_cells, claim_design, claims_design,
                                          design_seeds, margin_text)
from fedbench.results.claims.table import VERDICT_LEGEND, _shown, boundary_markdown, boundary_title
from fedbench.results.sequential import Design
from fedbench.results.papers import PAPERS as PAPER_NAMES
from fedbench.results.papers import experiment_paper

# ---- the committed report (reports/claims.md): every paper's claims, measured where runs exist ----


def setting_root(config: dict, setting: str) -> Path:
    """Where a setting's runs are: ``<results>/runs`` (the paper's setting) or ``<results>/tuned/runs``."""
    results = Path(config.get("results", "results"))
    return results / "runs" if setting == "paper" else results / "tuned" / "runs"


def _metrics_paths(config: dict, name: str, seed: int, setting: str = "paper") -> list[Path]:
    """``metrics.json`` of every run claim ``name`` reads for ``seed`` at ``setting``, under the config's
    ``results`` (the layout of :meth:`fedbench.config.cells.Cell.run_dir`)."""
    claim = config["claims"][name]
    root = setting_root(config, setting) / claim["experiment"]
    return [root / d / p / m / a / f"seed{seed}" / "metrics.json"
            for d, p, m in claim_cells(config, name) for a in claim_algorithms(claim)]


def _measured_seeds(config: dict, name: str, setting: str = "paper") -> list[int]:
    """The design's seeds (pilot first) for which every run claim ``name`` reads is on disk."""
    return [s for s in design_seeds(config) if all(path.exists() for path in _metrics_paths(config, name, s, setting))]


def report_rows(config_path: str | Path, published: pd.DataFrame) -> pd.DataFrame:
    """Every claim of one config file at the paper's setting and, where its experiment is tuned, tuned:
    measured (on the seeds whose runs all exist, named in ``seeds``) or, where none exist, ``not yet
    measured`` with the command that measures it."""
    config = load_yaml_strict(config_path)
    cap = claims_design(config)["looks"][-1]
    rows = []
    for name, claim in (config.get("claims") or {}).items():
        tuned = config["experiments"][claim["experiment"]].get("tune") is not None
        for setting in SETTINGS if tuned else ("paper",):
            measured = _measured_seeds(config, name, setting)
            pilot = [s for s in measured if s in config["seeds"]]
            if pilot:
                paths = [path for seed in measured for path in _metrics_paths(config, name, seed, setting)]
                one = {**config, "claims": {name: claim}, "only_experiments": None}
                if len(pilot) < len(config["seeds"]):  # a pilot still running: what there is
                    one["seeds"] = pilot
                table = evaluate_claims(one, _runs_with_global(one, paths), published, setting=setting)
                read = design_seeds(one)[:int(table["seeds_run"].max())]
                rows.append(table.assign(seeds=f"{', '.join(map(str, read))} ({len(read)} of {cap})"))
                continue
            command = (f"snakemake --cores 2 --configfile {config_path} --replace-workflow-config "
                       f"--config 'only_experiments=[{claim['experiment']}]'")
            rows.append(pd.DataFrame([{
                "claim": name, "paper": experiment_paper(config, claim["experiment"]), "setting": setting,
                "source": claim["source"], "experiment": claim["experiment"],
                "comparison": claim.get("better", claim.get("algorithm")), "metric": claim.get("metric", "accuracy"),
                "paper_margin": margin_text(claim, published, f"claims.{name}"),
                "verdict": "not yet measured", "seeds": f"none (0 of {cap})", "command": command,
            }]))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


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


# the mark of a section written by a version that decides look by look, the tuned setting beside the paper's
# where the config tunes: an HTML comment, invisible in the rendered report
LOOKS_MARK = "<!-- fedbench.results.claims: looks and tuning -->"
BOUNDARY_MARK = "<!-- fedbench.results.claims: boundary "
"""The mark of a section decided with this version's boundary, followed by its design (:func:`boundary_spec`);
a section with :data:`LOOKS_MARK` but without it was decided under Bonferroni over the looks."""
REREAD = "claims_history.md#the-bonferroni-sections-re-read-at-the-spending-boundary"
"""Where the verdicts of sections decided under Bonferroni are re-read at the spending boundary."""


def boundary_spec(design: Design) -> str:
    """``looks=3,5,7,10 alpha=0.05 spending=hsd(-2)``: what a section's boundary mark records."""
    return f"looks={','.join(map(str, design.looks))} alpha={design.alpha!r} spending={design.spending}"


def section_design(text: str) -> Design | None:
    """The design a section's boundary mark records (None: no mark, decided by an earlier version)."""
    for line in text.splitlines():
        if line.startswith(BOUNDARY_MARK):
            fields = dict(item.split("=", 1) for item in line[len(BOUNDARY_MARK):].removesuffix("-->").split())
            return Design(tuple(int(n) for n in fields["looks"].split(",")), float(fields["alpha"]),
                          spending=fields["spending"])
    return None


def _section(heading: str, rows: pd.DataFrame, config_paths: list[str], note: str, design: Design) -> str:
    """One section: its marks (looks and tuning; the boundary), the command that wrote it, ``note``, the
    claims table (both settings side by side)."""
    rows = rows.reindex(columns=rows.columns.union(["per_seed"], sort=False)).astype({"per_seed": object})
    written = f"Written by `python -m fedbench.results.claims --update {' '.join(config_paths)}` from the runs on disk."
    return "\n".join([f"## {heading}", LOOKS_MARK, f"{BOUNDARY_MARK}{boundary_spec(design)} -->", "",
                      written, *([note] if note else []), "",
                      _shown(rows, reading_column=True).to_markdown(index=False), "", ""])


def section_status(sections: dict[str, str]) -> list[str]:
    """The header's lines on how each section was decided, read from the sections themselves: with this
    version's boundary (they carry :data:`BOUNDARY_MARK`; the boundary per look is listed, one table per
    design), look by look under Bonferroni (:data:`LOOKS_MARK` only; written by an earlier version and
    kept by ``--update``; re-read at the spending boundary in :data:`REREAD`), or before looks and
    tuning (neither mark)."""
    designs = {name: section_design(text) for name, text in sections.items()}
    current = [name for name, design in designs.items() if design is not None]
    bonferroni = [name for name, text in sections.items() if designs[name] is None and LOOKS_MARK in text]
    earlier = [name for name, text in sections.items() if designs[name] is None and LOOKS_MARK not in text]
    lines = []
    by_design: dict[str, list[str]] = {}
    for name in current:
        by_design.setdefault(boundary_spec(designs[name]), []).append(name)
    for names in by_design.values():
        lines += [f"**Decided with the spending boundary: {', '.join(names)}**, "
                  f"{boundary_title(designs[names[0]])}; each look's critical t:", "",
                  boundary_markdown(designs[names[0]]), ""]
    if bonferroni:
        lines += [f"**Decided under Bonferroni over the looks: {', '.join(bonferroni)}** (written by an earlier "
                  "version and kept as measured: each look's interval at 1 − 2α/L for L looks, t(1 − α/L, seeds − 1) its "
                  "critical t).  Their verdicts re-read at the spending boundary from these sections' own numbers, without "
                  f"their runs, and the cells that would need seeds not run: [claims history]({REREAD}).  `--update` "
                  "with a section's config and its runs rewrites it at the spending boundary.", ""]
    if earlier:
        lines += [f"**Measured before claims were decided look by look and before tuning: {', '.join(earlier)}** (one "
                  "look at the config's seeds, a 95 % interval, no equivalence or not-comparable verdict, every method "
                  "at the paper's setting; re-running an analogue's claims, `snakemake claims`, and `--update` rewrites "
                  "its section with both settings side by side).", ""]
    return lines


def write_report(config_paths: Iterable[str | Path], out: str | Path, published: pd.DataFrame, note: str = "",
                 update: bool = False) -> pd.DataFrame:
    """``reports/claims.md``: per paper, every claim of the given config files (:func:`report_rows`), each
    paper's section naming the command that wrote it and ``note``.  ``update``: rewrite only the sections
    of the papers these configs test and keep the report's other sections as they are (each paper's
    analogue is measured on its own, at its own time)."""
    config_paths = [str(path) for path in config_paths]
    tables = [report_rows(path, published) for path in config_paths]
    table = pd.concat(tables, ignore_index=True)
    written: dict[str, tuple[list[pd.DataFrame], list[str], Design]] = {}  # heading -> rows, configs, design
    for path, rows in zip(config_paths, tables):
        config = load_yaml_strict(path)
        for paper in rows.get("paper", pd.Series(dtype=object)).unique():
            heading = config.get("claims_section", PAPER_NAMES[paper])
            parts, paths, _ = written.setdefault(heading, ([], [], claim_design(config, {})))
            parts.append(rows[rows["paper"] == paper])
            paths.append(path)
    sections = report_sections(Path(out).read_text(encoding="utf-8")) if update and Path(out).exists() else {}
    for heading, (parts, paths, design) in written.items():
        sections[heading] = _section(heading, pd.concat(parts, ignore_index=True), paths, note, design)
    papers = [PAPER_NAMES[paper] for paper in ("femam", "fedmr", "flt", "pfedmt", "default")]

    def order(heading: str) -> tuple[int, str]:
        """The papers' order; a named section (``claims_section``) after its paper's own."""
        first = next((i for i, name in enumerate(papers) if heading == name or heading.startswith(f"{name} ")), len(papers))
        return first, "" if heading in papers else heading
    header = [REPORT_TITLE, "",
              "Each paper's section is written by `python -m fedbench.results.claims --update CONFIG...` from the "
              "runs on disk under the config's `results:` directory (none typed in) and names its command; "
              "`--update` rewrites only the sections of the configs given.  *seeds*: the seeds whose runs all exist "
              "(of the design's cap).  A claim with no runs yet says so, with the command that measures it.",
              "", VERDICT_LEGEND, "", *section_status(sections), ""]
    body = [sections[name] for name in sorted(sections, key=order)]
    atomic_write(out, lambda p: Path(p).write_text("\n".join(header) + "".join(body).rstrip("\n") + "\n", encoding="utf-8"))
    return table
