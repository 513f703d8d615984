"""FLT's relatedness step end to end through the algorithms' own ``init`` (Algorithm 2): a
pretrained ConvAE encoder file -> (fine-tuned) client embeddings -> k-means -> UMAP -> A -> Ã ->
HC, and PCA+kM+HC's per-client PCA -> k-means -> A -> Ã -> HC, each on planted clusters.

Planted clusters, built so that the answer is known by construction:

* FLT: client m of cluster c = m % 3 holds 8x8 images of two patterns, a 2x2 bright square at
  location 2c or 2c + 1 of six (plus N(0, 0.05) noise): same-cluster clients hold the same two
  patterns, other clusters none of them, so Ã must be the same-cluster block matrix and HC into
  3 clusters must return the planted ones (ARI = 1).
* PCA+kM+HC: each client's PCA is fitted on its own data, so the signature only sees the shape
  of its data up to a rotation: cluster c's clients hold two modes at ±a_c e (a_c = 1, 4, 10)
  along a client-specific random direction e.  Their k = 2 centres in PCA space are (±a_c, 0, …)
  up to sign, so the matching distance is ~0 within a cluster and >= sqrt(2·3²)/2 ≈ 2.1 > 1.2
  across clusters: Ã must be the block matrix and HC must return the planted clusters.

UMAP's first call in the process compiles numba (~20 s): one module-scoped FLT federation.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from sklearn.metrics import adjusted_rand_score
from torch import nn

from conftest import make_federation
from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.flt_encoders import pretrain_encoder
from fedbench.engine.federated_data import ClientIndex, FederatedData
from fedbench.engine.local_sgd import LocalSGD
from fedbench.engine.weights import model_weights
from fedbench.results.gamma_sweep import graph_sweep

CLIENTS, PER_CLIENT = 12, 20
TRUTH = np.arange(CLIENTS) % 3


def federation(x: np.ndarray, truth: np.ndarray, seed: int = 0):
    """Clients owning consecutive blocks of PER_CLIENT rows of ``x`` (train = test), a linear model."""
    rows = [np.arange(m * PER_CLIENT, (m + 1) * PER_CLIENT) for m in range(len(truth))]
    index = ClientIndex.from_lists(rows, "cpu")
    y = torch.zeros(len(x), dtype=torch.long)
    data = FederatedData(torch.from_numpy(x.astype(np.float32)), y, index, index, num_classes=2)
    model = nn.Sequential(nn.Flatten(), nn.Linear(x[0].size, 2))
    return make_federation(data, model, LocalSGD(1, 5, 0.1), seed=seed)


def pattern_images(truth: np.ndarray, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    corners = [(0, 0), (0, 4), (2, 2), (4, 0), (4, 4), (6, 6)]  # six 2x2 squares, disjoint
    images = []
    for c in truth:
        for q in 2 * c + rng.integers(0, 2, PER_CLIENT):
            image = rng.normal(scale=0.05, size=(1, 8, 8))
            r, s = corners[q]
            image[0, r:r + 2, s:s + 2] += 1.0
            images.append(image)
    return np.stack(images)


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A ConvAE for 8x8 images pretrained (2 epochs) on scikit-learn's digits: the encoder file as the rule writes it."""
    out = tmp_path_factory.mktemp("encoders")
    config = {"device": "cpu", "datasets": {"digits8": {"source": "digits"}},
              "encoders": {"enc": {"dataset": "digits8", "epochs": 2, "latent_dim": 16, "max_samples": 200, "batch_size": 32}}}
    pretrain_encoder(config, "enc", out / "enc.pt", out / "enc_loss.csv")
    return out


@pytest.mark.parametrize("distance", ["min", "matching"])
def test_flt_relatedness_recovers_planted_clusters_end_to_end(encoder_dir, distance):
    fed = dataclasses.replace(federation(pattern_images(TRUTH), TRUTH), encoders=encoder_dir)
    # 24 centres, 4 per pattern: UMAP's 15 default neighbours would span four patterns and pull
    # them together (cross-cluster min distance 0.65 < gamma); 4 neighbours keep each pattern apart.
    algorithm = ALGORITHMS["flt"](encoder="enc", finetune_epochs=1, k=2, distance=distance, clusters=3, umap_neighbors=4)
    state = algorithm.init(fed, model_weights(fed.model))
    assert state["centres_2d"].shape == (CLIENTS, 2, 2)
    np.testing.assert_array_equal(state["adjacency"], (TRUTH[:, None] == TRUTH[None, :]).astype(int))
    assert adjusted_rand_score(TRUTH, state["clusters"]) == 1.0
    # the gamma sweep (report figure) at the run's own gamma reproduces what the run found
    swept = graph_sweep(state["centres_2d"], TRUTH, [1.0], num_clusters=3).set_index("distance").loc[distance]
    assert (swept["ari"], swept["adj_density"], swept["adj_cross_group"]) == (1.0, 3 * 3 * 4 / (12 * 11), 0.0)
    auto = ALGORITHMS["flt"](encoder="enc", k=2, distance=distance, clusters="auto", umap_neighbors=4).init(fed, model_weights(fed.model))
    assert adjusted_rand_score(TRUTH, auto["clusters"]) == 1.0  # HC's own choice of C finds the 3 clusters


def mode_pairs(truth: np.ndarray, spread=(1.0, 4.0, 10.0), seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = []
    for c in truth:
        e = rng.normal(size=64)
        e /= np.linalg.norm(e)  # a direction of the client's own
        signs = np.where(np.arange(PER_CLIENT) % 2 == 0, 1.0, -1.0)
        rows.append(signs[:, None] * spread[c] * e + rng.normal(scale=0.01, size=(PER_CLIENT, 64)))
    return np.concatenate(rows).reshape(-1, 1, 8, 8)


def test_pca_km_hc_recovers_planted_clusters_end_to_end():
    fed = federation(mode_pairs(TRUTH), TRUTH)
    algorithm = ALGORITHMS["pca_km_hc"](k=2, clusters=3)  # the code's matching distance, gamma 1.2
    state = algorithm.init(fed, model_weights(fed.model))
    within = state["distances"][TRUTH[:, None] == TRUTH[None, :]]
    across = state["distances"][TRUTH[:, None] != TRUTH[None, :]]
    assert within.max() < 0.1 and across.min() > np.sqrt(2 * 3.0**2) / 2 - 0.1  # the planted distances
    np.testing.assert_array_equal(state["adjacency"], (TRUTH[:, None] == TRUTH[None, :]).astype(int))
    assert adjusted_rand_score(TRUTH, state["clusters"]) == 1.0
