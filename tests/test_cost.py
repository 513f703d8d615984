"""The cost model on cells computed by hand: FLOPs and bytes of tiny models, the work of a run,
its time from a throughput table, its memory, and the planning-time budget check."""

import math
from pathlib import Path

import pytest
import yaml

from fedbench.config.cells import TRAINING_DEFAULTS, ConfigError
from fedbench.planning.validate import check_config
from fedbench.algorithms.femam_rules import earliest_schedule
from fedbench.cost import CellShape, cell_cost, choose_device, estimated_shape, model_cost, runtime_minutes, summary_shape
from fedbench.cost.rates import family_rate
from fedbench.cost.server import clustering_seconds, relatedness_seconds, server_average_seconds
from fedbench.cost.work import cell_work, evaluation_finetune, local_samples, scored_models, scored_rows
from fedbench.registry.workload import declared_workload
from fedbench.engine.memory import MemoryBudgetError
from fedbench.cost.memory import check_one_client_fits

MLR = {"arch": "mlr"}  # Linear(4, 3)
MLP = {"arch": "mlp", "hidden": [5]}  # Linear(4, 5) - ReLU - Linear(5, 3)
TABLE = {"safety_factor": 2.0, "job_overhead_s": 60, "cpu": {"assumed": 10.0, "families": {"mlp": {"train": 1000.0, "eval": 100.0}}}}


def test_flops_and_bytes_of_tiny_models_by_hand():
    # MLR: forward 2*4*3 = 24 FLOPs a sample; backward only the weight gradient (the input needs none): 24
    assert model_cost(MLR, (4,), 3).eval_flops == 24
    assert model_cost(MLR, (4,), 3).train_flops == 48
    assert model_cost(MLR, (4,), 3).state_bytes == (12 + 3) * 4
    # MLP: forward 2*(4*5 + 5*3) = 70; backward: layer 1 weight 2*4*5 = 40, layer 2 weight 2*5*3 = 30
    # and its input 2*5*3 = 30 -> 100; 170 in all.  (20 + 5 + 15 + 3) parameters of 4 bytes
    cost = model_cost(MLP, (4,), 3)
    assert (cost.eval_flops, cost.train_flops, cost.state_bytes) == (70, 170, 43 * 4)


def spec(algorithm=None, **training):
    return {"model": MLR, "algorithm": algorithm or {"method": "fedavg"},
            "training": {**TRAINING_DEFAULTS, "rounds": 10, "participation": 0.5, "local_epochs": 2, "eval_every": 5,
                         "memory_mb": 100, **training}}


SHAPE = CellShape(num_clients=10, train_samples=1000, eval_samples=200, largest_client=150, input_shape=(4,),
                  num_classes=3, dataset_samples=1200)


def test_work_time_and_memory_of_a_cell_by_hand():
    # training: 10 rounds x 0.5 participation x 2 epochs x 1000 samples x 48 FLOPs = 480,000
    # evaluation: 2 evaluations x (2 models x 200 test rows + 1000 training rows) x 24 FLOPs = 67,200
    assert cell_work(spec(), SHAPE) == (480_000, 67_200)
    cost = cell_cost(spec(), SHAPE, "cpu", TABLE)
    assert cost.family == "mlp" and cost.calibrated
    assert cost.seconds == 60 + 480_000 / 1000 + 67_200 / 100  # 1,212 s
    assert runtime_minutes(cost, 1, TABLE) == math.ceil(2 * 1212 / 60) == 41
    assert runtime_minutes(cost, 2, TABLE) == 81  # the second attempt (after a time limit) gets twice as long
    per_round = {**TABLE, "cpu": {**TABLE["cpu"], "round_overhead_s": 0.5}}  # + 10 rounds x 0.5 s
    assert cell_cost(spec(), SHAPE, "cpu", per_round).seconds == 1212 + 5
    # mem: process 2000 + budget 100 + 3 copies x 10 clients x 60 B + 1200 rows x 4 floats x 4 B, in MiB, rounded up
    assert cost.mem_mb == math.ceil(2000 + 100 + (3 * 10 * 60 + 1200 * 16) / 2**20) == 2101


def test_train_evaluation_cadence_and_unmeasured_families():
    # train_eval_every 10: one training-set evaluation instead of two -> 2 x 400 x 24 + 1 x 1000 x 24
    assert cell_work(spec(train_eval_every=10), SHAPE)[1] == 19_200 + 24_000
    resnet = {**spec(), "model": {"arch": "resnet20"}}
    shape = CellShape(10, 1000, 200, 150, (3, 32, 32), 10, 1200)
    cost = cell_cost(resnet, shape, "cpu", TABLE)
    assert not cost.calibrated and cost.seconds == pytest.approx(60 + (cost.train_flops + cost.eval_flops) / 10.0)


def test_ifca_scores_every_cluster_model_on_the_sampled_clients_training_rows_by_hand():
    # IFCA with C = 3 and 4 warm-up rounds: 10 - 4 = 6 rounds x 5 sampled clients (0.5 x 10) x 100 rows
    # (1000 / 10) x 3 models = 9,000 rows scored at 24 FLOPs = 216,000 FLOPs of evaluation beyond FedAvg's
    ifca = {"method": "ifca", "num_clusters": 3, "warmup_rounds": 4}
    assert cell_work(spec(ifca), SHAPE) == (480_000, 67_200 + 216_000)
    assert cell_work(spec({"method": "ifca", "num_clusters": 3}), SHAPE)[1] == 67_200 + 10 * 5 * 100 * 3 * 24


def test_flt_relatedness_step_at_its_measured_seconds_per_image_by_hand():
    # FLT embeds 1000 training images (2 ms each) after 3 epochs of fine-tuning (10 ms an image and epoch):
    # 1000 x (0.002 + 3 x 0.01) = 32 s beyond FedAvg's cell; without figures for the device, nothing
    table = {**TABLE, "cpu": {**TABLE["cpu"], "flt_relatedness": {"encode_s": 0.002, "finetune_s": 0.01}}}
    flt = {"method": "flt", "encoder": "enc", "finetune_epochs": 3}
    assert relatedness_seconds(spec(flt), SHAPE, table, "cpu") == pytest.approx(32.0)
    base = cell_cost(spec(), SHAPE, "cpu", table).seconds
    assert cell_cost(spec(flt), SHAPE, "cpu", table).seconds == pytest.approx(base + 32.0)
    assert relatedness_seconds(spec({**flt, "finetune_epochs": 0}), SHAPE, table, "cpu") == pytest.approx(2.0)
    assert relatedness_seconds(spec(flt), SHAPE, TABLE, "cpu") == 0.0
    assert relatedness_seconds(spec({"method": "pca_km_hc"}), SHAPE, table, "cpu") == 0.0


def test_the_authors_in_place_server_average_every_round_by_hand():
    """FLT's code and FedSEM as FLT's code average one client after another: 2 M^2 P multiply-adds a round.
    MLR Linear(4, 3): P = 15 entries; 10 clients, 10 rounds, 1,000 FLOP/s -> 10 x 2 x 100 x 15 / 1000 = 30 s."""
    table = {**TABLE, "cpu": {**TABLE["cpu"], "flt_in_place_average_flop_s": 1000.0}}
    seconds = {name: server_average_seconds(spec(algorithm), SHAPE, table, "cpu") for name, algorithm in {
        "fesem_flt": {"method": "fesem_flt"}, "flt_in_place": {"method": "flt", "encoder": "e", "aggregation": "in_place"},
        "flt": {"method": "flt", "encoder": "e"}, "fesem_flt_simultaneous": {"method": "fesem_flt", "aggregation": "simultaneous"},
        "fedavg": {"method": "fedavg"}}.items()}
    assert seconds == {"fesem_flt": 30.0, "flt_in_place": 30.0, "flt": 0.0, "fesem_flt_simultaneous": 0.0, "fedavg": 0.0}
    assert server_average_seconds(spec({"method": "fesem_flt"}), SHAPE, TABLE, "cpu") == 0.0  # no rate measured
    with_average = cell_cost(spec({"method": "fesem_flt"}), SHAPE, "cpu", table)
    assert with_average.seconds == pytest.approx(cell_cost(spec({"method": "fesem_flt"}), SHAPE, "cpu", TABLE).seconds + 30)


def test_the_clustering_of_flt_pca_km_hc_and_fesem_at_measured_seconds_by_hand():
    """SHAPE: 10 clients, 1000 training rows.  k-means at 1 ms a row x centre x restart, PCA 2 ms a row, UMAP
    0.5 s a centre, FedSEM's k-means 1 ms a model entry x client; MLR Linear(4, 3): 15 entries, 10 rounds."""
    rates = {"kmeans_s": 1e-3, "pca_s": 2e-3, "umap_s": 0.5, "fesem_kmeans_s": 1e-3}
    table = {**TABLE, "cpu": {**TABLE["cpu"], "flt_clustering": rates}}
    seconds = {name: clustering_seconds(spec(algorithm), SHAPE, table, "cpu") for name, algorithm in {
        # FLT: 1000 rows x k 5 x 10 restarts x 1 ms = 50 s, UMAP of 10 x 5 centres x 0.5 s = 25 s
        "flt": {"method": "flt", "encoder": "e"},
        # k 3, one restart (n_init auto): 3 s; UMAP of 30 centres: 15 s
        "flt_k3_auto": {"method": "flt", "encoder": "e", "k": 3, "n_init": "auto"},
        "flt_code": {"method": "flt", "encoder": "e", "k": "ground_truth"},  # counted at k = 5
        # PCA+kM+HC: 1000 rows x 2 ms = 2 s of PCA, k-means (k 5, 10 restarts) 50 s, no UMAP
        "pca_km_hc": {"method": "pca_km_hc"},
        # FedSEM as FLT's code: 10 rounds x 10 clients x 15 entries x 1 ms = 1.5 s
        "fesem_flt": {"method": "fesem_flt"},
        "fedavg": {"method": "fedavg"}, "ifca": {"method": "ifca", "num_clusters": 2}}.items()}
    assert seconds == pytest.approx({"flt": 75.0, "flt_k3_auto": 18.0, "flt_code": 75.0, "pca_km_hc": 52.0,
                                     "fesem_flt": 1.5, "fedavg": 0.0, "ifca": 0.0})
    assert clustering_seconds(spec({"method": "pca_km_hc"}), SHAPE, TABLE, "cpu") == 0.0  # nothing measured
    assert cell_cost(spec({"method": "pca_km_hc"}), SHAPE, "cpu", table).seconds == pytest.approx(
        cell_cost(spec({"method": "pca_km_hc"}), SHAPE, "cpu", TABLE).seconds + 52.0)


def test_plus_variants_fine_tune_every_client_at_each_evaluation_by_hand():
    # FedAvg+ with 3 fine-tuning epochs: at each of 2 evaluations all 10 clients x 3 epochs x 100 samples
    # (1000 / 10, no partition sizes) = 6,000 samples trained beyond FedAvg's 480,000 / 48 FLOPs each;
    # steps: 2 evaluations x 3 epochs x ceil(100 / 32) = 4 batches of the largest client = 24 more
    plus = {"method": "fedavg_plus", "finetune_epochs": 3}
    fedavg = cell_cost(spec(batch_size=32), SHAPE, "cpu", TABLE)
    cost = cell_cost(spec(plus, batch_size=32), SHAPE, "cpu", TABLE)
    assert cell_work(spec(plus, batch_size=32), SHAPE)[0] == 480_000 + 2 * 10 * 3 * 100 * 48
    assert cost.steps == fedavg.steps + 2 * 3 * 4
    # with the partition's client sizes, the padded rows (batch 32: 40 -> 64, 160 -> 160) and the largest's batches
    sized = CellShape(2, 200, 40, 160, (4,), 3, 240, client_sizes=(40, 160))
    training = spec(batch_size=32)["training"]
    assert evaluation_finetune(declared_workload(plus, training), training, sized, padded=True) == (2 * 2 * 3 * (64 + 160) / 2, 2 * 3 * 5)
    flt = {"method": "flt", "encoder": "e", "finetune_epochs": 5}  # FLT's fine-tuning is its relatedness step's
    assert evaluation_finetune(declared_workload(flt, training), training, SHAPE) == (0.0, 0.0)


def test_local_passes_of_the_algorithms():
    training = {**TRAINING_DEFAULTS, "local_epochs": 2, "batch_size": 20}
    assert declared_workload({"method": "fedavg"}, training).local_passes == 2
    assert declared_workload({"method": "ditto"}, training).local_passes == 4  # global and personal model
    assert declared_workload({"method": "fedrep", "head_epochs": 2, "body_epochs": 3}, training).local_passes == 5
    assert declared_workload({"method": "femam"}, training).local_passes == 2  # only the newest level trains
    assert declared_workload({"method": "femam", "structure": ["global", "personal"]}, training).local_passes == 2
    # step-counted: pFedMe's 20 local x 5 inner steps of batch 20; pFedMT's 30 team x 20 local iterations
    # at the mean client's 15 rows (150 samples over 10 clients: the batch of 20 is capped at 15)
    assert local_samples(declared_workload({"method": "pfedme", "local_steps": 20, "inner_steps": 5}, training), training, SHAPE) == 20 * 5 * 20
    # pFedMe's defaults count where the entry leaves them out: inner_steps 5 (FeMAM's pfedme sets only local_steps)
    assert local_samples(declared_workload({"method": "pfedme", "local_steps": 56}, training), training, SHAPE) == 56 * 5 * 20
    assert local_samples(declared_workload({"method": "pfedme"}, training), training, SHAPE) == 20 * 5 * 20  # local_steps 20 by default
    assert local_samples(declared_workload({"method": "fedavg", "local_steps": 7}, training), training, SHAPE) == 7 * 20
    assert local_samples(declared_workload({"method": "fedavg"}, training), training, SHAPE) == 2 * 100  # epochs: local_steps None
    assert local_samples(declared_workload({"method": "perfedavg", "local_steps": 3}, training), training, SHAPE) == 3 * 2 * 20  # two batches a step
    small = CellShape(10, 150, 20, 30, (4,), 3, 170)
    assert local_samples(declared_workload({"method": "pfedmt", "team_iterations": 30, "local_iterations": 20}, training), training, small) == 30 * 20 * 15
    assert local_samples(declared_workload({"method": "ditto"}, training), training, SHAPE) == 4 * 100  # 4 passes over the mean client's 100


def test_estimated_shape_from_the_dataset_facts():
    shape = estimated_shape({"source": "digits"}, {"kind": "dirichlet", "alpha": 0.5, "num_clients": 4, "test_fraction": 0.25})
    # 1,797 samples, a quarter held out: int(1797 * 0.75) = 1347 train, 450 evaluated
    assert (shape.num_clients, shape.train_samples, shape.eval_samples, shape.input_shape) == (4, 1347, 450, (1, 8, 8))
    assert shape.estimated and shape.largest_client == 2 * 1347 // 4
    femam = estimated_shape({"source": "cifar100"}, {"kind": "femam_cluster", "classes_per_cluster": 30})
    assert femam.num_clients == 50 and femam.input_shape == (3, 32, 32)  # the partitioner's default clients


def test_a_budget_too_small_for_one_client_names_both_figures():
    # one client of 150 rows at batch 10: 2 weight copies (60 B) + twice a batch of the activations
    # (input 16 B, flattened 16 B, logits 12 B) = 120 + 2 x 44 x 10 = 1,000 B
    training = {**TRAINING_DEFAULTS, "batch_size": 10, "memory_mb": 600 / 2**20}
    with pytest.raises(MemoryBudgetError, match=r"memory_mb = 0.000572 MB is too small for one client: one client needs 0.000954 MB \(batch 10"):
        check_one_client_fits(MLR, SHAPE, training, "cpu")
    check_one_client_fits(MLR, SHAPE, {**training, "memory_mb": 1000 / 2**20}, "cpu")  # 1,000 B fit in 1,000
    # a huge batch_size is the largest client's 150 rows: 120 + 2 x 44 x 150 = 13,320 B
    with pytest.raises(MemoryBudgetError, match=r"needs 0.0127 MB \(batch 150"):
        check_one_client_fits(MLR, SHAPE, {**training, "batch_size": 10**9, "memory_mb": 8000 / 2**20}, "cpu")


def test_a_budget_too_small_stops_the_config_before_any_job():
    config = {
        "results": "unused", "device": "cpu", "seeds": [0],
        "datasets": {"digits": {"source": "digits"}},
        "partitions": {"iid": {"kind": "iid", "num_clients": 4, "test_fraction": 0.25}},
        "models": {"mlr": {"arch": "mlr"}}, "algorithms": {"fedavg": {"method": "fedavg"}},
        "experiments": {"tiny": {"training": {"batch_size": 20, "memory_mb": 0.0001},
                                 "grid": [{"datasets": ["digits"], "partitions": ["iid"], "models": ["mlr"], "algorithms": ["fedavg"]}]}},
    }
    # MLR 64 -> 10 (2,600 B) at batch 20: 2 x 2,600 + 2 x (256 + 256 + 40) x 20 = 27,280 B = 0.0260 MB
    with pytest.raises(ConfigError, match=r"experiments.tiny.grid\[0\] \(digits/iid/mlr\): training.memory_mb = 0.0001 MB .* one client needs 0.026 MB \(batch 20"):
        check_config(config)
    config["experiments"]["tiny"]["training"]["memory_mb"] = 0.03
    check_config(config)


def test_cost_command_counts_the_jobs_and_marks_uncalibrated_gpu_figures(tmp_path, capsys, monkeypatch):
    import fedbench.planning.cost_report as cost_report
    from fedbench.cost import throughputs

    config_file = Path(__file__).parent / "data" / "tiny_config.yaml"
    measured = throughputs()
    assert "mlp" in measured["cuda"]["families"]  # measured on an H100 (benchmarks/gpu_check.sh)
    assert cost_report.main([str(config_file)]) == 0
    assert "H100-class GPU (uncalibrated*)" not in capsys.readouterr().out
    unmeasured = {**measured, "cuda": {k: v for k, v in measured["cuda"].items() if k != "families"}}
    monkeypatch.setattr(cost_report, "throughputs", lambda: unmeasured)
    assert cost_report.main([str(config_file)]) == 0
    out = capsys.readouterr().out
    # 2 partitions x 2 algorithms x 1 seed = 4 training jobs; 2 partition jobs
    assert "tiny_config.yaml: 4 training jobs (+ 2 partition jobs)" in out
    assert "H100-class GPU (uncalibrated*)" in out  # no GPU figure measured for the MLP family
    costs = cost_report.config_costs(yaml.safe_load(config_file.read_text()))["tiny"]
    assert costs["jobs"] == 4 and costs["calibrated"]["cuda"] is False
    # four tiny cells: FLOPs and the CPU's fitted fixed costs (config/throughputs.yaml: no job overhead,
    # 0.047 s a round, 0.54 ms a local step) of a second or so each; the GPU's assumed 60 s a job each
    assert 0 < costs["hours"]["cpu"] < 4 * 60 / 3600 < costs["hours"]["cuda"]


def test_femam_trains_only_its_newest_level_by_hand():
    # 3 levels, init_rounds 4, window 2, 10 rounds: level 1 trains rounds 1-4, level 2 rounds 5-6,
    # level 3 rounds 7-10 (the earliest schedule, exact for a test that fires as soon as it may)
    femam = {"method": "femam", "structure": ["global", "cluster", "personal"], "init_rounds": 4, "window": 2}
    assert earliest_schedule(3, 10, init_rounds=4, window=2) == [4, 2, 4]
    frozen = {rounds: declared_workload(femam, {**TRAINING_DEFAULTS, "rounds": rounds}).frozen_levels for rounds in (10, 4)}
    assert frozen == {10: 2, 4: 0}  # levels 1 and 2 freeze; in 4 rounds none
    assert earliest_schedule(5, 700, init_rounds=400, window=50) == [400, 50, 50, 50, 150]  # the paper's 5 levels
    assert declared_workload({"method": "femam"}, {**TRAINING_DEFAULTS, "rounds": 700}).frozen_levels == 4  # its defaults
    # training: 10 rounds x 0.5 x 10 clients x 2 epochs (newest level only, not x 3 levels) x 100 samples
    # = 10,000 samples, each the newest level's forward + backward (48), and each of the 2 frozen levels'
    # forward (24) once per training row (its logits kept): 480,000 + 2 x 1000 x 24 = 528,000;
    # evaluation: the newest level scores 2 x (2 x 200 + 1000) rows, and each frozen level once the
    # 200 evaluated and 1000 training rows: (2,800 + 2 x 1,200) x 24 = 124,800
    assert cell_work({**spec(), "algorithm": femam}, SHAPE) == (10_000 * 48 + 2 * 1000 * 24, 124_800)


def test_femam_partitions_hold_out_the_official_test_set_tiny_imagenet_95000():
    # FeMAM's cluster-wise partition of Tiny ImageNet (110,000 = 100,000 + the official 10,000 test):
    # validation half the test set, 95,000 / 5,000 / 10,000 (config/experiments/femam.yaml's notes)
    tiny = estimated_shape({"source": "tiny_imagenet"}, {"kind": "femam_cluster", "classes_per_cluster": 50})
    assert (tiny.train_samples, tiny.eval_samples, tiny.input_shape) == (95_000, 15_000, (3, 64, 64))
    # the Dirichlet reading: 1/11 test, then 5 % of the rest validation: 100,000 x 0.95 = 95,000
    dirichlet = estimated_shape({"source": "tiny_imagenet"}, {"kind": "dirichlet", "num_clients": 50, "alpha": 0.1,
                                                            "test_fraction": 1 / 11, "val_fraction": 0.05})
    assert dirichlet.train_samples == 95_000
    # the offline analogue: Fashion-MNIST's 10 classes, 5 % of them (3,000 + 500 test), code's val_ratio 0.1
    starved = estimated_shape({"source": "fashion_mnist"}, {"kind": "femam_multilevel", "structure": [1, 2, 4],
                                                            "classes_per_cluster": [2, 2, 1], "num_clients": 30,
                                                            "sample_fraction": 0.05, "val_ratio": 0.1})
    assert (starved.train_samples, starved.eval_samples) == (2_700, 300 + 500)


def test_throughput_by_family_and_input_size():
    table = {"job_overhead_s": 0, "cpu": {"assumed": 1.0, "families": {
        "resnet9": {"train": 100.0, "eval": 100.0},  # the benchmark's 32x32
        "resnet9@64x64": {"train": 400.0, "eval": 400.0},
        "mlp": {"train": 10.0, "eval": 10.0},
    }}}
    figures, calibrated, note = family_rate(table, "cpu", "resnet9", (3, 64, 64))
    assert figures["train"] == 400.0 and calibrated and "resnet9@64x64" in note
    figures, calibrated, _ = family_rate(table, "cpu", "resnet9", (3, 32, 32))
    assert figures["train"] == 100.0 and calibrated
    # no 56x56 figure: the nearest resolution's (64x64) stands in, uncalibrated
    figures, calibrated, note = family_rate(table, "cpu", "resnet9", (3, 56, 56))
    assert figures["train"] == 400.0 and not calibrated and "not 56x56" in note
    # 32x32 measured only: a 64x64 cell is not calibrated by it
    only32 = {"cpu": {"assumed": 1.0, "families": {"resnet9": table["cpu"]["families"]["resnet9"]}}}
    assert family_rate(only32, "cpu", "resnet9", (3, 64, 64))[1] is False
    assert family_rate(table, "cpu", "mlp", (60,))[1] is True  # a flat input: the family's figure at any width
    assert family_rate(table, "cpu", "vgg16", (3, 32, 32))[:2] == (None, False)  # the device's assumed figure
    resnet = {**spec(), "model": {"arch": "resnet9"}}
    shape = CellShape(2, 20, 10, 10, (3, 64, 64), 10, 30)
    cost = cell_cost(resnet, shape, "cpu", table)
    assert cost.calibrated and cost.seconds == pytest.approx((cost.train_flops + cost.eval_flops) / 400.0)


def test_evaluation_counts_each_distinct_model_once_over_its_clients_shared_test_rows_by_hand():
    """FLT's partitions: the clients of a cluster share one test set.  2 clusters of 2 clients, 30 and 40
    test rows per cluster, 5 validation rows: 140 client test rows, 75 shared ones.  The engine scores
    one global model (FedAvg) or one per cluster (IFCA) once over the distinct rows, a model per client
    (Local, FedAvg+ fine-tuned per client) over every client's rows; the global model the union."""
    summary = {"num_clients": 4, "train_client_sizes": [10, 10, 10, 10], "test_samples": 140, "val_samples": 5,
               "test_client_sizes": [30, 30, 40, 40], "groups": {"cluster": [0, 0, 1, 1]}, "shared_parts": ["test"],
               "input_shape": [4], "num_classes": 3, "spec": {"kind": "flt_scenario1"}}
    shape = summary_shape(summary)
    assert (shape.eval_samples, shape.shared_eval_samples, shape.dataset_samples) == (145, 75, 40 + 75)
    training = spec()["training"]
    assert scored_rows(scored_models({"method": "fedavg"}, training), shape) == 75 + 75
    assert scored_rows(scored_models({"method": "ifca", "num_clusters": 2}, training), shape) == 75 + 75
    assert scored_rows(scored_models({"method": "local"}, training), shape) == 145 + 75
    assert scored_rows(scored_models({"method": "fedavg_plus", "finetune_epochs": 1}, training), shape) == 145 + 75
    assert scored_rows(scored_models({"method": "fedavg"}, {**training, "bn_aggregation": "local"}), shape) == 145 + 75
    assert scored_rows(scored_models({"method": "not_loaded_plugin"}, training), shape) == 145 + 75
    # FLT (and PCA+kM+HC) in case II score a model per cluster when the server averages all members at once;
    # the authors' in-place loop leaves every client its own model, inside a cluster too (test_flt.py's FedSEM
    # case: a, a1 / b, b3, b4), and so does case I, where each client averages its own neighbours
    # (test_flt.py's neighbour average: 1.5, 11/4, 10/3): every client's rows are scored, as FedSEM as FLT's code
    flt = {"method": "flt", "encoder": "e"}
    assert scored_rows(scored_models({**flt, "clusters": 2}, training), shape) == 75 + 75
    assert scored_rows(scored_models({"method": "pca_km_hc"}, training), shape) == 75 + 75  # case II, C = 3 by default
    assert scored_rows(scored_models(flt, training), shape) == 145 + 75
    assert scored_rows(scored_models({**flt, "clusters": 2, "aggregation": "in_place"}, training), shape) == 145 + 75
    assert scored_rows(scored_models({"method": "pca_km_hc", "aggregation": "in_place"}, training), shape) == 145 + 75
    assert scored_rows(scored_models({"method": "fesem_flt"}, training), shape) == 145 + 75
    # no shared test rows: every method twice the clients' rows, as before
    unshared = summary_shape({**summary, "shared_parts": []})
    assert unshared.shared_eval_samples is None and scored_rows(scored_models({"method": "fedavg"}, training), unshared) == 2 * 145
    # 2 evaluations of FedAvg (10 rounds, every 5th): (75 + 75) x 2 + 40 training rows x 2, x 24 FLOPs
    assert cell_work(spec(), shape)[1] == (2 * 150 + 2 * 40) * 24


def test_a_cell_trains_at_its_numerics_settings_measured_rate_and_evaluates_at_fp32s():
    """``training.precision`` and the layout/compile flags pick the family's figure under ``settings``
    (benchmarks/matrix_settings.py): training FLOPs at that rate, evaluation (always FP32) at the
    family's; a setting never measured takes fp32's figure, uncalibrated."""
    settings = {"bf16+cl+compile": {"train": 4000.0, "ms_per_round": 1.0, "measured": "2026-11-27, NVIDIA H200"}}
    table = {**TABLE, "cpu": {**TABLE["cpu"], "families": {"mlp": {"train": 1000.0, "eval": 100.0, "settings": settings}}}}
    fast = cell_cost(spec(precision="bf16", channels_last=True, compile=True), SHAPE, "cpu", table)
    assert fast.calibrated and "bf16+cl+compile (2026-11-27, NVIDIA H200)" in fast.throughput
    assert fast.seconds == 60 + 480_000 / 4000 + 67_200 / 100  # 852 s against fp32's 1,212
    assert cell_cost(spec(), SHAPE, "cpu", table).seconds == 1212
    other = cell_cost(spec(precision="bf16"), SHAPE, "cpu", table)  # bf16 alone: not measured
    assert not other.calibrated and other.seconds == 1212 and "no bf16 figure" in other.throughput


def test_the_cost_command_estimates_a_grid_at_another_numerics_setting(capsys, monkeypatch):
    import fedbench.planning.cost_report as cost_report
    from fedbench.cost import throughputs

    config = yaml.safe_load((Path(__file__).parent / "data" / "tiny_config.yaml").read_text())
    measured = throughputs()
    mlp = measured["cuda"]["families"]["mlp"]
    doubled = {**measured, "cuda": {**measured["cuda"], "families": {**measured["cuda"]["families"], "mlp": {
        **mlp, "settings": {"bf16": {"train": 2 * mlp["train"], "measured": "by hand"}}}}}}
    monkeypatch.setattr(cost_report, "throughputs", lambda: doubled)
    base, bf16 = (cost_report.config_costs(config, numerics=n)["tiny"] for n in (None, "bf16"))
    assert bf16["calibrated"]["cuda"] and bf16["jobs"] == base["jobs"] == 4
    assert 0 < bf16["hours"]["cuda"] < base["hours"]["cuda"]  # half the training FLOPs' time, the same overheads
    with pytest.raises(SystemExit):
        cost_report.main(["--numerics", "bf16+fast", str(Path(__file__).parent / "data" / "tiny_config.yaml")])
    assert "unknown flags ['fast']" in capsys.readouterr().err


def test_lenet_is_a_family_of_its_own_measured_at_fashion_mnists_shape():
    # FedMR's and FLT's CNNCifar (lenet_cifar, fedmr_cnn): the file's LeNet figure, measured at 1x28x28
    # (FedMR's claims on Fashion-MNIST); CIFAR's 3x32x32 takes it uncalibrated
    for arch in ("lenet_cifar", "fedmr_cnn"):
        fashion = cell_cost({**spec(), "model": {"arch": arch}}, CellShape(10, 1000, 200, 150, (1, 28, 28), 10, 1200), "cpu")
        assert fashion.family == "lenet" and fashion.calibrated
        cifar = cell_cost({**spec(), "model": {"arch": arch}}, CellShape(10, 1000, 200, 150, (3, 32, 32), 10, 1200), "cpu")
        assert cifar.family == "lenet" and not cifar.calibrated and "not 32x32" in cifar.throughput


def test_auto_device_picks_the_cpu_where_the_model_says_the_gpu_loses():
    # a stub table: the GPU fast on FLOPs but slow per round (launches, bookkeeping): a tiny MLR cell of
    # 10 rounds costs 10 x 5 s on the GPU and a few FLOPs on the CPU; a big ResNet cell the opposite
    table = {"job_overhead_s": 60, "safety_factor": 2.0,
             "cpu": {"assumed": 1e9, "round_overhead_s": 0.0, "families": {"mlp": {"train": 1e9, "eval": 1e9}}},
             "cuda": {"assumed": 1e13, "round_overhead_s": 5.0, "families": {"resnet9": {"train": 1e13, "eval": 1e13}}}}
    device, reason = choose_device(spec(), SHAPE, table)
    assert device == "cpu" and "CPU is estimated faster" in reason and "cuda 110 s (uncalibrated" in reason
    big = {**spec(), "model": {"arch": "resnet9"}}
    shape = CellShape(10, 50_000, 10_000, 5_000, (3, 32, 32), 10, 60_000)
    device, reason = choose_device(big, shape, table)
    assert device == "cuda" and "GPU is estimated faster" in reason and "(calibrated: cuda resnet9" in reason
