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

Two more models, from the other benchmarks' CSV lines:

    benchmarks/distributed/cost_model.py pipeline bench_pipeline.csv
        Pipeline parallelism (bench_pipeline). A message between stages is two point-to-point
        transfers (a header, then the tensor): t_msg = 2 alpha + bytes / B, alpha and B from the
        ping-pong lines. With S equal stages, M micro-batches and c = one stage's compute per
        micro-batch (measured: the step's compute over M), both schedules finish after
        (M + S - 1) slots of c plus a forward and a backward message:
            T(M) = (M + S - 1) (c + 2 t_msg),   idle(M) = 1 - M c / T(M)
        which is the (S - 1) / (M + S - 1) bubble when messages are free.

    benchmarks/distributed/cost_model.py zero bench_distributed.csv
        ZeroRedundancyOptimizer (bench_distributed --zero). The state per rank is Adam's two
        moments of the parameters the greedy partition gives it (largest tensor first, to the
        least-loaded rank), so at p ranks the largest share is at least max(total / p, largest
        tensor); each step adds one broadcast per parameter (alpha_b + bytes / B_b each, the
        all-reduce fit's alpha and B) to the optimiser phase.
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


# Parameter tensor sizes (elements) of the named configurations, for the ZeRO partition.
TENSORS = {
    "mlp_seed": [1000 * 512, 512, 512 * 10, 10],
    "mlp_fashion": [784 * 512, 512, 512 * 256, 256, 256 * 10, 10],
}


def greedy_partition(sizes, p):
    """Elements per rank under ZeroRedundancyOptimizer's partition."""
    load = [0] * p
    for n in sorted(sizes, reverse=True):
        r = load.index(min(load))
        load[r] += n
    return load


def zero(path):
    rows = {}
    for line in open(path):
        f = line.strip().split(",")
        if f[0] == "model" and len(f) >= 17:
            rows[(f[1], int(f[3]), f[5])] = {"step": float(f[6]), "opt": float(f[15]), "bytes": float(f[16])}
    print("model, ranks: optimiser-state bytes on the fullest rank, measured / predicted (1/p of the total), "
          "optimiser phase ms (zero vs plain)")
    for (name, p, mode), r in sorted(rows.items()):
        if mode != "zero":
            continue
        plain = rows.get((name, p, "ddp"), rows.get((name, p, "single")))
        if name in TENSORS:
            sizes = TENSORS[name]
            predicted = max(greedy_partition(sizes, p)) * 8  # two float32 moments
            total = sum(sizes) * 8
        else:  # no tensor list here: the plain optimiser's measured bytes as the total
            predicted, total = "?", plain["bytes"] if plain else float("nan")
        print(f"  {name} p={p}: {r['bytes']:.0f} / {predicted} bytes (total {total}, total/p {total / p:.0f}); "
              f"optimiser {r['opt']:.2f} ms vs {plain['opt'] if plain else float('nan'):.2f} ms plain; "
              f"step {r['step']:.2f} ms vs {plain['step'] if plain else float('nan'):.2f} ms")


def pipeline(path):
    pings, runs, reference = {}, [], None
    for line in open(path):
        f = line.strip().split(",")
        if f[0] == "pingpong":
            pings[int(f[1])] = float(f[2]) * 1e-6
        elif f[0] == "pipeline":
            runs.append({"schedule": f[1], "S": int(f[2]), "M": int(f[3]), "batch": int(f[4]), "width": int(f[5]),
                         "step": float(f[6]) * 1e-3, "bound": float(f[8]), "compute": float(f[10]) * 1e-3,
                         "idle": float(f[11])})
        elif f[0] == "reference":
            reference = float(f[6]) * 1e-3
    (n0, t0), (n1, t1) = sorted(pings.items())[0], sorted(pings.items())[-1]
    bandwidth = (n1 - n0) / max(t1 - t0, 1e-12)
    alpha = t0 - n0 / bandwidth
    print(f"point to point: alpha {alpha * 1e6:.1f} us, B {bandwidth / 1e9:.2f} GB/s "
          f"(one-way {t0 * 1e6:.1f} us at {n0} B, {t1 * 1e6:.1f} us at {n1} B)")
    if reference:
        print(f"one process, whole model: {reference * 1e3:.2f} ms a step")
    print("schedule  S  M   step ms measured / predicted   idle measured / predicted / bound")
    for r in runs:
        c = r["compute"] / r["M"]
        header = 4 + 8 * 11  # int64 words of the pipeline's header
        message = 2 * alpha + (r["batch"] // r["M"] * r["width"] * 4 + header * 8) / bandwidth
        t = (r["M"] + r["S"] - 1) * (c + 2 * message)
        print(f"{r['schedule']:>8} {r['S']:2d} {r['M']:2d}   {r['step'] * 1e3:7.2f} / {t * 1e3:7.2f}"
              f"              {r['idle']:.2f} / {1 - r['M'] * c / t:.2f} / {r['bound']:.2f}")


if __name__ == "__main__":
    if sys.argv[1] == "pipeline":
        pipeline(sys.argv[2])
    elif sys.argv[1] == "zero":
        zero(sys.argv[2])
    else:
        main(sys.argv[1])
