"""FLT — federated learning with taskonomy (Jamali-Rad et al.), and its PCA+kM+HC baseline.

Initialisation (Algorithm 3, line 2): the one-off client relatedness step FCR (Algorithm 2)
turns each client's data signature into an adjacency matrix Ã (and, with HC, disjoint
clusters C).  Signatures are

* ``flt``: the client's samples through a pretrained ConvAE encoder (optionally fine-tuned
  on the client's data for J epochs), k-means centres per client, UMAP of all centres;
* ``pca_km_hc``: per-client PCA of the raw samples, k-means centres, no encoder, no UMAP.

Rounds: every sampled client trains its own current model for E epochs; then

* case I (``clusters: null``): every client's model becomes the sample-weighted average of
  its neighbours' models under Ã, w_m <- sum_j Ã_mj n_j w̄_j / sum_j Ã_mj n_j, over all M
  clients (non-participants contribute their current model, as W̄ in Algorithm 3 line 16).
  ``aggregation: simultaneous`` (default, the paper's W̄ Ã) or ``in_place`` (the authors'
  code: clients updated one after another, later ones averaging already-updated models);
* case II (``clusters: C`` or ``auto``): FedAvg inside each HC cluster; every member receives
  its cluster's model.  ``cluster_average: all`` (default, Algorithm 3 lines 20-22: W̄ holds
  the non-sampled members' current models, w_c = sum_{m in C_c} p_m w̄_m / sum p_m) or
  ``sampled`` (only the members trained this round).  The authors' code averages all members
  (``all_clients: True``, A replaced by all-ones blocks per HC cluster, notes §4.4), with the
  same in-place order as case I under ``aggregation: in_place``.

The relatedness step as the released code runs it (hjraad/FLT da09bfd, ``clustering_umap_central``;
notes §4.4), each a named option whose default is the paper's (or, where the paper is silent,
fedbench's earlier behaviour, so that existing results stay):

* ``k: ground_truth`` -- k-means with as many centres as the client's planted cluster has labels
  (2 in Scenario 1, 3 in Scenario 2, 5 on Structured FEMNIST): **oracle information** the code
  reads from its cluster array (:func:`ground_truth_k`); default ``k: 5`` (paper);
* ``random_state: code`` -- KMeans ``random_state=43``, UMAP ``random_state=42``; default ``run``
  (the run's seed for both);
* ``umap_fit: transform`` -- UMAP fitted on all centres, then each client's centres transformed on
  their own; default ``fit_transform`` (the fitted embedding, Algorithm 2 line 16's Z = UMAP(M));
* ``umap_order: code`` -- the centres stacked for UMAP's fit in the code's shuffled client order
  (:func:`fedbench.clustering.fcr.code_client_order`); default ``clients`` (0..M-1);
* ``n_init`` -- k-means restarts; 10 (scikit-learn's default when the code was written, and
  fedbench's all along); ``auto`` is today's scikit-learn default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Clustering, Federation, Workload
from fedbench.clustering.fcr import code_client_order, cut_linkage, fcr, pca_signatures, relatedness
from fedbench.algorithms.embedding_cache import cached_embeddings, embedding_key
from fedbench.algorithms.flt_encoders import embed_clients, load_encoder
from fedbench.engine.traffic import Traffic, weights_bytes
from fedbench.engine.weights import Weights, broadcast, put_rows, rows
from fedbench.registry.search_space import Relative

CLUSTER_AVERAGES = ("all", "sampled")
AGGREGATIONS = ("simultaneous", "in_place")
RANDOM_STATES = ("run", "code")
UMAP_FITS = ("fit_transform", "transform")
UMAP_ORDERS = ("clients", "code")
CODE_UNCLUSTERED_K = 5  # the code's nr_of_embedding_clusters where the data have no planted clusters (FEMNIST)
GROUND_TRUTH_K_BOUND = 5  # the most labels a planted cluster of FLT's scenarios holds (Structured FEMNIST's)
KMEANS_RESTARTS = 10  # k-means restarts (n_init) of the signatures: scikit-learn's default when the code was written


def ground_truth_k(fed: Federation) -> int:
    """k of ``k: ground_truth``, the released code's number of k-means centres: the number of labels
    of the client's planted cluster, counted as the code counts its cluster array, whose rows are
    padded to the widest cluster (Structured FEMNIST's last cluster is [45, 46, 0, 0, 0]: 5), so
    the largest number of distinct training labels of any planted cluster: 2 in Scenario 1, 3 in
    Scenario 2, 5 on Structured FEMNIST.  This is oracle information (the planted clusters are what
    FCR is meant to find).  Without planted clusters (FEMNIST, Scenario 3) the code uses its
    ``nr_of_embedding_clusters``, 5 in the released configs (:data:`CODE_UNCLUSTERED_K`)."""
    if fed.clusters is None:
        return CODE_UNCLUSTERED_K
    clusters = np.asarray(fed.clusters)
    y = fed.data.y.cpu().numpy()
    index, counts = fed.data.train.index.cpu().numpy(), fed.data.train.counts.cpu().numpy()
    labels: dict = {}
    for m, c in enumerate(clusters.tolist()):
        labels.setdefault(c, set()).update(np.unique(y[index[m, : counts[m]]]).tolist())
    return max(len(held) for held in labels.values())


IN_PLACE_BLOCK_BYTES = 4 << 20  # float64 columns of every client that the in-place loop keeps in cache


def neighbour_average(stacked: Weights, adjacency: np.ndarray, samples: torch.Tensor, in_place: bool) -> Weights:
    """w_m <- sum_j A_mj n_j w_j / sum_j A_mj n_j for every client m (FLT case I), in float64.

    ``in_place`` reproduces the authors' loop, which overwrites w_m before computing w_{m+1}.  That
    loop runs over blocks of columns (:data:`IN_PLACE_BLOCK_BYTES` of every client's float64 entries,
    a multiple of 64 columns), each block through all M clients before the next: every entry is the
    same dot product of the same float64 numbers as over whole rows (its column's M entries, in the
    same order), but each of the M passes reads a block in cache instead of all M models from memory
    (FLT's MLP, 100 clients: 127 MB a pass).  ``tests/test_flt.py`` checks the result equal to the
    whole-row loop's, bit for bit.

    The simultaneous average computes each distinct row of the weights once (clients of one cluster
    whose graph rows are equal get the same model): in a graph of C cliques the product is C rows, not
    M.  Each output row is the same float64 dot product of the same numbers, summed in the order the
    matrix product of fewer rows takes: ``tests/test_flt.py`` checks the float32 models within one unit
    in the last place of the full product's (nearly all equal)."""
    device = next(iter(stacked.values())).device
    weights = torch.as_tensor(adjacency, dtype=torch.float64, device=device) * samples.to(device, torch.float64)[None, :]
    weights = weights / weights.sum(1, keepdim=True)
    distinct, which = torch.unique(weights, dim=0, return_inverse=True) if not in_place else (weights, None)
    repeated = len(distinct) < len(weights)
    out = {}
    for name, value in stacked.items():
        if not value.is_floating_point():
            out[name] = value
            continue
        if not in_place:
            averaged = ((distinct if repeated else weights) @ value.reshape(len(value), -1).to(torch.float64)).to(value.dtype)
            out[name] = (averaged[which] if repeated else averaged).view_as(value)
            continue
        source = value.reshape(len(value), -1)
        result = torch.empty_like(source)
        width = max(64, IN_PLACE_BLOCK_BYTES // (8 * max(len(source), 1)) // 64 * 64)
        for start in range(0, source.shape[1], width):
            block = source[:, start : start + width].to(torch.float64, copy=True).contiguous()  # the loop overwrites it
            for m in range(len(block)):
                block[m] = weights[m] @ block
            result[:, start : start + width] = block
        out[name] = result.view_as(value)
    return out


def _centres_bytes(embeddings, k: int) -> int:
    """Bytes of a client's signature: k k-means centres (at most one per sample) of its embeddings
    ``[n, d]``, in their dtype."""
    e = np.asarray(embeddings)
    return int(min(k, len(e)) * e.shape[1] * e.itemsize) if e.ndim == 2 else 0


@dataclass(frozen=True)
class FLT(Algorithm):
    """FLT or PCA+kM+HC; see the module docstring.  ``signature``: ``encoder`` or ``pca``."""
    scored_models = "cluster"  # the clients of a cluster are scored with its model

    signature: str
    encoder: str | None
    finetune_epochs: int
    k: int | str  # or "ground_truth" (the code: labels per planted cluster, ground_truth_k)
    gamma: float
    distance: str
    cluster_count: int | str | None  # case II: HC into this many clusters ("auto": chosen by HC); None: case I
    aggregation: str
    umap_neighbors: int
    umap_min_dist: float
    pca_components: int
    cluster_average: str = "all"
    random_state: str = "run"  # "code": KMeans 43, UMAP 42 (the released code)
    umap_fit: str = "fit_transform"  # "transform": fit on all centres, transform each client's (the code)
    umap_order: str = "clients"  # "code": the code's shuffled client order for UMAP's fit
    n_init: int | str = KMEANS_RESTARTS

    def __post_init__(self):
        for name, choices in (("cluster_average", CLUSTER_AVERAGES), ("aggregation", AGGREGATIONS),
                              ("random_state", RANDOM_STATES), ("umap_fit", UMAP_FITS), ("umap_order", UMAP_ORDERS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        if isinstance(self.k, str) and self.k != "ground_truth":
            raise ValueError(f"k must be a positive integer or 'ground_truth', got {self.k!r}")

    def relatedness(self, fed: Federation) -> dict:
        """FCR (Algorithm 2): adjacency Ã, optional clusters C, and what the figures need."""
        everyone = torch.arange(fed.num_clients, device=fed.device)
        num_clusters = None if self.cluster_count in (None, "auto") else int(self.cluster_count)  # None: HC picks C
        if self.signature == "encoder":
            encoder_file = fed.encoders / f"{self.encoder}.pt"
            encoder = load_encoder(encoder_file).to(fed.device)
            finetune = {"finetune_epochs": self.finetune_epochs, "lr": 1e-3, "batch_size": 64}  # the code's Adam 1e-3, batch 64

            def compute():
                return embed_clients(encoder, fed.data, everyone, generator=fed.generator, **finetune)

            if self.finetune_epochs and fed.cache is not None:  # Enc2's fine-tuning: once per seed and data
                key = embedding_key(encoder_file, fed.data, everyone, fed.generator, finetune)
                embeddings = cached_embeddings(fed.cache, key, fed.generator, compute)
            else:
                embeddings = compute()
            k = ground_truth_k(fed) if self.k == "ground_truth" else self.k
            result = fcr(
                embeddings, k=k, gamma=self.gamma,
                distance=self.distance, n_neighbors=self.umap_neighbors, min_dist=self.umap_min_dist,
                umap_transform=self.umap_fit == "transform",
                umap_order=code_client_order(fed.num_clients) if self.umap_order == "code" else None,
                num_clusters=num_clusters, n_init=self.n_init, seed=None if self.random_state == "code" else fed.seed,
            )
            # what travels once: the encoder down, each client's k centres of its embeddings up
            signature = [_centres_bytes(e, k) for e in embeddings]
            return {"adjacency": result.adjacency, "clusters": result.clusters, "distances": result.distances,
                    "linkage": result.linkage, "centres_2d": result.centres_2d,
                    "signature_bytes": np.asarray(signature, dtype=np.int64),
                    "encoder_bytes": weights_bytes(encoder.state_dict())}
        samples = [
            fed.data.x[fed.data.train.index[m, : fed.data.train.counts[m]]].flatten(1).cpu().numpy()
            for m in range(fed.num_clients)
        ]
        centres = pca_signatures(samples, n_components=self.pca_components, k=self.k, seed=fed.seed)
        result = relatedness(centres, gamma=self.gamma, distance=self.distance, num_clusters=num_clusters)
        return {"adjacency": result.adjacency, "clusters": result.clusters, "distances": result.distances,
                "linkage": result.linkage, "signature_bytes": np.asarray([np.asarray(c).nbytes for c in centres], dtype=np.int64),
                "encoder_bytes": 0}

    @classmethod
    def workload(cls, params, training) -> Workload:
        """The sampled clients train E epochs (Algorithm 3); once, the relatedness step (Algorithm 2): FLT's
        signatures embed every client's training rows with the encoder after ``finetune_epochs`` epochs of its
        own fine-tuning (Enc2), k-means into k centres each (lines 10-12; ``k: ground_truth`` counted at
        :data:`GROUND_TRUTH_K_BOUND`) and UMAP of all centres (line 16); PCA+kM+HC's a PCA of every client's
        rows, then its k-means.  The authors' in-place average (``aggregation: in_place``) every round; every
        client keeps a model of its own under it, or in case I (``clusters: null``: each averages its own
        neighbours under Ã; counted per client, an upper bound)."""
        encoder = "encoder" in params  # FLT's signatures; PCA+kM+HC's take the rows' principal components
        n_init = params.get("n_init", KMEANS_RESTARTS)
        in_place = params["aggregation"] == "in_place"
        clustering = Clustering(signature_centres=params["k"] if isinstance(params["k"], int) else GROUND_TRUTH_K_BOUND,
                                restarts=1 if n_init == "auto" else int(n_init), signature_pca=not encoder,
                                centres_umap=encoder)
        return Workload(local_passes=training["local_epochs"], clustering=clustering, in_place_average=in_place,
                        relatedness_finetune_epochs=params["finetune_epochs"] if encoder else None,
                        own_models=in_place or params["clusters"] is None)

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {"clients": broadcast(initial, fed.num_clients), **self.relatedness(fed)}

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        trained, loss = fed.train_clients(rows(state["clients"], chosen), chosen)
        models = put_rows(state["clients"], chosen, trained)
        if self.cluster_count is None:  # case I
            models = neighbour_average(models, state["adjacency"], fed.data.train.counts, self.aggregation == "in_place")
        elif self.cluster_average == "all":  # case II, Algorithm 3 lines 20-22
            same = np.asarray(state["clusters"])[:, None] == np.asarray(state["clusters"])[None, :]
            models = neighbour_average(models, same.astype(float), fed.data.train.counts, self.aggregation == "in_place")
        else:
            models = self._cluster_average(fed, models, chosen, state["clusters"])
        return {**state, "clients": models}, loss

    @staticmethod
    def _cluster_average(fed: Federation, models: Weights, chosen: torch.Tensor, clusters: np.ndarray) -> Weights:
        """Case II, ``cluster_average: sampled``: FedAvg per cluster over its sampled members, sent to every member."""
        labels = torch.as_tensor(clusters, device=fed.device)
        for c in torch.unique(labels[chosen]).tolist():
            members = torch.nonzero(labels == c).flatten()
            trained = chosen[labels[chosen] == c]
            average = fed.average(rows(models, trained), trained)
            models = put_rows(models, members, broadcast(average, len(members)))
        return models

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return state["clients"]

    def global_model(self, fed: Federation, state: dict) -> None:
        return None

    def adjacency(self, fed: Federation, state: dict) -> np.ndarray:
        """The graph the server averages over: Ã (case I) or HC's same-cluster blocks (case II);
        the pipeline logs its density and its share of cross-group links."""
        if self.cluster_count is None or state.get("clusters") is None:
            return state["adjacency"]
        c = np.asarray(state["clusters"])
        return (c[:, None] == c[None, :]).astype(int)

    def clusters(self, fed: Federation, state: dict) -> np.ndarray:
        """HC's clusters: the ones case II trains on; in case I reported only (C chosen by HC)."""
        return state["clusters"]

    def planted_clusters(self, fed: Federation, state: dict, count: int) -> np.ndarray | None:
        """HC's tree (Ward on Ã's rows) cut into the planted number of clusters ``count``: structure
        recovery scored without HC's choice of C (:func:`fedbench.clustering.fcr.cut_linkage`)."""
        linkage = state.get("linkage")
        if linkage is None or len(linkage) + 1 != fed.num_clients or not 1 <= count <= fed.num_clients:
            return None
        return cut_linkage(np.asarray(linkage), count)

    def communication(self, fed: Federation, before: dict, after: dict, round_: int) -> Traffic:
        """Every sampled client's own model down and its trained model up (Algorithm 3); in the first
        round also the one-off relatedness step (Algorithm 2): the pretrained encoder down to every
        client and every client's signature up (its k k-means centres of its embeddings, or of its
        PCA projection for PCA+kM+HC, in their own dtype).  Nothing else: clusters form once."""
        traffic = super().communication(fed, before, after, round_)
        if round_ == 1:
            everyone = np.arange(fed.num_clients)
            traffic = traffic + Traffic.to(fed.num_clients, everyone, before.get("encoder_bytes", 0),
                                           before.get("signature_bytes", np.zeros(fed.num_clients, dtype=np.int64)))
        return traffic

    def artifacts(self, fed: Federation, state: dict) -> dict:
        keep = ("adjacency", "distances", "linkage", "centres_2d", "clusters")
        return {name: state[name] for name in keep if state.get(name) is not None}


@ALGORITHMS.register("flt", bounds={
        "finetune_epochs": ">= 0", "k": [">= 1", ("ground_truth",)], "gamma": "> 0", "distance": ("min", "matching"),
        "clusters": [">= 1", ("auto",)], "aggregation": ("simultaneous", "in_place"), "umap_neighbors": ">= 2",
        "umap_min_dist": ">= 0", "random_state": RANDOM_STATES, "umap_fit": UMAP_FITS, "umap_order": UMAP_ORDERS,
        "n_init": [">= 1", ("auto",)],
    }, refers={"encoder": "encoders"},  # refers: parameter -> the config section whose entry it names
    search={"gamma": Relative(0.5, 2)},
    figures=("adjacency", "umap", "gamma_sweep"))  # the figures its runs get: relatedness graph, UMAP of the centres, gamma sweep
def flt(
    *,
    encoder: str,
    finetune_epochs: int = 0,
    k: int | str = 5,
    gamma: float = 1.0,
    distance: str = "min",
    clusters: int | str | None = None,
    aggregation: str = "simultaneous",
    umap_neighbors: int = 15,
    umap_min_dist: float = 0.1,
    cluster_average: str = "all",
    random_state: str = "run",
    umap_fit: str = "fit_transform",
    umap_order: str = "clients",
    n_init: int | str = KMEANS_RESTARTS,
) -> FLT:
    """FLT (Algorithms 2-3).  Paper defaults: k = 5, ``distance: min`` (min over centre pairs),
    case II averaging ``cluster_average: all`` members, UMAP's fitted embedding in client order,
    the run's seed.  The authors' code: ``k: ground_truth`` (labels per planted cluster: oracle
    information), ``distance: matching``, γ = 1, ``aggregation: in_place``, all members,
    ``random_state: code`` (KMeans 43, UMAP 42), ``umap_fit: transform``, ``umap_order: code``,
    ``n_init: 10`` (see the module docstring)."""
    return FLT("encoder", encoder, finetune_epochs, k, gamma, distance, clusters, aggregation,
               umap_neighbors, umap_min_dist, 0, cluster_average, random_state, umap_fit, umap_order, n_init)


@ALGORITHMS.register("pca_km_hc", bounds={
        "k": ">= 1", "pca_components": ">= 1", "gamma": "> 0", "distance": ("min", "matching"), "clusters": [">= 1", ("auto",)],
        "aggregation": ("simultaneous", "in_place"),
    }, search={"gamma": Relative(0.5, 2)}, figures=("adjacency",))
def pca_km_hc(
    *,
    k: int = 5,
    pca_components: int = 128,
    gamma: float = 1.2,
    distance: str = "matching",
    clusters: int | str | None = 3,
    aggregation: str = "simultaneous",
    cluster_average: str = "all",
) -> FLT:
    """PCA+kM+HC (FLT's baseline, after Ghosh et al.'s one-shot clustering): per-client PCA and
    k-means signatures, threshold 1.2 as the authors' code, HC into ``clusters`` (paper: C = 3)."""
    return FLT("pca", None, 0, k, gamma, distance, clusters, aggregation, 15, 0.1, pca_components, cluster_average)
