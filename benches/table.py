#!/usr/bin/env python3
"""Prints the last `cargo bench --bench ulog` run as a Markdown table: MB/s (10^6 bytes/s,
from criterion's mean time and the log's size) for framing and decoding, ours and px4-ulog,
with the ratio ours / px4-ulog."""
import json
import pathlib

root = pathlib.Path(__file__).resolve().parent.parent
crit = root / "target" / "criterion"


def mbps(group, bench):
    d = crit / group / bench.replace("/", "_") / "new"
    est = json.loads((d / "estimates.json").read_text())["mean"]["point_estimate"]
    size = json.loads((d / "benchmark.json").read_text())["throughput"]["Bytes"]
    return size / est * 1e3  # bytes per ns -> MB/s


print("| log | frame ours | frame px4-ulog | ratio | decode ours | decode px4-ulog | ratio |")
print("|---|---:|---:|---:|---:|---:|---:|")
for group in sorted(p.name for p in crit.iterdir() if (p / "frame_ours").is_dir()):
    fo, fp = mbps(group, "frame/ours"), mbps(group, "frame/px4-ulog")
    do, dp = mbps(group, "decode/ours"), mbps(group, "decode/px4-ulog")
    print(f"| {group} | {fo:.0f} | {fp:.0f} | {fo / fp:.2f} | {do:.0f} | {dp:.0f} | {do / dp:.2f} |")
