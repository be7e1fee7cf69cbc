#!/usr/bin/env bash
# Second H200 run (read-only): the device plugin against the test kubelet with a CUDA process
# (issue 6), and the exporter's scrape latency and RSS beside a pynvml exporter (issue 5),
# all with a release build. Never changes GPU state.
# Usage: scripts/device/h200-session2.sh PATH/TO/gantry OUTDIR
set -uo pipefail
G=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"; OUT=$(realpath "$OUT")
HERE=$(cd "$(dirname "$0")/../.." && pwd)
export NVIDIA_DRIVER_ROOT=${NVIDIA_DRIVER_ROOT:-/usr/local/nvidia}

echo "== device plugin + test kubelet + torch"
bash "$HERE/scripts/device/h200-plugin.sh" "$G" "$OUT/plugin"

echo "== exporter benchmark (3 rounds, 1,000 scrapes each)"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import pynvml, prometheus_client; print("pynvml", getattr(pynvml, "__version__", "?"), "prometheus_client", prometheus_client.__version__ if hasattr(prometheus_client, "__version__") else "?")' 2>&1
  for round in 1 2 3; do
    python3 "$HERE/scripts/bench/scrape_bench.py" --name "gantry-release#$round" --url http://127.0.0.1:9400/metrics \
      --spawn "$G node exporter --no-kubernetes --collect-interval 1000 -a 127.0.0.1:9400"
    python3 "$HERE/scripts/bench/scrape_bench.py" --name "pynvml#$round" --url http://127.0.0.1:9401/metrics \
      --spawn "python3 $HERE/scripts/bench/pynvml_exporter.py --port 9401 --address 127.0.0.1"
    python3 "$HERE/scripts/bench/scrape_bench.py" --name "pynvml-cached#$round" --url http://127.0.0.1:9401/metrics \
      --spawn "python3 $HERE/scripts/bench/pynvml_exporter.py --port 9401 --address 127.0.0.1 --interval 1"
  done
} > "$OUT/exporter-bench.txt" 2>&1
cat "$OUT/exporter-bench.txt"

echo "== discovery labels"
"$G" node discovery --print --no-timestamp > "$OUT/discovery.txt" 2>&1; head -40 "$OUT/discovery.txt"
echo done
