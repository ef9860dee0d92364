#!/usr/bin/env bash
# Records the memory_scope pair on one GPU (run from the repo root): OUT=/some/dir bash examples/recorded/record4.sh
# The workload runs from a copy of src/ in /tmp so its frames name memory_scope.py as a user's would.
set -eu
OUT=${OUT:?set OUT}
mkdir -p /tmp/rec4/out && cp examples/recorded/src/_prof.py examples/recorded/src/memory_scope.py /tmp/rec4/
cd /tmp/rec4
for v in helpers inline; do
  python3 memory_scope.py --variant $v --out /tmp/rec4/out/memory_scope_$v
done
python3 -c 'import torch,sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0], torch.cuda.get_device_name(0))'
for f in /tmp/rec4/out/*.json; do gzip -9 -c "$f" > "$OUT/$(basename $f).gz"; done
cp /tmp/rec4/out/*.txt /tmp/rec4/out/*.meta.json "$OUT/"
ls -la "$OUT"
