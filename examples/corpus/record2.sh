#!/usr/bin/env bash
# Record the second batch of corpus traces on one GPU: OUT=/dir bash examples/corpus/record2.sh
# Workloads nobody tuned the rules on (BERT, T5, LSTMs, a recommender, ConvNeXt, EfficientNet,
# MobileNet, a hand-written KV-cache decoder, a compiled ViT, a numpy input pipeline, ...).
# As record.sh: the sources are copied to a folder unlike any checkout (here /srv/exp/jobs, so the
# frames name /srv/exp/jobs/<script>.py), runs are sequential, each under a timeout, most
# important first, and what would start after the budget is skipped and logged. Everything lands
# in $OUT/corpus2.tar.
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
RUN=/srv/exp/jobs
DEST="$RUN/out"
BUDGET=${BUDGET:-540}
rm -rf "$RUN" && mkdir -p "$DEST" && cp "$HERE"/src/*.py "$RUN"/
cd "$RUN"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import sys, torch, torchvision, transformers, timm, numpy; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version()); print("torchvision", torchvision.__version__, "transformers", transformers.__version__, "timm", timm.__version__, "numpy", numpy.__version__)'
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
  (( rc != 0 )) && tail -n 5 "$DEST/$name.log" | tee -a "$DEST/log.txt"
}
rec bert_cls_fp32         45 bert_train.py --mode cls
rec bert_mlm_bf16         45 bert_train.py --mode mlm
rec t5_eager_bf16         45 t5_train.py
rec lstm_cudnn_fp32       40 lstm_lm.py --impl cudnn
rec lstm_cell_loop        40 lstm_lm.py --impl cell
rec recsys_embbag         40 recsys.py
rec sgd_single_small      40 sgd_small.py
rec decode_kv_item        40 decode_kv.py
rec numpy_pipeline        40 numpy_pipeline.py
rec convnext_tiny_cl      45 vision.py --model convnext_tiny
rec efficientnet_b0_fp32  45 vision.py --model efficientnet_b0
rec mobilenet_v3_b1       40 vision.py --model mobilenet_v3_small
rec cnn_conv_bias_bn      40 cnn_bn.py --bias on
rec cnn_conv_nobias_bn    40 cnn_bn.py --bias off
rec vit_tiny_compiled    180 vit_compiled.py
echo "total $(( $(date +%s) - START ))s" | tee -a "$DEST/log.txt"
ls -la "$DEST"/*.json.gz 2>/dev/null | awk '{print $5, $9}' | tee -a "$DEST/log.txt"
tar -C "$RUN" -cf "${OUT:-/tmp}/corpus2.tar" out
cp "$DEST/log.txt" "$DEST/env.txt" "${OUT:-/tmp}/" 2>/dev/null
