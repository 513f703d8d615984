"""The cost model reads what algorithms and models declare, never their names: no method or
architecture name in its source; a plugin algorithm costs what its workload declares, a plugin model
without a throughput family the device's assumed rate, uncalibrated; declarations are type-checked."""

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
from torch import nn

from fedbench.algorithms.base import ALGORITHMS, Algorithm, Clustering, Workload
from fedbench.algorithms.fedavg import FedAvg
from fedbench.config.cells import TRAINING_DEFAULTS
from fedbench.cost import CellShape, cell_cost, throughputs
from fedbench.cost.families import family_benchmarks, model_family
from fedbench.cost.work import cell_work, local_steps
from fedbench.registry.workload import declared_workload
from fedbench.models import MODELS
from fedbench.registry.plugins import scratch_registries

COST = Path(__file__).resolve().parents[1] / "fedbench" / "cost"
MLR = {"arch": "mlr"}  # Linear(4, 3): 48 FLOPs a trained sample, 24 a scored one
SHAPE = CellShape(num_clients=10, train_samples=1000, eval_samples=200, largest_client=150, input_shape=(4,),
                  num_classes=3, dataset_samples=1200)
TRAINING = {**TRAINING_DEFAULTS, "rounds": 10, "participation": 0.5, "local_epochs": 2, "eval_every": 5, "batch_size": 25}
TABLE = {"safety_factor": 2.0, "job_overhead_s": 60,
         "cpu": {"assumed": 10.0, "families": {"mlp": {"train": 1000.0, "eval": 100.0},
                                               "fedavg_cnn": {"train": 5000.0, "eval": 500.0}}}}


def spec(method: str, model=MLR) -> dict:
    return {"model": model, "algorithm": {"method": method}, "training": TRAINING}


def test_the_cost_package_names_no_method_and_no_architecture():
    names = set(ALGORITHMS.names()) | set(MODELS.names())
    found = [f"{path.name}:{node.lineno}: {node.value!r}" for path in sorted(COST.glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]
    assert not found, "the cost model names registered methods or architectures:\n" + "\n".join(found)


@dataclass(frozen=True)
class EveryClientThreePasses(FedAvg):
    @classmethod
    def workload(cls, params, training):
        return Workload(local_passes=3, every_client_trains=True, choice_models=2, choice_rounds=training["rounds"])


def _register(name: str, cls) -> None:
    def build() -> cls:
        return cls()

    build.__annotations__["return"] = cls
    ALGORITHMS.register(name)(build)


def test_a_plugin_algorithm_costs_what_its_workload_declares_not_fedavgs():
    # FedAvg: 10 rounds x 5 sampled clients x 2 epochs x 100 rows x 48 = 480,000 FLOPs; evaluation
    # 2 x (2 x 200 test rows + 1000 training rows) x 24 = 67,200
    assert cell_work(spec("fedavg"), SHAPE) == (480_000, 67_200)
    with scratch_registries():
        _register("mine", EveryClientThreePasses)
        # every client, 3 passes: 10 x 10 x 3 x 100 x 48; and 2 models scored on the 5 sampled clients'
        # 100 rows every round: 10 x 5 x 100 x 2 x 24 = 240,000 more of evaluation
        assert cell_work(spec("mine"), SHAPE) == (1_440_000, 67_200 + 240_000)
        # its steps: 3 passes x ceil(100 / 25) batches of the mean client (every client steps together)
        assert local_steps(declared_workload({"method": "mine"}, TRAINING), TRAINING, SHAPE) == 3 * 4
        cost = cell_cost(spec("mine"), SHAPE, "cpu", TABLE)
        assert cost.seconds == 60 + 1_440_000 / 1000 + 307_200 / 100
    assert declared_workload({"method": "not_loaded"}, TRAINING) == Workload(local_passes=2)  # nothing to read


def test_a_plugin_model_without_a_family_gets_the_assumed_rate_uncalibrated():
    with scratch_registries():
        @MODELS.register("plugin_net")
        def plugin_net(input_shape, num_classes) -> nn.Module:
            return nn.Sequential(nn.Flatten(), nn.Linear(4, num_classes))

        @MODELS.register("plugin_mlp", family="mlp")
        def plugin_mlp(input_shape, num_classes) -> nn.Module:
            return nn.Sequential(nn.Flatten(), nn.Linear(4, num_classes))

        assert model_family("plugin_net") is None and model_family("plugin_mlp") == "mlp"
        undeclared = cell_cost(spec("fedavg", {"arch": "plugin_net"}), SHAPE, "cpu", TABLE)
        assert undeclared.family == "undeclared" and not undeclared.calibrated
        assert "declares no throughput family" in undeclared.throughput
        assert undeclared.seconds == 60 + (480_000 + 67_200) / 10.0  # the assumed 10 FLOP/s, not fedavg_cnn's
        declared = cell_cost(spec("fedavg", {"arch": "plugin_mlp"}), SHAPE, "cpu", TABLE)
        assert declared.family == "mlp" and declared.calibrated and declared.seconds == 60 + 480_000 / 1000 + 67_200 / 100


def test_every_model_declares_a_family_and_every_measured_family_its_benchmark():
    benchmarks = family_benchmarks()
    assert {arch: model_family(arch) for arch in MODELS.names() if model_family(arch) not in benchmarks} == {}
    measured = {key.partition("@")[0] for device in ("cpu", "cuda") for key in throughputs()[device].get("families", {})}
    assert measured <= set(benchmarks)
    assert benchmarks["mlp"].flat and not benchmarks["resnet9"].flat
    with scratch_registries():
        @MODELS.register("second_mlp_benchmark", family="mlp", benchmark_input=(10,))
        def second(input_shape, num_classes) -> nn.Module:
            return nn.Linear(10, num_classes)

        with pytest.raises(ValueError, match="both declare the benchmark of family 'mlp'"):
            family_benchmarks()


def test_a_declaration_is_type_checked():
    with pytest.raises(TypeError, match=r"Workload.local_steps: 1.5 is not int"):
        Workload(local_steps=1.5)
    with pytest.raises(TypeError, match=r"Workload.local_passes: True is not float"):
        Workload(local_passes=True)
    with pytest.raises(ValueError, match=r"Workload.local_passes: -1 is not a finite number >= 0"):
        Workload(local_passes=-1)
    with pytest.raises(ValueError, match=r"Workload.batches_per_step: 0 is not >= 1"):
        Workload(batches_per_step=0)
    with pytest.raises(TypeError, match=r"Workload.clustering: .* is not Clustering or NoneType"):
        Workload(clustering={"model_kmeans": True})
    with pytest.raises(ValueError, match=r"Clustering.restarts: 0 is not >= 1"):
        Clustering(restarts=0)
    assert Workload(relatedness_finetune_epochs=None).relatedness_finetune_epochs is None


@dataclass(frozen=True)
class WorkloadOnTheInstance(FedAvg):
    def workload(self, params, training):
        return Workload(local_passes=1)


@dataclass(frozen=True)
class MisspeltWorkload(FedAvg):
    def workloads(self, params, training):
        return Workload(local_passes=1)


@pytest.mark.parametrize("cls, message", [(WorkloadOnTheInstance, "workload is called on the class"),
                                          (MisspeltWorkload, "did you mean 'workload'")])
def test_registration_refuses_a_workload_the_cost_model_cannot_call(cls, message):
    with scratch_registries(), pytest.raises(TypeError, match=message):
        _register("broken", cls)


def test_the_default_workload_is_fedavgs():
    assert Algorithm.workload({}, TRAINING) == Workload(local_passes=2)
