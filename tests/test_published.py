"""Experiment grids link every algorithm to its published row, and those links resolve."""

import re
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from fedbench.config.cells import expand_cells
from fedbench.planning.validate import check_config
from fedbench.results.published import load_published
from fedbench.results.scorecard import scorecard

REPO = Path(__file__).resolve().parents[1]
GRIDS = sorted((REPO / "config" / "experiments").glob("*.yaml"))


def test_the_grids_checked_are_the_ones_the_readme_ships():
    """GRIDS (and test_papers.SHIPPED) come from a glob: were config/experiments/ moved or emptied, the
    parametrised checks would collect nothing and pass.  docs/paper-experiments.md names every shipped grid."""
    listed = set(re.findall(r"config/experiments/(\w+\.yaml)", (REPO / "docs" / "paper-experiments.md").read_text()))
    assert listed == {f"{paper}{suffix}.yaml" for paper in ("flt", "femam", "fedmr") for suffix in ("", "_offline")} | {"pfedmt.yaml", "fedmr_claims.yaml", "flt_claims.yaml", "flt_claims_mnist.yaml"}
    assert {p.name for p in GRIDS} == listed


@pytest.mark.parametrize("path", GRIDS, ids=lambda p: p.stem)
def test_experiment_grids_are_valid(path):
    config = yaml.safe_load(path.read_text())
    validate(config, str(REPO / "workflow" / "schemas" / "config.schema.yaml"))
    check_config(config)
    assert expand_cells(config)


def test_every_flt_link_resolves_to_one_published_accuracy():
    """Every cell of the FLT grid has its paper row, and the scorecard finds exactly one published
    accuracy per link and model (it raises otherwise)."""
    config = yaml.safe_load((REPO / "config" / "experiments" / "flt.yaml").read_text())
    for name, experiment in config["experiments"].items():
        algorithms = {a for block in experiment["grid"] for a in block["algorithms"]}
        assert set(experiment["published"]["rows"]) == algorithms, name
    card = scorecard(config, [], load_published())
    assert len(card) >= 40 and card["published"].notna().all()
    assert (card["paper"] == "flt").all()


@pytest.mark.slow  # snakemake -n over a whole paper grid (20-30 s each)
def test_flt_paper_grid_plans_cleanly(tmp_path):
    from test_workflow import planned_jobs, snakemake

    process = snakemake(tmp_path, "-n", "--config", "check_data=False", configfile=REPO / "config" / "experiments" / "flt.yaml")
    jobs = planned_jobs(process.stdout)
    # every FLT cell twice (the paper's reading and the authors' code's, 150 cells each)
    assert jobs["pretrain_encoder"] == 4 and jobs["train_cell"] == 2 * 150 + 16 * 3 * 3 and jobs["results_table"] == 1


@pytest.mark.slow  # snakemake -n over a whole paper grid (20-30 s each)
def test_pfedmt_paper_grid_plans_cleanly(tmp_path):
    """Table 1: 4 experiments x 6 algorithms (Per-FedAvg twice: the code's and the paper's
    personalisation; pFedMe twice: theta and w_{i,R}) x 5 seeds; only_experiments keeps the
    offline Synthetic half, which plans without ``check_data: false`` (no dataset file to check).
    The paper grids' datasets are not in this checkout: ``check_data: false``."""
    from test_workflow import planned_jobs, snakemake

    config = REPO / "config" / "experiments" / "pfedmt.yaml"
    jobs = planned_jobs(snakemake(tmp_path, "-n", "--config", "check_data=False", configfile=config).stdout)
    assert jobs["train_cell"] == 4 * 6 * 5 and jobs["partition"] == 10 and jobs["scorecard"] == 1 and jobs["accuracy_curves"] == 4
    offline = planned_jobs(snakemake(tmp_path, "-n", "--config", "only_experiments=[synthetic_mlr,synthetic_dnn]", configfile=config).stdout)
    assert offline["train_cell"] == 2 * 6 * 5 and offline["partition"] == 5 and offline["scorecard"] == 1


def test_every_fedmr_table1_number_is_linked_once():
    """All 216 published numbers of FedMR's Table 1 (27 settings x 8 methods), each by exactly one
    experiment and model (the scorecard raises on a link matching none or several)."""
    config = yaml.safe_load((REPO / "config" / "experiments" / "fedmr.yaml").read_text())
    for name, experiment in config["experiments"].items():
        algorithms = {a for block in experiment["grid"] for a in block["algorithms"]}
        assert set(experiment["published"]["rows"]) == algorithms, name
    card = scorecard(config, [], load_published())
    published = load_published()
    table = published[(published["paper"] == "fedmr") & (published["table"] == "Table 1")]
    assert len(table) == 216 and len(card) == 216 and card["published"].notna().all()
    keys = ["dataset", "model", "partition", "method", "setting"]
    assert set(map(tuple, card[keys].values)) == set(map(tuple, table[keys].values))


@pytest.mark.slow  # snakemake -n over a whole paper grid (20-30 s each)
def test_fedmr_paper_grid_plans_cleanly(tmp_path):
    """216 cells x 3 seeds; 9 (dataset, partition) pairs x 3 seeds partitions; one scorecard."""
    from test_workflow import planned_jobs, snakemake, write_config

    config = yaml.safe_load((REPO / "config" / "experiments" / "fedmr.yaml").read_text())
    jobs = planned_jobs(snakemake(tmp_path, "-n", "--config", "check_data=False", "allow_long=True",
                                  configfile=write_config(tmp_path / "fedmr.yaml", config)).stdout)
    assert jobs["train_cell"] == 216 * 3 and jobs["partition"] == 9 * 3 and jobs["scorecard"] == 1
