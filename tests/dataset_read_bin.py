#!/usr/bin/env python3
"""Reads an ArduPilot flight's exported tables (`ulog-recv export LOG.bin --dataset ROOT`)
with pyarrow alone and holds them against what pymavlink's DFReader (the reference reader)
reads from the same .bin.

Usage: dataset_read_bin.py ROOT FLIGHT_ID LOG.bin

For every message type with data (not FMT, FMTU, UNIT, MULT, PARM, MSG):
- its table is the file ROOT/parquet/v1/TYPE/date=*/vehicle=*/FLIGHT_ID.parquet;
- its rows of each instance (multi_id: the field FMTU marks `#`) number pymavlink's messages,
  `timestamp` is TimeUS;
- every column (found by its `dataflash_label` metadata) holds pymavlink's values in its
  first and last rows and sums as pymavlink's do, with FMTU's multipliers applied as the
  guide says: a field scaled by its character (c, C, e, E, L) as pymavlink scales it, any
  other numeric field with a multiplier other than 0 and 1 (not a mode, M) times it;
- each column's metadata names its unit as UNIT and FMTU do.
Beside: `log_messages` holds every MSG text in order (not our dropout marks), `params`
every parameter's first value and each later change, and `flights` the flight's row
(autopilot, duration, failsafe from ERR, lowest battery voltage, highest RelHomeAlt, ERR
errors).

Prints {"tables": N, "rows": N, "checked_values": N}; exits 1 with the reasons."""
import collections
import glob
import json
import math
import sys

import pyarrow.parquet as pq
from pymavlink import DFReader

NOT_TABLES = {"FMT", "FMTU", "UNIT", "MULT", "PARM", "MSG"}
SCALED = set("cCeEL")
TEXT = set("nNZ")
MARK = "ulog-recv: dropout of "
FAILSAFES = {5, 6, 7, 8, 9, 17, 20, 23, 26, 27, 29, 31}


def table_file(root, name, flight):
    files = glob.glob(f"{root}/parquet/v1/{name}/date=*/vehicle=*/{flight}.parquet")
    return files[0] if len(files) == 1 else None


def close(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def read(path):
    """pymavlink's reading: per type, its format's columns and each message's values."""
    r = DFReader.DFReader_binary(path)
    mults, fmtu, types = {}, {}, {}
    rows = collections.defaultdict(list)
    texts, params, changed, latest = [], {}, [], {}
    times = []
    while True:
        m = r.recv_msg()
        if m is None:
            break
        t = m.get_type()
        if hasattr(m, "TimeUS"):
            times.append(m.TimeUS)
        if t == "MULT":
            mults[chr(m.Id)] = float("%.7g" % m.Mult)
        elif t == "FMTU":
            fmtu[m.FmtType] = (m.UnitIds, m.MultIds)
        elif t == "UNIT":
            pass
        elif t == "MSG":
            if not m.Message.startswith(MARK):
                texts.append((m.TimeUS, m.Message))
        elif t == "PARM":
            value = float(m.Value)
            if m.Name not in latest:
                params[m.Name] = value
            elif latest[m.Name] != value:
                changed.append((m.TimeUS, m.Name, value))
            latest[m.Name] = value
        elif t not in NOT_TABLES:
            fmt = m.fmt
            units, mult_ids = fmtu.get(fmt.type, ("", ""))
            if t not in types:
                types[t] = (fmt, units, mult_ids)
            values = {}
            for i, (label, c) in enumerate(zip(fmt.columns, fmt.format)):
                v = getattr(m, label)
                if c == "a":
                    for k, x in enumerate(v):
                        values[f"{label}_{k}"] = int(x)
                    continue
                if c in TEXT:
                    if isinstance(v, bytes):  # FILE's data, which pymavlink keeps as bytes
                        v = v.split(b"\0")[0].decode("utf-8", "replace")
                    values[label] = v
                    continue
                mult = mults.get(mult_ids[i]) if i < len(mult_ids) else None
                # TimeUS is the table's `timestamp`, in µs as logged.
                if c not in SCALED and c != "M" and mult not in (None, 0.0, 1.0) and label != "TimeUS":
                    v = v * mult
                values[label] = v
            instance = units.find("#")
            multi_id = int(getattr(m, fmt.columns[instance])) if instance >= 0 else 0
            rows[t].append((multi_id, values))
    units_by_id = {chr(k) if isinstance(k, int) else k: v for k, v in r.unit_lookup.items()} \
        if hasattr(r, "unit_lookup") else {}
    return types, rows, texts, params, changed, times, units_by_id


def main():
    root, flight, path = sys.argv[1:4]
    types, rows, texts, params, changed, times, units_by_id = read(path)
    errors, checked, total_rows = [], 0, 0
    for name, messages in sorted(rows.items()):
        fmt, units, _ = types[name]
        f = table_file(root, name, flight)
        if f is None:
            errors.append(f"{name}: no table file")
            continue
        table = pq.read_table(f)
        total_rows += table.num_rows
        by_label = {}
        for field in table.schema:
            md = field.metadata or {}
            label = md.get(b"dataflash_label")
            if label is not None:
                key = field.name[len(label.decode()):] if fmt.format[fmt.columns.index(
                    label.decode())] == "a" else ""
                by_label[label.decode() + key] = field.name
        data = table.to_pydict()
        per_instance = collections.defaultdict(list)
        for i, multi_id in enumerate(data["multi_id"]):
            per_instance[multi_id].append(i)
        theirs = collections.defaultdict(list)
        for multi_id, values in messages:
            theirs[multi_id].append(values)
        if sorted(per_instance) != sorted(theirs):
            errors.append(f"{name}: instances {sorted(per_instance)}, pymavlink {sorted(theirs)}")
            continue
        for multi_id, want in theirs.items():
            got = per_instance[multi_id]
            if len(got) != len(want):
                errors.append(f"{name}[{multi_id}]: {len(got)} rows, pymavlink {len(want)}")
                continue
            for label, column in by_label.items():
                ours = [data[column][i] for i in got]
                expected = [w[label] for w in want]
                for k in (0, -1):
                    if not close(ours[k], expected[k]):
                        errors.append(f"{name}[{multi_id}].{label} row {k}: {ours[k]!r}, "
                                      f"pymavlink {expected[k]!r}")
                if isinstance(expected[0], (int, float)):
                    a, b = math.fsum(ours), math.fsum(expected)
                    if not (math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
                            or (math.isnan(a) and math.isnan(b))):
                        errors.append(f"{name}[{multi_id}].{label}: sum {a}, pymavlink {b}")
                checked += len(ours)
            if "TimeUS" in fmt.columns:
                stamps = [data["timestamp"][i] for i in got]
                want_stamps = [w["TimeUS"] for w in want]
                if stamps != want_stamps:
                    k = next(i for i, (a, b) in enumerate(zip(stamps, want_stamps)) if a != b)
                    errors.append(f"{name}[{multi_id}]: timestamp {k} {stamps[k]}, "
                                  f"pymavlink {want_stamps[k]}")
        for i, label in enumerate(fmt.columns):
            unit = units_by_id.get(units[i]) if i < len(units) else None
            column = by_label.get(label)
            if column and unit:
                md = table.schema.field(column).metadata or {}
                if md.get(b"unit", b"").decode() != unit:
                    errors.append(f"{name}.{label}: unit {md.get(b'unit')}, FMTU {unit}")
    log = pq.read_table(table_file(root, "log_messages", flight)).to_pydict()
    if list(zip(log["timestamp"], log["message"])) != texts:
        errors.append(f"log_messages: {len(log['message'])} texts, pymavlink {len(texts)}")
    p = pq.read_table(table_file(root, "params", flight)).to_pydict()
    initial = {n: v for n, v, c in zip(p["name"], p["value"], p["changed"]) if not c}
    changes = [(t, n, v) for t, n, v, c in zip(p["timestamp"], p["name"], p["value"], p["changed"]) if c]
    if set(initial) != set(params) or any(not math.isclose(initial[n], params[n], rel_tol=1e-6)
                                          for n in params):
        errors.append(f"params: {len(initial)} initial, pymavlink {len(params)}")
    if [(t, n) for t, n, _ in changes] != [(t, n) for t, n, _ in sorted(changed, key=lambda c: c[0])]:
        errors.append(f"params: changes {changes[:5]}, pymavlink {changed[:5]}")
    row = {k: v[0] for k, v in pq.read_table(table_file(root, "flights", flight)).to_pydict().items()}
    volts = [v["Volt"] for i, v in rows.get("BAT", []) if i == 0 and v["Volt"] > 0]
    failsafe = any(v["Subsys"] in FAILSAFES and v["ECode"] != 0 for _, v in rows.get("ERR", []))
    errs = sum(1 for _, v in rows.get("ERR", []) if v["ECode"] != 0)
    heights = [v["RelHomeAlt"] for _, v in rows.get("POS", [])]
    want = {"autopilot": "ardupilot", "failsafe": failsafe, "errors": errs,
            "min_battery_v": min(volts) if volts else None,
            "max_height_m": max(heights) if heights else None,
            "duration_s": (max(times) - min(times)) / 1e6}
    for k, v in want.items():
        if not close(row[k], v):
            errors.append(f"flights.{k}: {row[k]!r}, pymavlink {v!r}")
    if errors:
        print("\n".join(errors[:40]), file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"tables": len(rows), "rows": total_rows, "checked_values": checked,
                      "failsafe": failsafe}))


main()
