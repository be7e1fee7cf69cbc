#!/usr/bin/env python3
"""Heavier variants of the published openb pod lists, made from them, for robustness checks
of the GPU-sharing policies beyond the traces in ../shared/data/openb (not the held-out ones:
those are not read here). Usage: make-synthetic-variants.py DATA_DIR OUT_DIR.

- multigpu50: multigpu30 plus copies of its multi-GPU pods (drawn with replacement) until
  multi-GPU pods ask for half of the GPU.
- gpuspec25 / gpuspec33: gpuspec20 with a GPU-model constraint, drawn from the constraints
  gpuspec20 already has, added to unconstrained GPU pods until 25 % of all pods / 33 % of GPU
  pods are constrained.
- cpu235 / cpu250 / cpu300: cpu200 plus copies of its CPU-only pods until their CPU is 34 % /
  36 % of the GPU nodes' CPU (cpu300: half as many copies again as cpu200 has, 44 %).
"""
import csv
import random
import sys


def load(data, name):
    with open(f"{data}/openb_pod_list_{name}.csv", newline="") as f:
        r = csv.DictReader(f)
        return r.fieldnames, list(r)


def save(out, name, fields, rows):
    with open(f"{out}/openb_pod_list_{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def gpu_of(rows):
    return sum(int(r["num_gpu"]) * int(r["gpu_milli"]) for r in rows)


def main(data, out):
    random.seed(7)
    fields, rows = load(data, "multigpu30")
    multi = [r for r in rows if int(r["num_gpu"]) > 1]
    total, m, k, res = gpu_of(rows), gpu_of(multi), 0, list(rows)
    while m / total < 0.5:
        r = dict(random.choice(multi))
        r["name"] += f"-x{k}"
        k += 1
        res.append(r)
        m += gpu_of([r])
        total += gpu_of([r])
    save(out, "multigpu50", fields, res)

    # One generator for multigpu50, gpuspec33 and cpu300, in that order.
    constrain(data, out, "gpuspec33", lambda rows, gpu: int(len(gpu) * 0.33))
    with open(f"{data}/openb_node_list_gpu_node.csv", newline="") as f:
        cap = sum(int(n["cpu_milli"]) for n in csv.DictReader(f))
    fields, rows = load(data, "cpu200")
    cpu = [r for r in rows if int(r["num_gpu"]) == 0]
    res = list(rows)
    for k in range(len(cpu) // 2):
        r = dict(random.choice(cpu))
        r["name"] += f"-c{k}"
        res.append(r)
    save(out, "cpu300", fields, res)
    for name, frac in [("cpu235", 0.34), ("cpu250", 0.36)]:
        random.seed(11)
        res, k = list(rows), 0
        tot = sum(int(r["cpu_milli"]) for r in cpu)
        while tot / cap < frac:
            r = dict(random.choice(cpu))
            r["name"] += f"-c{k}"
            k += 1
            res.append(r)
            tot += int(r["cpu_milli"])
        save(out, name, fields, res)
    random.seed(5)
    constrain(data, out, "gpuspec25", lambda rows, gpu: int(len(rows) * 0.25))


def constrain(data, out, name, want_of):
    fields, rows = load(data, "gpuspec20")
    specs = [r["gpu_spec"] for r in rows if r["gpu_spec"]]
    gpu = [r for r in rows if int(r["num_gpu"]) > 0]
    have = sum(1 for r in gpu if r["gpu_spec"])
    free = [r for r in gpu if not r["gpu_spec"]]
    random.shuffle(free)
    for r in free[: max(0, want_of(rows, gpu) - have)]:
        r["gpu_spec"] = random.choice(specs)
    save(out, name, fields, rows)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
