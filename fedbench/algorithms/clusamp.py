"""CluSamp — clustered client sampling from model similarity (Fraboni et al., ICML'21, Algorithm 2),
as the FedMR repository runs it (``ClusteredSampling`` in ``main_fed.py``, ``utils/clustering.py``;
notes §2.6).

* Every client keeps a representative gradient G_i = w_i - w (its last local model minus the
  global model it started from), zero until it is first sampled.
* Each round: the client dissimilarity matrix D_ij = ||G_i - G_j||_1 (``similarity: L1``, the
  code's default; ``L2`` and ``arccos`` as Fraboni et al. offer), Ward hierarchical clustering
  (``scipy.cluster.hierarchy.linkage``) of the rows of D (``linkage_input: rows``, as the code
  passes the square matrix) or of D as condensed distances (``distances``).
* Algorithm 2's m sampling distributions: with client weights m p_i (p_i = n_i / n), walk the
  dendrogram's merges in order and merge two groups whenever their joint weight stays <= 1; the
  groups (heaviest first) then fill m distributions of total mass 1 each, a client's weight
  spilling into the next distribution where one fills up.  Every distribution sums to one and
  client i's weights over all distributions sum to m p_i.
* One client is drawn from each distribution (the same client may be drawn twice); the server
  takes the sample-weighted average of the drawn clients' models.

The code's similarity update fills only one entry per sampled client (an indentation bug, notes
§2.6); here the full matrix is recomputed from the representative gradients every round.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from scipy.cluster.hierarchy import ClusterWarning, linkage
from scipy.spatial.distance import squareform

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation
from fedbench.engine.weights import Weights, broadcast, parameter_names


def dissimilarity(gradients: torch.Tensor, kind: str) -> np.ndarray:
    """``[K, K]`` dissimilarity of the representative gradients ``[K, P]``."""
    g = gradients.double()
    if kind == "L1":
        d = torch.cdist(g, g, p=1)
    elif kind == "L2":
        d = torch.cdist(g, g, p=2)
    elif kind == "arccos":
        unit = g / g.norm(dim=1, keepdim=True).clamp_min(1e-12)
        d = torch.arccos((unit @ unit.T).clamp(-1.0, 1.0))
        zero = g.norm(dim=1) == 0
        d[zero[:, None] & zero[None, :]] = 0.0
    else:
        raise ValueError(f"similarity must be L1, L2 or arccos, got {kind!r}")
    d = d.cpu().numpy()
    np.fill_diagonal(d, 0.0)
    return d


def sampling_distributions(tree: np.ndarray, weights: np.ndarray, m: int) -> np.ndarray:
    """Algorithm 2's ``[m, K]`` distributions from the Ward ``tree`` (scipy linkage) and the client
    sample counts ``weights``."""
    k = len(weights)
    mass = m * weights / weights.sum()  # m p_i, sums to m
    groups: dict[int, list[int]] = {i: [i] for i in range(k)}
    group_mass = {i: float(mass[i]) for i in range(k)}
    blocked: set[int] = set()
    for step, (a, b, _, _) in enumerate(tree):
        a, b, node = int(a), int(b), k + step
        if a in blocked or b in blocked or group_mass[a] + group_mass[b] > 1.0 + 1e-12:
            blocked.add(node)
            continue
        groups[node] = groups.pop(a) + groups.pop(b)
        group_mass[node] = group_mass.pop(a) + group_mass.pop(b)
    ordered = sorted(groups, key=lambda g: (-group_mass[g], min(groups[g])))
    out = np.zeros((m, k))
    row, room = 0, 1.0
    for g in ordered:
        for client in sorted(groups[g]):
            left = float(mass[client])
            while left > 1e-12 and row < m:
                put = min(left, room)
                out[row, client] += put
                left -= put
                room -= put
                if room <= 1e-12:
                    row, room = row + 1, 1.0
    return out / out.sum(1, keepdims=True)


@dataclass(frozen=True)
class CluSamp(Algorithm):
    scored_models = "global"  # every client is scored with the one global model
    similarity: Literal["L1", "L2", "arccos"] = "L1"
    linkage_input: Literal["rows", "distances"] = "rows"

    def init(self, fed: Federation, initial: Weights) -> dict:
        size = sum(initial[n].numel() for n in parameter_names(fed.model))
        return {"global": initial, "gradients": torch.zeros(fed.num_clients, size, device=fed.device)}

    def distributions(self, fed: Federation, state: dict) -> np.ndarray:
        m = max(1, round(fed.participation * fed.num_clients))
        d = dissimilarity(state["gradients"], self.similarity)
        with warnings.catch_warnings():  # the rows of a square distance matrix are the observations on purpose
            warnings.simplefilter("ignore", ClusterWarning)
            tree = linkage(d if self.linkage_input == "rows" else squareform(d, checks=False), "ward")
        return sampling_distributions(tree, fed.data.train.counts.cpu().double().numpy(), m)

    def round(self, fed: Federation, state: dict, round_: int):
        r = self.distributions(fed, state)
        cumulative = torch.from_numpy(np.cumsum(r, 1))
        u = torch.rand(len(r), 1, generator=fed.generator, dtype=torch.float64)
        chosen = torch.searchsorted(cumulative, u * cumulative[:, -1:]).squeeze(1).clamp(max=fed.num_clients - 1)
        chosen = chosen.to(fed.device)
        fed.sampled = chosen  # the round's clients (with repeats), for the byte count
        trained, loss = fed.train_clients(broadcast(state["global"], len(chosen)), chosen)
        names = parameter_names(fed.model)
        update = torch.cat([(trained[n] - state["global"][n]).reshape(len(chosen), -1) for n in names], 1)
        gradients = state["gradients"].clone()
        gradients[chosen] = update
        return {"global": fed.average(trained, chosen), "gradients": gradients}, loss

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        return broadcast(state["global"], fed.num_clients)

    def global_model(self, fed: Federation, state: dict) -> Weights:
        return state["global"]


@ALGORITHMS.register("clusamp")
def clusamp(
    *, similarity: Literal["L1", "L2", "arccos"] = "L1", linkage_input: Literal["rows", "distances"] = "rows"
) -> CluSamp:
    """CluSamp (Fraboni et al. 2021, Alg. 2): clustered sampling from the ``similarity`` of the
    clients' representative gradients (L1 as released), Ward linkage on the dissimilarity matrix's
    ``rows`` (the code) or on it as ``distances``."""
    if similarity not in ("L1", "L2", "arccos"):
        raise ValueError(f"similarity must be L1, L2 or arccos, got {similarity!r}")
    if linkage_input not in ("rows", "distances"):
        raise ValueError(f"linkage_input must be 'rows' or 'distances', got {linkage_input!r}")
    return CluSamp(similarity=similarity, linkage_input=linkage_input)
