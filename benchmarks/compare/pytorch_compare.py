#!/usr/bin/env python3
"""tapegrad against PyTorch on the GPU (or the CPU): the named configurations, same weights, same
data, same number of steps; prints ms per step, the ratio tapegrad/PyTorch and both sides' losses.

First, unless DIR already holds its results, it runs BUILD/benchmarks/compare/tapegrad_compare
--device DEVICE --out DIR, which times tapegrad and leaves, per configuration,
DIR/<config>_b<batch>.weights.safetensors (the initial weights, PyTorch parameter names),
DIR/<config>_b<batch>.data.safetensors (the batch pool: step i trains on x.<i mod pool>) and
DIR/results.json (tapegrad's timings, step counts and losses). Then it trains the same models in
PyTorch for the same number of steps, eager and with torch.compile (where it works), timing whole
steps the way tapegrad does: two warm-up steps, then blocks of steps closed by a device
synchronise, median ms per step. TF32 stays off on both sides unless --tf32.

    python3 benchmarks/compare/pytorch_compare.py --build-dir build --device cuda
    python3 benchmarks/compare/pytorch_compare.py --quick        # four configurations, eager only
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32}


def read_safetensors(path):
    """Returns ({name: tensor}, metadata) of a safetensors file (a small reader: no extra package)."""
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    metadata = header.pop("__metadata__", {})
    base = 8 + header_len
    tensors = {}
    for name, entry in header.items():
        start, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        if end > start:
            flat = torch.frombuffer(bytearray(data[base + start : base + end]), dtype=dtype)
            tensors[name] = flat.reshape(entry["shape"]).clone()
        else:
            tensors[name] = torch.empty(entry["shape"], dtype=dtype)
    return tensors, metadata


class LstmClassifier(nn.Module):
    """LSTM over a time-major sequence [T, B, I], then Linear on the last hidden state."""

    def __init__(self, input_size, hidden_size, num_classes):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size)
        self.fc = nn.Linear(hidden_size, num_classes)

    def forward(self, x):
        _, (h_n, _) = self.lstm(x)
        return self.fc(h_n[0])


class CharLanguageModel(nn.Module):
    """examples/char_lstm's model: Embedding -> LSTM over packed sequences -> Linear at every step."""

    def __init__(self, vocab, embedding, hidden, layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embedding, padding_idx=0)
        self.lstm = nn.LSTM(embedding, hidden, num_layers=layers)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.embedding(x), lengths.cpu(), enforce_sorted=False)
        out, _ = nn.utils.rnn.pad_packed_sequence(self.lstm(packed)[0], total_length=x.shape[0])
        return self.head(out.reshape(-1, out.shape[-1]))


def build_model(meta):
    if meta["kind"] == "char_lm":
        return CharLanguageModel(int(meta["num_classes"]), int(meta["input_size"]), int(meta["hidden_size"]),
                                 int(meta["num_layers"]))
    if meta["kind"] == "lstm":
        return LstmClassifier(int(meta["input_size"]), int(meta["hidden_size"]), int(meta["num_classes"]))
    sizes = [int(v) for v in meta["mlp_sizes"].split(",")]
    layers = []
    for i in range(len(sizes) - 1):
        if i > 0:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
    return nn.Sequential(*layers)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(stem, steps, device, compile_model):
    """Trains `steps` steps; returns (median ms per step, min ms, first loss, final loss)."""
    weights, meta = read_safetensors(stem + ".weights.safetensors")
    data, _ = read_safetensors(stem + ".data.safetensors")
    pool = int(meta["pool"])
    xs = [data[f"x.{i}"].to(device) for i in range(pool)]
    ys = [data[f"y.{i}"].to(device) for i in range(pool)]
    if meta["kind"] == "char_lm":  # every step's logits against every step's target, padding ignored
        lengths = [data[f"lengths.{i}"] for i in range(pool)]
        inputs = [(x, n) for x, n in zip(xs, lengths)]
        ys = [y.reshape(-1) for y in ys]
    else:
        inputs = [(x,) for x in xs]
    model = build_model(meta)
    model.load_state_dict(weights, strict=True)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(meta["lr"]))
    forward = torch.compile(model) if compile_model else model
    done = 0

    def step():
        nonlocal done
        loss = F.cross_entropy(forward(*inputs[done % pool]), ys[done % pool])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        done += 1
        return loss

    first_loss = step().item()
    synchronize(device)
    start = time.perf_counter()
    loss = step()
    synchronize(device)
    estimate = max(time.perf_counter() - start, 1e-7)
    block = max(1, math.ceil(2e-3 / estimate))
    per_step_ms = []
    while done + block <= steps:
        start = time.perf_counter()
        for _ in range(block):
            loss = step()
        synchronize(device)
        per_step_ms.append(1e3 * (time.perf_counter() - start) / block)
    while done < steps:  # the same number of steps as tapegrad, so the final losses compare
        loss = step()
    per_step_ms.sort()
    median = per_step_ms[len(per_step_ms) // 2] if per_step_ms else float("nan")
    return median, (per_step_ms[0] if per_step_ms else float("nan")), first_loss, loss.item()


def rel_diff(a, b):
    """Relative difference; losses under 0.01 count as 0.01 (near 0, rounding alone looks large)."""
    return abs(a - b) / max(abs(a), abs(b), 1e-2)


QUICK_CONFIGS = "mlp_seed:64,lstm_small:1,lstm_small:64,lstm_large:64"


def run_tapegrad(args, device):
    """Runs tapegrad_compare so that args.dir holds the weights, data and tapegrad's results."""
    binary = os.path.join(args.build_dir, "benchmarks", "compare", "tapegrad_compare")
    if not os.path.exists(binary):
        sys.exit(f"pytorch_compare: no {os.path.join(args.dir, 'results.json')} and no {binary} to make it "
                 "(build tapegrad, or pass --build-dir)")
    configs = args.configs or (QUICK_CONFIGS if args.quick else "all")
    budget = args.budget if args.budget > 0 else (0.3 if args.quick else 2.0)
    command = [binary, "--device", device.type, "--no-libtorch", "--out", args.dir, "--configs", configs,
               "--budget", str(budget)]
    if args.threads > 0:
        command += ["--threads", str(args.threads)]
    print("running:", " ".join(command), flush=True)
    subprocess.run(command, check=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="compare_out_gpu", help="tapegrad_compare's --out folder")
    parser.add_argument("--build-dir", default=os.environ.get("TAPEGRAD_BUILD_DIR", "build"),
                        help="tapegrad's build folder (to run tapegrad_compare when DIR has no results)")
    parser.add_argument("--rerun", action="store_true", help="run tapegrad_compare even when DIR has results")
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK_CONFIGS}, eager only, short timings")
    parser.add_argument("--configs", default="", help="for tapegrad_compare: all, or e.g. mlp_seed,lstm_small:16")
    parser.add_argument("--budget", type=float, default=0, help="tapegrad_compare's seconds per configuration")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--modes", default="", help="eager, compile or both (default both; eager with --quick)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads on both sides (0: defaults)")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 in cuBLAS/cuDNN (off: plain FP32 like tapegrad)")
    args = parser.parse_args()

    device = torch.device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    results_path = os.path.join(args.dir, "results.json")
    if args.rerun or not os.path.exists(results_path):
        run_tapegrad(args, device)
    if not os.path.exists(results_path):
        sys.exit(f"pytorch_compare: tapegrad_compare wrote no {results_path}")
    with open(results_path) as f:
        ours = json.load(f)
    if ours.get("mode", "train") != "train":
        sys.exit(f"pytorch_compare: {results_path} holds a --mode {ours['mode']} run; this script compares training "
                 "steps (pass --rerun, or another --dir)")
    modes = [m for m in (args.modes or ("eager" if args.quick else "eager,compile")).split(",") if m]

    print(f"PyTorch {torch.__version__} on {device}"
          + (f" ({torch.cuda.get_device_name(device)}, cuDNN {torch.backends.cudnn.version()})" if device.type == "cuda" else "")
          + f"; tapegrad measured on {ours['device']}; TF32 {'on' if args.tf32 else 'off'}; threads {torch.get_num_threads()}")
    header = f"{'config':<12} {'batch':>6} {'tapegrad ms':>12}"
    for m in modes:
        header += f" {m + ' ms':>12} {'tg/' + m:>10}"
    header += f" {'lossN tg':>10} {'lossN pt':>10} {'N':>6}  losses"
    print(header)
    rows = []
    mismatch = False
    for row in ours["rows"]:
        stem = os.path.join(args.dir, f"{row['config']}_b{row['batch']}")
        line = f"{row['config']:<12} {row['batch']:>6} {row['tapegrad_ms']:>12.3f}"
        result = {"config": row["config"], "batch": row["batch"], "steps": row["steps"], "tapegrad_ms": row["tapegrad_ms"]}
        eager_losses = None
        for mode in modes:
            try:
                median, fastest, first, final = run(stem, row["steps"], device, mode == "compile")
                result[mode] = {"ms": median, "min_ms": fastest, "first_loss": first, "final_loss": final,
                                "ratio_tapegrad_over_pytorch": row["tapegrad_ms"] / median}
                line += f" {median:>12.3f} {row['tapegrad_ms'] / median:>10.2f}"
                if eager_losses is None:
                    eager_losses = (first, final)
            except Exception as e:  # torch.compile does not handle every model everywhere
                result[mode] = {"error": f"{type(e).__name__}: {e}"}
                line += f" {'failed':>12} {'-':>10}"
                print(f"  {row['config']} b{row['batch']} {mode}: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                      file=sys.stderr)
        if eager_losses:
            diff = max(rel_diff(row["tapegrad_first_loss"], eager_losses[0]), rel_diff(row["tapegrad_final_loss"], eager_losses[1]))
            agree = "agree" if diff <= 1e-3 else "MISMATCH"
            mismatch |= diff > 1e-3
            line += f" {row['tapegrad_final_loss']:>10.6f} {eager_losses[1]:>10.6f} {row['steps']:>6}  {agree}"
        print(line, flush=True)
        rows.append(result)
    out_path = os.path.join(args.dir, f"pytorch_{device.type}.json")
    with open(out_path, "w") as f:
        json.dump({"pytorch": torch.__version__, "device": str(device), "tf32": args.tf32, "rows": rows}, f, indent=2)
    print(f"tg/eager, tg/compile below 1: tapegrad is faster. Wrote {out_path}")
    return 2 if mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
