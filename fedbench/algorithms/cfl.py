"""CFL — Clustered Federated Learning (Sattler, Müller, Samek, IEEE TNNLS 2020).

Algorithm 1 of the paper (as in the authors' code, felisat/clustered-federated-learning):

* one cluster holds every client at first; each round every sampled client i of cluster c
  computes its weight update dtheta_i = SGD_E(theta_c) - theta_c, and the cluster model becomes
  theta_c + sum_i (n_i / n_c) dtheta_i (sample-weighted FedAvg of the updates, Alg. 1);
* a cluster c is bi-partitioned when it is near a stationary point of the joint objective but
  some client is not (Sec. III, Eqs. (29)-(30)):
  ||sum_i n_i/n_c dtheta_i|| < eps1  and  max_i ||dtheta_i|| > eps2,
  and (authors' code) it has at least ``min_cluster_size`` participating clients (code: > 2)
  and the round is past ``warmup_rounds`` (code: ``c_round > 20``);
* the bipartition minimises the maximum cross-cluster cosine similarity of the updates
  (Eq. (23)); as in the authors' code, it is the top split of complete-linkage agglomerative
  clustering on the dissimilarity -cos(dtheta_i, dtheta_j) (sklearn ``AgglomerativeClustering``,
  ``n_clusters=2``), which always yields two non-empty groups, also when merge heights tie
  (e.g. mutually orthogonal or identical updates).  Both children inherit theta_c and are then
  averaged over their own members, one split level per cluster and round (recursive over rounds).

Defaults eps1 = 0.4, eps2 = 1.6 are the authors' notebook values (they depend on model and lr;
the ``cfl_norms`` artifact records both norms of every cluster and round for tuning; the run's
history carries the round's smallest mean-update norm and largest client norm, and the number
of splits so far; ``summary`` gives the split rounds or "never split", which the pipeline logs
as a warning: a CFL that never splits is FedAvg).

The mean-update norm ||sum_i p_i dtheta_i|| uses ``mean_norm_weighting``: ``samples`` (default,
p_i = n_i / n_c, the paper's Algorithm 1) or ``uniform`` (p_i = 1 / |c|, the authors' notebook,
which averages the updates unweighted for the criterion).

Partial participation (the paper's Sec. VI "varying client populations / parameter tree"):
members of a splitting cluster that were not sampled keep their cluster, now an inner node of
the parameter tree, which caches the pre-split model and the mean update of each child.  When
such a client is next sampled it computes its update from the cached model and descends to the
child whose mean update is most cosine-similar (repeated down the tree), then trains as usual.
Until then it is scored with the leaf reached by always following the child with more training
samples at split time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation
from fedbench.algorithms.clustered import flat, stack
from fedbench.engine.weights import Weights, rows, weighted_average
from fedbench.registry.search_space import Relative


NORM_WEIGHTINGS = ("samples", "uniform")


def cosine_matrix(updates: torch.Tensor) -> np.ndarray:
    u = torch.nn.functional.normalize(updates.double(), dim=1)
    return (u @ u.T).cpu().numpy()


def bipartition(similarity: np.ndarray) -> np.ndarray:
    """Boolean mask of the first update's side of the complete-linkage bipartition (n >= 2 updates).

    As the authors' code (felisat/clustered-federated-learning, ``cluster_clients``):
    ``AgglomerativeClustering(n_clusters=2, linkage="complete")`` on the precomputed dissimilarity
    -cos, which undoes the last merge of the tree, so both sides are non-empty whatever the ties.
    On tied heights this is the authors' split, not scipy's ``fcluster(t=2, criterion="maxclust")``,
    which cuts at a height and returns ONE group when the top merges tie (three mutually orthogonal
    updates: sklearn {0, 1} | {2}, fcluster {0, 1, 2}).  The dissimilarity is -cos as in their call,
    not 1 - cos: -s is exact, so ties are exactly those of the computed cosines (1 - s can round
    distinct cosines to equal distances and break such near-ties differently); scipy's ``cut_tree``
    gives the same split but rejects the negative heights.  Cosines are clipped to 1 (rounding can
    lift a parallel pair above it) and the matrix is symmetrised; only the upper triangle is read.
    """
    from sklearn.cluster import AgglomerativeClustering  # lazy: importing sklearn.cluster takes seconds

    s = np.minimum(np.asarray(similarity, dtype=np.float64), 1.0)
    d = -(s + s.T) / 2
    labels = AgglomerativeClustering(n_clusters=2, metric="precomputed", linkage="complete").fit(d).labels_
    return labels == labels[0]


@dataclass(frozen=True)
class CFL(Algorithm):
    scored_models = "cluster"  # the clients of a cluster are scored with its model
    eps1: float = 0.4
    eps2: float = 1.6
    min_cluster_size: int = 3
    warmup_rounds: int = 20
    mean_norm_weighting: str = "samples"

    def __post_init__(self):
        if self.mean_norm_weighting not in NORM_WEIGHTINGS:
            raise ValueError(f"mean_norm_weighting must be one of {NORM_WEIGHTINGS}, got {self.mean_norm_weighting!r}")

    def init(self, fed: Federation, initial: Weights) -> dict:
        return {
            "models": {0: initial},  # leaf cluster id -> model
            "tree": {},  # inner node id -> {"model", "children", "directions", "larger"}
            "assign": torch.zeros(fed.num_clients, dtype=torch.long),  # node (leaf or inner) per client
            "next_id": 1, "splits": [], "norms": [], "membership": [],
        }

    def _route(self, fed: Federation, state: dict, chosen: torch.Tensor) -> torch.Tensor:
        """Sends sampled clients sitting on inner nodes down to leaves by update similarity."""
        assign, tree = state["assign"].clone(), state["tree"]
        while True:
            at = chosen.cpu()[torch.tensor([int(assign[i]) in tree for i in chosen.cpu()], dtype=torch.bool)]
            if not len(at):
                return assign
            nodes = [tree[int(assign[i])] for i in at]
            start = stack([n["model"] for n in nodes])
            trained, _ = fed.train_clients(start, at.to(fed.device))
            updates = flat(fed, trained) - flat(fed, start)
            for row, (i, node) in enumerate(zip(at.tolist(), nodes)):
                cos = torch.nn.functional.cosine_similarity(updates[row : row + 1].double(), node["directions"].double())
                assign[i] = node["children"][int(cos.argmax())]

    def _leaf(self, state: dict, node: int) -> int:
        while node in state["tree"]:
            node = state["tree"][node]["larger"]
        return node

    def _effective(self, state: dict) -> np.ndarray:
        return np.array([self._leaf(state, int(a)) for a in state["assign"]])

    def round(self, fed: Federation, state: dict, round_: int):
        chosen = fed.sample_clients()
        assign = self._route(fed, state, chosen)
        models, tree = dict(state["models"]), dict(state["tree"])
        next_id, splits, norms = state["next_id"], list(state["splits"]), list(state["norms"])
        cluster = assign[chosen.cpu()]
        start = stack([models[int(c)] for c in cluster])
        trained, loss = fed.train_clients(start, chosen)
        updates = flat(fed, trained) - flat(fed, start)
        counts = fed.data.train.counts[chosen].cpu()
        for c in torch.unique(cluster).tolist():
            idx = (cluster == c).nonzero().flatten()
            w = counts[idx].double() if self.mean_norm_weighting == "samples" else torch.ones(len(idx), dtype=torch.float64)
            w = w / w.sum()
            mean_norm = float((updates[idx].double() * w[:, None].to(updates.device)).sum(0).norm())
            max_norm = float(updates[idx].norm(dim=1).max())
            norms.append({"round": round_, "cluster": c, "clients": len(idx), "mean_norm": mean_norm, "max_norm": max_norm})
            if not (round_ > self.warmup_rounds and len(idx) >= max(self.min_cluster_size, 2)
                    and mean_norm < self.eps1 and max_norm > self.eps2):
                continue
            sim = cosine_matrix(updates[idx])
            side = bipartition(sim)  # two non-empty sides (len(idx) >= 2): no "no split" branch
            a, b = next_id, next_id + 1
            next_id += 2
            side_t = torch.from_numpy(side)
            groups = (idx[side_t], idx[~side_t])
            directions = torch.stack([
                weighted_average({"u": updates[g]}, counts[g].to(updates.device))["u"] for g in groups
            ])
            sizes = [int(counts[g].sum()) for g in groups]
            tree[c] = {"model": models.pop(c), "children": (a, b), "directions": directions,
                       "larger": a if sizes[0] >= sizes[1] else b}
            models[a] = models[b] = tree[c]["model"]
            cluster[groups[0]], cluster[groups[1]] = a, b
            splits.append({
                "round": round_, "parent": c, "child_a": a, "child_b": b,
                "clients_a": len(groups[0]), "clients_b": len(groups[1]), "mean_norm": mean_norm,
                "max_norm": max_norm, "max_cross_similarity": float(sim[np.ix_(side, ~side)].max()),
                "members_a": " ".join(map(str, chosen.cpu()[groups[0]].tolist())),
                "members_b": " ".join(map(str, chosen.cpu()[groups[1]].tolist())),
            })
        for c in torch.unique(cluster).tolist():  # per-cluster sample-weighted FedAvg
            idx = (cluster == c).nonzero().flatten().to(chosen.device)
            models[c] = fed.average(rows(trained, idx), chosen[idx])
        assign[chosen.cpu()] = cluster
        state = {**state, "models": models, "tree": tree, "assign": assign, "next_id": next_id,
                 "splits": splits, "norms": norms}
        state["membership"] = state["membership"] + [self._effective(state)]
        return state, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        leaves = sorted(state["models"])
        stacked = stack([state["models"][c] for c in leaves])
        index = torch.from_numpy(np.searchsorted(leaves, self._effective(state))).to(fed.device)
        return rows(stacked, index)

    def global_model(self, fed: Federation, state: dict) -> Weights | None:
        return state["models"][0] if not state["tree"] else None

    def clusters(self, fed: Federation, state: dict) -> np.ndarray:
        return np.unique(self._effective(state), return_inverse=True)[1]

    def diagnostics(self, fed: Federation, state: dict) -> dict:
        """History columns: this round's smallest mean-update norm and largest client-update norm
        over its clusters, and the number of splits so far."""
        last = [n for n in state["norms"] if state["norms"] and n["round"] == state["norms"][-1]["round"]]
        return {
            "cfl_mean_norm": min((n["mean_norm"] for n in last), default=float("nan")),
            "cfl_max_norm": max((n["max_norm"] for n in last), default=float("nan")),
            "cfl_splits": len(state["splits"]),
        }

    def summary(self, fed: Federation, state: dict) -> dict:
        rounds = [s["round"] for s in state["splits"]]
        out = {"split_rounds": rounds}
        if not rounds:
            out["warning"] = (f"CFL never split (eps1={self.eps1}, eps2={self.eps2}): "
                              "it trained one cluster, i.e. FedAvg")
        return out

    @staticmethod
    def history_note(history: pd.DataFrame) -> str:
        """A run that never split (``cfl_splits`` 0 throughout) trained FedAvg: its scorecard row says so."""
        if "cfl_splits" in history and history["cfl_splits"].max() == 0:
            return "CFL never split (= FedAvg)"
        return ""

    def artifacts(self, fed: Federation, state: dict) -> dict:
        membership = np.stack(state["membership"]) if state["membership"] else np.zeros((0, fed.num_clients), int)
        return {
            "cfl_splits": pd.DataFrame(state["splits"], columns=[
                "round", "parent", "child_a", "child_b", "clients_a", "clients_b", "mean_norm", "max_norm",
                "max_cross_similarity", "members_a", "members_b"]),
            "cfl_norms": pd.DataFrame(state["norms"], columns=["round", "cluster", "clients", "mean_norm", "max_norm"]),
            "cfl_membership": membership,  # [rounds, clients]: leaf cluster id of every client after each round
        }


@ALGORITHMS.register("cfl", bounds={"eps1": ">= 0", "eps2": ">= 0", "min_cluster_size": ">= 1", "warmup_rounds": ">= 0"},
                     search={"eps1": Relative(0.25, 4), "eps2": Relative(0.25, 4)})
def cfl(
    *,
    eps1: float = 0.4,
    eps2: float = 1.6,
    min_cluster_size: int = 3,
    warmup_rounds: int = 20,
    mean_norm_weighting: str = "samples",
) -> CFL:
    """CFL (Sattler et al. 2020): per-cluster FedAvg of weight updates; a cluster with mean update norm
    < eps1 and max client update norm > eps2 is bi-partitioned by cosine similarity of the updates;
    ``mean_norm_weighting`` "samples" (paper, Alg. 1) or "uniform" (the authors' notebook)."""
    return CFL(eps1=eps1, eps2=eps2, min_cluster_size=min_cluster_size, warmup_rounds=warmup_rounds,
               mean_norm_weighting=mean_norm_weighting)
