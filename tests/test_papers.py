"""The report by paper: which paper an experiment reproduces, the config checks on it, and one
paper's rows of the results table and the scorecard."""

import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedbench.config.cells import ConfigError
from fedbench.planning.validate import check_config
from fedbench.results.papers import (
    PAPERS, SHARED, category, config_papers, experiment_paper, paper_experiments, shared_category, write_paper_rows,
)
from fedbench.config.files import ConfigFileError, check_schema

REPO = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((REPO / "tests" / "data" / "tiny_config.yaml").read_text())
SHIPPED = [REPO / "config" / "config.yaml", *sorted((REPO / "config" / "experiments").glob("*.yaml"))]


def two_experiments() -> dict:
    """The tiny config with a second experiment of the same grid linked to FLT's numbers."""
    config = copy.deepcopy(TINY)
    linked = copy.deepcopy(config["experiments"]["tiny"])
    linked["published"] = {"paper": "flt", "table": "Table 1", "dataset": "MNIST", "partition": "scenario1",
                           "rows": {"fedavg": {"method": "FedAvg", "setting": "M=100; C=5; rho=0.2; E=1; T=100"}}}
    config["experiments"]["linked"] = linked
    return config


def test_an_experiment_belongs_to_its_paper_key_else_its_published_paper_else_the_default_suite():
    config = two_experiments()
    assert experiment_paper(config, "tiny") == "default"  # no key, no published block
    assert experiment_paper(config, "linked") == "flt"  # the published block's paper
    config["experiments"]["tiny"]["paper"] = "femam"
    assert experiment_paper(config, "tiny") == "femam"  # the key
    assert config_papers(config) == ["flt", "femam"]  # PAPERS' order, not the config's
    assert paper_experiments(config, "femam") == ["tiny"]
    assert [category(p) for p in config_papers(config)] == ["FLT", "FeMAM"]


def test_shared_outputs_go_to_the_one_paper_that_uses_them_else_to_the_shared_category():
    assert shared_category(["flt", "flt"]) == "FLT"
    assert shared_category(["flt", "femam"]) == SHARED
    assert shared_category([]) == SHARED  # a partition only partition_grid builds


def test_a_paper_key_that_contradicts_the_published_block_or_is_unknown_is_a_config_error():
    config = two_experiments()
    config["experiments"]["linked"]["paper"] = "flt"
    check_config(config, published_csv=None)
    config["experiments"]["linked"]["paper"] = "pfedmt"
    with pytest.raises(ConfigError, match=r"experiments\.linked\.paper: 'pfedmt' but its published block links to 'flt'"):
        check_config(config, published_csv=None)
    config["experiments"]["linked"]["paper"] = "fedsam"
    with pytest.raises(ConfigError, match=r"unknown paper 'fedsam'; valid choices: default, flt, pfedmt, femam, fedmr"):
        check_config(config, published_csv=None)
    with pytest.raises(ConfigFileError, match="fedsam"):
        check_schema(config)


def test_the_schema_lists_exactly_the_papers_of_the_report():
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    experiment = schema["properties"]["experiments"]["additionalProperties"]["properties"]
    assert experiment["paper"]["enum"] == list(PAPERS)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_experiment_names_its_paper(path):
    """Explicit, not guessed: each experiment of the shipped configs says which paper it reproduces,
    the one its published links point to (the default suite: ``default``)."""
    config = yaml.safe_load(path.read_text())
    for name, spec in config["experiments"].items():
        assert "paper" in spec, f"{path.name}: experiments.{name} has no paper key"
        assert spec["paper"] == (spec.get("published") or {}).get("paper", spec["paper"])
    papers = {spec["paper"] for spec in config["experiments"].values()}
    assert papers == ({"default"} if path.name == "config.yaml" else {path.stem.split("_")[0]})


def test_a_papers_tables_hold_only_its_experiments_rows(tmp_path):
    """A hand-made results table of two experiments: the paper's CSV keeps its experiment's rows
    unchanged, its Markdown has only that experiment's section."""
    results = pd.DataFrame({
        "experiment": ["tiny", "tiny", "linked"], "protocol": "mean_client_last", "dataset": "digits",
        "partition": ["iid", "dir0.5", "iid"], "model": "mlr", "algorithm": "fedavg", "seeds": 2,
        "accuracy_mean": [90.0, 80.0, 70.0], "accuracy_std": [1.0, 2.0, 3.0],
        "accuracy": ["90.00 ± 1.00", "80.00 ± 2.00", "70.00 ± 3.00"],
        "ari_mean": float("nan"), "ari_std": float("nan"), "nmi_mean": float("nan"), "nmi_std": float("nan"),
    })
    results.to_csv(tmp_path / "results.csv", index=False)
    rows = write_paper_rows("results", tmp_path / "results.csv", ["tiny"], tmp_path / "p.csv", tmp_path / "p.md")
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "p.csv"), pd.read_csv(tmp_path / "results.csv").iloc[:2])
    assert list(rows["partition"]) == ["iid", "dir0.5"]
    markdown = (tmp_path / "p.md").read_text()
    assert "## tiny" in markdown and "## linked" not in markdown
    assert "90.00 ± 1.00" in markdown and "80.00 ± 2.00" in markdown and "70.00 ± 3.00" not in markdown


def test_a_scorecard_without_a_model_keeps_its_rows_through_the_csv(tmp_path):
    """FLT's published rows have no model: the paper's scorecard.md, written from scorecard.csv read
    back from disk, is the whole config's Markdown of the same rows (blank cells read back as NaN
    and pandas' groupby dropped those rows before)."""
    from test_scorecard import FLT_PUBLISHED, flt_experiment

    from fedbench.results.scorecard import to_markdown, write_scorecard

    experiment = flt_experiment({"fedavg": {"method": "FedAvg", "setting": "E=1"}})
    card = write_scorecard({"experiments": {"e": experiment}}, [], FLT_PUBLISHED, tmp_path / "card.csv", tmp_path / "card.md")
    assert len(card) == 2 and set(card["model"]) == {""}
    rows = write_paper_rows("scorecard", tmp_path / "card.csv", ["e"], tmp_path / "p.csv", tmp_path / "p.md")
    assert len(rows) == 2
    assert (tmp_path / "p.md").read_text() == to_markdown(card) == (tmp_path / "card.md").read_text()
    assert sum(line.startswith("| FedAvg ") for line in (tmp_path / "p.md").read_text().splitlines()) == 2
