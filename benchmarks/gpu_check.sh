#!/usr/bin/env bash
# One prepared GPU check for a lent machine (a few minutes): the CUDA-parametrised engine tests (and the
# Moreau family's CUDA-graph rounds, tests/test_moreau_fast_path.py),
# then `make bench-gpu` family by family, each under its own time limit so that one slow or
# failing family still leaves the others' figures.  Writes into OUTDIR (default gpu_check/):
#   pytest.log, bench.log and throughputs.yaml (config/throughputs.yaml with the measured `cuda`
#   families; copy it over config/throughputs.yaml to keep them).
#
#   bash benchmarks/gpu_check.sh [OUTDIR] [PYTHON]
#   GPU_CHECK=grids bash benchmarks/gpu_check.sh [OUTDIR] [PYTHON]
#
# GPU_CHECK (default "tests bench") names the parts; "moreau" times the Moreau family's rounds (below);
# "grids" runs the slow test that trains every
# pairing the paper grids plan for two rounds, on the GPU (12 pytest-xdist workers, GRIDS_TIMEOUT
# seconds at most; grids.log, and grids_reports.log written test by test: every outcome and each
# failure's traceback; needs pytest-xdist, and umap-learn for FLT's pairings).
# The other parts need torch with CUDA, numpy, pandas, scikit-learn, PyYAML and pytest, not
# umap-learn or snakemake.  BENCH_SKIP (default "reference") is passed to engine_round's --skip: the
# DataLoader loop is the peers' way; the reference loop takes as long again.
set -uo pipefail
out=$(realpath -m "${1:-gpu_check}")
python=${2:-python3}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
} 2>&1 | tee "$out/bench.log"

parts=${GPU_CHECK:-tests bench}
if [[ " $parts " == *" grids "* ]]; then
  FEDBENCH_TEST_DEVICE=cuda FEDBENCH_REPORT_LOG="$out/grids_reports.log" PYTHONPATH="$PWD/benchmarks:$PYTHONPATH" \
    timeout "${GRIDS_TIMEOUT:-600}" "$python" -m pytest -q -p no:cacheprovider -p report_as_you_go -m slow -n 12 \
    --tb=short tests/test_paper_grids_train.py 2>&1 | tee "$out/grids.log"
fi
[[ " $parts " == *" tests "* ]] && timeout 120 "$python" -m pytest -q -p no:cacheprovider -k cuda tests/test_engine.py tests/test_moreau_fast_path.py 2>&1 | tee "$out/pytest.log"

# "moreau": one round of pFedMe / pFedMT (and Per-FedAvg) two ways, the fast path (fused oracle steps, wide
# model, CUDA graphs) against the loops before it (benchmarks/moreau_round.py), at pFedMT's Synthetic shapes
# and on FeMAM's ResNet-9 pFedMe cell (50 clients, batch 32, R = 56, vmap before); moreau.log
if [[ " $parts " == *" moreau "* ]]; then
  for entry in "mlr:60:--methods pfedme,perfedavg,pfedmt" "dnn:60:--methods pfedme,perfedavg,pfedmt" \
               "resnet9:150:--methods pfedme --clients 50 --samples 900 --batch-size 32 --local-steps 56 --repeats 3"; do
    IFS=: read -r model seconds flags <<< "$entry"
    # shellcheck disable=SC2086
    timeout "$seconds" "$python" benchmarks/moreau_round.py --device cuda --model "$model" $flags 2>&1 | tee -a "$out/moreau.log"
    echo "# moreau $model: exit ${PIPESTATUS[0]}" | tee -a "$out/moreau.log"
  done
fi

[[ " $parts " == *" bench "* ]] || exit 0
cp config/throughputs.yaml "$out/throughputs.yaml"
# family:seconds (the papers' sizes: FeMAM's 50 clients for ResNet-9 take longest)
for entry in mlp:45 fedavg_cnn:50 leaf_cnn:50 resnet20:40 vgg16:40 resnet9:100; do
  family=${entry%%:*}
  start=$(date +%s)
  timeout "${entry##*:}" "$python" benchmarks/throughputs.py --device cuda --size paper --families "$family" \
    --skip "${BENCH_SKIP-reference}" --output "$out/throughputs.yaml" 2>&1 | tee -a "$out/bench.log"
  echo "# $family: exit ${PIPESTATUS[0]}, $(( $(date +%s) - start )) s" | tee -a "$out/bench.log"
done
