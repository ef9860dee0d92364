#!/usr/bin/env bash
# Records examples/recorded/*.json.gz on a GPU machine with two GPUs (run from the repo root):
#   OUT=/some/dir bash examples/recorded/record.sh
# GPU 1: the matmul-bias sweep and the mlp workload through the runner (profd.server.workloads.runner);
# GPU 0 meanwhile: the single-GPU rule recordings; then both GPUs: the 2-rank DDP recordings.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROOT=$PWD
OUT=${OUT:?set OUT}
LOG=$OUT/log.txt
REC=/tmp/rec; SWEEP=/tmp/sweep; mkdir -p $REC $SWEEP
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $LOG; }
{ nvidia-smi; python3 -c 'import torch,sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0], "gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0))'; nproc; } >>$LOG 2>&1
# profd importable without installing it (the runner needs only the standard library)
mkdir -p /tmp/pp/profd && cp profd/__init__.py /tmp/pp/profd/ && ln -sfn $ROOT/server /tmp/pp/profd/server && ln -sfn $ROOT/protocol /tmp/pp/profd/protocol

sweep() {
  export CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/pp
  for c in "" "--compile"; do for d in bfloat16 float32; do
    timeout 200 python3 -m profd.server.workloads.runner run matmul-bias --n 64,512,4096,8192 --dtype $d $c \
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
r() { local name=$1; shift; say "run $name: $*"; timeout 90 python3 "$@" --out $REC/$name >>$LOG 2>&1; say "  $name rc=$?"; }
r conv_bias_bn conv_bn.py --bias
r conv_nobias_bn conv_bn.py --no-bias
r dataloader_w0 dataloader.py --workers 0
r dataloader_w8_pin dataloader.py --workers 8 --pin
r misaligned_odd misaligned.py --dims odd
r misaligned_aligned misaligned.py --dims aligned
r host_sync_all host_sync.py --variant all
r host_sync_none host_sync.py --variant none
r sync_wait_busy sync_wait.py --variant busy
r sync_wait_idle sync_wait.py --variant idle
r sync_wait_none sync_wait.py --variant none
r contention_alone contention.py --label alone
r jitter_side jitter.py --side
r jitter_alone jitter.py --no-side
say "contender start"
python3 contender.py --seconds 80 --stop /tmp/stop_contender >$OUT/contender_log.txt 2>&1 & CPID=$!
for i in $(seq 60); do grep -q "contender up" $OUT/contender_log.txt 2>/dev/null && break; sleep 0.5; done
sleep 1
r contention_contended contention.py --label contended
touch /tmp/stop_contender; wait $CPID; say "contender stopped"
cd $ROOT
say "waiting for the sweep"
wait $SWEEP_PID
say "sweep done"
unset CUDA_VISIBLE_DEVICES
cd examples/recorded/src
say "ddp straggler"; timeout 120 python3 ddp_job.py --mode straggler --out $REC/ddp_straggler >>$LOG 2>&1; say "  rc=$?"
say "ddp overlap"; timeout 120 python3 ddp_job.py --mode overlap --out $REC/ddp_overlap >>$LOG 2>&1; say "  rc=$?"
cd $ROOT
gzip -f $REC/*.json
ls -la $REC $SWEEP >>$LOG
tar -cf $OUT/recorded.tar -C $REC .
tar -cf $OUT/sweep.tar -C $SWEEP .
say "all done"
