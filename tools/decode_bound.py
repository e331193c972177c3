#!/usr/bin/env python3
"""tools/decode_bound.py MODEL_DIR [FINGERPRINT] — `rill bench` output on stdin, the same on stdout with each
decode figure set next to its memory bound on the die that ran it.

A decode step reads every weight but the embedding table (one row of it; all of it when it is tied to the
lm_head) and, per row, the K/V of every key it attends to. Bytes a step = those weights (from the
safetensors headers of MODEL_DIR) + rows x K/V bytes a key (config.json: layers x kv heads x head_dim x K
and V x 2 bytes, the default bf16 cache) x the timed steps' mean context. The bound is the die's rate over
those bytes, for two rates that FINGERPRINT (tools/gpu_run.sh's summary, which begins with the die's
fingerprint) names:
  - the copy rate ("copy rate: ... N GB/s", bench/kernels/gpc_probe.cu: a 2 GiB device-to-device copy, read
    + write bytes), the bound bench/RESULTS.md and the CUDA issue use;
  - the read-stream rate under the decode GEMM's load (latency_probe.cu's "3 x 5" row: 120 KB an SM in
    flight), which differs between dies of one kind where the copy rate does not (bench/RESULTS.md run AO).
Lines other than decode figures pass through unchanged; without a rate the figure gets the bytes only.
"""
import json
import os
import re
import struct
import sys


def weight_bytes(model_dir):
    """Bytes of every tensor in the model's safetensors files, and of its embedding table."""
    total = embed = 0
    for name in sorted(os.listdir(model_dir)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, name), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for key, t in header.items():
            if key == "__metadata__":
                continue
            size = t["data_offsets"][1] - t["data_offsets"][0]
            total += size
            if key.endswith("embed_tokens.weight"):
                embed += size
    return total, embed


def kv_bytes_per_key(config):
    text = config.get("text_config", config)
    heads = text["num_attention_heads"]
    head_dim = text.get("head_dim") or text["hidden_size"] // heads
    return text["num_hidden_layers"] * text.get("num_key_value_heads", heads) * head_dim * 2 * 2


def die_rates(path):
    """(copy GB/s, read-stream GB/s) from a fingerprint, None where it lacks one."""
    copy = read = None
    if path and os.path.exists(path):
        for line in open(path, errors="replace"):
            m = re.match(r"copy rate: .*?(\d+) GB/s", line)
            if m:
                copy = float(m.group(1))
            m = re.match(r"3 x 5\s+\d+\s+\d+\s+\d+\s+\d+\s+(\d+)\s*$", line)
            if m and read is None:
                read = float(m.group(1))
    return copy, read


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: tools/decode_bound.py MODEL_DIR [FINGERPRINT] < rill-bench-output")
    model_dir = sys.argv[1]
    try:
        config = json.load(open(os.path.join(model_dir, "config.json")))
        total, embed = weight_bytes(model_dir)
        kv = kv_bytes_per_key(config)
    except (OSError, ValueError, KeyError) as e:
        # The figures must still get through (this runs in a pipe): unchanged, with the reason on stderr.
        print(f"decode_bound: {model_dir}: {e!r}; figures passed through without bounds", file=sys.stderr)
        sys.stdout.writelines(sys.stdin)
        return
    tied = config.get("tie_word_embeddings", config.get("text_config", {}).get("tie_word_embeddings", False))
    streamed = total - (0 if tied else embed)
    copy, read = die_rates(sys.argv[2] if len(sys.argv) > 2 else None)
    rows = 1
    for line in sys.stdin:
        line = line.rstrip("\n")
        m = re.match(r"model \S+ device \S+ batch (\d+)", line)
        if m:
            rows = int(m.group(1))
        m = re.match(r"decode_tokens_per_s ([\d.]+) \(.*at context (\d+)\.\.(\d+)", line)
        if m:
            tps, first, last = float(m.group(1)), int(m.group(2)), int(m.group(3))
            step_bytes = streamed + rows * kv * (first + last) / 2
            notes = [f"{step_bytes / 1e9:.3f} GB a step"]
            for what, rate in (("copy-rate bound", copy), ("read-stream bound", read)):
                if rate:
                    bound = rate * 1e9 / step_bytes * rows
                    notes.append(f"{100 * tps / bound:.1f}% of the {what} {bound:.1f} tok/s ({rate:.0f} GB/s)")
            line += " [" + "; ".join(notes) + "]"
        print(line, flush=True)


if __name__ == "__main__":
    main()
