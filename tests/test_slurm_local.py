"""The helpers of scripts/slurm_local.py that need no daemon: config writing, sacct parsing,
job counting and the table comparison (the cluster itself: ``make slurm-local``, docs/cluster.md)."""

from pathlib import Path

import pandas as pd

from conftest import load_script

slurm_local = load_script("slurm_local")


def settings(text: str) -> dict[str, str]:
    """``Key=Value`` lines -> dict (the node and partition lines keyed by their first word)."""
    return dict(line.split("=", 1) for line in text.splitlines() if line and " " not in line)


def test_slurm_conf_keeps_everything_in_the_state_directory(tmp_path):
    text = slurm_local.slurm_conf(tmp_path, host="box", cpus=3, memory_mb=1234, ctld_port=7001, slurmd_port=7002, dbd_port=7003)
    conf = settings(text)
    for key in ("StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile",
                "SlurmdLogFile", "AccountingStoragePass"):
        assert Path(conf[key]).parent == tmp_path, key
    assert conf["AuthInfo"] == f"socket={tmp_path / 'munge.socket'}"
    assert conf["ProctrackType"] == "proctrack/linuxproc" and conf["TaskPlugin"] == "task/none"
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"  # sacct --clusters all needs it
    assert (conf["SlurmctldPort"], conf["SlurmdPort"], conf["AccountingStoragePort"]) == ("7001", "7002", "7003")
    assert conf["SlurmctldHost"] == "box(127.0.0.1)"
    assert "NodeName=box NodeAddr=127.0.0.1 CPUs=3 RealMemory=1234 State=UNKNOWN" in text.splitlines()
    assert f"PartitionName={slurm_local.PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP" in text.splitlines()


def test_slurmdbd_conf(tmp_path):
    conf = settings(slurm_local.slurmdbd_conf(tmp_path, host="box", dbd_port=7003, db_port=7004, db_user="u", db_password="p"))
    assert (conf["DbdHost"], conf["DbdAddr"], conf["DbdPort"]) == ("box", "127.0.0.1", "7003")
    assert (conf["StoragePort"], conf["StorageUser"], conf["StoragePass"]) == ("7004", "u", "p")
    assert conf["StorageType"] == "accounting_storage/mysql"


def test_parse_sacct():
    text = "12|COMPLETED\n13|CANCELLED by 0\n\n14|RUNNING\n15|\n"
    assert slurm_local.parse_sacct(text) == {"12": "COMPLETED", "13": "CANCELLED", "14": "RUNNING", "15": ""}


def test_run_jobs():
    output = "\n".join([
        "rule partition:", "    output: x", "Job 2 has been submitted with SLURM jobid 11 (log: a).",
        "rule train_cell:", "Job 1 has been submitted with SLURM jobid 12 (log: b).", "localrule tables:", "rules: no",
    ])
    assert slurm_local.run_jobs(output) == (["partition", "train_cell"], ["tables"], ["11", "12"])


def test_table_differences_ignore_only_the_wall_time(tmp_path):
    def write(root: Path, accuracy: float, wall: float, md: str):
        (root / "tables").mkdir(parents=True)
        pd.DataFrame({"algorithm": ["fedavg"], "accuracy_mean": [accuracy], "wall_time_s": [wall]}).to_csv(root / "tables/results.csv", index=False)
        (root / "tables/results.md").write_text(md)

    write(tmp_path / "a", 0.5, 1.0, "x")
    write(tmp_path / "b", 0.5, 9.0, "x")
    write(tmp_path / "c", 0.6, 1.0, "y")
    assert slurm_local.table_differences(tmp_path / "a", tmp_path / "b") == []
    assert slurm_local.table_differences(tmp_path / "a", tmp_path / "c") == ["tables/results.md", "tables/results.csv"]


def test_srun_shim_sets_the_config_and_runs_the_real_srun(tmp_path):
    import subprocess

    fake = tmp_path / "real_srun"
    fake.write_text('#!/bin/sh\necho "$SLURM_CONF" "$@"\n')
    fake.chmod(0o755)
    shim = tmp_path / "srun"
    shim.write_text(slurm_local.srun_shim(tmp_path / "slurm.conf", str(fake)))
    shim.chmod(0o755)
    out = subprocess.run([str(shim), "-n", "1", "a b"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}).stdout
    assert out == f"{tmp_path / 'slurm.conf'} -n 1 a b\n"


def test_submitted_rules_pairs_each_slurm_job_with_its_rule():
    output = "\n".join([
        "rule partition:", "    output: x", "    jobid: 2", "Job 2 has been submitted with SLURM jobid 11 (log: a).",
        "rule train_cell:", "    jobid: 1", "rule train_cell:", "    jobid: 3",
        "Job 3 has been submitted with SLURM jobid 13 (log: c).", "Job 1 has been submitted with SLURM jobid 12 (log: b).",
        "localrule tables:", "    jobid: 0",
    ])
    assert slurm_local.submitted_rules(output) == {"11": "partition", "13": "train_cell", "12": "train_cell"}


def test_sacct_times_and_overhead():
    text = ("11|2026-11-23T10:00:00|2026-11-23T10:00:02|5\n"
            "12|2026-11-23T10:00:01|2026-11-23T10:00:05|30\n"
            "13|2026-11-23T10:00:01|2026-11-23T10:00:09|40\n"
            "14|2026-11-23T10:00:01|Unknown|0\n")
    times = slurm_local.parse_sacct_times(text)
    assert times == {"11": (2.0, 5), "12": (4.0, 30), "13": (8.0, 40)}
    rules = {"11": "partition", "12": "train_cell", "13": "train_cell"}
    # training jobs ran 30 and 40 s around payloads of 20 and 26 s: 12 s each outside the script
    line = slurm_local.slurm_overhead(rules, times, [20.0, 26.0])
    assert line == ("queue wait median 4.0 s (max 8.0 s); "
                    "training jobs ran 35.0 s on average, of which 12.0 s outside the training script")
    assert slurm_local.load_line("x", 30.0, 3) == "x: 3 jobs in 30.0 s wall, 6.0 jobs/min"


def test_results_root_follows_the_config(tmp_path):
    (tmp_path / "a.yaml").write_text("results: results/pfedmt\n")
    (tmp_path / "b.yaml").write_text("seeds: [0]\n")
    assert slurm_local.results_root(tmp_path / "a.yaml", True) == "results/pfedmt"
    assert slurm_local.results_root(tmp_path / "b.yaml", False) == "results"


def test_action_jobs_of_a_local_run():
    output = "\n".join(["localrule partition:", "    jobid: 2", "localrule train_cell:", "    jobid: 1",
                        "localrule tables:", "    jobid: 0"])
    assert slurm_local.action_jobs(output) == ["partition", "train_cell"]


def test_workflow_args_reach_snakemake_as_target_and_config():
    """--only once put the target after --config, which swallowed it as a config entry."""
    from snakemake.cli import get_argument_parser

    # the profile's other options need the SLURM plugin installed, which the normal suite does not have
    command = ["--configfile", "c.yaml", "--latency-wait", "5", *slurm_local.workflow_args(True, "a,b")]
    parsed = get_argument_parser().parse_args(command)
    assert parsed.targets == ["tables"]
    assert parsed.config == ["only_experiments=[a,b]"]
    assert parsed.replace_workflow_config and parsed.configfile == [Path("c.yaml")]
    assert get_argument_parser().parse_args(["--cores", "2", *slurm_local.workflow_args(False, "")]).targets == ["tables"]
