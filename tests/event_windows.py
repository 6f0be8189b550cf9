"""Checks a session stored with an event buffer against the log it received, as pyulog reads
both: the buffer's topics hold exactly the original's samples inside the manifest's windows
(every one, values and order, none outside), every other topic all of its samples, and each
event in the manifest is where the original log says it is.

usage: event_windows.py ORIGINAL.ulg STORED.ulg MANIFEST.json BUFFER

BUFFER is the event buffer's name in the manifest (its patterns come from there). Exits 1
with the reasons when anything differs; prints one JSON object of counts either way.
"""
import fnmatch
import json
import math
import operator
import re
import sys

from pyulog import ULog

original_path, stored_path, manifest_path, buffer_name = sys.argv[1:5]
manifest = json.load(open(manifest_path))
buffer = next(c for c in manifest["columns"] if c["name"] == buffer_name)
spec = buffer["event_buffer"]
windows = spec["windows"]
problems = []


def gated(topic):
    return any(fnmatch.fnmatchcase(topic, p) for p in buffer["patterns"])


def in_windows(t):
    return any(lo <= t <= hi for lo, hi in windows)


def rows(ulog):
    out = {}
    for d in ulog.data_list:
        keys = sorted(d.data.keys())
        n = len(d.data["timestamp"])
        out[f"{d.name}/{d.multi_id}"] = [
            (int(d.data["timestamp"][i]),) + tuple(repr(d.data[k][i]) for k in keys)
            for i in range(n)
        ]
    return out


original, stored = ULog(original_path), ULog(stored_path)
want_all, got_all = rows(original), rows(stored)
counts = {"gated_kept": 0, "gated_total": 0, "other_samples": 0}
for key, want in want_all.items():
    got = got_all.get(key, [])
    if gated(key.split("/")[0]):
        counts["gated_total"] += len(want)
        want = [r for r in want if in_windows(r[0])]
        counts["gated_kept"] += len(want)
    else:
        counts["other_samples"] += len(want)
    if got != want:
        outside = [r[0] for r in got if not in_windows(r[0])]
        problems.append(
            f"{key}: {len(got)} samples stored, {len(want)} expected"
            f" (first stored outside the windows: {outside[:3]})"
        )
for key in set(got_all) - set(want_all):
    if got_all[key]:
        problems.append(f"{key}: stored but not in the original")

# The windows: each event's own is [at - before, at + after], and the buffer's merge them.
own = []
for e in manifest["events"]:
    after = e.get("after_us", spec["after_us"])
    w = next((w for w in e.get("windows", []) if w["buffer"] == buffer_name), None)
    expected = [max(0, e["at_us"] - spec["before_us"]), e["at_us"] + after]
    if w is None or [w["from_us"], w["to_us"]] != expected:
        problems.append(f"event {e['name']} at {e['at_us']}: window {w}, expected {expected}")
    own.append(expected)
merged = []
for lo, hi in sorted(own):
    if merged and lo <= merged[-1][1]:
        merged[-1][1] = max(merged[-1][1], hi)
    else:
        merged.append([lo, hi])
if merged != windows:
    problems.append(f"the buffer's windows {windows} are not the events' merged: {merged}")

# Each event where the original says: a logged string at its timestamp, a field condition on
# the sample where it turned true.
logged = [(m.timestamp, m.message) for m in original.logged_messages]
for tagged in original.logged_messages_tagged.values():
    logged += [(m.timestamp, m.message) for m in tagged]
OPS = {"==": operator.eq, "!=": operator.ne, "<=": operator.le, ">=": operator.ge,
       "<": operator.lt, ">": operator.gt}


def field_crossings(condition):
    m = re.fullmatch(r"\s*(\w+)\.(\S+?)\s*(==|!=|<=|>=|<|>)\s*(\S+)\s*", condition)
    topic, field, op, value = m.group(1), m.group(2), OPS[m.group(3)], float(m.group(4))
    times = []
    for d in original.data_list:
        if d.name != topic or field not in d.data:
            continue
        before = False
        for t, v in zip(d.data["timestamp"], d.data[field]):
            now = not math.isnan(float(v)) and op(float(v), value)
            if now and not before:
                times.append(int(t))
            before = now
    return sorted(times)


fired = {}
for e in manifest["events"]:
    if e["source"] == "logged_text":
        if not any(t == e["at_us"] and re.search(e["name"], text) for t, text in logged):
            problems.append(f"no logged string matching {e['name']!r} at {e['at_us']}")
    elif e["source"] == "field":
        fired.setdefault(e["name"], []).append(e["at_us"])
for condition, times in fired.items():
    if sorted(times) != field_crossings(condition):
        problems.append(
            f"{condition}: fired at {sorted(times)}, pyulog: {field_crossings(condition)}"
        )
counts["events"] = len(manifest["events"])
counts["windows"] = windows
print(json.dumps(counts))
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
