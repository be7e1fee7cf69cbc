#!/usr/bin/env bash
# The real device plugin (NVML backend) on a real GPU machine, against the test kubelet
# `gantry sim kubelet-probe`: no cluster, no API access. Checks that the plugin advertises the
# GPU by the UUID `nvidia-smi -L` prints, that Allocate hands out that UUID, and that a CUDA
# process given it sees exactly that GPU (and none with a bogus UUID). Read-only on the GPU.
# Usage: scripts/device/h200-plugin.sh PATH/TO/gantry OUTDIR
# Writes OUTDIR/probe.json (the probe's report), OUTDIR/plugin.log, OUTDIR/h200-plugin.txt
# (every command and its output, then PASS/FAIL per check). Exit 0 only if every check passes.
# Env: DRIVER_ROOT (default /usr/local/nvidia); PLUGIN_EXTRA_ARGS (e.g. `--sim-model H200` for
# a dry run on a machine without a GPU).
set -uo pipefail
G=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"; OUT=$(realpath "$OUT")
DRIVER_ROOT=${DRIVER_ROOT:-/usr/local/nvidia}
D=$(mktemp -d /tmp/gantry-dp.XXXXXX)
TXT="$OUT/h200-plugin.txt"; : > "$TXT"
run() { echo "\$ $*"; "$@" 2>&1; echo "[exit $?]"; echo; }
FAILED=0
check() { # check NAME CONDITION-RESULT(0/1) DETAIL
  if [ "$2" = 0 ]; then echo "PASS $1: $3"; else echo "FAIL $1: $3"; FAILED=1; fi
}

# No API access here: make sure the plugin does not try (no node name, no kubeconfig).
unset NODE_NAME KUBECONFIG KUBERNETES_SERVICE_HOST
# shellcheck disable=SC2086
RUST_LOG=${RUST_LOG:-info} "$G" node device-plugin --plugin-dir "$D" --kubelet-socket "$D/kubelet.sock" \
  --driver-root "$DRIVER_ROOT" ${PLUGIN_EXTRA_ARGS:-} > "$OUT/plugin.log" 2>&1 &
PLUGIN=$!
stop_plugin() {
  if kill -0 "$PLUGIN" 2>/dev/null; then kill -TERM "$PLUGIN"; wait "$PLUGIN"; echo "plugin exit: $?"; fi
}
trap stop_plugin EXIT

{
  run nvidia-smi -L
  echo "\$ $G sim kubelet-probe --dir $D --allocate 1 --timeout 60 --json > probe.json"
  "$G" sim kubelet-probe --dir "$D" --allocate 1 --timeout 60 --json > "$OUT/probe.json" 2> "$OUT/probe.err"
  PROBE_RC=$?
  echo "[exit $PROBE_RC]"; cat "$OUT/probe.json" "$OUT/probe.err"; echo
  echo "\$ $G sim kubelet-probe --dir $D   # again, as text: a kubelet restart, the plugin re-registers"
  "$G" sim kubelet-probe --dir "$D" --timeout 60 2>&1; echo "[exit $?]"; echo
} >> "$TXT"
rm -f "$OUT/probe.err"

# The facts to check, from probe.json.
read -r UUID VISIBLE NDEV HEALTH <<< "$(python3 - "$OUT/probe.json" <<'PY' 2>>"$TXT"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    a = r["allocate"]
    print(a["device_ids"][0], a["containers"][0]["envs"].get("NVIDIA_VISIBLE_DEVICES", "-"),
          len(r["devices"]), ",".join(sorted({d["health"] for d in r["devices"]})))
except Exception as e:
    print("- - 0 -")
PY
)"
SMI_UUIDS=$(nvidia-smi -L 2>/dev/null | grep -oE 'GPU-[0-9a-f-]+' | sort | tr '\n' ',' | sed 's/,$//')
PLUGIN_UUIDS=$(python3 -c 'import json,sys; print(",".join(sorted(d["id"] for d in json.load(open(sys.argv[1]))["devices"])))' "$OUT/probe.json" 2>/dev/null)

TORCH='import torch; n = torch.cuda.device_count(); print(n, torch.cuda.get_device_name(0) if n else "-", torch.cuda.get_device_properties(0).uuid if n else "-")'
{
  echo "\$ CUDA_VISIBLE_DEVICES=$UUID python3 -c '$TORCH'"
  POS=$(CUDA_VISIBLE_DEVICES="$UUID" python3 -c "$TORCH" 2>&1); echo "$POS"; echo
  BOGUS=GPU-00000000-0000-0000-0000-000000000000
  echo "\$ CUDA_VISIBLE_DEVICES=$BOGUS python3 -c '$TORCH'   # negative control"
  NEG=$(CUDA_VISIBLE_DEVICES="$BOGUS" python3 -c "$TORCH" 2>&1); echo "$NEG"; echo
} >> "$TXT"
POS_LAST=$(echo "$POS" | tail -1); NEG_LAST=$(echo "$NEG" | tail -1)
POS_COUNT=${POS_LAST%% *}; POS_TORCH_UUID=${POS_LAST##* }

{
  echo "--- checks ---"
  check probe "$PROBE_RC" "kubelet-probe exit $PROBE_RC"
  [ -n "$SMI_UUIDS" ] && [ "$PLUGIN_UUIDS" = "$SMI_UUIDS" ]; check uuids $? "plugin advertises [$PLUGIN_UUIDS], nvidia-smi -L lists [$SMI_UUIDS]"
  [ "$HEALTH" = Healthy ]; check health $? "device health: $HEALTH ($NDEV devices)"
  [ "$VISIBLE" = "$UUID" ] && [ "$UUID" != - ]; check allocate $? "allocated $UUID, NVIDIA_VISIBLE_DEVICES=$VISIBLE"
  [ "$POS_COUNT" = 1 ] && [ "GPU-$POS_TORCH_UUID" = "$UUID" ]; check cuda $? "torch with the allocated UUID: $POS_LAST"
  [ "${NEG_LAST%% *}" = 0 ]; check cuda-negative $? "torch with a bogus UUID: $NEG_LAST"
  stop_plugin; trap - EXIT
  [ -z "$(find "$D" -name '*.sock' ! -name kubelet.sock)" ]; check clean-shutdown $? "plugin sockets left in $D: $(find "$D" -name '*.sock' ! -name kubelet.sock | tr '\n' ' ')"
} >> "$TXT"
rm -rf "$D"
grep -E '^(PASS|FAIL)' "$TXT"
exit $FAILED
