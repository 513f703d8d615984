#!/usr/bin/env bash
# Times the papers' claims analogues (README, "The papers' claims") on a lent GPU machine: each one
# from an empty results folder (partitions, encoders, every run, tables, claims), one after another,
# `snakemake --cores CORES` with every job's training on the GPU (`device=auto`; FeMAM's config says
# cpu and is overridden).  Writes into OUTDIR:
#   analogues.log           per analogue: wall time, training jobs finished / planned, the jobs' wall
#                           times (Snakemake's benchmark files: start-up included) summed and per
#                           method, the runs' own (``wall_time_s`` of metrics.json) summed, the verdicts
#   <name>_claims.csv       the claims table the run wrote (to set beside the CPU run's verdicts)
#   <name>_logs.tar.gz      Snakemake's log and the benchmark files
#
#   bash benchmarks/gpu_analogues.sh OUTDIR "fedmr pfedmt femam flt" [SECONDS] [PYTHON] [CORES]
#
# SECONDS (default 3600) bounds the whole script: an analogue still running then is stopped and
# reported with the jobs it finished.  Needs snakemake (and umap-learn for FLT) importable by PYTHON.
set -uo pipefail
out=$(realpath -m "${1:?OUTDIR}")
names=${2:-fedmr pfedmt femam flt}
budget=${3:-3600}
python=${4:-python3}
cores=${5:-$(getconf _NPROCESSORS_ONLN)}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
start_all=$(date +%s)

declare -A args=(
  [fedmr]="--configfile config/experiments/fedmr_claims.yaml"
  [pfedmt]="--configfile config/experiments/pfedmt.yaml --config only_experiments=[synthetic_mlr,synthetic_dnn] device=auto"
  [femam]="--configfile config/experiments/femam_offline.yaml --config only_experiments=[femam_offline_starved] device=auto"
  [flt]="--configfile config/experiments/flt_claims.yaml"
)
declare -A folder=([fedmr]=results/fedmr_claims [pfedmt]=results/pfedmt [femam]=results/femam_offline [flt]=results/flt_claims)
declare -A paper=([fedmr]=fedmr [pfedmt]=pfedmt [femam]=femam [flt]=flt)

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$python" -c 'import torch, snakemake; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "snakemake", snakemake.__version__)'
  echo "cores $cores of $(getconf _NPROCESSORS_ONLN) CPUs; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} 2>&1 | tee "$out/analogues.log"

for name in $names; do
  [[ -n "${args[$name]:-}" ]] || { echo "unknown analogue $name (fedmr, pfedmt, femam, flt)" | tee -a "$out/analogues.log"; exit 2; }
  results=${folder[$name]}
  left=$(( budget - ($(date +%s) - start_all) ))
  (( left > 30 )) || { echo "# $name: not started, the budget is spent" | tee -a "$out/analogues.log"; continue; }
  rm -rf "$results" .snakemake/locks
  # shellcheck disable=SC2086
  planned=$("$python" -m snakemake -n --quiet rules ${args[$name]} --replace-workflow-config 2>/dev/null |
            awk '$1 == "train_cell" || $1 == "tune_trial" || $1 == "train_tuned" {n += $2} END {print n}')
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  timeout "$left" "$python" -m snakemake --cores "$cores" --scheduler greedy --keep-going \
    ${args[$name]} --replace-workflow-config >"$out/$name.snakemake.log" 2>&1
  rc=$?
  wall=$(( ($(date +%s%N) - t0) / 1000000 ))  # ms
  "$python" - "$name" "$results" "$rc" "$wall" "${planned:-?}" "${paper[$name]}" "$out" <<'EOF' 2>&1 | tee -a "$out/analogues.log"
import csv, json, pathlib, shutil, statistics, sys
name, results, rc, wall, planned, paper, out = sys.argv[1:]
results = pathlib.Path(results)
seconds = {}
for kind in ("train", "tune", "tuned"):  # the cells, the tuning trials, the tuned runs
  for tsv in sorted((results / "benchmarks" / kind).rglob("*.tsv")):
    method = f"{kind}: " + (tsv.parent.parent.name if kind == "tune" else tsv.parent.name)
    with tsv.open() as handle:
        seconds.setdefault(method, []).append(float(next(csv.DictReader(handle, delimiter="\t"))["s"]))
runs = sum(len(v) for v in seconds.values())
total = sum(sum(v) for v in seconds.values())
inside = sum(json.loads(f.read_text())["wall_time_s"] for d in ("runs", "tuned/runs", "tuning/trials")
             for f in (results / d).rglob("metrics.json"))
state = "finished" if rc == "0" else ("stopped at the budget" if rc == "124" else f"exit {rc}")
print(f"# {name}: {state}, wall {int(wall) / 1000:.0f} s ({int(wall) / 60000:.1f} min), "
      f"{runs} of {planned} training jobs, {total:.0f} s of jobs, {inside:.0f} s of runs (metrics.json)")
for method, values in sorted(seconds.items()):
    print(f"    {method:<28} {len(values):>3} runs  {min(values):7.1f}-{max(values):7.1f} s  median {statistics.median(values):7.1f} s")
claims = results / "tables" / paper / "claims.csv"
if claims.exists():
    shutil.copy(claims, pathlib.Path(out) / f"{name}_claims.csv")
    with claims.open() as handle:
        rows = list(csv.DictReader(handle))
    for setting in ("paper", "tuned"):
        verdicts = [row["verdict"] for row in rows if row.get("setting", "paper") == setting]
        if verdicts:
            print(f"    verdicts ({setting}): " + ", ".join(f"{verdicts.count(v)} {v}" for v in sorted(set(verdicts))))
EOF
  mv "$out/$name.snakemake.log" "$results/snakemake.log"
  tar -czf "$out/${name}_logs.tar.gz" "$results/snakemake.log" "$results/benchmarks" 2>/dev/null
done
echo "# all: $(( $(date +%s) - start_all )) s" | tee -a "$out/analogues.log"
