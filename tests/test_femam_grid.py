"""FeMAM's paper grid: every one of its 382 published numbers linked, the plan's size, and bad
input stopped before any job."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from fedbench.config.cells import ConfigError, expand_cells
from fedbench.planning.validate import check_config
from fedbench.models import MODELS
from fedbench.results.published import links, load_published, published_rows
from fedbench.results.scorecard import scorecard

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "config" / "experiments" / "femam.yaml"


def femam_config() -> dict:
    """The grid; where ResNet-9 is not registered (it comes with its own change) the MLP stands in,
    which changes no cell, link or plan count."""
    config = yaml.safe_load(GRID.read_text())
    if "resnet9" not in MODELS:
        config["models"]["resnet9"] = {"arch": "mlp"}
    return config


def test_every_published_femam_number_is_linked_once_per_metric():
    config = femam_config()
    published = load_published()
    femam = published[published["paper"] == "femam"]
    linked = []
    for experiment in config["experiments"].values():
        for link in links(experiment):
            rows = published_rows(experiment, link, published, "resnet9")
            assert len(rows[rows["metric"] == link.metric]) == 1, link
            linked.append(rows)
    linked = pd.concat(linked)
    assert len(femam) == 382
    assert set(linked.index) == set(femam.index)
    card = scorecard(config, [], published)  # raises if a link matches no published number, or several
    # every metric of a linked row is scored (accuracy and macro-F1): all 382 numbers, each once but
    # the "IID" column (2 x 10 methods x 2 metrics), scored on both of its partitions (paper IID and
    # Dirichlet(10)); the two Tiny ImageNet client-wise cells Table 1 prints differently from Table
    # C.3 share a row
    also = {int(r) for r in card["also_published_row"] if r}
    assert len(card) == 382 + 40 - 2 and len(also) == 2 and card["published"].notna().all()
    iid = card[card["partition"] == "iid"]
    assert len(iid) == 80 and set(iid["config_partition"]) == {"femam_iid_cifar", "femam_dir10_cifar", "femam_iid_tiny", "femam_dir10_tiny"}
    assert set(card["published_row"]) | also == set(femam.index)


def test_cells_of_the_grid():
    config = femam_config()
    check_config(config)
    cells = expand_cells(config)
    # 14 dataset x partition experiments (the two "IID" ones on two partitions: 16 cells) x 11
    # algorithms (10 of the paper + the code's FeMAM), + 4 Table 2 ablations, x 4 seeds (the paper's 4 runs)
    assert len(cells) == (16 * 11 + 4) * 4
    assert {c.algorithm for c in cells if c.partition == "femam_ml3.6.11" and c.dataset == "cifar100"} >= {
        "femam_no1", "femam_no5", "femam_no34", "femam_no234"}


@pytest.mark.slow  # snakemake -n over a whole paper grid (20-30 s each)
def test_femam_paper_grid_plans_cleanly(tmp_path):
    from test_workflow import planned_jobs, snakemake

    configfile = tmp_path / "femam.yaml"
    configfile.write_text(yaml.safe_dump(femam_config(), sort_keys=False))
    # its datasets are not in this checkout, and its Tiny ImageNet cells run for weeks on a CPU
    jobs = planned_jobs(snakemake(tmp_path, "-n", "--config", "check_data=False", "allow_long=True", configfile=configfile).stdout)
    assert jobs["train_cell"] == (16 * 11 + 4) * 4 and jobs["partition"] == 16 * 4 and jobs["scorecard"] == 1


def _bad(config: dict, change) -> str:
    change(config)
    with pytest.raises(ConfigError) as error:
        check_config(config)
    return str(error.value)


def test_bad_femam_input_is_named_before_any_job():
    message = _bad(femam_config(), lambda c: c["algorithms"]["femam"].update(structure=[]))
    assert "algorithms.femam" in message and "at least 1 level" in message
    message = _bad(femam_config(), lambda c: c["algorithms"]["femam"].update(pruned_levels="leaves"))
    assert "pruned_levels" in message and "valid parameters" in message
    message = _bad(femam_config(), lambda c: c["algorithms"]["femam"].update(combine="average"))
    assert "algorithms.femam" in message and "combine" in message
    message = _bad(femam_config(), lambda c: c["partitions"]["femam_ml2.5.9"].update(classes_per_cluster=[19, 7, 4]))
    assert "femam_ml2.5.9" in message and "needs 109 classes" in message and "has 100" in message


def test_bad_femam_structure_stops_snakemake(tmp_path):
    from test_workflow import snakemake

    config = femam_config()
    config["partitions"]["femam_ml3.6.11"]["classes_per_cluster"] = [14, 6, 3]
    configfile = tmp_path / "bad.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    process = snakemake(tmp_path, "-n", configfile=configfile, check=False)
    assert process.returncode != 0 and "femam_ml3.6.11" in process.stdout and "needs 111 classes" in process.stdout
    assert not (tmp_path / "results").exists()
