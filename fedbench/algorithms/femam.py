"""FeMAM — Federated Multi-Level Additive Modeling (Chen et al., "Multi-Level Additive Modeling for
Structured Non-IID Federated Learning"; Algorithms 1-2, Eqs. 2-9, B.1-B.5).

Every client predicts with the sum of its levels' outputs (Eq. 2, :class:`AdditiveLevels`).  Levels
are added one at a time (Sec. 3.4, "progressive level adding"); only the newest level trains, the
earlier ones frozen, BatchNorm in eval mode (Eq. 8).  The kind of each level (``structure``):

* ``global``: every client trains from the one global model, the server averages (Eq. B.2, B.1b);
* ``cluster``: clients are grouped by k-means on their trained level models (Eq. 4 / B.3) and each
  group's model is the sample-weighted average of its members' (Eq. 7); local training adds
  lam/2 ||theta - Theta_C(i)||^2 (Eq. 5 / B.4; Theta_C(i) is the model the client started the round from);
* ``personal``: each client trains its own model, nothing is aggregated (Eq. B.5).

A round: broadcast (Eq. 6), local training of the newest level by every client holding it,
grouping + aggregation (Eq. 7), then every client's validation loss and accuracy with all its
levels.  When the convergence test fires (:func:`~fedbench.algorithms.femam_rules.converged`) each
client drops the newest level if it did not lower its validation loss (Eq. 9, ``epsilon``; the
first level is never pruned), and the next level of ``structure`` is added; after the last level
has converged and been pruned the structure is final and its level keeps training (as the code
does until its last epoch): by the clients that kept it (``final_training: holders``, Alg. 2 line
16: the level's models and mapping are adjusted to the remaining clients) or by every client,
re-grouped every round so that pruned clients rejoin (``everyone``, the code: ``aggregate_id``
re-clusters all clients at the latest level).  Model selection (minimum mean validation loss) is
the ``femam`` evaluation protocol's job.  Every client takes part in every round (as the paper and
code).

A new level (Alg. 2 line 2, "Randomly initialize models Theta_{1:K_L'} and mapping function C_L'"):
``new_level: random_groups`` (default) draws K_L' random models (1 for a global level,
``num_clusters`` for a cluster level, one per client for the personal level) and a random mapping
(a cluster level's clients dealt evenly over its K models in random order), each client starting
from its group's model (Eq. B.1a), the K models the first centres of Eq. B.3; ``random_shared``
(fedbench before issue 24) gives every client one shared random model in one group, k-means
forming the groups after the first round; ``global_copy`` (the code) copies the level-1 model.

The round in which a level is added is scored (``client_models``, ``clusters``) on the state the
convergence test validated, before pruning and the new level (the code tests before adding); the
new level counts from the next round on.

The released code's choices (notes §1.7) are named options, the paper's reading the default:
``combine`` ("sum" / code "mean" of the logits), ``convergence`` ("accuracy_variance" / code
"loss_std" from ``init_rounds``), ``new_level`` ("random_groups" / code "global_copy"; "random_shared"),
``cluster_features`` ("parameters" / code "last_layer") with ``cluster_fit`` ("sem" / code
"refit"), ``prox_levels`` ("cluster" / code "all", with lam = 0.02 for the code's 0.01 ||.||^2),
``pruning`` ("eq9" / code "window"), ``pruned_level`` ("leaves" the prediction / code "stays"),
``final_training`` ("holders" / code "everyone").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Federation, Workload
from fedbench.algorithms.clustered import cluster_average, flat, fresh_weights
from fedbench.algorithms.femam_rules import (
    CLUSTER_FIT, CONVERGENCE, FEATURES, PRUNING, cluster_features, converged, earliest_schedule, keep_eq9, keep_window,
    kmeans_groups,
)
from fedbench.algorithms.partial import train_module, trainer_for
from fedbench.engine.evaluate import evaluate_clients
from fedbench.engine.frozen_levels import LevelLogits, WeightsIdentity
from fedbench.engine.traffic import Traffic
from fedbench.engine.weights import Weights, broadcast, parameter_names, put_rows, rows
from fedbench.models.additive import COMBINE, AdditiveLevels, additive_weights, level_key
from fedbench.registry.search_space import LogRange, Relative

KINDS = ("global", "cluster", "personal")
NEW_LEVEL = ("random_groups", "random_shared", "global_copy")
FINAL_TRAINING = ("holders", "everyone")
PRUNED_LEVEL = ("leaves", "stays")
PROX_LEVELS = ("cluster", "all")
PAPER_STRUCTURE = ("global", "cluster", "cluster", "cluster", "personal")  # Sec. 5.1: 5 levels


def _choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"FeMAM {name} must be one of {', '.join(valid)}; got {value!r}")


@dataclass(frozen=True)
class FeMAM(Algorithm):
    structure: tuple[str, ...] = PAPER_STRUCTURE
    num_clusters: int = 5
    lam: float = 0.02
    prox_levels: str = "cluster"
    combine: str = "sum"
    convergence: str = "accuracy_variance"
    init_rounds: int = 400
    window: int = 50
    threshold: float = 1.0
    new_level: str = "random_groups"
    cluster_features: str = "parameters"
    cluster_fit: str = "sem"
    pruning: str = "eq9"
    epsilon: float = 0.0
    pruned_level: str = "leaves"
    final_training: str = "holders"
    _modules: dict = field(default_factory=dict, compare=False, repr=False)
    _level_logits: dict = field(default_factory=dict, compare=False, repr=False)  # per federation's data

    # its newest level trains on the wide step beside its frozen levels' kept logits, whose table takes no memory format
    ignored_training = {"channels_last": "FeMAM's local training reads its frozen levels' logits from a table whose step "
                                          "takes no memory format (channels_last applies to the wide step and the reference loop)"}
    harmless_training = {"channels_last": False}

    def __post_init__(self):
        if len(self.structure) < 1:
            raise ValueError("FeMAM structure needs at least 1 level, got none")
        for level, kind in enumerate(self.structure):
            if kind not in KINDS:
                raise ValueError(f"FeMAM structure level {level + 1}: {kind!r} is not one of {', '.join(KINDS)}")
        for name, valid in (("prox_levels", PROX_LEVELS), ("combine", COMBINE), ("convergence", CONVERGENCE),
                            ("new_level", NEW_LEVEL), ("cluster_features", FEATURES), ("cluster_fit", CLUSTER_FIT),
                            ("pruning", PRUNING), ("pruned_level", PRUNED_LEVEL), ("final_training", FINAL_TRAINING)):
            _choice(name, getattr(self, name), valid)
        if self.num_clusters < 1 or self.window < 1 or self.init_rounds < 0:
            raise ValueError(f"FeMAM needs num_clusters >= 1, window >= 1, init_rounds >= 0; got "
                             f"{self.num_clusters}, {self.window}, {self.init_rounds}")
        if self.lam < 0 or self.threshold <= 0:
            raise ValueError(f"FeMAM needs lam >= 0 and threshold > 0; got {self.lam}, {self.threshold}")

    @classmethod
    def workload(cls, params, training) -> Workload:
        """Only the newest level trains, E epochs a round (Sec. 3.4, Eq. 8); the clients counted as the sampled
        ones (FeMAM's grids take every client, participation 1, as Algorithm 1).  Every level frozen within the
        run's rounds (all but the last that trains in :func:`~fedbench.algorithms.femam_rules.earliest_schedule`,
        an upper bound) runs one forward per row, once: its logits are kept (:mod:`fedbench.engine.frozen_levels`)."""
        rounds = training["rounds"]
        schedule = earliest_schedule(len(params["structure"]), rounds, init_rounds=params["init_rounds"],
                                     window=params["window"])
        frozen = max(0, sum(n > 0 for n in schedule) - 1) if rounds >= 1 else 0
        return Workload(local_passes=training["local_epochs"], frozen_levels=frozen)

    # ---- modules ---------------------------------------------------------------------------

    def _module(self, fed: Federation, n_levels: int):
        """The additive model with ``n_levels`` levels (newest trainable) and its trainer, built once;
        the models of one federation share the levels' logits kept by evaluation (a frozen level's
        stay valid when the next level is added)."""
        key = (id(fed.data), n_levels)
        if key not in self._modules:
            module = AdditiveLevels(fed.model, n_levels, self.combine).to(fed.device)
            module.level_logits = self._level_logits.setdefault(id(fed.data), LevelLogits())
            self._modules[key] = (module, trainer_for(fed, module))
        return self._modules[key]

    def scoring_model(self, fed: Federation, state: dict) -> AdditiveLevels:
        """The module the stacked :meth:`client_models` belong to (read by the pipeline)."""
        return self._module(fed, len(_scored(state)["levels"]))[0]

    def _active(self, fed: Federation, state: dict) -> torch.Tensor:
        """a_l per client: a pruned level leaves the prediction (paper) or stays in it (code)."""
        kept = state["kept"] if self.pruned_level == "leaves" else np.ones_like(state["kept"])
        return torch.from_numpy(kept.astype(np.float32)).to(fed.device)

    # ---- levels ----------------------------------------------------------------------------

    def _new_level(self, fed: Federation, state: dict | None, initial: Weights, level: int
                   ) -> tuple[Weights, np.ndarray, Weights | None]:
        """Stacked starting weights, groups and (a cluster level under ``random_groups``) the K
        starting centres of level ``level``.  The first level starts from the run's initial model;
        a later one as ``new_level`` says (module doc; Alg. 2 line 2 and Eq. B.1a)."""
        m, kind = fed.num_clients, self.structure[level]
        groups = np.arange(m) if kind == "personal" else np.zeros(m, dtype=np.int64)
        if level == 0:
            return broadcast(initial, m), groups, None
        if self.new_level == "global_copy":
            return {k: v.clone() for k, v in state["levels"][0].items()}, groups, None
        if self.new_level == "random_shared":
            return broadcast(fresh_weights(fed, fed.seed * 1000 + level), m), groups, None
        count = {"global": 1, "cluster": min(self.num_clusters, m), "personal": m}[kind]
        models = [fresh_weights(fed, fed.seed * 1000 + level + 100_000 * j) for j in range(count)]
        centres = {k: torch.stack([model[k] for model in models]) for k in models[0]}
        if kind == "cluster":  # a random mapping C_L' that uses every one of the K models
            rng = np.random.default_rng([fed.seed, level])
            groups = rng.permutation(np.arange(m) % count).astype(np.int64)
        start = rows(centres, torch.from_numpy(groups).to(fed.device))
        return start, groups, centres if kind == "cluster" else None

    def init(self, fed: Federation, initial: Weights) -> dict:
        if fed.data.val is None:
            raise ValueError("FeMAM needs per-client validation rows (convergence, pruning and model selection "
                             "use them): use a partition with val_fraction or val_ratio > 0")
        if fed.participation != 1.0:
            raise ValueError(f"FeMAM trains every client every round (paper and code); participation is {fed.participation}")
        start, groups, _ = self._new_level(fed, None, initial, 0)
        return {
            "levels": [start], "groups": [groups], "kept": np.ones((fed.num_clients, 1), dtype=bool),
            "centres": None, "added": [0], "pruned": [[]],
            "level_loss": [], "level_acc": [], "val_log": [], "val_level": [], "trace": [], "complete": False,
        }

    # ---- one round -------------------------------------------------------------------------

    def round(self, fed: Federation, state: dict, round_: int):
        fed.sample_clients()  # everyone; drawn as FedAvg draws, so that one global level is FedAvg
        state = {k: v for k, v in state.items() if k != "scored"}  # last round's pre-addition state
        newest = len(state["levels"]) - 1
        kind = self.structure[newest]
        if state["complete"] and self.final_training == "everyone":  # the code: pruned clients train and rejoin
            kept = state["kept"].copy()
            kept[:, newest] = True
            state = {**state, "kept": kept}
        holders = torch.from_numpy(np.flatnonzero(state["kept"][:, newest])).to(fed.device)
        if not len(holders):  # every client dropped the final level: nothing left to train
            state = self._validate(fed, state, round_)
            return state, torch.zeros(1, device=fed.device)
        module, trainer = self._module(fed, newest + 1)
        start = rows(additive_weights(state["levels"], self._active(fed, state)), holders)
        mu = self.lam if kind == "cluster" or self.prox_levels == "all" else 0.0
        frozen = WeightsIdentity(state["levels"][:newest]) if newest else None  # unchanged while this level trains
        trained, loss = train_module(fed, trainer, start, holders, fed.with_local(prox_mu=mu), center=start,
                                     frozen_key=frozen)
        level = {k: trained[level_key(newest, k)] for k in state["levels"][newest]}
        state = self._aggregate(fed, state, newest, kind, holders, level, round_)
        return self._validate(fed, state, round_), loss

    def communication(self, fed: Federation, before: dict, after: dict, round_: int) -> Traffic:
        """Sec. 5.5 ("the client only needs to download and update the model at the latest level"):
        every client that trains the newest level this round (its holders, as :meth:`round` picks
        them) receives its group's model of that level and sends its trained one back; the frozen
        levels it already holds are not sent again (one level model each way, FedAvg's volume)."""
        newest = len(before["levels"]) - 1
        holding = before["kept"][:, newest].copy()
        if before["complete"] and self.final_training == "everyone":
            holding[:] = True
        size = fed.model_bytes(before["levels"][newest], stacked=True)
        return Traffic.to(fed.num_clients, np.flatnonzero(holding), size, size)

    def _aggregate(self, fed, state, newest, kind, holders, level, round_) -> dict:
        """Eq. (7) at the newest level, then broadcast (Eq. 6) into every holder's row."""
        full = state["levels"][newest]
        groups = state["groups"][newest].copy()
        centres = state["centres"]
        if kind == "personal":
            merged = put_rows(full, holders, level)
            groups[holders.cpu().numpy()] = holders.cpu().numpy()  # every holder its own group
        elif kind == "global":
            merged = put_rows(full, holders, broadcast(fed.average(level, holders), len(holders)))
            groups[holders.cpu().numpy()] = 0
        else:
            names = parameter_names(fed.model)
            last = torch.cat([level[n].flatten(1) for n in names[-2:]], 1)
            features = cluster_features(flat(fed, level), last, self.cluster_features)
            previous = None
            if self.cluster_fit == "sem" and centres is not None:
                previous = cluster_features(flat(fed, centres), torch.cat([centres[n].flatten(1) for n in names[-2:]], 1),
                                            self.cluster_features)
            choice = kmeans_groups(features, self.num_clusters, fit=self.cluster_fit, seed=fed.seed * 100_003 + round_,
                                   centres=previous)
            choice_t = torch.from_numpy(np.asarray(choice, dtype=np.int64)).to(fed.device)
            if previous is None:  # first grouping (or refit): centres seeded with a member of each group
                k = min(self.num_clusters, len(holders))
                seed_rows = [int(np.flatnonzero(choice == g)[0]) if (choice == g).any() else 0 for g in range(k)]
                centres = rows(level, torch.tensor(seed_rows, device=fed.device))
            centres = cluster_average(fed, centres, level, holders, choice_t)
            merged = put_rows(full, holders, rows(centres, choice_t))
            groups[holders.cpu().numpy()] = choice
        levels = state["levels"][:-1] + [merged]
        all_groups = state["groups"][:-1] + [groups]
        return {**state, "levels": levels, "groups": all_groups,
                "centres": centres if self.cluster_fit == "sem" and kind == "cluster" else None}

    def _validate(self, fed: Federation, state: dict, round_: int) -> dict:
        """Every client's validation loss/accuracy with its levels; the convergence test; pruning
        (Eq. 9) and adding the next level when it fires."""
        newest = len(state["levels"]) - 1
        module = self._module(fed, newest + 1)[0]
        everyone = torch.arange(fed.num_clients, device=fed.device)
        active = self._active(fed, state)
        val = evaluate_clients(module, additive_weights(state["levels"], active), fed.data, fed.data.val, everyone)
        state = {
            **state,
            "level_loss": state["level_loss"] + [float(val.loss.mean())],
            "level_acc": state["level_acc"] + [float(val.accuracy.mean())],
            "val_log": state["val_log"] + [val.loss.copy()],
            "val_level": state["val_level"] + [newest],
            "trace": state["trace"] + [(round_, newest + 1, float(val.loss.mean()), float(val.accuracy.mean()))],
        }
        if state["complete"] or not converged(
            state["level_loss"], state["level_acc"], round_, rule=self.convergence,
            init_rounds=self.init_rounds, window=self.window, threshold=self.threshold,
        ):
            return state
        scored = {"levels": state["levels"], "kept": state["kept"], "groups": state["groups"]}  # as validated
        kept, groups, pruned = state["kept"].copy(), [g.copy() for g in state["groups"]], [list(p) for p in state["pruned"]]
        if newest > 0:
            if self.pruning == "eq9":
                without = active.clone()
                without[:, newest] = 0
                loss_without = evaluate_clients(module, additive_weights(state["levels"], without), fed.data,
                                                fed.data.val, everyone).loss
                keep = keep_eq9(loss_without, val.loss, self.epsilon)
            else:
                keep = keep_window(np.stack(state["val_log"]), np.array(state["val_level"]), kept, newest,
                                   self.window, self.epsilon)
            drop = kept[:, newest] & ~keep
            kept[:, newest] &= keep
            groups[newest][drop] = -1
            pruned[newest] = sorted(set(pruned[newest]) | set(np.flatnonzero(drop).tolist()))
        state = {**state, "kept": kept, "groups": groups, "pruned": pruned}
        if newest + 1 == len(self.structure):
            return {**state, "complete": True}
        start, new_groups, centres = self._new_level(fed, state, None, newest + 1)
        return {
            **state,
            "levels": state["levels"] + [start], "groups": groups + [new_groups],
            "kept": np.concatenate([kept, np.ones((fed.num_clients, 1), dtype=bool)], 1),
            "centres": centres, "added": state["added"] + [round_], "pruned": pruned + [[]],
            "level_loss": [], "level_acc": [], "scored": scored,
        }

    # ---- what the pipeline reads -----------------------------------------------------------

    def client_models(self, fed: Federation, state: dict, round_: int) -> Weights:
        """Every client's additive model; in the round a level was added, the validated state before it."""
        scored = _scored(state)
        return additive_weights(scored["levels"], self._active(fed, scored))

    def global_model(self, fed: Federation, state: dict) -> Weights | None:
        if self.structure[0] != "global":
            return None
        return {k: v[0] for k, v in state["levels"][0].items()}

    def level_clusters(self, fed: Federation, state: dict) -> dict[str, np.ndarray]:
        """Group of every client at every level added so far (-1: the client dropped the level)."""
        return {f"level{l + 1}": g for l, g in enumerate(state["groups"])}

    def clusters(self, fed: Federation, state: dict) -> np.ndarray | None:
        """The first cluster level's groups once it exists (scored against a ``cluster`` ground truth;
        in the round a level was added, as validated before it)."""
        groups = _scored(state)["groups"]
        for l, kind in enumerate(self.structure[: len(groups)]):
            if kind == "cluster":
                return groups[l]
        return None

    def artifacts(self, fed: Federation, state: dict) -> dict:
        levels = []
        for l, groups in enumerate(state["groups"]):
            members = {str(g): np.flatnonzero(groups == g).tolist() for g in np.unique(groups) if g >= 0}
            levels.append({
                "level": l + 1, "kind": self.structure[l], "added_round": state["added"][l],
                "groups": members, "assignment": groups.tolist(), "pruned": state["pruned"][l],
            })
        trace = [{"round": r, "levels": n, "val_loss": vl, "val_acc": va} for r, n, vl, va in state["trace"]]
        return {"structure": {"structure": list(self.structure), "complete": state["complete"],
                              "levels": levels, "trace": trace}}


def _scored(state: dict) -> dict:
    """What the pipeline scores: the state as validated before a level was added this round, else the state."""
    return state.get("scored", state)


@ALGORITHMS.register("femam", search={"lam": LogRange(0.002, 0.2), "init_rounds": Relative(0.5, 2, integer=True),
                                        "window": Relative(0.5, 2, integer=True)},
                     figures=("femam_structure",))  # levels x clients beside the truth, levels vs rounds
def femam(
    *,
    structure: list[Literal["global", "cluster", "personal"]] = list(PAPER_STRUCTURE),
    num_clusters: int = 5,
    lam: float = 0.02,
    prox_levels: Literal["cluster", "all"] = "cluster",
    combine: Literal["sum", "mean"] = "sum",
    convergence: Literal["accuracy_variance", "loss_std"] = "accuracy_variance",
    init_rounds: int = 400,
    window: int = 50,
    threshold: float = 1.0,
    new_level: Literal["random_groups", "random_shared", "global_copy"] = "random_groups",
    cluster_features: Literal["parameters", "last_layer"] = "parameters",
    cluster_fit: Literal["sem", "refit"] = "sem",
    pruning: Literal["eq9", "window"] = "eq9",
    epsilon: float = 0.0,
    pruned_level: Literal["leaves", "stays"] = "leaves",
    final_training: Literal["holders", "everyone"] = "holders",
) -> FeMAM:
    """FeMAM (Chen et al.): levels of kind global/cluster/personal added one by one (``structure``;
    the paper's 5 levels by default), ``num_clusters`` groups per cluster level, proximal weight ``lam``
    (the paper leaves lambda open: 0.02 = the code's 0.01 ||.||^2), convergence after ``init_rounds``
    over ``window`` rounds below ``threshold``, pruning margin ``epsilon`` (Eq. 9); the other
    keywords choose between the paper's reading (default) and the released code's (docs/fidelity.md)."""
    return FeMAM(
        structure=tuple(structure), num_clusters=num_clusters, lam=lam, prox_levels=prox_levels, combine=combine,
        convergence=convergence, init_rounds=init_rounds, window=window, threshold=threshold, new_level=new_level,
        cluster_features=cluster_features, cluster_fit=cluster_fit, pruning=pruning, epsilon=epsilon,
        pruned_level=pruned_level, final_training=final_training,
    )
