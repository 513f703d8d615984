"""FLT's fine-tuned client embeddings kept between runs (fedbench.algorithms.embedding_cache): a run that
reads them is the run that computed them, bit for bit, and the key tells apart what would differ."""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pytest
import torch

import fedbench.algorithms.flt as flt_module
from fedbench.algorithms.embedding_cache import cached_embeddings, embedding_key
from fedbench.algorithms.flt_encoders import embed_clients, load_encoder
from fedbench.config.cells import Cell
from fedbench.data import load_dataset
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.models.convae import autoencoder_spec, build_autoencoder
from fedbench.planning.validate import check_config
from fedbench.run.job import cell_job
from fedbench.run.partition_job import build_partition
from fedbench.run.stages import run_cell

DIGITS28 = {"source": "digits", "size": 28, "test_fraction": 0.2}
FINETUNE = {"finetune_epochs": 1, "lr": 1e-3, "batch_size": 8}


def save_encoder(path, seed=0):
    torch.manual_seed(seed)
    spec = autoencoder_spec("auto", (1, 28, 28))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": build_autoencoder(spec).state_dict(), "spec": spec}, path)
    return path


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    encoder_file = save_encoder(tmp_path_factory.mktemp("enc") / "enc.pt")
    x = torch.from_numpy(load_dataset(DIGITS28).x[:40])
    lists = [np.arange(0, 15), np.arange(15, 22), np.arange(22, 40)]
    index = ClientIndex.from_lists(lists, "cpu")
    return encoder_file, FederatedData(x, torch.zeros(40, dtype=torch.long), index, index, 10)


def embed(encoder_file, data, generator):
    return embed_clients(load_encoder(encoder_file), data, torch.arange(3), generator=generator, **FINETUNE)


def test_a_read_gives_the_computed_embeddings_and_the_generator_where_computing_left_it(setting, tmp_path):
    encoder_file, data = setting
    first = torch.Generator().manual_seed(7)
    key = embedding_key(encoder_file, data, torch.arange(3), first, FINETUNE)
    computed = cached_embeddings(tmp_path, key, first, lambda: embed(encoder_file, data, first))
    assert (tmp_path / "embeddings" / f"{key}.npz").is_file()
    assert not [p for p in (tmp_path / "embeddings").iterdir() if p.name.startswith(".")]  # nothing half-written left

    again = torch.Generator().manual_seed(7)
    assert embedding_key(encoder_file, data, torch.arange(3), again, FINETUNE) == key

    def must_not_run():
        raise AssertionError("a stored key was computed again")

    read = cached_embeddings(tmp_path, key, again, must_not_run)
    assert [e.shape for e in read] == [(15, 128), (7, 128), (18, 128)]
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(read, computed))
    assert torch.equal(again.get_state(), first.get_state())  # the next draw is the one computing would have made
    assert torch.equal(torch.rand(3, generator=again), torch.rand(3, generator=first))


def test_the_key_changes_with_whatever_the_embeddings_depend_on(setting, tmp_path):
    encoder_file, data = setting
    clients = torch.arange(3)

    def key(file=encoder_file, data=data, clients=clients, seed=7, **settings):
        return embedding_key(file, data, clients, torch.Generator().manual_seed(seed), {**FINETUNE, **settings})

    one_pixel = FederatedData(data.x.clone(), data.y, data.train, data.test, 10)
    one_pixel.x[30, 0, 5, 5] += 0.5  # a training image of client 2
    fewer_rows = FederatedData(data.x, data.y, ClientIndex(data.train.index, torch.tensor([15, 7, 17])), data.test, 10)
    other_encoder = save_encoder(tmp_path / "other.pt", seed=1)
    variants = [key(seed=8), key(finetune_epochs=2), key(lr=1e-2), key(data=one_pixel), key(data=fewer_rows),
                key(file=other_encoder), key(clients=torch.tensor([2, 0, 1]))]
    assert len({key(), *variants}) == 1 + len(variants)
    unused_pixel = FederatedData(data.x.clone(), data.y, ClientIndex(data.train.index[:2], data.train.counts[:2]), data.test, 10)
    unused_pixel.x[30] += 0.5  # a row of client 2, whom this key leaves out
    assert key(data=unused_pixel, clients=torch.arange(2)) == key(clients=torch.arange(2))


def test_an_unreadable_file_is_computed_again_and_replaced(setting, tmp_path, caplog):
    encoder_file, data = setting
    generator = torch.Generator().manual_seed(7)
    key = embedding_key(encoder_file, data, torch.arange(3), generator, FINETUNE)
    stored = tmp_path / "embeddings" / f"{key}.npz"
    stored.parent.mkdir()
    stored.write_bytes(b"not an npz")
    with caplog.at_level(logging.WARNING, logger="fedbench"):
        computed = cached_embeddings(tmp_path, key, generator, lambda: embed(encoder_file, data, generator))
    assert "unreadable" in caplog.text
    with np.load(stored) as f:
        assert np.array_equal(f["rows"], np.concatenate(computed))


CONFIG = {
    "device": "cpu",
    "seeds": [0],
    "datasets": {"digits28": DIGITS28},
    "encoders": {"enc": {"dataset": "digits28"}},
    "partitions": {"dir": {"kind": "dirichlet", "alpha": 0.5, "num_clients": 6, "test_fraction": 0.25}},
    "models": {"mlp": {"arch": "mlp_dropout", "hidden": 16}},
    "algorithms": {"flt_enc2": {"method": "flt", "encoder": "enc", "finetune_epochs": 1, "k": 2, "clusters": 2}},
    "experiments": {"tiny": {
        "protocol": "mean_client_last",
        "training": {"rounds": 3, "local_epochs": 1, "batch_size": 16, "lr": 0.05, "momentum": 0.5,
                     "participation": 0.5, "eval_every": 1},
        "grid": [{"datasets": ["digits28"], "partitions": ["dir"], "models": ["mlp"], "algorithms": ["flt_enc2"]}],
    }},
}


def test_an_flt_run_that_reads_its_embeddings_writes_what_one_that_fine_tunes_writes(tmp_path, monkeypatch):
    """FLT (Enc2) twice on one seed: the first fine-tunes and keeps the embeddings, the second reads them
    (fine-tuning is made to fail there) -- and both runs' numbers, history and per-client files agree
    with a third run that keeps nothing (no cache)."""
    config = {**CONFIG, "results": str(tmp_path / "results")}
    check_config(config)
    save_encoder(tmp_path / "results" / "encoders" / "enc.pt")
    partition = tmp_path / "p.npz"
    build_partition(config, "digits28", "dir", 0, partition, tmp_path / "p.json")
    job = cell_job(config, Cell("tiny", "digits28", "dir", "mlp", "flt_enc2", 0))
    first = run_cell(job, partition, tmp_path / "first")
    assert len(list((tmp_path / "results" / "cache" / "embeddings").glob("*.npz"))) == 1

    def no_finetuning(*args, **kwargs):
        raise AssertionError("fine-tuned again although the embeddings were kept")

    with monkeypatch.context() as patch:
        patch.setattr(flt_module, "embed_clients", no_finetuning)
        second = run_cell(job, partition, tmp_path / "second")
    with monkeypatch.context() as patch:
        original = flt_module.FLT.relatedness

        def without_cache(self, fed):
            fed.cache = None
            return original(self, fed)

        patch.setattr(flt_module.FLT, "relatedness", without_cache)
        plain = run_cell(job, partition, tmp_path / "plain")
    keys = ("final", "global", "num_clients", "seed")
    assert {k: first[k] for k in keys} == {k: second[k] for k in keys} == {k: plain[k] for k in keys}
    for name in ("history.csv", "clients.csv"):
        frames = [pd.read_csv(tmp_path / run / name) for run in ("first", "second", "plain")]
        frames = [frame.drop(columns=[c for c in frame if "time" in c]) for frame in frames]
        pd.testing.assert_frame_equal(frames[0], frames[1])
        pd.testing.assert_frame_equal(frames[0], frames[2])
    assert json.loads((tmp_path / "second" / "metrics.json").read_text())["final"] == first["final"]


def test_the_cost_report_counts_a_kept_fine_tuning_once():
    """``make cost``: the runs that share a fine-tuning (here two experiments of the same cells) pay it once;
    FLT without fine-tuning (Enc1) and other seeds pay their own."""
    import fedbench.planning.cost_report as cost_report
    from fedbench.config.cells import TRAINING_DEFAULTS, resolve_cell
    from fedbench.cost import throughputs
    from fedbench.cost.server import relatedness_seconds

    experiment = CONFIG["experiments"]["tiny"]
    grid = {**experiment["grid"][0], "algorithms": ["flt_enc2", "flt_enc1"]}
    config = {**CONFIG, "results": "unused", "seeds": [0, 1],
              "algorithms": {**CONFIG["algorithms"], "flt_enc1": {"method": "flt", "encoder": "enc", "k": 2, "clusters": 2}},
              "experiments": {name: {**experiment, "grid": [grid]} for name in ("first", "second")}}
    check_config(config)
    costs = cost_report.config_costs(config)
    cell = Cell("second", "digits28", "dir", "mlp", "flt_enc2", 0)
    spec = resolve_cell(config, cell)
    spec["training"] = {**TRAINING_DEFAULTS, **spec["training"]}
    kept = relatedness_seconds(spec, cost_report.cell_shape(config, cell, spec), throughputs(), "cpu")
    assert kept > 0 and costs["first"]["jobs"] == costs["second"]["jobs"] == 4
    assert costs["first"]["hours"]["cpu"] - costs["second"]["hours"]["cpu"] == pytest.approx(2 * kept / 3600)
    assert cost_report.shared_embeddings(spec, cell) == ("enc", 1, "digits28", "dir", 0, 0.0)
    assert cost_report.shared_embeddings(resolve_cell(config, Cell("second", "digits28", "dir", "mlp", "flt_enc1", 0)),
                                         cell) is None
