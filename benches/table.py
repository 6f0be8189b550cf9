#!/usr/bin/env python3
"""Prints the last `cargo bench --bench ulog` run as a Markdown table: MB/s (10^6 bytes/s,
from criterion's mean time and the log's size) for framing and decoding by ours, px4-ulog and
yule_log, with the ratios ours / theirs. Reads `$CARGO_TARGET_DIR/criterion` when that is set,
as cargo wrote it there."""
import json
import os
import pathlib

root = pathlib.Path(__file__).resolve().parent.parent
crit = pathlib.Path(os.environ.get("CARGO_TARGET_DIR") or root / "target") / "criterion"


def mbps(group, bench):
    d = crit / group / bench.replace("/", "_") / "new"
    est = json.loads((d / "estimates.json").read_text())["mean"]["point_estimate"]
    size = json.loads((d / "benchmark.json").read_text())["throughput"]["Bytes"]
    return size / est * 1e3  # bytes per ns -> MB/s


peers = ["px4-ulog", "yule_log"]
for step in ["frame", "decode"]:
    print(f"\n{step}: MB/s of ULog")
    print("| log | ours | " + " | ".join(f"{p} | ours / {p}" for p in peers) + " |")
    print("|---|---:|" + "---:|---:|" * len(peers))
    for group in sorted(p.name for p in crit.iterdir() if (p / "frame_ours").is_dir()):
        ours = mbps(group, f"{step}/ours")
        cells = []
        for peer in peers:
            theirs = mbps(group, f"{step}/{peer}")
            cells += [f"{theirs:.0f}", f"{ours / theirs:.2f}"]
        print(f"| {group} | {ours:.0f} | " + " | ".join(cells) + " |")
