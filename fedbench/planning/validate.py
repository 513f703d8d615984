"""The workflow's full config validation, run before any job (``workflow/rules/common.smk``):
the config files without a repeated key, the JSON schema, the config's own entries
(:func:`fedbench.config.checks.check_entries`), then what needs the results layer: ``published`` links
(to the experiment's grid and to rows of ``config/published_results.csv``), ``paper:`` names and
the papers' ``claims``; given the workplace, what the jobs would hit there (:mod:`fedbench.planning.preflight`:
where results go, whether the data is there, whether the run can end).  Every problem is one line
naming the entry."""

from __future__ import annotations

from fedbench.config.cells import ConfigError
from fedbench.config.checks import check_entries
from fedbench.planning.preflight import PlanEstimate, Workplace, check_workplace
from fedbench.results.claims.spec import ClaimError, check_claims, check_design, design_seeds
from fedbench.results.papers import PAPERS
from fedbench.results.published import PUBLISHED_CSV, link_keys, links, load_published
from fedbench.tuning.trials import check_tuning
from fedbench.config.files import SCHEMA, check_finite, check_schema, load_yaml_strict

__all__ = ["ConfigError", "Workplace", "check_config", "validate_config"]


def validate_config(config: dict, configfiles=(), schema=SCHEMA, published_csv=PUBLISHED_CSV,
                    workplace: Workplace | None = None) -> PlanEstimate | None:
    """Everything checked when the workflow starts, in order: the config files read without a
    repeated key, the (merged) ``config`` against the JSON schema, :func:`check_config`, then, given
    the ``workplace``, :func:`fedbench.planning.preflight.check_workplace`, whose estimate of the plan it
    returns.  Raises a ``ValueError`` (:class:`~fedbench.config.files.ConfigFileError` or
    :class:`ConfigError`) whose message is one line naming the entry."""
    for path in dict.fromkeys(map(str, configfiles)):
        load_yaml_strict(path)
    try:
        check_finite(config)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    check_schema(config, schema)
    check_config(config, published_csv)
    return None if workplace is None else check_workplace(config, workplace)


def check_config(config: dict, published_csv=PUBLISHED_CSV) -> None:
    """Raise :class:`~fedbench.config.cells.ConfigError` naming the first problem and the valid choices:
    the config's own entries, then every experiment's ``published`` block and ``paper``, the links
    resolved against ``published_csv`` (``None``: links are not resolved), and the claims."""
    check_entries(config)
    for experiment, spec in config.get("experiments", {}).items():
        _check_published_links(experiment, spec)
        _check_paper(experiment, spec)
    if published_csv is not None and any(spec.get("published") for spec in config.get("experiments", {}).values()):
        published = load_published(published_csv)
        for experiment, spec in config.get("experiments", {}).items():
            _resolve_published(experiment, spec, published)
    if config.get("claims"):  # the papers' claims (fedbench.results.claims): names, cells, published margins
        try:
            check_claims(config, None if published_csv is None else load_published(published_csv))
            check_design(config)
        except ClaimError as error:
            raise ConfigError(str(error)) from None
    check_tuning(config, design_seeds(config))  # tune: blocks (fedbench.tuning.trials), against every final seed


def _resolve_published(experiment: str, spec: dict, published) -> None:
    """Every link of the experiment's ``published`` block matches rows of the published table;
    otherwise name the first key that matches nothing and the values it could take."""
    block = spec.get("published")
    if not block:
        return
    models = sorted(block.get("models", {})) or [None]
    for link in links(spec):
        for model in models:
            keys = link_keys(spec, link, model)
            rows = published
            for key, value in keys.items():
                matched = rows[rows[key] == value]
                if matched.empty:
                    where = f"experiments.{experiment}.published" + (
                        f".rows.{link.algorithm}.{key}" if key in ("method", "setting") else
                        (".models" if key == "model" and "models" in block else f".{key}")
                    )
                    choices = sorted(map(str, rows[key].unique()))
                    raise ConfigError(
                        f"{where}: {value!r} matches no row of the published results "
                        f"(given the keys before it); valid choices: {', '.join(choices)}"
                    )
                rows = matched


def _check_published_links(experiment: str, spec: dict) -> None:
    """A ``published`` block links only algorithms (and maps only models) of the experiment's grid."""
    block = spec.get("published")
    if not block:
        return
    in_grid = {name for grid in spec.get("grid", []) for name in grid["algorithms"]}
    for algorithm, entries in block.get("rows", {}).items():
        for entry in entries if isinstance(entries, list) else [entries]:
            base = entry.get("relative_to")
            if base is not None and base not in in_grid:
                raise ConfigError(
                    f"experiments.{experiment}.published.rows.{algorithm}.relative_to: {base!r} is not in the "
                    f"experiment's grid algorithms ({', '.join(sorted(in_grid))})"
                )
    for axis, declared in (("rows", "algorithms"), ("models", "models")):
        in_grid = {name for grid in spec.get("grid", []) for name in grid[declared]}
        stray = sorted(set(block.get(axis, {})) - in_grid)
        if stray:
            raise ConfigError(
                f"experiments.{experiment}.published.{axis}: {', '.join(stray)} not in the experiment's grid "
                f"{declared} ({', '.join(sorted(in_grid))})"
            )


def _check_paper(experiment: str, spec: dict) -> None:
    """``paper:`` names a known paper (fedbench.results.papers.PAPERS) and agrees with the
    ``published`` block's paper: an experiment's report category is the paper it is scored against."""
    paper = spec.get("paper")
    if paper is None:
        return
    if paper not in PAPERS:
        raise ConfigError(f"experiments.{experiment}.paper: unknown paper {paper!r}; valid choices: {', '.join(PAPERS)}")
    linked = (spec.get("published") or {}).get("paper")
    if linked is not None and linked != paper:
        raise ConfigError(
            f"experiments.{experiment}.paper: {paper!r} but its published block links to {linked!r}'s numbers; "
            f"one experiment reproduces one paper"
        )
