#!/usr/bin/env bash
# One prepared GPU check for a lent machine, within GPU_CHECK_BUDGET seconds (default 570: under
# 10 minutes with start-up).  Every measurement runs under its own `timeout` (never past the
# budget), logs its outcome as it arrives, and a failure is one logged line: the rest still run.
#
#   bash benchmarks/gpu_check.sh [OUTDIR] [PYTHON]
#   GPU_CHECK="matrix concurrent" bash benchmarks/gpu_check.sh OUT      # only these parts
#   GPU_CHECK="moreau tests" bash benchmarks/gpu_check.sh OUT           # the Moreau family's rounds, the CUDA tests
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_SIZE=tiny GPU_CHECK_SCALE=4 GPU_CHECK_BUDGET=400 GPU_CHECK=moreau \
#     bash benchmarks/gpu_check.sh OUT .venv/bin/python                 # the moreau part's dry run on the CPU
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_SIZE=tiny GPU_CHECK_SCALE=6 GPU_CHECK_BUDGET=3000 CONCURRENT_K=2 \
#     GPU_CHECK="matrix algorithms concurrent grids" bash benchmarks/gpu_check.sh OUT   # a dry run on the CPU
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_SIZE=tiny GPU_CHECK_BUDGET=60 GRIDS_WORKERS=1 GPU_CHECK=grids \
#     bash benchmarks/gpu_check.sh OUT .venv/bin/python                 # the grids part's selection on the CPU
#
# Parts (GPU_CHECK, default "batching profile matrix algorithms concurrent compile tests grids"), in this order:
#   batching    S = 10 runs trained as one vectorised call against 10 calls (issue 56): FLT's local round
#               (784-200-10 MLP, 20 clients each) and pFedMT's MLR device step (50 devices each), ms per run
#               and the ratio, each client's weights compared between the two ways: benchmarks/run_batching.py
#               -> batching.log
#   profile     one round of the wide ResNet-9 and ResNet-20 steps (fp32 and bf16 + channels_last) under
#               torch.profiler: where the device time goes, by kind (convolution forward, data and weight
#               gradients, BatchNorm, matrix products, elementwise, copies) and by kernel, to tell why
#               they stay under their TFLOP/s targets -> profile_<family>_<setting>.txt, matrix.csv; then
#               each ResNet-9 stage's convolution (8/16/32/64 channels at 32/16/8/4 px) for FeMAM's 50
#               clients x batch 32, fp32 and bf16, three ways: the wide step's grouped convolution, one
#               per client, unfold + bmm (benchmarks/conv_layouts.py) -> conv_layouts.log
#   matrix      every family (benchmarks/throughputs.py's: mlp, fedavg_cnn, leaf_cnn, resnet9, resnet20,
#               vgg16; the papers' client counts) x {fp32, bf16} x {channels first, last}, compile off,
#               plus bf16 + channels_last + cudnn_benchmark: benchmarks/numerics_matrix.py, one
#               process per family, achieved training TFLOP/s per setting -> matrix.csv
#   algorithms  whole rounds of FeMAM and pFedMe on ResNet-9 (FeMAM's 50 clients x 900, batch 32),
#               fp32 and bf16: benchmarks/algorithm_round.py -> algorithms.csv
#   moreau      (not by default: the default parts fill the budget already; GPU_CHECK="moreau tests")
#               one round of pFedMe / Per-FedAvg / pFedMT two ways, the fast path (fused oracle steps,
#               wide model, CUDA graphs) against the loops before it (benchmarks/moreau_round.py), at
#               pFedMT's Synthetic shapes (mlr, dnn) and on FeMAM's ResNet-9 pFedMe cell (50 clients,
#               batch 32, R = 56, vmap before); runs after algorithms -> moreau.log
#   concurrent  CONCURRENT_K (default 4) ResNet-9 cells in K processes on the one GPU, their timed
#               rounds overlapping, against one alone (bf16 + channels_last) -> concurrent.csv
#   compile     the matrix with compile on: ResNet-9 and ResNet-20 first (the targets), then the
#               other families, as far as the budget goes (each compile takes tens of seconds)
#   tests       the CUDA-parametrised tests (pytest -k cuda tests/test_engine.py tests/test_numerics.py
#               tests/test_moreau_fast_path.py: the engine against the reference loop, bf16 / channels_last /
#               tf32 with CUDA graphs, the Moreau family's rounds with CUDA graphs against eager) -> pytest.log
#   grids       the rest of the budget: the slow test that trains every paper-grid pairing for two
#               rounds, on the GPU, in reverse collection order (the H100 session of 2026-11-26, cut
#               off at 240 s, reached 64 of 235 pairings in collection order; the H200 session of
#               2026-11-27, 101 of 236 in reverse order), GRIDS_WORKERS (12) pytest-xdist workers
#               -> grids_order.txt (every pairing collected), grids_run.txt (those handed to pytest),
#               grids.log, grids_reports.log (every outcome as it arrives, each failure's traceback).
#               Left out, each kind with one logged line: the pairings listed as passed on a GPU in
#               benchmarks/gpu_runs/grids_passed.txt (GRIDS_RERUN_PASSED=1 keeps them, last), so
#               that a session reaches new ones first (add a session's passes with
#                 awk '/^PASSED call /{print $4}' OUT/grids_reports.log >> benchmarks/gpu_runs/grids_passed.txt
#               and sort -u), and, where "$python" cannot import umap, FLT's encoder pairings (those
#               whose algorithm names an encoder: FLT's relatedness step runs UMAP; on the H200 all 40
#               that ran failed so, after 8-60 s each).  Needs pytest-xdist, and umap-learn for FLT.
#               umap-learn and pynndescent (pure Python, the two the lent machines' image lacks; numba, llvmlite, joblib,
#               scikit-learn, scipy and tqdm are there) travel as wheels (/work/.library/device/README.md,
#               Notes): here, once, in the repository's root (/.whl/ is git-ignored)
#                 python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                   --implementation cp -d .whl umap-learn==0.5.12 pynndescent==0.7.0
#               then the device call carries .whl and starts with
#                 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#                   --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit;
#   bench       (not by default) the former check: `make bench-gpu` family by family, writing
#               throughputs.yaml (config/throughputs.yaml with the measured `cuda` families)
# GPU_CHECK_FAMILIES (default all six) limits the matrix and compile parts to some families (ResNet-9 and
# ResNet-20 always compile first); GPU_CHECK_MOREAU_MODELS (default "mlr dnn resnet9") the moreau part's models.
# GPU_CHECK_ARCHIVE=FILE.tgz packs OUTDIR into one archive at the end: the device tool returns at most 8 files a
# call (the 2026-11-27 evening run lost its matrix.csv, logs and profiles so), so on a lent machine call
#   GPU_CHECK_ARCHIVE=$OUT/gpu_check.tgz bash benchmarks/gpu_check.sh /tmp/gpu_check python3
# Everything goes to OUTDIR/gpu_check.log too, and a summary (best setting per family, the targets
# ResNet-9 >= 10 and ResNet-20 >= 8 TFLOP/s) ends it.  Needs torch with CUDA, numpy, pandas,
# scikit-learn, PyYAML and pytest.
set -uo pipefail
out=$(realpath -m "${1:-gpu_check}")
python=${2:-python3}
budget=${GPU_CHECK_BUDGET:-570}
device=${GPU_CHECK_DEVICE:-cuda}
size=${GPU_CHECK_SIZE:-paper}
parts=" ${GPU_CHECK:-batching profile matrix algorithms concurrent compile tests grids} "
k=${CONCURRENT_K:-4}
scale=${GPU_CHECK_SCALE:-1}  # multiplies every step's time limit (a dry run on a slow CPU)
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
log="$out/gpu_check.log"
start_all=$(date +%s)

left() { echo $(( budget - ($(date +%s) - start_all) )); }
say() { echo "# [$(( $(date +%s) - start_all )) s] $*" | tee -a "$log"; }
# step NAME SECONDS COMMAND...: COMMAND under timeout min(SECONDS, what is left), output to the log
step() {
  local name=$1 limit=$2 rest
  shift 2
  rest=$(left)
  limit=$(( limit * scale ))
  (( rest < limit )) && limit=$rest
  if (( limit < 5 )); then say "$name: not started, the budget is spent"; return 0; fi
  local t0=$(date +%s)
  timeout "$limit" "$@" 2>&1 | grep --line-buffered -v '^{' | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  say "$name: exit $rc$( ((rc == 124)) && echo " (stopped at its $limit s limit)"), $(( $(date +%s) - t0 )) s"
}
has() { [[ "$parts" == *" $1 "* ]]; }
# umap-learn importable by $python? (the grids part starts the check alongside its collection)
umap_importable() { if [[ -n ${umap_check:-} ]]; then wait "$umap_check"; else timeout 120 "$python" -c "import umap" >/dev/null 2>&1; fi; }
count() { if [[ -f "$2" ]]; then grep -c "$1" "$2"; else echo 0; fi; }

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown); device $device, size $size, budget $budget s, parts:$parts"
} 2>&1 | tee "$log"

families=${GPU_CHECK_FAMILIES:-resnet9 resnet20 vgg16 fedavg_cnn leaf_cnn mlp}  # the matrix's and compile's families
declare -A limit=([mlp]=30 [fedavg_cnn]=45 [leaf_cnn]=45 [resnet9]=60 [resnet20]=50 [vgg16]=50)
matrix=(--size "$size" --device "$device" --csv "$out/matrix.csv")

if has batching; then
  runs=$([[ $size == tiny ]] && echo 2 || echo 10)
  step "batching" 45 bash -c "\"\$0\" benchmarks/run_batching.py --device \"\$1\" --runs \$2 --repeats 5 2>&1 | tee -a \"\$3\"; \
    exit \${PIPESTATUS[0]}" "$python" "$device" "$runs" "$out/batching.log"
fi

if has profile; then
  for family in resnet9 resnet20; do
    step "profile $family" 60 "$python" benchmarks/numerics_matrix.py --family "$family" "${matrix[@]}" \
      --settings fp32,bf16+cl --repeats 1 --profile "$out"
  done
  layers=("8,8,32,3" "16,16,16,3" "32,32,8,3" "64,64,4,3")
  [[ $size == tiny ]] && layers=("8,8,8,3")
  for layer in "${layers[@]}"; do
    for dtype in fp32 bf16; do
      step "conv layout $layer $dtype" 30 bash -c "\"\$0\" benchmarks/conv_layouts.py --device \"\$1\" --dtype \"\$2\" \
        --clients \$4 --batch \$5 --conv \"\$3\" --linear 64,100 --repeats 5 2>&1 | tee -a \"\$6\"; exit \${PIPESTATUS[0]}" \
        "$python" "$device" "$dtype" "$layer" "$([[ $size == tiny ]] && echo 2 || echo 50)" \
        "$([[ $size == tiny ]] && echo 4 || echo 32)" "$out/conv_layouts.log"
    done
  done
fi

if has matrix; then
  for family in $families; do
    step "matrix $family" "${limit[$family]}" "$python" benchmarks/numerics_matrix.py --family "$family" "${matrix[@]}" \
      --settings fp32,bf16,fp32+cl,bf16+cl,bf16+cl+bench --budget-s $(( (${limit[$family]} - 15) * scale ))
  done
fi

if has algorithms; then
  # pFedMe with 4 x 5 minibatch steps a round (the grid's 56 x 5 take ~14 times as long; FLOP/s alike)
  rounds=(--family resnet9 --device "$device" --csv "$out/algorithms.csv")
  [[ $size == tiny ]] && rounds+=(--clients 3 --samples 16 --eval-samples 4 --batch-size 8)
  for setting in fp32 bf16; do
    step "algorithms femam $setting" 40 "$python" benchmarks/algorithm_round.py --algorithm '{"method": "femam"}' \
      --setting "$setting" "${rounds[@]}"
    step "algorithms pfedme $setting" 40 "$python" benchmarks/algorithm_round.py \
      --algorithm '{"method": "pfedme", "lam": 0.1, "mu": 0.01, "personal_lr": 0.01, "local_steps": 4}' \
      --setting "$setting" "${rounds[@]}"
  done
fi

if has moreau; then
  # model:seconds:flags (the papers' shapes; at the tiny size a few clients, one timed round)
  if [[ $size == tiny ]]; then
    entries=("mlr:40:--methods pfedme,perfedavg,pfedmt --clients 4 --samples 16 --batch-size 4 --local-steps 2 --repeats 1 --warmup 0"
             "resnet9:60:--methods pfedme --clients 2 --samples 8 --batch-size 4 --local-steps 2 --repeats 1 --warmup 0")
  else
    entries=("mlr:60:--methods pfedme,perfedavg,pfedmt" "dnn:60:--methods pfedme,perfedavg,pfedmt"
             "resnet9:150:--methods pfedme --clients 50 --samples 900 --batch-size 32 --local-steps 56 --repeats 3")
  fi
  for entry in "${entries[@]}"; do
    IFS=: read -r model seconds flags <<< "$entry"
    [[ " ${GPU_CHECK_MOREAU_MODELS:-mlr dnn resnet9} " == *" $model "* ]] || continue
    step "moreau $model" "$seconds" bash -c "\"\$0\" benchmarks/moreau_round.py --device \"\$1\" --model \"\$2\" \$3 2>&1 | tee -a \"\$4\"; exit \${PIPESTATUS[0]}" \
      "$python" "$device" "$model" "$flags" "$out/moreau.log"
  done
fi

if has concurrent; then
  # one alone, then K at once; every process waits after its warm-up until the same start time
  at=$(( $(date +%s) + 25 * scale ))
  step "concurrent 1" 60 "$python" benchmarks/numerics_matrix.py --family resnet9 --size "$size" --device "$device" \
    --settings bf16+cl --warmup 2 --repeats 5 --start-at "$at" --csv "$out/concurrent_1.csv"
  rest=$(left)
  if (( rest > 60 * scale )); then
    at=$(( $(date +%s) + 40 * scale ))
    kt=$(( rest - 5 )); (( kt > 90 * scale )) && kt=$(( 90 * scale ))
    for i in $(seq "$k"); do
      timeout "$kt" "$python" benchmarks/numerics_matrix.py --family resnet9 --size "$size" --device "$device" \
        --settings bf16+cl --warmup 2 --repeats 5 --start-at "$at" --csv "$out/concurrent_k$i.csv" \
        >"$out/concurrent_k$i.log" 2>&1 &
    done
    wait
    grep -hv '^{' "$out"/concurrent_k*.log | tee -a "$log"
    "$python" - "$out" "$k" <<'EOF' 2>&1 | tee -a "$log"
import csv, glob, sys
out, k = sys.argv[1], int(sys.argv[2])
def rows(pattern):
    return [r for f in sorted(glob.glob(f"{out}/{pattern}")) for r in csv.DictReader(open(f)) if r["status"] == "ok"]
one, many = rows("concurrent_1.csv"), rows("concurrent_k*.csv")
table = [("cells", "processes_ok", "ms_per_round_each", "train_tflops_total")]
if one:
    table.append((1, 1, one[0]["ms_per_round"], f"{float(one[0]['train_tflops']):.4g}"))
if many:
    total = sum(float(r["train_tflops"]) for r in many)
    table.append((k, len(many), "/".join(r["ms_per_round"] for r in many), f"{total:.4g}"))
csv.writer(open(f"{out}/concurrent.csv", "w", newline="")).writerows(table)
if one and many:
    print(f"# {k} concurrent cells: {total:.4g} TFLOP/s together against {float(one[0]['train_tflops']):.4g} alone "
          f"({total / max(float(one[0]['train_tflops']), 1e-12):.2f}x; {len(many)} of {k} processes finished)")
else:
    print(f"# concurrent: {'one alone' if one else 'no single cell'} and {len(many)} of {k} concurrent cells measured")
EOF
  else
    say "concurrent $k: not started, $rest s left"
  fi
fi

if has compile; then
  step "compile resnet9" 150 "$python" benchmarks/numerics_matrix.py --family resnet9 "${matrix[@]}" \
    --settings bf16+cl+compile,fp32+compile,bf16+compile,fp32+cl+compile --warmup 3 --budget-s $(( 100 * scale ))
  step "compile resnet20" 120 "$python" benchmarks/numerics_matrix.py --family resnet20 "${matrix[@]}" \
    --settings bf16+cl+compile,fp32+compile,bf16+compile,fp32+cl+compile --warmup 3 --budget-s $(( 80 * scale ))
  for family in vgg16 fedavg_cnn leaf_cnn mlp; do
    [[ " $families " == *" $family "* ]] || continue
    step "compile $family" 90 "$python" benchmarks/numerics_matrix.py --family "$family" "${matrix[@]}" \
      --settings bf16+cl+compile,fp32+compile,bf16+compile,fp32+cl+compile --warmup 3 --budget-s $(( 50 * scale ))
  done
fi

if has tests; then
  step "tests" 90 bash -c "\"$python\" -m pytest -q -p no:cacheprovider -k cuda tests/test_engine.py tests/test_numerics.py tests/test_moreau_fast_path.py 2>&1 | tee \"$out/pytest.log\"; exit \${PIPESTATUS[0]}"
fi

if has grids; then
  rest=$(( $(left) - 5 ))
  if (( rest > 30 )); then
    timeout 120 "$python" -c "import umap" >/dev/null 2>&1 &  # umap-learn importable? (alongside the collection)
    umap_check=$!
    FEDBENCH_TEST_DEVICE=$device timeout "$rest" "$python" -m pytest -q -p no:cacheprovider --collect-only -m slow \
      tests/test_paper_grids_train.py 2>/dev/null | grep '::' | tac >"$out/grids_order.txt"
    rest=$(( $(left) - 5 ))  # what the collection left
  fi
  if (( rest > 20 )) && [[ -s "$out/grids_order.txt" ]]; then
    order="$out/grids_order.txt" run="$out/grids_run.txt"
    passed=benchmarks/gpu_runs/grids_passed.txt
    if [[ -s $passed ]]; then
      grep -vxF -f "$passed" "$order" >"$run"
      skipped=$(( $(wc -l <"$order") - $(wc -l <"$run") ))
      if [[ ${GRIDS_RERUN_PASSED:-0} == 1 ]]; then
        grep -xF -f "$passed" "$order" >>"$run"
        say "grids: the $skipped pairings that passed on a GPU before ($passed) go last"
      else
        say "grids: $skipped pairings left out, passed on a GPU before ($passed; GRIDS_RERUN_PASSED=1 keeps them)"
      fi
    else
      cp "$order" "$run"
    fi
    if ! umap_importable; then
      # FLT's encoder pairings reach UMAP (fedbench/clustering/fcr.py) only after fine-tuning: each would fail late
      timeout 120 "$python" - >"$out/grids_umap.txt" <<'EOF'
import sys
sys.path.insert(0, "tests")
from test_paper_grids_train import PAIRINGS
print("\n".join(f"[{key}]" for key, p in PAIRINGS.items() if "encoder" in p["algorithm"]))
EOF
      if [[ -s "$out/grids_umap.txt" ]]; then
        before=$(wc -l <"$run")
        grep -vF -f "$out/grids_umap.txt" "$run" >"$run.tmp"
        mv "$run.tmp" "$run"
        say "grids: $(( before - $(wc -l <"$run") )) FLT encoder pairings left out: $python cannot import umap (umap-learn; wheels: this script's header)"
      else
        say "grids: $python cannot import umap, and listing FLT's encoder pairings failed: none left out"
      fi
    fi
    rest=$(( $(left) - 5 ))
    if (( rest > 20 )) && [[ -s "$run" ]]; then
      say "grids: $(wc -l <"$run") of $(wc -l <"$order") pairings, reverse collection order, $rest s"
      FEDBENCH_TEST_DEVICE=$device FEDBENCH_REPORT_LOG="$out/grids_reports.log" PYTHONPATH="$PWD/benchmarks:$PYTHONPATH" \
        timeout "$rest" "$python" -m pytest -q -p no:cacheprovider -p report_as_you_go -m slow -n "${GRIDS_WORKERS:-12}" \
        --tb=short "@$run" >"$out/grids.log" 2>&1
      rc=$?
      say "grids: exit $rc$( ((rc == 124)) && echo ' (stopped at the budget)'); $(count '^PASSED' "$out/grids_reports.log") passed, $(count '^FAILED' "$out/grids_reports.log") failed"
    else
      say "grids: $(wc -l <"$run") of $(wc -l <"$order") pairings left, not started: $rest s left"
    fi
  else
    say "grids: not started, $rest s left"
  fi
fi

if has bench; then
  cp config/throughputs.yaml "$out/throughputs.yaml"
  for entry in mlp:45 fedavg_cnn:50 leaf_cnn:50 resnet20:40 vgg16:40 resnet9:100; do
    step "bench ${entry%%:*}" "${entry##*:}" "$python" benchmarks/throughputs.py --device "$device" --size "$size" \
      --families "${entry%%:*}" --skip "${BENCH_SKIP-reference}" --output "$out/throughputs.yaml"
  done
fi

[[ -f "$out/matrix.csv" ]] && "$python" - "$out/matrix.csv" <<'EOF' 2>&1 | tee -a "$log" "$out/summary.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
targets = {"resnet9": 10.0, "resnet20": 8.0}
print(f"# summary: {sum(r['status'] == 'ok' for r in rows)} settings measured, "
      f"{sum(r['status'] == 'failed' for r in rows)} failed, {sum(r['status'] == 'skipped' for r in rows)} skipped")
for family in dict.fromkeys(r["family"] for r in rows):
    ok = [r for r in rows if r["family"] == family and r["status"] == "ok"]
    if not ok:
        print(f"{family:>10}: nothing measured")
        continue
    fp32 = next((r for r in ok if r["setting"] == "fp32"), None)
    best = max(ok, key=lambda r: float(r["train_tflops"]))
    line = (f"{family:>10}: best {best['setting']} {float(best['train_tflops']):.4g} TFLOP/s ({best['ms_per_round']} ms/round)"
            + (f", fp32 {float(fp32['train_tflops']):.4g} TFLOP/s" if fp32 else ""))
    if family in targets:
        line += f"; target {targets[family]:.0f} TFLOP/s {'met' if float(best['train_tflops']) >= targets[family] else 'not met'}"
    print(line)
EOF
say "all: $(( $(date +%s) - start_all )) s"
# GPU_CHECK_ARCHIVE=FILE.tgz: everything OUTDIR holds in one archive (the device tool returns 8 files a call)
if [[ -n ${GPU_CHECK_ARCHIVE:-} ]]; then
  tar czf "$GPU_CHECK_ARCHIVE" -C "$(dirname "$out")" "$(basename "$out")" && echo "archived $out in $GPU_CHECK_ARCHIVE"
fi
