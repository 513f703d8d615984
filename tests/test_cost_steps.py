"""The cost model's counts, by hand: which clients train, the vectorised engine's padded batches,
the local minibatch steps of a round per algorithm, and the fixed costs per job, round, step and
evaluation (config/throughputs.yaml's ``*_overhead_s``)."""

import pytest

from fedbench.config.cells import TRAINING_DEFAULTS
from fedbench.cost import CellShape, cell_cost
from fedbench.cost.rates import overhead
from fedbench.cost.work import cell_work, counted_steps, evaluations, expected_max, local_samples, local_steps, training_clients
from fedbench.registry.workload import declared_workload

MLR = {"arch": "mlr"}  # Linear(4, 3): 48 FLOPs a trained sample, 24 a scored one
# five clients of 10, 20, 30, 40 and 100 training samples (mean 40); at batch 25 they take 1, 1, 2, 2
# and 4 batches an epoch, and the vectorised engine computes 25, 25, 50, 50 and 100 rows (mean 50)
SIZES = (10, 20, 30, 40, 100)
SHAPE = CellShape(num_clients=5, train_samples=200, eval_samples=50, largest_client=100, input_shape=(4,),
                  num_classes=3, dataset_samples=250, client_sizes=SIZES)
ESTIMATED = CellShape(5, 200, 50, 80, (4,), 3, 250, estimated=True)  # no client sizes: the mean client's 40
TRAINING = {**TRAINING_DEFAULTS, "rounds": 10, "local_epochs": 2, "batch_size": 25, "participation": 0.4, "eval_every": 5}


def spec(algorithm, **training):
    return {"model": MLR, "algorithm": algorithm, "training": {**TRAINING, **training}}


def test_expected_largest_of_the_sampled_clients_by_enumeration():
    # 2 of the batch counts 1, 1, 2, 2, 4: of the 10 pairs, the 4 with the 4 -> 4; of the 6 others,
    # (1, 1) -> 1 and 5 -> 2: (16 + 1 + 10) / 10
    assert expected_max([1, 1, 2, 2, 4], 2) == pytest.approx(2.7)
    assert expected_max([1, 1, 2, 2, 4], 5) == pytest.approx(4) and expected_max([1, 1, 2, 2, 4], 1) == pytest.approx(2)
    assert expected_max([3, 7], 9) == pytest.approx(7)  # more sampled than there are: all of them


def test_local_steps_of_a_round_per_algorithm_by_hand():
    # FedAvg: 2 epochs x E[the batches of the largest of the round's round(0.4 x 5) = 2 clients] = 2 x 2.7
    assert local_steps(declared_workload({"method": "fedavg"}, TRAINING), TRAINING, SHAPE) == pytest.approx(5.4)
    assert local_steps(declared_workload({"method": "fedavg"}, TRAINING), TRAINING, ESTIMATED) == 2 * 2  # ceil(40 / 25) without the sizes
    # FedAvg as pFedMe runs it: local_steps plain steps
    assert local_steps(declared_workload({"method": "fedavg", "local_steps": 20}, TRAINING), TRAINING, SHAPE) == 20
    # pFedMe: local_steps x inner_steps, its defaults 20 x 5
    assert local_steps(declared_workload({"method": "pfedme"}, TRAINING), TRAINING, SHAPE) == 100
    assert local_steps(declared_workload({"method": "pfedme", "local_steps": 8, "inner_steps": 3}, TRAINING), TRAINING, SHAPE) == 24
    # Per-FedAvg: two batches a local step, default 20 local steps
    assert local_steps(declared_workload({"method": "perfedavg"}, TRAINING), TRAINING, SHAPE) == 40
    # pFedMT: team_iterations x local_iterations, default 30 x 20
    assert local_steps(declared_workload({"method": "pfedmt"}, TRAINING), TRAINING, SHAPE) == 600
    assert counted_steps(declared_workload({"method": "pfedmt", "team_iterations": 2, "local_iterations": 3}, TRAINING)) == 6
    # FeMAM (everyone takes part at participation 1): its newest level's 2 epochs x the largest client's 4 batches
    femam = {"method": "femam", "structure": ["global", "cluster", "personal"], "init_rounds": 4, "window": 2}
    everyone = {**TRAINING, "participation": 1.0}
    assert local_steps(declared_workload(femam, everyone), everyone, SHAPE) == 2 * 4
    # Ditto trains two models: twice the epochs
    assert local_steps(declared_workload({"method": "ditto"}, TRAINING), TRAINING, SHAPE) == pytest.approx(2 * 2 * 2.7)
    assert evaluations(TRAINING) == 2 and evaluations({**TRAINING, "eval_every": 3}) == 4  # rounds 3, 6, 9, 10


def test_padded_batches_and_the_clients_that_train_by_hand():
    # the vectorised engine computes a short last batch at full length: 2 epochs x 50 rows, not 2 x 40
    assert local_samples(declared_workload({"method": "fedavg"}, TRAINING), TRAINING, SHAPE, padded=True) == 100
    assert local_samples(declared_workload({"method": "fedavg"}, TRAINING), TRAINING, SHAPE) == 80
    assert local_samples(declared_workload({"method": "fedavg"}, TRAINING), TRAINING, ESTIMATED, padded=True) == 80  # no sizes: unpadded
    # FedAvg: 10 rounds x 2 clients x 100 rows x 48 FLOPs; the reference engine: 80 real rows
    assert cell_work(spec({"method": "fedavg"}), SHAPE)[0] == 10 * 2 * 100 * 48 == 96_000
    assert cell_work(spec({"method": "fedavg"}, engine="reference"), SHAPE)[0] == 10 * 2 * 80 * 48
    # pFedMe and pFedMT train every client each round (the sampled ones only aggregate); Per-FedAvg the sampled
    assert training_clients(declared_workload({"method": "pfedme"}, TRAINING), TRAINING, SHAPE) == 5
    assert training_clients(declared_workload({"method": "pfedmt"}, TRAINING), TRAINING, SHAPE) == 5
    assert training_clients(declared_workload({"method": "perfedavg"}, TRAINING), TRAINING, SHAPE) == 2
    # pFedMe: 10 rounds x 5 clients x 100 steps x min(25, 40) rows x 48 FLOPs
    assert cell_work(spec({"method": "pfedme"}), SHAPE)[0] == 10 * 5 * 100 * 25 * 48
    # pFedMT: 10 rounds x 5 clients x 600 steps x 25 rows x 48
    assert cell_work(spec({"method": "pfedmt"}), SHAPE)[0] == 10 * 5 * 600 * 25 * 48


TABLE = {"safety_factor": 2.0, "job_overhead_s": 60,
         "cpu": {"assumed": 1.0, "job_overhead_s": 20.0, "round_overhead_s": 0.1, "step_overhead_s": 0.01,
                 "eval_overhead_s": 0.5, "families": {"mlp": {"train": 480.0, "eval": 24.0}}},
         "cuda": {"assumed": 1.0, "families": {"mlp": {"train": 480.0, "eval": 24.0}}}}


def test_the_fixed_costs_per_job_round_step_and_evaluation_by_hand():
    # Per-FedAvg: training 10 x 2 clients x 40 steps x 25 rows x 48 = 960,000 FLOPs at 480 /s = 2,000 s;
    # evaluation 2 x (2 models x 50 rows + 200 training rows) x 24 = 14,400 FLOPs at 24 /s = 600 s
    cost = cell_cost(spec({"method": "perfedavg"}), SHAPE, "cpu", TABLE)
    assert (cost.flop_seconds, cost.rounds, cost.steps, cost.evaluations) == (2600, 10, 400, 2)
    # + the CPU's own job overhead 20 s (over the file's 60) + 10 rounds x 0.1 + 400 steps x 0.01 + 2 x 0.5
    assert cost.seconds == pytest.approx(2600 + 20 + 1 + 4 + 1)
    assert cost.counts() == {"job_overhead_s": 1, "round_overhead_s": 10, "step_overhead_s": 400, "eval_overhead_s": 2}
    # the GPU has none of them: the file's job overhead, no other
    assert cell_cost(spec({"method": "perfedavg"}), SHAPE, "cuda", TABLE).seconds == pytest.approx(2600 + 60)
    assert overhead(TABLE, "cuda", "step_overhead_s") == 0 and overhead(TABLE, "cpu", "job_overhead_s") == 20
