#!/usr/bin/env bash
# Records the compile-graph-break, memory-growth and unfused-attention pairs (one H200, run from the repo root):
#   OUT=/some/dir bash examples/recorded/record3.sh
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT}; REC=/tmp/rec3; mkdir -p $REC
cd examples/recorded/src
python3 -c 'import torch,sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0], torch.cuda.get_device_name(0))' >$OUT/log.txt 2>&1
for v in break whole; do timeout 200 python3 graph_break.py --variant $v --out $REC/graph_break_$v >>$OUT/log.txt 2>&1; echo "graph_break $v rc=$?" >>$OUT/log.txt; done
for v in grow fixed; do timeout 100 python3 memory_growth.py --variant $v --out $REC/memory_growth_$v >>$OUT/log.txt 2>&1; echo "memory $v rc=$?" >>$OUT/log.txt; done
for v in naive sdpa; do timeout 100 python3 attention.py --variant $v --out $REC/attention_$v >>$OUT/log.txt 2>&1; echo "attention $v rc=$?" >>$OUT/log.txt; done
gzip -f $REC/*.json
ls -la $REC >>$OUT/log.txt
tar -cf $OUT/recorded3.tar -C $REC .
