#!/usr/bin/env python3
"""Baseline for the exporter benchmark: a straightforward GPU exporter built from pynvml and
prometheus_client, serving dcgm-exporter's default metric names and labels (the same set
`gantry node exporter` serves by default).

By default NVML is read on every scrape (the usual way such exporters are written);
`--interval SECONDS` samples in a background thread instead and serves the cached values.

    python3 scripts/bench/pynvml_exporter.py --port 9401
"""

import argparse
import os
import socket
import threading
import time

import pynvml
from prometheus_client import start_http_server
from prometheus_client.core import REGISTRY
from prometheus_client.metrics_core import Metric

# (name, type, help, reader) — reader(handle) returns a number or raises pynvml.NVMLError.
def _mem(h):
    try:
        return pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    except (TypeError, AttributeError, pynvml.NVMLError):
        return pynvml.nvmlDeviceGetMemoryInfo(h)


def _gpm_ratio(metric_id):
    def read(h, cache):
        return cache.gpm(h, metric_id)
    return read


class GpmCache:
    """Two GPM samples per scrape window give the DCP ratios on Hopper and newer."""

    def __init__(self):
        self.prev = {}
        self.values = {}

    def refresh(self, handles):
        self.values = {}
        for h in handles:
            try:
                if not pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
                    continue
                sample = pynvml.nvmlGpmSampleAlloc()
                pynvml.nvmlGpmSampleGet(h, sample)
            except Exception:
                continue
            prev = self.prev.get(id(h))
            self.prev[id(h)] = sample
            if prev is None:
                continue
            ids = [pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
                   pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
                   pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC]
            try:
                req = pynvml.c_nvmlGpmMetricsGet_t()
                req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
                req.numMetrics = len(ids)
                req.sample1 = prev
                req.sample2 = sample
                for i, mid in enumerate(ids):
                    req.metrics[i].metricId = mid
                pynvml.nvmlGpmMetricsGet(req)
                self.values[id(h)] = {mid: req.metrics[i].value for i, mid in enumerate(ids)}
            except Exception:
                pass
            finally:
                pynvml.nvmlGpmSampleFree(prev)

    def gpm(self, h, metric_id):
        vals = self.values.get(id(h))
        if vals is None or metric_id not in vals:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        v = vals[metric_id]
        if metric_id in (pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC):
            return int(v * 1e6)  # MB/s -> bytes/s
        return v / 100.0


def _xid_reader(xids):
    return lambda h, cache: xids.get(pynvml.nvmlDeviceGetIndex(h), 0)


def metric_table(xids):
    P = pynvml
    return [
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock (MHz).", lambda h, c: P.nvmlDeviceGetClockInfo(h, P.NVML_CLOCK_SM)),
        ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock (MHz).", lambda h, c: P.nvmlDeviceGetClockInfo(h, P.NVML_CLOCK_MEM)),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (C).",
         lambda h, c: P.nvmlDeviceGetFieldValues(h, [P.NVML_FI_DEV_MEMORY_TEMP])[0].value.uiVal),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (C).", lambda h, c: P.nvmlDeviceGetTemperature(h, P.NVML_TEMPERATURE_GPU)),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (W).", lambda h, c: P.nvmlDeviceGetPowerUsage(h) / 1000.0),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Energy since driver load (mJ).",
         lambda h, c: P.nvmlDeviceGetTotalEnergyConsumption(h)),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "PCIe replays.", lambda h, c: P.nvmlDeviceGetPcieReplayCounter(h)),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilisation (%).", lambda h, c: P.nvmlDeviceGetUtilizationRates(h).gpu),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilisation (%).", lambda h, c: P.nvmlDeviceGetUtilizationRates(h).memory),
        ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilisation (%).", lambda h, c: P.nvmlDeviceGetEncoderUtilization(h)[0]),
        ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilisation (%).", lambda h, c: P.nvmlDeviceGetDecoderUtilization(h)[0]),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Last XID seen.", _xid_reader(xids)),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Free framebuffer (MiB).", lambda h, c: _mem(h).free >> 20),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Used framebuffer (MiB).", lambda h, c: _mem(h).used >> 20),
        ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Reserved framebuffer (MiB).", lambda h, c: _mem(h).reserved >> 20),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "NVLink traffic, all links.",
         lambda h, c: sum(P.nvmlDeviceGetFieldValues(h, [P.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, P.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX])[i].value.ullVal for i in (0, 1))),
        ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU license state.", lambda h, c: 0),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped (uncorrectable).",
         lambda h, c: P.nvmlDeviceGetRemappedRows(h)[1]),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped (correctable).",
         lambda h, c: P.nvmlDeviceGetRemappedRows(h)[0]),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Row remap failed.", lambda h, c: int(P.nvmlDeviceGetRemappedRows(h)[3])),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Graphics engine active ratio.", _gpm_ratio(P.NVML_GPM_METRIC_GRAPHICS_UTIL)),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Tensor pipe active ratio.", _gpm_ratio(P.NVML_GPM_METRIC_ANY_TENSOR_UTIL)),
        ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "DRAM active ratio.", _gpm_ratio(P.NVML_GPM_METRIC_DRAM_BW_UTIL)),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "PCIe TX bytes/s.", _gpm_ratio(P.NVML_GPM_METRIC_PCIE_TX_PER_SEC)),
        ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "PCIe RX bytes/s.", _gpm_ratio(P.NVML_GPM_METRIC_PCIE_RX_PER_SEC)),
    ]


class NvmlCollector:
    def __init__(self, hostname):
        self.xids = {}
        self.table = metric_table(self.xids)
        self.gpm = GpmCache()
        self.driver = pynvml.nvmlSystemGetDriverVersion()
        if isinstance(self.driver, bytes):
            self.driver = self.driver.decode()
        self.hostname = hostname
        self.handles = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            bus = pynvml.nvmlDeviceGetPciInfo(h).busId
            dec = lambda s: s.decode() if isinstance(s, bytes) else s
            labels = {"gpu": str(i), "UUID": dec(uuid), "pci_bus_id": dec(bus), "device": f"nvidia{i}",
                      "modelName": dec(name), "Hostname": hostname, "DCGM_FI_DRIVER_VERSION": self.driver}
            self.handles.append((h, labels))

    def read(self):
        self.gpm.refresh([h for h, _ in self.handles])
        families = []
        for name, kind, help_text, reader in self.table:
            m = Metric(name, help_text, kind)
            for h, labels in self.handles:
                try:
                    v = reader(h, self.gpm)
                except (pynvml.NVMLError, IndexError, AttributeError):
                    continue
                m.add_sample(name, labels, v)
            if m.samples:
                families.append(m)
        return families

    def collect(self):
        return self.read()


class CachedCollector:
    def __init__(self, inner, interval):
        self.inner = inner
        self.cached = inner.read()
        t = threading.Thread(target=self.loop, args=(interval,), daemon=True)
        t.start()

    def loop(self, interval):
        while True:
            time.sleep(interval)
            self.cached = self.inner.read()

    def collect(self):
        return self.cached


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=9401)
    ap.add_argument("--address", default="0.0.0.0")
    ap.add_argument("--interval", type=float, default=0.0,
                    help="sample NVML every N seconds in the background (default: on each scrape)")
    args = ap.parse_args()
    pynvml.nvmlInit()
    hostname = os.environ.get("NODE_NAME") or socket.gethostname()
    for c in list(REGISTRY._collector_to_names):  # keep the output to the GPU metrics
        REGISTRY.unregister(c)
    collector = NvmlCollector(hostname)
    if args.interval > 0:
        collector = CachedCollector(collector, args.interval)
    REGISTRY.register(collector)
    start_http_server(args.port, addr=args.address)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
