#!/usr/bin/env bash
# Record the corpus traces on one GPU: OUT=/dir bash examples/corpus/record.sh
# The sources are copied to a folder unlike any checkout and run from there, so the frames name
# /opt/jobs/corpus_runs/<script>.py as a user's remote run would. Runs are sequential (one GPU,
# no contention between recordings), each under a timeout, most important first; runs that would
# start after the budget are skipped and logged. Everything lands in $OUT/corpus.tar.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
RUN=/opt/jobs/corpus_runs
DEST="$RUN/out"
BUDGET=${BUDGET:-480}
rm -rf "$RUN" && mkdir -p "$DEST" && cp "$HERE"/src/*.py "$RUN"/
cd "$RUN"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import sys, torch, torchvision, transformers, timm; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version()); print("torchvision", torchvision.__version__, "transformers", transformers.__version__, "timm", timm.__version__)'
  nproc
} > "$DEST/env.txt" 2>&1
START=$(date +%s)
ONLY=${ONLY:-}  # space-separated names: record only these
rec() {  # rec NAME SECONDS script args...
  local name=$1 limit=$2; shift 2
  if [[ -n "$ONLY" && " $ONLY " != *" $name "* ]]; then return; fi
  local used=$(( $(date +%s) - START ))
  if (( used + 10 > BUDGET )); then echo "SKIP $name (budget: ${used}s used)" | tee -a "$DEST/log.txt"; return; fi
  (( limit > BUDGET - used )) && limit=$(( BUDGET - used ))
  local t0=$(date +%s)
  timeout "$limit" python3 "$@" --out "$DEST/$name" > "$DEST/$name.log" 2>&1
  local rc=$?
  echo "rc=$rc ${name} $(( $(date +%s) - t0 ))s: python3 $*" | tee -a "$DEST/log.txt"
  (( rc != 0 )) && tail -5 "$DEST/$name.log" | tee -a "$DEST/log.txt"
}
rec gpt2_generate        60 gpt2_generate.py
rec gpt2_train_modules   60 gpt2_train.py --mode train
rec gpt2_infer_modules   60 gpt2_train.py --mode infer
rec resnet18_train       60 resnet18_train.py --modules --memory
rec compiled_break       90 compiled.py --variant break
rec compiled_none        90 compiled.py --variant none
rec compiled_sync        90 compiled.py --variant sync
rec attention_manual     40 attention.py --impl manual
rec attention_sdpa       40 attention.py --impl sdpa
rec eval_grad            40 eval_loop.py --variant grad
rec eval_nograd          40 eval_loop.py --variant nograd
rec cpu_train            40 cpu_train.py
rec copies_pageable_nb   40 copies.py --variant pageable
rec copies_pinned_nb     40 copies.py --variant pinned
rec prefetch_side_stream 40 prefetch.py
rec train_50steps        60 train_variants.py --variant steps50
rec amp_gradscaler       40 train_variants.py --variant scaler
rec grad_accum           40 train_variants.py --variant accum
rec act_checkpoint       40 train_variants.py --variant checkpoint
rec graphs_eager         40 cuda_graphs.py --mode eager
rec graphs_replay        40 cuda_graphs.py --mode graphs
rec loader_w0            60 loader.py --workers 0
rec loader_w4_pin        60 loader.py --workers 4 --pin
rec optim_single         40 optimizers.py --impl single
rec optim_foreach        40 optimizers.py --impl foreach
rec optim_fused          40 optimizers.py --impl fused
rec memgrowth_tensor     40 memory_growth.py --variant tensor
rec memgrowth_item       40 memory_growth.py --variant item
rec cpu_ahead            40 cpu_ahead.py
rec linear_m8944_aligned 40 linear_dims.py --dims aligned
rec linear_m8944_odd     40 linear_dims.py --dims odd
rec gloo_balanced        60 gloo_job.py --port 29511
rec gloo_straggler       60 gloo_job.py --straggler --port 29512
rec timm_vit_small       60 timm_train.py --model vit_small_patch16_224
rec timm_resnet50        60 timm_train.py --model resnet50
rec serve_decode_batch   60 serve_batching.py
rec gpt2_train_scaler    60 gpt2_train.py --mode scaler
rec cold_start           40 cold_start.py
rec hf_gpt2_compiled     120 hf_compile.py
rec gemm_fp32             40 gemm_precision.py --kind fp32
rec gemm_tf32             40 gemm_precision.py --kind tf32
rec gemm_fp8              40 gemm_precision.py --kind fp8
echo "total $(( $(date +%s) - START ))s" | tee -a "$DEST/log.txt"
ls -la "$DEST"/*.json.gz 2>/dev/null | awk '{print $5, $9}' | tee -a "$DEST/log.txt"
tar -C "$RUN" -cf "${OUT:-/tmp}/corpus.tar" out
cp "$DEST/log.txt" "$DEST/env.txt" "${OUT:-/tmp}/" 2>/dev/null
