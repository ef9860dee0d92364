#!/usr/bin/env bash
# Record what bench/impact.py needs on one GPU: OUT=/dir bash bench/impact_rec/record_impact.sh SRCROOT
# SRCROOT holds corpus_src/ (examples/corpus/src), recorded_src/ (examples/recorded/src) and
# unprofiled.py. 1) the fixes.py before/after recordings (profiled traces with with_stack, as the
# corpus records, and their unprofiled µs per step in the meta); 2) the unprofiled step time of the
# corpus's other before/after traces (unprofiled.py: the script with the profiler replaced by a
# timer), twice, in two passes; each run under a timeout, everything after the budget skipped.
set -u
SRC=$(cd "${1:?SRCROOT}" && pwd)
BUDGET=${BUDGET:-500}
START=$(date +%s)
OUTD=${OUT:-/tmp/impact_out}
RUN=/opt/jobs/impact_runs
rm -rf "$RUN" && mkdir -p "$RUN/out" "$RUN/recorded" "$OUTD"
cp "$SRC"/corpus_src/*.py "$RUN"/ && cp "$SRC"/recorded_src/*.py "$RUN"/recorded/ && cp "$SRC"/unprofiled.py "$RUN"/
cd "$RUN"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
LOG="$OUTD/log.txt"; UNP="$OUTD/unprofiled.txt"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'; nproc; } > "$OUTD/env.txt" 2>&1
used() { echo $(( $(date +%s) - START )); }
fits() { local u; u=$(used); if (( u + $1 > BUDGET )); then echo "SKIP $2 (budget: ${u}s used)" | tee -a "$LOG"; return 1; fi; }
rec() {  # rec NAME SECONDS args... (fixes.py)
  local name=$1 limit=$2; shift 2
  fits 8 "$name" || return 0
  local t0=$(date +%s)
  timeout "$limit" python3 fixes.py "$@" ${SMOKE:+--device cpu} --out "out/$name" > "out/$name.log" 2>&1
  echo "rc=$? rec $name $(( $(date +%s) - t0 ))s: fixes.py $*" | tee -a "$LOG"
}
unp() {  # unp NAME SECONDS STEPS SRCDIR script args...
  local name=$1 limit=$2 n=$3 dir=$4; shift 4
  fits 8 "$name" || return 0
  local t0=$(date +%s) r
  r=$(UNPROFILED_STEPS=$n timeout "$limit" python3 unprofiled.py "$dir" "$@" 2>>"out/unp_$name.err" | grep '^RESULT')
  echo "$name $r" >> "$UNP"
  echo "rc=$? unp $name $(( $(date +%s) - t0 ))s: $r" | tee -a "$LOG"
}
for size in gpu cpu; do
  rec "fix_${size}_none" 60 --size ${SMOKE:-$size} --fix none
done
rec fix_gpu_tf32    40 --size ${SMOKE:-gpu} --fix tf32
rec fix_cpu_foreach 40 --size ${SMOKE:-cpu} --fix foreach
rec fix_gpu_bf16    40 --size ${SMOKE:-gpu} --fix bf16
rec fix_gpu_pinned  40 --size ${SMOKE:-gpu} --fix pinned
rec fix_cpu_tf32    40 --size ${SMOKE:-cpu} --fix tf32
rec fix_cpu_foreach_tf32 40 --size ${SMOKE:-cpu} --fix foreach+tf32
rec fix_gpu_zero    40 --size ${SMOKE:-gpu} --fix zero
rec fix_cpu_zero    40 --size ${SMOKE:-cpu} --fix zero
rec fix_gpu_foreach 40 --size ${SMOKE:-gpu} --fix foreach
for pass in 1 2; do
  unp optim_single 40 20 . optimizers.py --impl single
  unp optim_foreach 40 20 . optimizers.py --impl foreach
  unp copies_pageable_nb 30 20 . copies.py --variant pageable
  unp copies_pinned_nb 30 20 . copies.py --variant pinned
  unp host_sync_all 30 5 recorded host_sync.py --variant all
  unp host_sync_none 30 5 recorded host_sync.py --variant none
  unp attention_manual 30 20 . attention.py --impl manual
  unp attention_sdpa 30 20 . attention.py --impl sdpa
  unp sync_wait_idle 30 5 recorded sync_wait.py --variant idle
  unp sync_wait_none 30 5 recorded sync_wait.py --variant none
  unp loader_w0 40 5 . loader.py --workers 0
  unp loader_w4_pin 40 5 . loader.py --workers 4 --pin
  unp dataloader_w0 40 5 recorded dataloader.py --workers 0
  unp dataloader_w8_pin 40 5 recorded dataloader.py --workers 8 --pin
  unp attention_naive 30 5 recorded attention.py --variant naive
  unp attention_sdpa_recorded 30 5 recorded attention.py --variant sdpa
  unp compiled_break 60 20 . compiled.py --variant break
  unp compiled_none 60 20 . compiled.py --variant none
  unp graph_break_break 90 5 recorded graph_break.py --variant break
  unp graph_break_whole 90 5 recorded graph_break.py --variant whole
  unp optim_fused 40 20 . optimizers.py --impl fused
  unp compiled_sync 60 20 . compiled.py --variant sync
  unp conv_bias_bn 30 5 recorded conv_bn.py --bias
  unp conv_nobias_bn 30 5 recorded conv_bn.py --no-bias
  unp cnn_conv_bias_bn 40 20 . cnn_bn.py --bias on
  unp cnn_conv_nobias_bn 40 20 . cnn_bn.py --bias off
  unp sync_wait_busy 30 5 recorded sync_wait.py --variant busy
  unp loader_w4_pin_steady 60 40 . loader.py --workers 4 --pin
  unp gemm_fp32 30 20 . gemm_precision.py --kind fp32
  unp gemm_tf32 30 20 . gemm_precision.py --kind tf32
  unp graphs_eager 30 20 . cuda_graphs.py --mode eager
  unp graphs_replay 30 20 . cuda_graphs.py --mode graphs
done
echo "total $(used)s" | tee -a "$LOG"
tar -C "$RUN" -czf "$OUTD/impact.tar.gz" out
ls -la out/*.json.gz 2>/dev/null | awk '{print $5, $9}' >> "$LOG"
