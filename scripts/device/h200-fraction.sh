#!/usr/bin/env bash
# A fractional GPU on a real node, without a cluster (issue #20 point 4). The real device
# plugin (NVML) serves the test kubelet `gantry sim kubelet-probe`, which allocates one GPU as
# the kubelet does for a GPU reservation pod; `--fraction 0.5` then prints the environment the
# binder writes into the fractional pod's ConfigMaps (which the admission webhook wired into
# its container). A CUDA process started with that environment — NVIDIA_VISIBLE_DEVICES
# applied as CUDA_VISIBLE_DEVICES, the NVIDIA container runtime's job on a real node — must
# see exactly the reserved GPU, and can keep to its share with GPU_MEMORY_LIMIT. Read-only on
# the GPU: memory allocations only.
# Usage: scripts/device/h200-fraction.sh PATH/TO/gantry OUTDIR   (exit 0 only if all checks pass)
set -uo pipefail
# shellcheck disable=SC2086
G=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"; OUT=$(realpath "$OUT")
DRIVER_ROOT=${DRIVER_ROOT:-/usr/local/nvidia}
# GPU_ARGS: how the agents find GPUs (`--sim-model H200 --sim-gpus 1` for a dry run without one).
GPU_ARGS=${GPU_ARGS:---driver-root $DRIVER_ROOT}
D=$(mktemp -d /tmp/gantry-frac.XXXXXX)
TXT="$OUT/h200-fraction.txt"; : > "$TXT"
FAILED=0
check() { if [ "$2" = 0 ]; then echo "PASS $1: $3"; else echo "FAIL $1: $3"; FAILED=1; fi; }
unset NODE_NAME KUBECONFIG KUBERNETES_SERVICE_HOST

# GFD's memory label, as the scheduler reads it from the node.
MIB=$("$G" node discovery --print $GPU_ARGS 2>/dev/null | sed -n 's/^nvidia.com\/gpu.memory=//p' | head -1)
{ echo "\$ nvidia-smi -L"; nvidia-smi -L 2>&1; echo; echo "\$ gantry node discovery --print | grep nvidia.com/gpu.memory"; echo "nvidia.com/gpu.memory=$MIB"; echo; } >> "$TXT"

RUST_LOG=info "$G" node device-plugin --plugin-dir "$D" --kubelet-socket "$D/kubelet.sock" \
  $GPU_ARGS > "$OUT/fraction-plugin.log" 2>&1 &
PLUGIN=$!
trap 'kill -TERM $PLUGIN 2>/dev/null; wait $PLUGIN 2>/dev/null' EXIT
{
  echo "\$ gantry sim kubelet-probe --dir $D --allocate 1 --fraction 0.5 --gpu-memory-mib $MIB --json"
  "$G" sim kubelet-probe --dir "$D" --allocate 1 --fraction 0.5 --gpu-memory-mib "$MIB" --json > "$OUT/fraction-probe.json" 2>&1
  PROBE_RC=$?; echo "[exit $PROBE_RC]"; cat "$OUT/fraction-probe.json"; echo
} >> "$TXT"

# The share's environment, exported as the container would have it.
ENVF="$OUT/fraction-env.txt"
python3 - "$OUT/fraction-probe.json" > "$ENVF" <<'PY' 2>>"$TXT"
import json, sys
for k, v in sorted(json.load(open(sys.argv[1]))["shareEnv"].items()):
    print(f"{k}={v}")
PY
{ echo "--- the fractional container's environment ---"; cat "$ENVF"; echo; } >> "$TXT"
VISIBLE=$(sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p' "$ENVF")
PORTION=$(sed -n 's/^GPU_PORTION=//p' "$ENVF")
LIMIT=$(sed -n 's/^GPU_MEMORY_LIMIT=//p' "$ENVF")
RESERVED=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["allocate"]["device_ids"][0])' "$OUT/fraction-probe.json" 2>/dev/null)

TORCH='
import os, torch
n = torch.cuda.device_count()
p = torch.cuda.get_device_properties(0)
limit_mib = int(os.environ["GPU_MEMORY_LIMIT"].removesuffix("Mi"))
total_mib = p.total_memory // (1 << 20)
torch.cuda.set_per_process_memory_fraction(limit_mib / total_mib, 0)
ok = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
try:
    torch.empty((limit_mib + 1024) << 20, dtype=torch.uint8, device="cuda")
    over = "allowed"
except torch.OutOfMemoryError:
    over = "refused"
print(n, "GPU-" + str(p.uuid), p.name.replace(" ", "_"), total_mib, limit_mib, over)
'
{
  echo "\$ env \$(cat fraction-env.txt) CUDA_VISIBLE_DEVICES=\$NVIDIA_VISIBLE_DEVICES python3 -c '<torch check>'"
  OUTL=$(env $(cat "$ENVF") CUDA_VISIBLE_DEVICES="$VISIBLE" python3 -c "$TORCH" 2>&1); echo "$OUTL"; echo
} >> "$TXT"
read -r N TUUID NAME TOTAL LIM OVER <<< "$(echo "$OUTL" | tail -1)"
{
  echo "--- checks ---"
  check probe "$PROBE_RC" "kubelet-probe exit $PROBE_RC"
  [ -n "$RESERVED" ] && [ "$VISIBLE" = "$RESERVED" ]; check share-device $? "reserved $RESERVED, fraction's NVIDIA_VISIBLE_DEVICES=$VISIBLE"
  [ "$PORTION" = 0.50 ]; check share-portion $? "GPU_PORTION=$PORTION"
  [ "$N" = 1 ] && [ "$TUUID" = "$RESERVED" ]; check cuda-sees-exactly-it $? "torch: $N device(s), $TUUID $NAME"
  [ "$LIM" -gt 0 ] 2>/dev/null && [ $((LIM * 2)) -le "$MIB" ] && [ $((LIM * 2 + 2)) -ge "$MIB" ] 2>/dev/null; check share-memory $? "GPU_MEMORY_LIMIT=$LIMIT: half of the node label $MIB MiB (CUDA sees $TOTAL MiB)"
  [ "$OVER" = refused ]; check keeps-to-share $? "allocating past the limit: $OVER"
} >> "$TXT"
rm -rf "$D"
grep -E '^(PASS|FAIL)' "$TXT"
exit $FAILED
