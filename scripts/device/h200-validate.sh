#!/usr/bin/env bash
# Read-only validation of the node agents on a real GPU machine (the `device` tool).
# Never changes GPU state: no MIG, clocks, power, persistence or resets.
# Usage: scripts/device/h200-validate.sh PATH/TO/gantry OUTDIR
set -uo pipefail
G=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
T=$(mktemp -d)
run() { echo "\$ $*"; "$@" 2>&1; echo "[exit $?]"; echo; }

{
  run nvidia-smi -L
  run nvidia-smi --query-gpu=name,uuid,pci.bus_id,memory.total,memory.used,memory.free,temperature.gpu,power.draw,clocks.sm,clocks.mem,mig.mode.current,driver_version --format=csv
  run "$G" node discovery --print --no-timestamp
} > "$OUT/discovery.txt"

{
  run "$G" node toolkit --cdi-only --host-root / --cdi-dir "$T/cdi" --no-signal
  echo "--- generated spec ---"; cat "$T"/cdi/*.yaml 2>&1
  echo "--- every path in the spec exists on this machine? ---"
  grep -oE '(hostPath|path): /[^ ]+' "$T"/cdi/*.yaml | awk '{print $2}' | sort -u | while read -r p; do
    if [ -e "$p" ]; then echo "ok      $p"; else echo "MISSING $p"; fi
  done
} > "$OUT/toolkit-cdi.txt"

cat > "$T/mig.yaml" <<'YAML'
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.18gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.18gb": 7
YAML
{
  run nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending --format=csv
  run "$G" node mig-manager --dry-run --config-file "$T/mig.yaml" --config all-1g.18gb
  run nvidia-smi --query-gpu=mig.mode.current,mig.mode.pending --format=csv
} > "$OUT/mig-dry-run.txt"

{
  "$G" node exporter --no-kubernetes --collect-interval 1000 -a 127.0.0.1:9400 > "$T/exporter.log" 2>&1 &
  EP=$!
  sleep 4
  run nvidia-smi --query-gpu=temperature.gpu,power.draw,memory.used,memory.free,clocks.sm,clocks.mem --format=csv,noheader
  curl -s http://127.0.0.1:9400/metrics | grep -E '^DCGM_FI_DEV_(GPU_TEMP|POWER_USAGE|FB_USED|FB_FREE|SM_CLOCK|MEM_CLOCK)'
  echo "--- exporter RSS ---"; grep -E 'VmRSS|VmHWM' /proc/$EP/status
  kill $EP; wait $EP 2>/dev/null
} > "$OUT/exporter.txt"
echo done
