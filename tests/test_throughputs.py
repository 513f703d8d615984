"""The GPU-figures command (``make bench-gpu``) built and run on the CPU at its tiny size: every way
timed, FLOP/s derived from the model's FLOPs, the throughput file updated in place."""

import importlib.util
from pathlib import Path

import pytest
import yaml

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "throughputs.py"


@pytest.fixture(scope="module")
def throughputs_script():
    spec = importlib.util.spec_from_file_location("bench_throughputs", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_family_has_the_papers_size(throughputs_script):
    sizes = throughputs_script.SIZES["paper"]
    assert set(sizes) == set(throughputs_script.FAMILIES) == {"mlp", "fedavg_cnn", "leaf_cnn", "lenet", "small_cnn",
                                                                        "resnet9", "resnet20", "vgg16"}
    assert sizes["fedavg_cnn"][:3] == (20, 600, 10)  # FedAvg: 20 clients x 600 images, batch 10
    assert sizes["resnet9"][:3] == (50, 900, 32)  # FeMAM: 50 clients x ~900 images, batch 32
    assert sizes["resnet20"][:3] == sizes["vgg16"][:3] == sizes["lenet"][:3] == (10, 500, 50)  # FedMR: 10 sampled clients x 500, batch 50
    assert throughputs_script.FAMILIES["lenet"][:2] == ("lenet_cifar", (1, 28, 28))  # the registry's LeNet, on Fashion-MNIST's shape
    assert sizes["small_cnn"][:3] == (30, 200, 32)  # FeMAM's offline analogues: 30 clients, up to ~200 images, batch 32


def test_tiny_run_refreshes_only_its_family(throughputs_script, tmp_path):
    output = tmp_path / "throughputs.yaml"
    output.write_text("# kept header\nsafety_factor: 2.0\ncpu:\n  assumed: 1.0\n  families:\n    vgg16: {train: 5.0, eval: 6.0}\n")
    assert throughputs_script.main(["--device", "cpu", "--size", "tiny", "--families", "mlp", "--output", str(output)]) == 0
    assert output.read_text().startswith("# kept header\n")
    table = yaml.safe_load(output.read_text())
    assert table["safety_factor"] == 2.0 and table["cpu"]["assumed"] == 1.0
    assert table["cpu"]["families"]["vgg16"] == {"train": 5.0, "eval": 6.0}  # another family's figures stay
    mlp = table["cpu"]["families"]["mlp"]
    assert set(mlp["ms_per_round"]) == {"vectorised", "reference", "dataloader", "eval_vectorised", "eval_loop"}
    # 784-200-10 MLP: 639,200 FLOPs a training sample, 317,600 an evaluated one (tests/test_cost.py's
    # counting); 2 clients x 8 samples trained, 2 x 4 scored per round
    ms = mlp["ms_per_round"]
    assert mlp["train"] == pytest.approx(2 * 8 * 639_200 / (ms["vectorised"] / 1000), rel=2e-3)
    assert mlp["eval"] == pytest.approx(2 * 4 * 317_600 / (ms["eval_vectorised"] / 1000), rel=2e-3)
    assert "2 clients x 8 samples, batch 4" in mlp["setting"]


def test_image_size_writes_a_figure_keyed_by_resolution(throughputs_script, tmp_path):
    """``--image-size``: the family measured at N x N goes under ``<family>@NxN``, its own figure stays."""
    output = tmp_path / "throughputs.yaml"
    output.write_text("cpu:\n  assumed: 1.0\n  families:\n    fedavg_cnn: {train: 5.0, eval: 6.0}\n")
    assert throughputs_script.main(["--device", "cpu", "--size", "tiny", "--families", "fedavg_cnn", "--image-size", "32",
                                    "--skip", "reference,dataloader", "--output", str(output)]) == 0
    families = yaml.safe_load(output.read_text())["cpu"]["families"]
    assert families["fedavg_cnn"] == {"train": 5.0, "eval": 6.0}
    assert families["fedavg_cnn@32x32"]["input"] == [1, 32, 32] and families["fedavg_cnn@32x32"]["train"] > 0


def test_numerics_flags_pass_through_and_keep_the_cost_models_file(throughputs_script):
    args = throughputs_script.parse_args(["--precision", "bf16", "--channels-last", "--compile"])
    assert throughputs_script.numerics_flags(args) == ["--precision", "bf16", "--channels-last", "--compile"]
    assert throughputs_script.numerics_flags(throughputs_script.parse_args([])) == []  # the cost model's setting


@pytest.fixture(scope="module")
def matrix_script():
    spec = importlib.util.spec_from_file_location("numerics_matrix", BENCH.parent / "numerics_matrix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a subprocess per setting (~30 s); .ci/run runs it
def test_the_numerics_matrix_logs_every_setting_and_fails_soft(matrix_script, tmp_path):
    """gpu_check.sh's matrix at the tiny size on the CPU: one row per setting as it arrives; a setting
    that fails is a row with its error and the next still runs; bf16 takes the MLP through the wide step."""
    out = tmp_path / "matrix.csv"
    code = matrix_script.main(["--family", "mlp", "--size", "tiny", "--device", "cpu", "--settings", "fp32,fp8+cl,bf16+cl",
                               "--warmup", "0", "--repeats", "1", "--csv", str(out)])
    assert code == 1
    rows = list(__import__("csv").DictReader(out.open()))
    assert [(r["setting"], r["status"]) for r in rows] == [("fp32", "ok"), ("fp8+cl", "failed"), ("bf16+cl", "ok")]
    assert "'fp8' is not a precision" in rows[1]["error"]
    # measured: a time per round (its TFLOP/s, printed to 4 decimals, reads 0.0000 on a loaded CPU at this size)
    assert [r["step"] for r in rows] == ["fused_mlp", "", "wide"] and float(rows[2]["ms_per_round"]) > 0


def test_a_profiled_round_splits_device_time_by_kind_and_names_what_no_kind_claims(matrix_script, tmp_path):
    """The profile part's console line: shares by kind that sum to one, and the operators left in
    ``other`` named (their table's file may not come back from a lent machine)."""
    import torch  # noqa: PLC0415

    a, index = torch.randn(64, 64), torch.arange(0, 64, 2)

    def one_round():
        for _ in range(3):
            (a @ a).index_select(0, index)

    shares = matrix_script.profile_round(one_round, torch.device("cpu"), tmp_path / "p.txt", "title")
    other_is = shares.pop("other is")
    assert set(shares) <= {"matmul", "other", "copy", "elementwise"} and "matmul" in shares
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-3)
    assert other_is[0][0] == "aten::index_select"
    assert sum(v for _, v in other_is) <= shares["other"] + 1e-4
    assert (tmp_path / "p.txt").read_text().startswith("title\nself CPU time by kind")


def test_matrix_settings_records_each_measured_setting_once_at_its_fastest(tmp_path, capsys):
    """benchmarks/matrix_settings.py: a matrix CSV or a console log -> ``cuda.families.<f>.settings``; fp32
    rows left out (a family's own figure), the fastest row of a setting kept (the concurrent part's
    slower lines lose), the file's top comments and other figures kept; a console needs --measured, an
    unknown family is refused."""
    spec = importlib.util.spec_from_file_location("matrix_settings", BENCH.parent / "matrix_settings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = tmp_path / "throughputs.yaml"
    table.write_text("# top comment\ncuda:\n  assumed: 5.0e+12\n  families:\n    resnet9:\n      train: 3.2e+12\n      eval: 3.0e+12\n")
    console = tmp_path / "console.txt"
    console.write_text("   resnet9 fp32                          ok: 312.49 ms/round, 3.5254 TFLOP/s, step wide\n"
                       "   resnet9 bf16+cl                       ok: 187.05 ms/round, 5.8898 TFLOP/s, step wide\n"
                       "   resnet9 bf16+cl                       ok: 878.77 ms/round, 1.2536 TFLOP/s, step wide\n"
                       "     femam resnet9 fp32                 ok: 339.36 ms/round, 3.2463 TFLOP/s (cost model's count)\n")
    with pytest.raises(SystemExit, match="--measured"):
        module.main([str(console), "--output", str(table)])
    assert module.main([str(console), "--output", str(table), "--measured", "today, H200"]) == 0
    written = yaml.safe_load(table.read_text())["cuda"]["families"]["resnet9"]
    assert written["train"] == 3.2e12 and written["settings"] == {
        "bf16+cl": {"train": 5.89e12, "ms_per_round": 187.05, "measured": "today, H200"}}
    assert table.read_text().startswith("# top comment\n")
    matrix = tmp_path / "matrix.csv"
    matrix.write_text("when,device,family,setting,ms_per_round,train_tflops,status\n"
                      "2026-11-27T22:00,NVIDIA H200,resnet9,bf16+compile,160.18,6.8778,ok\n"
                      "2026-11-27T22:01,NVIDIA H200,resnet9,fp32+cl+compile,,,skipped\n")
    assert module.main([str(matrix), "--output", str(table)]) == 0
    settings = yaml.safe_load(table.read_text())["cuda"]["families"]["resnet9"]["settings"]
    assert settings["bf16+compile"] == {"train": 6.878e12, "ms_per_round": 160.18, "measured": "2026-11-27, NVIDIA H200"}
    assert "bf16+cl" in settings  # the earlier settings stay
    matrix.write_text("when,device,family,setting,ms_per_round,train_tflops,status\n2026-11-27,H200,vgg16,bf16,1,1,ok\n")
    with pytest.raises(SystemExit, match="no cuda figure of vgg16"):
        module.main([str(matrix), "--output", str(table)])
