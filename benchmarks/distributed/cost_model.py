#!/usr/bin/env python3
"""The ring all-reduce cost model of docs/distributed.md, from run_distributed.sh's medians.

Ring all-reduce of n bytes over p processes: 2(p-1) steps, each sending n/p bytes to the next
process, so  T(n, p) = 2(p-1) * alpha + 2(p-1)/p * n / B  (alpha: latency per step, B: the link
bandwidth, NCCL's "bus bandwidth"). At p = 2 it is 2 alpha + n / B: alpha and B are fitted to the
measured MPI_Allreduce medians (4 KiB to 4 MiB, relative least squares). A data-parallel step at
p processes with the per-process batch fixed takes  compute + exposed communication; the measured
models have one DDP bucket (under 25 MB), so nothing overlaps backward and the whole all-reduce is
exposed: efficiency(p) = compute / (compute + T(gradient bytes, p)).

    benchmarks/distributed/cost_model.py results.csv
"""
import sys

# Gradient bytes (float32 parameters) of the named configurations.
PARAMS = {
    "mlp_seed": 1000 * 512 + 512 + 512 * 10 + 10,
    "mlp_fashion": 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10,
    "lstm_small": 4 * 128 * (32 + 128) + 2 * 4 * 128 + 128 * 10 + 10,
}
# 25 Gb/s Ethernet: 3.125 GB/s on the wire, about 2.8 GB/s of MPI payload over TCP (90%); 25 us a
# step (one small-message hop through a switch with the kernel's TCP stack).
ETHERNET = {"alpha_s": 25e-6, "bandwidth_Bps": 2.8e9}
# 8 GPUs over NVLink: NCCL's ring bus bandwidth, about 370 GB/s on H100 (NVIDIA's figure for ring
# all-reduce; NVLink SHARP reaches a bus bandwidth of about 480 GB/s) and about 200-230 GB/s on
# A100 (nccl-tests results); alpha chosen so that a small all-reduce over 8 GPUs takes about 17 us.
NVLINK = {"H100": {"alpha_s": 1.2e-6, "bandwidth_Bps": 370e9}, "A100": {"alpha_s": 1.2e-6, "bandwidth_Bps": 220e9}}


def ring_time(n_bytes, p, alpha, bandwidth):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n_bytes / bandwidth


def fit(points):
    """alpha, B of t = 2 alpha + n / B minimising the relative error (weights 1/t^2)."""
    sw = swn = swnn = swt = swnt = 0.0
    for n, t in points:
        w = 1 / (t * t)
        sw += w; swn += w * n; swnn += w * n * n; swt += w * t; swnt += w * n * t
    det = sw * swnn - swn * swn
    a = (swnn * swt - swn * swnt) / det
    b = (sw * swnt - swn * swt) / det
    return a / 2, 1 / b


def main(path):
    allreduce, compute, measured = {}, {}, {}
    for line in open(path):
        f = line.strip().split(",")
        if f[0] == "median_allreduce":
            allreduce[int(f[1])] = [float(x) * 1e-6 for x in f[2:6]]  # mpi, group medians; mpi, group minima
        elif f[0] == "median" and f[5] == "nosync":
            compute[f[1]] = (int(f[2]) // int(f[3]), float(f[6]) * 1e-3)  # per-rank batch, step s
        elif f[0] == "median" and f[5] == "ddp":
            measured[f[1]] = float(f[8]) * 1e-3
    fits = {}
    for column, label in ((2, "MPI_Allreduce, least"), (0, "MPI_Allreduce, median"), (1, "ProcessGroup, median")):
        points = [(n, t[column]) for n, t in sorted(allreduce.items()) if n <= 4 << 20]
        fits[column] = fit(points)
        print(f"fit of {label} over {len(points)} sizes (4 KiB - 4 MiB, 2 processes): alpha {fits[column][0] * 1e6:.2f} us, "
              f"B {fits[column][1] / 1e9:.2f} GB/s")
    alpha, bandwidth = fits[2]
    for n, t in sorted(allreduce.items()):
        print(f"  {n:>9} B  MPI least {t[2] * 1e6:9.1f} us  median {t[0] * 1e6:9.1f} us  model (least fit) "
              f"{ring_time(n, 2, alpha, bandwidth) * 1e6:9.1f} us  ProcessGroup median {t[1] * 1e6:9.1f} us")
    print("\nmodel (per-process batch), gradient MB, compute ms/step (1 core, measured), then efficiency at p processes")
    ps = [2, 4, 8, 16, 32, 64]
    for name, (batch, step) in sorted(compute.items()):
        n = PARAMS[name] * 4
        local = ring_time(n, 2, alpha, bandwidth)
        # What tapegrad's ProcessGroup adds today over MPI at this size (measured DDP exposed time
        # against the model), assumed to carry over unchanged to a cluster.
        extra = max(0.0, measured.get(name, 0) - local)
        print(f"{name}:{batch}  {n / 1e6:.2f} MB  {step * 1e3:.1f} ms; this machine p=2: model all-reduce "
              f"{local * 1e3:.2f} ms, DDP measured exposed {measured.get(name, 0) * 1e3:.2f} ms (+{extra * 1e3:.2f} ms)")
        cells, slow = [], []
        for p in ps:
            t = ring_time(n, p, ETHERNET["alpha_s"], ETHERNET["bandwidth_Bps"])
            cells.append(f"p={p}: {t * 1e3:.2f} ms {step / (step + t):.0%}")
            slow.append(f"{step / (step + t + extra):.0%}")
        print("  25 GbE  " + ", ".join(cells))
        print("  25 GbE with today's ProcessGroup overhead: " + " ".join(slow))
        for gpu, link in NVLINK.items():
            t = ring_time(n, 8, link["alpha_s"], link["bandwidth_Bps"])
            print(f"  8x{gpu} NVLink: all-reduce {t * 1e6:.1f} us; efficiency at a GPU step of 0.2 / 0.5 / 2 ms: "
                  + " / ".join(f"{c / (c + t):.0%}" for c in (0.2e-3, 0.5e-3, 2e-3)))


if __name__ == "__main__":
    main(sys.argv[1])
