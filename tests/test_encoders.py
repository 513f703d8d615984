"""FLT's encoder: the ConvAE (paper Table 13), pretraining, the encoder file, client embeddings with
vectorised per-client fine-tuning (checked against a per-client loop), the digits source's
FLT options, the ``pretrain_encoder`` rule and the config checks."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate
from conftest import coloured_pixels
from test_workflow import REPO, TINY_CONFIG, planned_jobs, snakemake, write_config

from fedbench.algorithms import ALGORITHMS
from fedbench.config.cells import ConfigError
from fedbench.planning.validate import check_config
from fedbench.data import load_dataset
from fedbench.algorithms.flt_encoders import embed_clients, load_encoder, plot_loss_curve, pretrain_encoder
from fedbench.engine.batches import make_batch_plan
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.models.convae import ConvAE, autoencoder_spec, build_autoencoder

DIGITS28 = {"source": "digits", "size": 28, "test_fraction": 0.2}
ENCODER = {"dataset": "digits28", "classes": [0, 1, 2, 3], "epochs": 4, "max_samples": 300, "batch_size": 16, "lr": 3e-3}


def encoder_config(**encoder) -> dict:
    return {"device": "cpu", "datasets": {"digits28": DIGITS28}, "encoders": {"enc": {**ENCODER, **encoder}}}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    out = tmp_path_factory.mktemp("encoder")
    curve = pretrain_encoder(encoder_config(), "enc", out / "enc.pt", out / "enc_loss.csv")
    return out, curve


# ---- the ConvAE -------------------------------------------------------------------------


def test_convae_grey_is_table_13():
    model = build_autoencoder(autoencoder_spec("auto", (1, 28, 28)))
    assert sum(p.numel() for p in model.parameters()) == 51_577  # Table 13's total
    x = torch.rand(5, 1, 28, 28)
    assert model(x).shape == x.shape
    assert model.encode(x).shape == (5, 128)
    assert model(x).min() >= 0 and model(x).max() <= 1  # sigmoid output
    assert [type(m).__name__ for m in model.encoder] == [
        "Conv2d", "ReLU", "MaxPool2d", "Conv2d", "ReLU", "MaxPool2d", "Flatten", "Linear"]


def test_convae_colour_and_auto():
    spec = autoencoder_spec("auto", (3, 32, 32))
    assert spec["arch"] == "convae_colour" and spec["output"] == "none"
    model = build_autoencoder(spec)
    x = torch.randn(2, 3, 32, 32)
    assert model(x).shape == x.shape and model.encode(x).shape == (2, 128)
    assert model.encoder[-1].in_features == 512
    assert build_autoencoder(autoencoder_spec("convae", (1, 8, 8), latent_dim=16)).encode(torch.zeros(1, 1, 8, 8)).shape == (1, 16)
    with pytest.raises(ValueError, match="divisible by 4"):
        ConvAE(1, 30)


# ---- pretraining and the encoder file ---------------------------------------------------


def test_pretraining_reduces_the_reconstruction_loss(pretrained):
    out, curve = pretrained
    written = pd.read_csv(out / "enc_loss.csv")
    assert list(written.columns) == ["epoch", "train_loss", "test_loss", "lr"]
    assert list(written["epoch"]) == [0, 1, 2, 3, 4]
    assert written["train_loss"].iloc[-1] < 0.5 * written["train_loss"].iloc[0]
    assert written["test_loss"].iloc[-1] < 0.5 * written["test_loss"].iloc[0]  # digits28 has a test split
    pd.testing.assert_frame_equal(written, curve, check_dtype=False)
    assert not list(out.glob(".*tmp*"))  # atomic writes leave no temporaries


def test_loss_curve_figure_draws_the_train_and_test_losses(pretrained, tmp_path, saved_figures):
    """The pretraining figure: train and test MSE against epoch (log scale), one line each, from the CSV."""
    out, curve = pretrained
    plot_loss_curve(out / "enc_loss.csv", tmp_path / "enc_loss.png")
    (ax,) = saved_figures[-1].axes
    assert [line.get_label() for line in ax.lines] == ["train", "test"]
    for line, column in zip(ax.lines, ("train_loss", "test_loss")):
        assert list(line.get_xdata()) == list(curve["epoch"])
        np.testing.assert_allclose(line.get_ydata(), curve[column], rtol=1e-12)
    assert (ax.get_yscale(), ax.get_title()) == ("log", "enc")


def test_load_encoder_round_trips(pretrained):
    out, curve = pretrained
    payload = torch.load(out / "enc.pt", weights_only=True)
    assert payload["spec"]["arch"] == "convae" and payload["input_shape"] == [1, 28, 28]
    encoder = load_encoder(out / "enc.pt")
    assert isinstance(encoder, ConvAE) and not encoder.training
    for name, value in encoder.state_dict().items():
        assert torch.equal(value, payload["state_dict"][name])
    x = torch.from_numpy(load_dataset(DIGITS28).x[:50])
    with torch.no_grad():
        loss = F.mse_loss(encoder(x), x).item()
    assert loss < curve["train_loss"].iloc[0]


def test_pretraining_is_deterministic(pretrained, tmp_path):
    out, _ = pretrained
    pretrain_encoder(encoder_config(), "enc", tmp_path / "enc.pt", tmp_path / "enc_loss.csv")
    assert (tmp_path / "enc_loss.csv").read_text() == (out / "enc_loss.csv").read_text()
    first, again = load_encoder(out / "enc.pt").state_dict(), load_encoder(tmp_path / "enc.pt").state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)


# ---- client embeddings --------------------------------------------------------------------


def federation(x: torch.Tensor, sizes: list[int]) -> FederatedData:
    """Clients owning consecutive rows of ``x``, ``sizes[k]`` each (train = test)."""
    bounds = np.cumsum([0, *sizes])
    lists = [np.arange(a, b) for a, b in itertools.pairwise(bounds)]
    index = ClientIndex.from_lists(lists, "cpu")
    return FederatedData(x, torch.zeros(len(x), dtype=torch.long), index, index, num_classes=10)


def reference_embeddings(encoder, data, clients, epochs, lr, batch_size, seed, optimizer):
    """The per-client loop: a copy of the ConvAE, torch.optim on the plan's batches, then encode."""
    plan = make_batch_plan(data.train.counts[clients], epochs, batch_size, torch.Generator().manual_seed(seed))
    out = []
    for j, c in enumerate(clients.tolist()):
        model = copy.deepcopy(encoder)
        opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=lr)
        own = data.train.index[c, : data.train.counts[c]]
        for batch in plan.client_batches(j):
            xb = data.x[own[batch]]
            loss = F.mse_loss(model(xb), xb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            out.append(model.encode(data.x[own]).numpy())
    return out


def test_embeddings_without_finetuning_equal_the_encoder(pretrained):
    encoder = load_encoder(pretrained[0] / "enc.pt")
    x = torch.from_numpy(load_dataset(DIGITS28).x[:60])
    data = federation(x, [25, 0, 35])
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    emb = embed_clients(encoder, data, torch.tensor([2, 0, 1]), finetune_epochs=0, lr=1e-3, batch_size=10, generator=generator)
    assert torch.equal(generator.get_state(), state)  # J = 0 draws nothing
    assert [e.shape for e in emb] == [(35, 128), (25, 128), (0, 128)]
    with torch.no_grad():
        np.testing.assert_allclose(emb[0], encoder.encode(x[25:]).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(emb[1], encoder.encode(x[:25]).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_vectorised_finetuning_equals_the_per_client_loop(pretrained, optimizer):
    # float64, so that Adam's normalisation does not amplify float32 rounding between the two paths
    encoder = load_encoder(pretrained[0] / "enc.pt").double()
    before = copy.deepcopy(encoder.state_dict())
    x = torch.from_numpy(load_dataset(DIGITS28).x[:80]).double()
    data = federation(x, [23, 7, 40, 10])
    clients = torch.tensor([2, 0, 1])  # unequal step counts (4, 3 and 1 batches per epoch)
    lr = 1e-2 if optimizer == "adam" else 0.5
    emb = embed_clients(encoder, data, clients, finetune_epochs=2, lr=lr, batch_size=10,
                        generator=torch.Generator().manual_seed(5), optimizer=optimizer, chunk_size=2)
    expected = reference_embeddings(encoder, data, clients, 2, lr, 10, 5, optimizer)
    untuned = embed_clients(encoder, data, clients, finetune_epochs=0, lr=lr, batch_size=10, generator=None)
    for got, want, plain in zip(emb, expected, untuned):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
        assert np.abs(got - plain).max() > 1e-3  # the fine-tuning did move the encoder
    assert all(torch.equal(v, encoder.state_dict()[k]) for k, v in before.items())  # input left alone
    one_chunk = embed_clients(encoder, data, clients, finetune_epochs=2, lr=lr, batch_size=10,
                              generator=torch.Generator().manual_seed(5), optimizer=optimizer)
    for a, b in zip(emb, one_chunk):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


def test_embeddings_in_passes_of_512_images_equal_passes_of_4096_bit_for_bit():
    """Embedding runs 512 images a pass (``ENCODE_ROWS``; 4096 until 2e2b0e1, whose activations left the
    caches): the same embeddings bit for bit, with one encoder (FLT Enc1) and with every client's own
    fine-tuned copy (Enc2: 100 clients, 5 images each a pass instead of 40)."""
    import fedbench.algorithms.flt_encoders as flt_encoders

    torch.manual_seed(0)
    encoder = ConvAE().eval()
    gen = torch.Generator().manual_seed(1)
    data = federation(torch.rand(6000, 1, 28, 28, generator=gen), [60] * 100)
    clients = torch.arange(100)
    params = {k: v.detach().unsqueeze(0).repeat(100, *[1] * v.dim()) + 0.01 * torch.randn(100, *v.shape, generator=gen)
              for k, v in encoder.named_parameters()}
    now = flt_encoders._encode_stacked(encoder, params, data, clients)
    before = flt_encoders._encode_stacked(encoder, params, data, clients, samples=4096)
    assert flt_encoders.ENCODE_ROWS == 512 and all(np.array_equal(a, b) for a, b in zip(now, before))
    one = flt_encoders._encode_one(encoder, data, clients)
    assert all(np.array_equal(a, b) for a, b in zip(one, flt_encoders._encode_one(encoder, data, clients, batch=4096)))


# ---- the digits source's FLT options ------------------------------------------------------


def test_digits_upsampled_with_an_official_test_split():
    plain = load_dataset({"source": "digits"})
    assert plain.x.shape == (1797, 1, 8, 8) and plain.test_mask is None  # defaults unchanged
    big = load_dataset(DIGITS28)
    assert big.x.shape == (1797, 1, 28, 28) and big.x.dtype == np.float32
    assert 0 <= big.x.min() and big.x.max() <= 1
    assert np.array_equal(big.y, plain.y)
    assert big.test_mask.sum() == 360  # ceil(0.2 * 1797)
    shares = np.bincount(big.y[big.test_mask], minlength=10) / np.bincount(big.y, minlength=10)
    assert np.allclose(shares, 0.2, atol=0.02)  # stratified
    assert np.array_equal(load_dataset(DIGITS28).test_mask, big.test_mask)  # fixed split
    assert np.allclose(big.x.mean((1, 2, 3)), plain.x.mean((1, 2, 3)), atol=0.05)  # same images, resampled


# ---- config checks and the rule -----------------------------------------------------------


def tiny_with_encoder() -> dict:
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["datasets"]["digits28"] = DIGITS28
    config["encoders"] = {"enc": {**ENCODER, "epochs": 2, "max_samples": 100, "batch_size": 32}}
    return config


def test_config_check_rejects_undeclared_encoder_and_dataset():
    config = tiny_with_encoder()
    check_config(config)
    config["algorithms"]["flt"] = {"method": "flt", "encoder": "nope"}  # FLT registers encoder -> encoders (refers)
    with pytest.raises(ConfigError, match=r"algorithms\.flt\.encoder: 'nope' is not declared under 'encoders'; declared: enc"):
        check_config(config)
    config["algorithms"]["flt"]["encoder"] = "enc"
    config["algorithms"]["fedavg"]["encoder"] = "enc"  # a method without that parameter
    with pytest.raises(ConfigError, match=r"algorithm 'fedavg' has no parameter 'encoder'"):
        check_config(config)
    config = tiny_with_encoder()
    config["encoders"]["enc"]["dataset"] = "fmnist"
    with pytest.raises(ConfigError, match=r"encoders\.enc\.dataset: 'fmnist' is not declared under 'datasets'"):
        check_config(config)


def test_schema_checks_encoder_entries():
    schema = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
    validate(tiny_with_encoder(), schema)
    config = tiny_with_encoder()
    config["encoders"]["enc"]["learning_rate"] = 0.1
    with pytest.raises(WorkflowError, match="learning_rate"):
        validate(config, schema)


def test_rule_pretrains_the_encoder(tmp_path):
    configfile = write_config(tmp_path / "config.yaml", tiny_with_encoder())
    snakemake(tmp_path, "--cores", "1", "encoders", configfile=configfile)
    out = tmp_path / "results" / "encoders"
    assert {p.name for p in out.iterdir()} == {"enc.pt", "enc_loss.csv", "enc_loss.png"}
    assert coloured_pixels(out / "enc_loss.png") > 1000  # the two curves are drawn (the legend alone: about 250)
    assert load_encoder(out / "enc.pt").encode(torch.zeros(1, 1, 28, 28)).shape == (1, 128)
    assert len(pd.read_csv(out / "enc_loss.csv")) == 3
    assert "encoder enc epoch 2/2" in (tmp_path / "results" / "logs" / "encoders" / "enc.log").read_text()
    assert torch.load(out / "enc.pt", weights_only=True)["provenance"]["code_files"]["fedbench/algorithms/flt_encoders.py"]
    again = snakemake(tmp_path, "-n", "encoders", configfile=configfile)
    assert planned_jobs(again.stdout) == {}


def test_a_cell_with_an_encoder_waits_for_it(tmp_path):
    assert "flt" in ALGORITHMS  # registered by importing fedbench.algorithms (was a skip that could never trigger)
    config = tiny_with_encoder()
    config["algorithms"]["flt"] = {"method": "flt", "encoder": "enc"}
    config["experiments"]["tiny"]["grid"] = [
        {"datasets": ["digits28"], "partitions": ["iid"], "models": ["mlr"], "algorithms": ["flt", "fedavg"]}]
    configfile = write_config(tmp_path / "config.yaml", config)
    process = snakemake(tmp_path, "-n", "results/runs/tiny/digits28/iid/mlr/flt/seed0/metrics.json", configfile=configfile)
    assert planned_jobs(process.stdout) == {"partition": 1, "pretrain_encoder": 1, "train_cell": 1}
    process = snakemake(tmp_path, "-n", "results/runs/tiny/digits28/iid/mlr/fedavg/seed0/metrics.json", configfile=configfile)
    assert planned_jobs(process.stdout) == {"partition": 1, "train_cell": 1}
