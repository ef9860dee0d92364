#!/usr/bin/env bash
# Record the wild-style corpus traces on one GPU: OUT=/dir bash examples/corpus/record_wild.sh
# Each script in src/wild/ profiles itself the way people do (no schedule, one block around an
# epoch or a forward, the legacy API, tensorboard_trace_handler, cold processes, torch.compile
# compiling, CUDA or CPU activity only) and writes its own trace; this copies them to
# /home/lab/wild (a folder unlike any checkout), runs each in a fresh process under a timeout,
# gzips what it wrote and tars everything into $OUT/wild.tar.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
RUN=/home/lab/wild
DEST="$RUN/out"
BUDGET=${BUDGET:-420}
rm -rf "$RUN" && mkdir -p "$DEST" && cp "$HERE"/src/wild/*.py "$RUN"/
cd "$RUN"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import sys, torch, torchvision, transformers, numpy; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version()); print("torchvision", torchvision.__version__, "transformers", transformers.__version__, "numpy", numpy.__version__)'
  nproc
} > "$DEST/env.txt" 2>&1
START=$(date +%s)
ONLY=${ONLY:-}
rec() {  # rec NAME SECONDS SCRIPT [TARGET]: the script writes TARGET (default NAME.json)
  local name=$1 limit=$2 script=$3 target=${4:-$1.json}
  if [[ -n "$ONLY" && " $ONLY " != *" $name "* ]]; then return; fi
  local used=$(( $(date +%s) - START ))
  if (( used + 15 > BUDGET )); then echo "SKIP $name (budget: ${used}s used)" | tee -a "$DEST/log.txt"; return; fi
  (( limit > BUDGET - used )) && limit=$(( BUDGET - used ))
  local t0=$(date +%s)
  timeout "$limit" python3 "$script" "$target" > "$DEST/$name.log" 2>&1
  local rc=$?
  echo "rc=$rc ${name} $(( $(date +%s) - t0 ))s: python3 $script $target" | tee -a "$DEST/log.txt"
  (( rc != 0 )) && tail -n 5 "$DEST/$name.log" | tee -a "$DEST/log.txt"
  if [[ -d "$target" ]]; then  # tensorboard_trace_handler's folder: keep its file names
    for f in "$target"/*.json; do [[ -f "$f" ]] && gzip -9 -c "$f" > "$DEST/${name}__$(basename "$f").gz"; done
  elif [[ -f "$target" ]]; then
    gzip -9 -c "$target" > "$DEST/$name.json.gz"; rm -f "$target"
  fi
}
rec epoch_train          40 epoch_train.py
rec single_forward       40 single_forward.py
rec autograd_legacy      40 autograd_legacy.py
rec tb_handler           40 tb_handler.py tb_log
rec cold_conv1d          40 cold_conv1d.py
rec cuda_only            40 cuda_only.py
rec cpu_only_activity    40 cpu_only_activity.py
rec infer_loop           50 infer_loop.py
rec loader_epoch         60 loader_epoch.py
rec isnan_check          40 isnan_check.py
rec memgrowth_eval       40 memgrowth_eval.py
rec nostack_train        40 nostack_train.py
rec annotated_cold       40 annotated_cold.py
rec decode_loop          50 decode_loop.py
rec compile_cold         75 compile_cold.py
rec graph_break_loop     90 graph_break_loop.py
rec compile_autotune     75 compile_autotune.py
echo "total $(( $(date +%s) - START ))s" | tee -a "$DEST/log.txt"
ls -la "$DEST"/*.gz 2>/dev/null | awk '{print $5, $9}' | tee -a "$DEST/log.txt"
tar -C "$RUN" -cf "${OUT:-/tmp}/wild.tar" out
cp "$DEST/log.txt" "$DEST/env.txt" "${OUT:-/tmp}/" 2>/dev/null
