"""The algorithm contract (:mod:`fedbench.extension.contract`) over every built-in algorithm, and the
contract catching deliberately broken ones.

The default run checks a representative subset (FedAvg; FedAvg+, scored with fine-tuned models;
IFCA, cluster models in its state; Ditto, personal models; pFedMe, which declares ignored
training settings and trains every client in minibatch steps); ``pytest -m slow tests/test_contract.py`` checks every built-in (FLT with a
freshly pretrained encoder)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from fedbench.algorithms import ALGORITHMS
from fedbench.algorithms.base import Workload
from fedbench.algorithms.fedavg import FedAvg
from fedbench.algorithms.local import Local
from fedbench.extension.contract import PROPERTIES, Case, ContractFailure, check_algorithm, difference
from fedbench.registry.plugins import scratch_registries

DIGITS28 = {"source": "digits", "test_fraction": 0.2}
ENCODER = {"enc": {"dataset": "data", "epochs": 1, "latent_dim": 8, "max_samples": 100, "batch_size": 32}}
WITH_VALIDATION = {"kind": "dirichlet", "alpha": 0.5, "num_clients": 4, "test_fraction": 0.25, "val_fraction": 0.2}

# every built-in algorithm's tiny case: its cheapest settings that still run each of its stages
CASES = {
    "cfl": Case("cfl", {"warmup_rounds": 1, "min_cluster_size": 1, "eps1": 100.0, "eps2": 0.0}),
    "clusamp": Case("clusamp"),
    "ditto": Case("ditto"),
    "fedasam": Case("fedasam"),
    "fedavg": Case("fedavg"),
    "fedavg_plus": Case("fedavg_plus"),
    "fedexp": Case("fedexp"),
    "fedgen": Case("fedgen", {"generator_epochs": 1, "teacher_iterations": 2, "hidden": 16, "noise_dim": 8,
                              "generator_batch": 16}),
    "fedindep": Case("fedindep"),
    "fedmr": Case("fedmr", {"first_stage_rounds": 1}),
    "fedmut": Case("fedmut"),
    "fedprox": Case("fedprox"),
    "fedrep": Case("fedrep", {"head_epochs": 1, "body_epochs": 1}),
    "femam": Case("femam", {"num_clusters": 2, "init_rounds": 1, "window": 1}, partition=WITH_VALIDATION,
                  training={"participation": 1.0}),  # FeMAM trains every client and selects on validation rows
    "fesem": Case("fesem", {"num_clusters": 2}),
    "fesem_flt": Case("fesem_flt", {"num_clusters": 2}),
    "fesem_plus": Case("fesem_plus", {"num_clusters": 2, "finetune_epochs": 1}),
    "flt": Case("flt", {"encoder": "enc", "k": 2, "clusters": 2, "umap_neighbors": 3}, dataset=DIGITS28, encoders=ENCODER),
    "ifca": Case("ifca"),
    "local": Case("local"),
    "pca_km_hc": Case("pca_km_hc", {"k": 2, "pca_components": 4, "clusters": 2}),
    "perfedavg": Case("perfedavg", {"local_steps": 2}),
    "pfedme": Case("pfedme", {"local_steps": 2, "inner_steps": 2}),
    "pfedmt": Case("pfedmt", {"team_iterations": 2, "local_iterations": 2}),
}
QUICK = ("fedavg", "fedavg_plus", "ifca", "ditto", "pfedme")


def test_every_built_in_algorithm_has_a_contract_case():
    assert sorted(CASES) == ALGORITHMS.names()


@pytest.mark.parametrize("method", QUICK)
def test_representative_algorithms_pass_the_contract(method, tmp_path):
    report = check_algorithm(CASES[method], tmp_path)
    assert list(report.results) == list(PROPERTIES)
    report.raise_for_failures()


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(set(CASES) - set(QUICK)))
def test_every_built_in_algorithm_passes_the_contract(method, tmp_path):
    check_algorithm(CASES[method], tmp_path).raise_for_failures()


# ---- broken algorithms the contract must catch ----------------------------------------------------------------


@dataclass(frozen=True)
class _KeepsStateOnItself(FedAvg):
    """Halves the global model from its second round on, counting rounds on the instance, not in the state."""

    seen: dict = field(default_factory=lambda: {"rounds": 0})

    def round(self, fed, state, round_):
        self.seen["rounds"] += 1
        state, loss = super().round(fed, state, round_)
        if self.seen["rounds"] > 1:
            state = {**state, "global": {k: v / 2 if v.is_floating_point() else v for k, v in state["global"].items()}}
        return state, loss


@dataclass(frozen=True)
class _PeeksAtTestRows(FedAvg):
    """Nudges its biases by the mean of the test rows' features."""

    def round(self, fed, state, round_):
        state, loss = super().round(fed, state, round_)
        peek = 1e-3 * fed.data.x[fed.data.test.union].mean()
        return {**state, "global": {k: v + peek if k.endswith("bias") else v for k, v in state["global"].items()}}, loss


@dataclass(frozen=True)
class _ReadsWhatItIgnores(FedAvg):
    ignored_training = {"lr": "claims a step size of its own"}  # but its local SGD uses training.lr


@dataclass(frozen=True)
class _ScoresWithTheTrainingStream(FedAvg):
    def client_models(self, fed, state, round_):
        torch.randperm(fed.num_clients, generator=fed.generator)  # moves training's random stream
        return super().client_models(fed, state, round_)


@dataclass(frozen=True)
class _ClaimsOneModelForEveryone(Local):
    scored_models = "global"  # but each client keeps its own model: the cost model would count too few rows


@dataclass(frozen=True)
class _ClaimsEveryClientTrains(FedAvg):
    @classmethod
    def workload(cls, params, training):  # but only the sampled 3 of 4 do
        return Workload(local_passes=training["local_epochs"], every_client_trains=True)


@dataclass(frozen=True)
class _ClaimsTwoPasses(FedAvg):
    @classmethod
    def workload(cls, params, training):  # but its clients run local_epochs passes
        return Workload(local_passes=2 * training["local_epochs"])


@dataclass(frozen=True)
class _ClaimsStepsOfOneBatch(FedAvg):
    local_steps: int = 2  # plain SGD steps, one minibatch each

    @classmethod
    def workload(cls, params, training):  # but counts 2 batches a step
        return Workload(local_steps=2, batches_per_step=2)


@dataclass(frozen=True)
class _FineTunesUndeclared(FedAvg):
    finetune_epochs: int = 1  # every client fine-tunes before scoring; FedAvg's declaration reads no such entry


@dataclass(frozen=True)
class _DeclaresNoWorkload(FedAvg):
    @classmethod
    def workload(cls, params, training):
        return {"local_passes": 1}


def _register(name, cls):
    def build() -> cls:
        return cls()

    build.__annotations__["return"] = cls
    ALGORITHMS.register(name)(build)


@pytest.mark.parametrize("cls, broken", [
    (_KeepsStateOnItself, "resume"),
    (_PeeksAtTestRows, "test_rows"),
    (_ReadsWhatItIgnores, "ignored_training"),
    (_ScoresWithTheTrainingStream, "scoring"),
    (_ClaimsOneModelForEveryone, "scoring"),
    (_ClaimsEveryClientTrains, "workload"),
    (_ClaimsTwoPasses, "workload"),
    (_ClaimsStepsOfOneBatch, "workload"),
    (_FineTunesUndeclared, "workload"),
    (_DeclaresNoWorkload, "workload"),
])
def test_the_contract_fails_a_broken_algorithm(cls, broken, tmp_path):
    """Each broken algorithm fails the property it breaks, with a message saying where, and passes the
    determinism check (it is deterministic: only the broken property tells it apart)."""
    with scratch_registries():
        _register("broken", cls)
        report = check_algorithm(Case("broken"), tmp_path, properties=("deterministic", broken))
    assert report.results["deterministic"] == ("pass", "")
    assert list(report.failures) == [broken]
    with pytest.raises(ContractFailure, match=f"broken: {broken}: fail"):
        report.raise_for_failures()


def test_an_exemption_is_reported_with_its_reason_and_an_unknown_property_is_refused(tmp_path):
    report = check_algorithm(Case("fedavg", exempt={"scoring": "a reason"}), tmp_path, properties=("checkpoint", "scoring"))
    assert report.results == {"checkpoint": ("pass", ""), "scoring": ("exempt", "a reason")}
    assert report.lines() == ["fedavg: checkpoint: pass", "fedavg: scoring: exempt (a reason)"]
    with pytest.raises(ValueError, match=r"unknown contract properties \['resumes'\]"):
        check_algorithm(Case("fedavg", exempt={"resumes": "typo"}), tmp_path)


def test_difference_names_where_two_states_differ():
    a = {"global": {"w": torch.zeros(2)}, "assignment": [0, 1], "nan": float("nan")}
    assert difference(a, {"global": {"w": torch.zeros(2)}, "assignment": [0, 1], "nan": float("nan")}) is None
    assert difference(a, {**a, "global": {"w": torch.tensor([0.0, 0.5])}}) == (
        "state['global']['w'] differs (largest difference 0.5)")
    assert difference(a, {**a, "assignment": (0, 1)}) == "state['assignment'] is a list of 2 against a tuple of 2"
    assert difference({"a": 1}, {"b": 1}) == "state has keys ['a'] against ['b']"
