#!/bin/bash
# usage: conns.sh BIN NODES DELAY OUT -- socket census of every gantry process of a bench run
BIN=$1; N=$2; D=$3; OUT=$4
$BIN bench operator --nodes $N > $OUT.bench.txt 2>$OUT.bench.err &
BP=$!
sleep $D
{
for p in $(pgrep -f "^$BIN"); do
  echo "== pid $p rss_kb $(awk '/VmRSS/{print $2}' /proc/$p/status) $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-120)"
  ls -l /proc/$p/fd 2>/dev/null | awk '{print $NF}' | sed -e 's/socket:.*/socket/' -e 's/anon_inode:.*/anon/' -e 's|^/.*|file|' | sort | uniq -c
  echo "tcp estab: $(ss -tnpH state established 2>/dev/null | grep -c "pid=$p,")  unix: $(ss -xpH 2>/dev/null | grep -c "pid=$p,")"
done
} > $OUT.census.txt
wait $BP
