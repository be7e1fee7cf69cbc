#!/bin/bash
# Device run 6 (fifth session): operator at 1,000 nodes after the paged-list snapshot fix, burst pod creation,
# concurrent node labelling and the upgrade/migpolicy/plan memory cuts; allocator purge setting; regressions.
B=$PWD/.devbin/gantry
cd /tmp
nproc > $OUT/machine.txt; nvidia-smi -L >> $OUT/machine.txt 2>&1
for i in 1 2 3; do
  echo "== run $i" >> $OUT/operator-1000.txt
  ( time timeout 150 $B bench operator --nodes 1000 --timeout 130 ) >> $OUT/operator-1000.txt 2>&1
done
for i in 1 2; do
  echo "== MIMALLOC_PURGE_DELAY=0 run $i" >> $OUT/operator-1000-purge0.txt
  MIMALLOC_PURGE_DELAY=0 timeout 150 $B bench operator --nodes 1000 --timeout 130 >> $OUT/operator-1000-purge0.txt 2>&1
done
GANTRY_LOG=warn,gantry_sim::kubelet::driver=info timeout 150 $B bench operator --nodes 1000 --timeout 130 > $OUT/operator-1000-drivers.log 2>&1
grep "kubelet::driver" $OUT/operator-1000-drivers.log | sed 's/\x1b\[[0-9;]*m//g' | cut -c12-19 | uniq -c > $OUT/operator-1000-driver-installs-per-second.txt
tail -12 $OUT/operator-1000-drivers.log > $OUT/operator-1000-drivers.txt; rm $OUT/operator-1000-drivers.log
( time timeout 200 $B bench scheduler-api --nodes 1000 --gpus-per-node 8 --pods 10000 --timeout 180 ) > $OUT/scheduler-api.txt 2>&1
( time taskset -c 0,1 $B demo --plain --no-ui --summary-json $OUT/demo-summary.json ) > $OUT/demo-2cores.txt 2>&1
echo "demo rc=$?" >> $OUT/demo-2cores.txt
