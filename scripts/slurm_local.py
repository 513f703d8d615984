"""A single-node SLURM cluster on this machine, to run the workflow through ``profiles/slurm`` for real.

    scripts/slurm-local [--config tests/data/tiny_config.yaml] [--keep] [--scancel]
    scripts/slurm-local --config config/experiments/pfedmt.yaml --replace-config --only synthetic_mlr,synthetic_dnn \
        [--compare-with results/pfedmt]    # skip the local run: compare with tables already built locally
    make slurm-local

What it does (as root; Debian's ``slurm-wlm``, ``munge``, ``slurmdbd`` and ``mariadb-server``,
installed with apt-get where missing):

1. writes ``munge.key``, ``slurm.conf``, ``slurmdbd.conf`` and a MariaDB data directory into a
   fresh temporary state directory (nothing under /etc is touched; ``SLURM_CONF`` points every
   SLURM command at the temporary config);
2. starts munged, MariaDB, slurmdbd, slurmctld and slurmd on free localhost ports -- accounting
   through ``slurmdbd`` because ``snakemake-executor-plugin-slurm`` reads job states with
   ``sacct --clusters all``, which needs the accounting database;
3. runs the config locally (``--cores 2``) and through ``snakemake --profile profiles/slurm``;
   with ``--scancel`` it first cancels a training job mid-run and reruns the workflow, which
   resumes the cell from its checkpoint;
4. checks that every job of the SLURM run went through ``sbatch`` (the controller's job list
   holds one job per Snakemake job, all COMPLETED) and that the tables equal the local run's;
5. stops exactly the daemons it started (by their process ids) and removes the state directory
   (``--keep`` leaves it for inspection).

The pure helpers (config writing, parsing ``sacct`` output, comparing tables) need no daemon
and are tested in ``tests/test_slurm_local.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
PACKAGES = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client",
            "slurmdbd": "slurmdbd", "mariadbd": "mariadb-server"}
PARTITION = "debug"
CLUSTER = "fedbench"
TABLES = ("tables/results.md", "tables/results.csv")
RUN_ONLY_COLUMNS = ("wall_time_s",)  # how long a run took: never equal between two runs


# ---- pure helpers (tested without daemons) -------------------------------------------------

def slurm_conf(state: Path, *, host: str, cpus: int, memory_mb: int, ctld_port: int, slurmd_port: int,
               dbd_port: int, user: str = "root") -> str:
    """A minimal single-node slurm.conf whose every path lies under ``state``."""
    return "\n".join([
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        f"AuthType=auth/munge",
        f"CredType=cred/munge",
        f"AuthInfo=socket={state / 'munge.socket'}",
        f"StateSaveLocation={state / 'slurmctld'}",
        f"SlurmdSpoolDir={state / 'slurmd'}",
        f"SlurmctldPidFile={state / 'slurmctld.pid'}",
        f"SlurmdPidFile={state / 'slurmd.pid'}",
        f"SlurmctldLogFile={state / 'slurmctld.log'}",
        f"SlurmdLogFile={state / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "MinJobAge=600",  # finished jobs stay visible to squeue too
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={dbd_port}",
        f"AccountingStoragePass={state / 'munge.socket'}",  # the munge socket for talking to slurmdbd
        "JobCompType=jobcomp/none",
        "SlurmdParameters=config_overrides",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def slurmdbd_conf(state: Path, *, host: str, dbd_port: int, db_port: int, db_user: str, db_password: str, user: str = "root") -> str:
    """slurmdbd.conf: the accounting daemon on ``dbd_port``, storing into MariaDB on ``db_port``."""
    return "\n".join([
        "AuthType=auth/munge",
        f"AuthInfo=socket={state / 'munge.socket'}",
        f"DbdHost={host}",
        "DbdAddr=127.0.0.1",
        f"DbdPort={dbd_port}",
        f"SlurmUser={user}",
        f"LogFile={state / 'slurmdbd.log'}",
        f"PidFile={state / 'slurmdbd.pid'}",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={db_port}",
        f"StorageUser={db_user}",
        f"StoragePass={db_password}",
        "StorageLoc=slurm_acct_db",
        "",
    ])


def srun_shim(conf: Path, srun: str) -> str:
    """A ``srun`` that sets SLURM_CONF to ``conf`` and runs the real ``srun``."""
    return f'#!/bin/sh\nexport SLURM_CONF="{conf}"\nexec "{srun}" "$@"\n'


def parse_sacct(text: str) -> dict[str, str]:
    """``sacct -X --parsable2 --noheader --format=JobIdRaw,State`` output -> {job id: state}
    (``CANCELLED by 0`` -> ``CANCELLED``; blank lines ignored)."""
    states = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        job, state = line.split("|")[:2]
        states[job.strip()] = state.split()[0] if state.strip() else ""
    return states


TARGET_RULES = ("all", "partitions", "encoders", "train", "tables")  # the Snakefile's rules without an action


def run_jobs(snakemake_output: str) -> tuple[list[str], list[str], list[str]]:
    """From a Snakemake run's output: the rules of the jobs it ran through the executor
    (``rule x:``), those it ran on the submitting host (``localrule x:``), and the SLURM job ids
    it submitted (``Job n has been submitted with SLURM jobid m``)."""
    remote = re.findall(r"^rule (\w+):$", snakemake_output, flags=re.M)
    local = re.findall(r"^localrule (\w+):$", snakemake_output, flags=re.M)
    submitted = re.findall(r"^Job \d+ has been submitted with SLURM jobid (\d+)", snakemake_output, flags=re.M)
    return remote, local, submitted


def action_jobs(snakemake_output: str) -> list[str]:
    """The rules of the jobs a run executed, target rules without an action left out (a local
    run prints ``localrule x:`` for every job)."""
    remote, local, _ = run_jobs(snakemake_output)
    return [rule for rule in remote + local if rule not in TARGET_RULES]


def submitted_rules(snakemake_output: str) -> dict[str, str]:
    """{SLURM job id: rule} from a Snakemake run's output, pairing each ``rule x:`` block's
    ``jobid: n`` with ``Job n has been submitted with SLURM jobid m``."""
    rule_of, current, submitted = {}, None, {}
    for line in snakemake_output.splitlines():
        if match := re.match(r"^(?:local)?rule (\w+):$", line):
            current = match.group(1)
        elif (match := re.match(r"^\s+jobid: (\d+)$", line)) and current:
            rule_of[match.group(1)] = current
        elif match := re.match(r"^Job (\d+) has been submitted with SLURM jobid (\d+)", line):
            submitted[match.group(2)] = rule_of.get(match.group(1), "?")
    return submitted


def parse_sacct_times(text: str) -> dict[str, tuple[float, int]]:
    """``sacct -X --parsable2 --noheader --format=JobIdRaw,Submit,Start,ElapsedRaw`` output ->
    {job id: (seconds from submission to start, seconds the job ran)}."""
    from datetime import datetime

    times = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        job, submit, start, elapsed = line.split("|")[:4]
        if start in ("", "Unknown", "None"):
            continue
        wait = (datetime.fromisoformat(start) - datetime.fromisoformat(submit)).total_seconds()
        times[job.strip()] = (wait, int(elapsed))
    return times


def training_seconds(results: Path) -> list[float]:
    """The wall seconds of each training cell's payload, from the ``benchmark:`` files that the
    Snakemake instance running the job writes (inside the SLURM job on a cluster)."""
    import pandas as pd

    return [float(pd.read_csv(f, sep="\t")["s"].iloc[0]) for f in sorted((results / "benchmarks" / "train").glob("**/*.tsv"))]


def load_line(label: str, wall: float, jobs: int) -> str:
    return f"{label}: {jobs} jobs in {wall:.1f} s wall, {60 * jobs / wall:.1f} jobs/min"


def slurm_overhead(rules: dict[str, str], times: dict[str, tuple[float, int]], payload_s: list[float]) -> str:
    """Per-job scheduling cost on the cluster: the median wait from ``sbatch`` to start, and the
    mean seconds a training job ran beyond its payload (the in-job Snakemake and ``srun``)."""
    import statistics

    waits = [times[j][0] for j in rules if j in times]
    train = [times[j][1] for j, rule in rules.items() if rule == "train_cell" and j in times]
    parts = [f"queue wait median {statistics.median(waits):.1f} s (max {max(waits):.1f} s)"] if waits else []
    if train and len(train) == len(payload_s):
        parts.append(f"training jobs ran {statistics.mean(train):.1f} s on average, of which "
                     f"{(sum(train) - sum(payload_s)) / len(train):.1f} s outside the training script")
    return "; ".join(parts)


def table_differences(local: Path, other: Path) -> list[str]:
    """Which result tables differ between two results roots: the Markdown byte for byte, the CSV
    cell by cell except the run-only columns (wall time)."""
    import pandas as pd

    problems = []
    md = TABLES[0]
    if (local / md).read_bytes() != (other / md).read_bytes():
        problems.append(md)
    a, b = (pd.read_csv(root / TABLES[1]).drop(columns=list(RUN_ONLY_COLUMNS), errors="ignore") for root in (local, other))
    if not a.equals(b):
        problems.append(TABLES[1])
    return problems


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the cluster ---------------------------------------------------------------------------

def ensure_installed() -> None:
    """apt-get install whatever of slurm-wlm, munge, slurmdbd, mariadb-server is missing (needs root)."""
    missing = sorted({pkg for binary, pkg in PACKAGES.items() if not shutil.which(binary)})
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"slurm-local: missing {', '.join(missing)}; install them (apt-get install {' '.join(missing)}) or run as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", *missing], check=True, env=env)


@dataclass
class Cluster:
    """The daemons this script started (pids) and where their state lives."""

    state: Path
    host: str = field(default_factory=socket.gethostname)
    started: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        self.ports = {name: free_port() for name in ("ctld", "slurmd", "dbd", "db")}
        # snakemake-executor-plugin-slurm-jobstep starts each rule inside the job with ``srun`` and
        # removes every SLURM_* variable but a few job ids from srun's environment, SLURM_CONF
        # included; a real cluster has its slurm.conf where srun looks by default (/etc/slurm) or
        # runs configless, this one keeps it in the state directory -- so the jobs find an ``srun``
        # first on PATH that puts SLURM_CONF back and runs the real one.
        self.env = {**os.environ, "SLURM_CONF": str(self.state / "slurm.conf"),
                    "PATH": f"{self.state / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}

    def write_srun_shim(self) -> None:
        (self.state / "bin").mkdir(parents=True, exist_ok=True)
        shim = self.state / "bin" / "srun"
        shim.write_text(srun_shim(self.state / "slurm.conf", shutil.which("srun") or "/usr/bin/srun"))
        shim.chmod(0o755)

    def run(self, *command: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(command, env=self.env, check=check, text=True, capture_output=True, **kw)

    def _pid_from(self, name: str, pidfile: Path, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pidfile.exists() and pidfile.read_text().strip():
                self.started[name] = int(pidfile.read_text().split()[0])
                return
            time.sleep(0.2)
        raise RuntimeError(f"{name} did not start; see the logs in {self.state}")

    def start(self) -> None:
        s = self.state
        for d in ("slurmctld", "slurmd", "mysql"):
            (s / d).mkdir(parents=True, exist_ok=True)
        self.write_srun_shim()
        key = s / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run(["munged", "--force", f"--key-file={key}", f"--socket={s / 'munge.socket'}",
                        f"--pid-file={s / 'munged.pid'}", f"--log-file={s / 'munged.log'}",
                        f"--seed-file={s / 'munged.seed'}"], check=True)
        self._pid_from("munged", s / "munged.pid")

        self._start_mariadb()
        password = os.urandom(12).hex()
        self._sql(f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
                  "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;")
        (s / "slurmdbd.conf").write_text(slurmdbd_conf(s, host=self.host, dbd_port=self.ports["dbd"], db_port=self.ports["db"],
                                                      db_user="slurm", db_password=password))
        (s / "slurmdbd.conf").chmod(0o600)
        memory_mb = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.9)
        (s / "slurm.conf").write_text(slurm_conf(s, host=self.host, cpus=os.cpu_count() or 1, memory_mb=memory_mb,
                                                 ctld_port=self.ports["ctld"], slurmd_port=self.ports["slurmd"],
                                                 dbd_port=self.ports["dbd"]))
        # slurmdbd reads slurmdbd.conf from the directory of SLURM_CONF
        subprocess.run(["slurmdbd"], env=self.env, check=True)
        self._pid_from("slurmdbd", s / "slurmdbd.pid")
        self._wait(lambda: self.run("sacctmgr", "-i", "show", "cluster", check=False).returncode == 0, "slurmdbd")
        self.run("sacctmgr", "-i", "add", "cluster", CLUSTER, check=False)
        subprocess.run(["slurmctld"], env=self.env, check=True)
        self._pid_from("slurmctld", s / "slurmctld.pid")
        subprocess.run(["slurmd"], env=self.env, check=True)
        self._pid_from("slurmd", s / "slurmd.pid")
        self._wait(lambda: "idle" in self.run("sinfo", "-h", "-o", "%T", check=False).stdout, "the node to come up idle")

    def _start_mariadb(self) -> None:
        s = self.state
        subprocess.run(["mariadb-install-db", f"--datadir={s / 'mysql'}", "--user=root", "--auth-root-authentication-method=socket",
                        "--skip-test-db"], check=True, capture_output=True)
        log = open(s / "mariadb.log", "w")
        process = subprocess.Popen(["mariadbd", "--no-defaults", f"--datadir={s / 'mysql'}", "--user=root",
                                    f"--socket={s / 'mysql.sock'}", f"--port={self.ports['db']}", "--bind-address=127.0.0.1",
                                    f"--pid-file={s / 'mariadb.pid'}", "--innodb-buffer-pool-size=64M",
                                    "--innodb-lock-wait-timeout=900"], stdout=log, stderr=log)
        self.started["mariadbd"] = process.pid
        self._wait(lambda: self._sql("SELECT 1", check=False).returncode == 0, "MariaDB")

    def _sql(self, statement: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["mariadb", f"--socket={self.state / 'mysql.sock'}", "-u", "root", "-e", statement],
                              check=check, capture_output=True, text=True)

    def _wait(self, ready, what: str, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"timed out waiting for {what}; see the logs in {self.state}")

    def stop(self) -> None:
        """SIGTERM to every daemon this script started, newest first, by process id."""
        for name in reversed(list(self.started)):
            pid = self.started[name]
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
        self.started.clear()


# ---- the check -----------------------------------------------------------------------------

def workflow_args(replace_config: bool, only: str, target: str = "tables") -> tuple[str, ...]:
    """The target, then the config options: Snakemake's ``--config`` takes every word after it,
    so the target must come first."""
    return (target, *(("--replace-workflow-config",) if replace_config else ()),
            *(("--config", f"only_experiments=[{only}]") if only else ()))


def snakemake(workdir: Path, config: Path, *args: str, env=None) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("snakemake")), "-s", str(REPO / "Snakefile"),
               "--directory", str(workdir), "--configfile", str(config), *args]
    print("$", " ".join(command), flush=True)
    return subprocess.run(command, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def slurm_args(train_runtime: int = 30, retries: int | None = None) -> tuple[str, ...]:
    """``--profile profiles/slurm`` with the profile's cluster values for this one node: one
    partition, no GPU, small jobs; training jobs limited to ``train_runtime`` minutes."""
    return (
        "--profile", "profiles/slurm",
        "--default-resources", f"slurm_partition={PARTITION}", "mem_mb=1000", "runtime=30",
        "--set-resources", f"train_cell:slurm_partition={PARTITION}", "train_cell:gpu=0", "train_cell:mem_mb=1500",
        f"train_cell:runtime={train_runtime}",
        "--set-threads", "train_cell=1",
        "--slurm-init-seconds-before-status-checks", "5",
        "--latency-wait", "5",
        *(("--retries", str(retries)) if retries is not None else ()),
    )


SLURM_ARGS = slurm_args()


SLURM_NOTICE_S = 240  # how long Snakemake gets to notice a cancelled job (the plugin polls every <= 180 s)
CANCEL_CELL = "results/runs/tiny/digits/iid/mlr/fedavg/seed0"  # a cell of tests/data/tiny_config.yaml


def results_root(config: Path, replace: bool) -> str:
    """The results directory a run with ``config`` writes to (relative to its work directory)."""
    import yaml

    default = "results" if replace else yaml.safe_load((REPO / "config/config.yaml").read_text())["results"]
    return (yaml.safe_load(config.read_text()) or {}).get("results", default)


def long_config(base: Path, out: Path, rounds: int = 1500) -> Path:
    """``base`` with training long enough to cancel mid-cell, checkpointed every 10 rounds."""
    import yaml

    config = yaml.safe_load(base.read_text())
    for experiment in config["experiments"].values():
        experiment.setdefault("training", {}).update(rounds=rounds, eval_every=250, checkpoint_every=10)
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out


def job_pids(cluster: Cluster, jobs: list[str]) -> list[int]:
    """The process ids SLURM's ``scontrol listpids`` gives for ``jobs``."""
    pids = []
    for job in jobs:
        for line in cluster.run("scontrol", "listpids", job, check=False).stdout.splitlines()[1:]:
            if line.split() and line.split()[0].isdigit():
                pids.append(int(line.split()[0]))
    return pids


def scancel_and_resume(cluster: Cluster, state: Path, config: Path) -> bool:
    """Train one long cell through SLURM and ``scancel`` its job once a checkpoint is on disk.
    snakemake-executor-plugin-slurm 2.8.0 does not see that job end: ``sacct`` reports it as
    ``CANCELLED by <uid>``, which is not among the plugin's failure states (plain ``CANCELLED``,
    ``TIMEOUT``, ... are), so it keeps waiting.  After SLURM_NOTICE_S the script interrupts
    Snakemake as Ctrl-C would and runs the same command again; the new job must resume from the
    checkpoint and the cell's results must equal an uninterrupted local run's."""
    import json

    config = long_config(config, state / "long_config.yaml")
    target = f"{CANCEL_CELL}/metrics.json"
    local = snakemake(state / "long_local", config, "--cores", "1", target)
    if local.returncode:
        print(local.stdout[-4000:])
        return False
    command = [str(Path(sys.executable).with_name("snakemake")), "-s", str(REPO / "Snakefile"), "--directory",
               str(state / "long_slurm"), "--configfile", str(config), *SLURM_ARGS, target]
    print("$", " ".join(command), flush=True)
    log = open(state / "scancel_run.log", "w")
    process = subprocess.Popen(command, cwd=REPO, env=cluster.env, stdout=log, stderr=subprocess.STDOUT, text=True)
    checkpoint = state / "long_slurm" / CANCEL_CELL / "checkpoint.pt"
    deadline = time.time() + 600
    while not checkpoint.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    running = cluster.run("squeue", "-h", "-t", "RUNNING", "-o", "%i").stdout.split()
    pids = job_pids(cluster, running)
    for job in running:
        cluster.run("scancel", job)
    print(f"slurm-local: scancel {' '.join(running)} with {checkpoint.name} on disk", flush=True)
    try:
        process.wait(timeout=SLURM_NOTICE_S)
        noticed = True
    except subprocess.TimeoutExpired:
        noticed = False
        print(f"slurm-local: Snakemake still waits for the cancelled job after {SLURM_NOTICE_S} s; interrupting it", flush=True)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=300)
    log.close()
    time.sleep(2)
    leftovers = []
    for pid in pids:  # proctrack/linuxproc loses processes whose parent died first: end them by pid
        try:
            os.kill(pid, signal.SIGKILL)
            leftovers.append(pid)
        except ProcessLookupError:
            pass
    if leftovers:
        print(f"slurm-local: killed {len(leftovers)} process(es) of the cancelled job that outlived it", flush=True)
    if process.returncode != 0 or not noticed:
        rerun = subprocess.run(command, cwd=REPO, env=cluster.env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        (state / "scancel_rerun.log").write_text(rerun.stdout)
        if rerun.returncode:
            print(rerun.stdout[-4000:])
            return False
    job_logs = "".join(p.read_text() for p in (state / "long_slurm" / "results" / "logs" / "train").glob("**/*.log"))
    resumed = "resuming from" in job_logs
    run = state / "long_slurm" / CANCEL_CELL
    drop = ("wall_time_s", "peak_memory")
    a, b = (json.loads((root / CANCEL_CELL / "metrics.json").read_text()) for root in (state / "long_local", state / "long_slurm"))
    equal = {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop} and all(
        (state / "long_local" / CANCEL_CELL / name).read_bytes() == (run / name).read_bytes() for name in ("history.csv", "clients.csv"))
    print(f"slurm-local: the rerun {'resumed' if resumed else 'did NOT resume'} the cancelled cell from its checkpoint; "
          f"results {'equal' if equal else 'DIFFER from'} the uninterrupted local run's", flush=True)
    return bool(running) and resumed and equal


def same_cell(a: Path, b: Path) -> bool:
    """The cell ``CANCEL_CELL`` has the same results under the results parents ``a`` and ``b``."""
    import json

    drop = ("wall_time_s", "peak_memory")
    ma, mb = (json.loads((root / CANCEL_CELL / "metrics.json").read_text()) for root in (a, b))
    return {k: v for k, v in ma.items() if k not in drop} == {k: v for k, v in mb.items() if k not in drop} and all(
        (a / CANCEL_CELL / name).read_bytes() == (b / CANCEL_CELL / name).read_bytes() for name in ("history.csv", "clients.csv"))


def timeout_and_resume(cluster: Cluster, state: Path, config: Path) -> bool:
    """Train a cell longer than one attempt can through SLURM with a 2-minute time limit and up to
    3 retries: SLURM ends an attempt (``TIMEOUT``), the plugin resubmits it, the next attempt
    continues from the last checkpoint, and the results equal an uninterrupted local run's."""
    config = long_config(config, state / "limit_config.yaml", rounds=6000)
    target = f"{CANCEL_CELL}/metrics.json"
    local = snakemake(state / "limit_local", config, "--cores", "1", target)
    if local.returncode:
        print(local.stdout[-4000:])
        return False
    run = snakemake(state / "long_timeout", config, *slurm_args(train_runtime=2, retries=3), target, env=cluster.env)
    (state / "timeout_run.log").write_text(run.stdout)
    states = parse_sacct(cluster.run("sacct", "-X", "--parsable2", "--noheader", "--format=JobIdRaw,State",
                                     "--starttime", "now-1days").stdout)
    _, _, submitted = run_jobs(run.stdout)
    timeouts = [j for j in submitted if states.get(j) == "TIMEOUT"]
    logs = "".join(p.read_text() for p in (state / "long_timeout" / "results" / "logs" / "train").glob("**/*.log"))
    ok = run.returncode == 0 and bool(timeouts) and "resuming from" in logs and same_cell(state / "limit_local", state / "long_timeout")
    print(f"slurm-local: time-limit check: {len(timeouts)} attempt(s) ended by TIMEOUT, then "
          f"{'resumed and completed with results equal to the local run' if ok else 'FAILED (see timeout_run.log)'}", flush=True)
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=REPO / "tests/data/tiny_config.yaml")
    parser.add_argument("--keep", action="store_true", help="keep the state directory and the results")
    parser.add_argument("--scancel", action="store_true", help="cancel a training job mid-run, rerun, check it resumed")
    parser.add_argument("--faults-only", action="store_true", help="skip the local-vs-SLURM table comparison")
    parser.add_argument("--replace-config", action="store_true",
                        help="use --config alone (Snakemake's --replace-workflow-config), as for a paper grid")
    parser.add_argument("--only", default="", help="comma-separated experiments to run (only_experiments)")
    parser.add_argument("--compare-with", type=Path, metavar="RESULTS",
                        help="skip the local run; compare the SLURM run's tables with this finished local results root")
    parser.add_argument("--time-limit", action="store_true",
                        help="train with a 2-minute SLURM time limit and retries, check the next attempt resumes")
    args = parser.parse_args(argv)
    ensure_installed()
    state = Path(tempfile.mkdtemp(prefix="fedbench-slurm-"))
    cluster = Cluster(state / "cluster")
    started = time.time()
    try:
        cluster.start()
        print(f"slurm-local: cluster up in {time.time() - started:.1f} s (state in {state})", flush=True)
        ok = True
        if not args.faults_only:
            extra = workflow_args(args.replace_config, args.only)
            results = results_root(args.config, args.replace_config)
            local_results = args.compare_with.resolve() if args.compare_with else state / "local" / results
            if not args.compare_with:
                t0 = time.time()
                local = snakemake(state / "local", args.config.resolve(), "--cores", "2", *extra)
                if local.returncode:
                    print(local.stdout[-4000:])
                    return 1
                print(f"slurm-local: {load_line('local run', time.time() - t0, len(action_jobs(local.stdout)))}", flush=True)
            t0 = time.time()
            on_slurm = snakemake(state / "slurm", args.config.resolve(), *SLURM_ARGS, *extra, env=cluster.env)
            (state / "slurm_run.log").write_text(on_slurm.stdout)
            elapsed = time.time() - t0
            if on_slurm.returncode:
                print(on_slurm.stdout[-6000:])
                return 1
            remote, local_rules, submitted = run_jobs(on_slurm.stdout)
            accounted = parse_sacct(cluster.run("sacct", "-X", "--parsable2", "--noheader", "--format=JobIdRaw,State",
                                                "--starttime", "now-1days").stdout)
            completed = sorted(j for j, s in accounted.items() if s == "COMPLETED")
            print(f"slurm-local: SLURM run {elapsed:.1f} s: {len(remote)} jobs with an action, {len(submitted)} submitted "
                  f"with sbatch, sacct: {len(completed)} of {len(accounted)} COMPLETED; on the submitting host only "
                  f"{sorted(set(local_rules))}", flush=True)
            times = parse_sacct_times(cluster.run("sacct", "-X", "--parsable2", "--noheader", "--starttime", "now-1days",
                                                  "--format=JobIdRaw,Submit,Start,ElapsedRaw").stdout)
            print(f"slurm-local: {load_line('SLURM run', elapsed, len(submitted))}; "
                  f"{slurm_overhead(submitted_rules(on_slurm.stdout), times, training_seconds(state / 'slurm' / results))}",
                  flush=True)
            through_sbatch = len(remote) == len(submitted) == len(completed) == len(accounted) > 0 and sorted(submitted) == completed
            through_sbatch = through_sbatch and set(local_rules) <= set(TARGET_RULES)
            problems = table_differences(local_results, state / "slurm" / results)
            ok = through_sbatch and not problems
            if problems:
                print(f"slurm-local: tables differ: {problems}")
        if args.scancel:
            t0 = time.time()
            ok = scancel_and_resume(cluster, state, args.config.resolve()) and ok
            print(f"slurm-local: scancel check {time.time() - t0:.1f} s", flush=True)
        if args.time_limit:
            t0 = time.time()
            ok = timeout_and_resume(cluster, state, args.config.resolve()) and ok
            print(f"slurm-local: time-limit check {time.time() - t0:.1f} s", flush=True)
        print(f"slurm-local: {'OK' if ok else 'FAILED'} (total {time.time() - started:.1f} s)")
        return 0 if ok else 1
    finally:
        cluster.stop()
        if args.keep:
            print(f"slurm-local: state kept in {state}")
        else:
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
