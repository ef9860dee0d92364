#!/usr/bin/env bash
# Second recording pass (run from the repo root on a 2-GPU machine): OUT=/dir bash examples/recorded/record2.sh
# GPU 1: the matmul-bias sweep (n 64/512/4096/8192, bf16 and fp32, eager and compiled) and the mlp
# workload (eager / compile / graphs) through the runner; GPU 0 meanwhile: the larger jitter recording.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD; OUT=${OUT:?set OUT}; LOG=$OUT/log2.txt
REC=/tmp/rec; SWEEP=/tmp/sweep; mkdir -p $REC $SWEEP
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $LOG; }
python3 -c 'import torch,sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0], torch.cuda.get_device_name(0))' >>$LOG 2>&1
# profd importable without installing it; run from /tmp so that the repo's own profd/ folder does not shadow it
mkdir -p /tmp/pp/profd && cp profd/__init__.py /tmp/pp/profd/ && ln -sfn $ROOT/server /tmp/pp/profd/server && ln -sfn $ROOT/protocol /tmp/pp/profd/protocol
sweep() {
  cd /tmp
  export CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/pp
  for c in "" "--compile"; do for d in bfloat16 float32; do
    timeout 240 python3 -m profd.server.workloads.runner run matmul-bias --n 64,512,4096,8192 --dtype $d $c \
      --out $SWEEP --no-analyze --timeout 120 >>$OUT/sweep_log.txt 2>&1
    echo "sweep $d $c rc=$?" >>$OUT/sweep_log.txt
  done; done
  for m in eager compile graphs; do
    timeout 150 python3 -m profd.server.workloads.runner run mlp --mode $m --out $SWEEP --no-analyze --timeout 120 >>$OUT/sweep_log.txt 2>&1
    echo "mlp $m rc=$?" >>$OUT/sweep_log.txt
  done
}
sweep & SWEEP_PID=$!
cd examples/recorded/src
export CUDA_VISIBLE_DEVICES=0
say "jitter n4096"; timeout 90 python3 jitter.py --side --n 4096 --active 12 --out $REC/jitter_side_n4096 >>$LOG 2>&1; say "  rc=$?"
say "jitter n4096 alone"; timeout 90 python3 jitter.py --no-side --n 4096 --active 12 --out $REC/jitter_alone_n4096 >>$LOG 2>&1; say "  rc=$?"
cd $ROOT
wait $SWEEP_PID; say "sweep done"
gzip -f $REC/*.json
tar -cf $OUT/recorded2.tar -C $REC .
tar -cf $OUT/sweep.tar -C $SWEEP .
say "all done"
