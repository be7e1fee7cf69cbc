#!/bin/bash
# usage: sample.sh BIN NODES OUT -- RSS of the bench process, the kubelet processes and the operator every second
BIN=$1; N=$2; OUT=$3
$BIN bench operator --nodes $N > $OUT.txt 2> $OUT.err &
BP=$!
t0=$(date +%s.%N)
while kill -0 $BP 2>/dev/null; do
  b=$(awk '/VmRSS/{print $2}' /proc/$BP/status 2>/dev/null)
  k=0; for p in $(pgrep -f "^$BIN sim kubelets"); do r=$(awk '/VmRSS/{print $2}' /proc/$p/status 2>/dev/null); k=$((k+${r:-0})); done
  o=0; for p in $(pgrep -f "^$BIN operator"); do r=$(awk '/VmRSS/{print $2}' /proc/$p/status 2>/dev/null); o=$((o+${r:-0})); done
  echo "$(echo "$(date +%s.%N) - $t0" | bc | cut -c1-6) $((b/1024)) $((k/1024)) $((o/1024)) $(( (b+k+o)/1024 ))" >> $OUT.rss
  sleep 1
done
