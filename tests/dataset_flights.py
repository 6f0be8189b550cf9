#!/usr/bin/env python3
"""Holds the `flights` and `dropouts` tables of an exported flight (`ulog-recv export LOG
--dataset ROOT`, read by pyarrow) against what pyulog decodes from the same .ulg, and the
vehicle type's name against pymavlink's MAV_TYPE enum.

Usage: dataset_flights.py ROOT LOG.ulg

Every column of the one `flights` row is computed here from pyulog's data as the guide
(docs/src/tables.md) and the crate docs define it:
- log_start_us: the header's timestamp; log_end_us: the latest sample's; duration_s;
- start_utc/end_utc: moved by the first GPS fix's UTC reference (time_utc_usec - timestamp of
  the first vehicle_gps_position/sensor_gps sample with one), null without;
- armed_s: vehicle_status.arming_state == 2 from each sample to the next (to the log's end
  after the last); failsafe: any vehicle_status.failsafe;
- max_altitude_m (vehicle_global_position.alt), max_height_m (-vehicle_local_position.z),
  max_distance_m (from the latest home_position x/y at or before each local position);
- min_battery_v (voltage_v > 0), min_battery_remaining (0..1);
- errors (levels 0-3) and warnings (4) of the logged strings; dropouts and their ms;
- info and parameters: sys_name, ver_hw, ver_sw, ver_sw_release, SYS_AUTOSTART, MAV_TYPE,
  MAV_SYS_ID.
`dropouts` has one row per pyulog dropout, with its duration.

Prints {"columns": N}; exits 1 with the differences."""
import bisect
import datetime
import math
import os
import sys

import pyarrow.dataset as ds
from pymavlink.dialects.v20 import common as mavlink
from pyulog import ULog

UTC_TOPICS = ["vehicle_gps_position", "sensor_gps"]


def topic(ulog, name):
    return [d for d in ulog.data_list if d.name == name]


def release_text(release):
    major, minor, patch, kind = (release >> 24) & 255, (release >> 16) & 255, (release >> 8) & 255, release & 255
    suffix = "" if kind == 255 else "-dev" if kind < 64 else "-alpha" if kind < 128 else "-beta" if kind < 192 else "-rc"
    return f"v{major}.{minor}.{patch}{suffix}"


def finite(values):
    return [float(v) for v in values if math.isfinite(float(v))]


def expected_row(ulog):
    start = ulog.start_timestamp
    end = ulog.last_timestamp
    row = {"log_start_us": start, "log_end_us": end, "duration_s": (end - start) / 1e6}
    offset = None
    for name in UTC_TOPICS:
        for d in topic(ulog, name):
            if offset is None and "time_utc_usec" in d.data:
                fixes = [(int(u), int(t)) for u, t in zip(d.data["time_utc_usec"], d.data["timestamp"]) if u > 0]
                if fixes:
                    offset = fixes[0][0] - fixes[0][1]
        if offset is not None:
            break

    def utc(us):
        return datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(microseconds=us)
    row["start_utc"] = utc(offset + start) if offset is not None else None
    row["end_utc"] = utc(offset + end) if offset is not None else None
    row["utc_source"] = "gps" if offset is not None else None

    status = topic(ulog, "vehicle_status")
    if status:
        d = status[0].data
        armed_us, prev = 0, None
        for t, state in zip(d["timestamp"], d["arming_state"]):
            if prev is not None and prev[1]:
                armed_us += int(t) - prev[0]
            prev = (int(t), state == 2)
        if prev[1]:
            armed_us += end - prev[0]
        row["armed_s"] = armed_us / 1e6
        row["failsafe"] = bool(any(d["failsafe"])) if "failsafe" in d else None
    else:
        row["armed_s"] = row["failsafe"] = None

    glob_ = topic(ulog, "vehicle_global_position")
    row["max_altitude_m"] = max(finite(glob_[0].data["alt"]), default=None) if glob_ else None
    local = topic(ulog, "vehicle_local_position")
    row["max_height_m"] = max((-z for z in finite(local[0].data["z"])), default=None) if local else None
    home = topic(ulog, "home_position")
    distance = None
    if local and home:
        h = home[0].data
        homes = [(int(t), float(x), float(y)) for t, x, y in zip(h["timestamp"], h["x"], h["y"])
                 if math.isfinite(x) and math.isfinite(y)]
        times = [t for t, _, _ in homes]
        d = local[0].data
        for t, x, y in zip(d["timestamp"], d["x"], d["y"]):
            k = bisect.bisect_right(times, int(t))
            if k == 0:
                continue
            _, hx, hy = homes[k - 1]
            r = math.hypot(float(x) - hx, float(y) - hy)
            if math.isfinite(r):
                distance = r if distance is None else max(distance, r)
    row["max_distance_m"] = distance if local else None
    battery = topic(ulog, "battery_status")
    volts = [v for b in battery for v in finite(b.data.get("voltage_v", [])) if v > 0]
    left = [r for b in battery for r in finite(b.data.get("remaining", [])) if 0 <= r <= 1]
    row["min_battery_v"] = min(volts, default=None) if battery else None
    row["min_battery_remaining"] = min(left, default=None) if battery else None

    # pyulog keeps the level as PX4 writes it: an ASCII digit.
    levels = [m.log_level - ord("0") for m in ulog.logged_messages]
    levels += [m.log_level - ord("0") for ms in ulog.logged_messages_tagged.values() for m in ms]
    row["errors"] = sum(1 for lv in levels if lv <= 3)
    row["warnings"] = sum(1 for lv in levels if lv == 4)
    row["dropouts"] = len(ulog.dropouts)
    row["dropout_ms"] = sum(d.duration for d in ulog.dropouts)

    info = ulog.msg_info_dict
    params = ulog.initial_parameters
    for key in ["sys_name", "ver_hw", "ver_sw"]:
        row[key] = info.get(key)
    row["ver_sw_release"] = release_text(info["ver_sw_release"]) if "ver_sw_release" in info else None
    row["airframe"] = int(params["SYS_AUTOSTART"]) if "SYS_AUTOSTART" in params else None
    mav_type = int(params["MAV_TYPE"]) if "MAV_TYPE" in params else None
    row["mav_type"] = mav_type
    entry = mavlink.enums["MAV_TYPE"].get(mav_type) if mav_type is not None else None
    name = entry.name.removeprefix("MAV_TYPE_").lower() if entry else None
    # pymavlink's dialect may be older than the mavlink crate's: a value it still calls
    # reserved has a name there now.
    row["vehicle_type"] = name if not (name or "").startswith(("reserved", "vtol_reserved")) else "named"
    row["system_id"] = int(params["MAV_SYS_ID"]) if "MAV_SYS_ID" in params else None
    return row


def same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b


def main():
    root, log = sys.argv[1], sys.argv[2]
    ulog = ULog(log)
    errors = []
    flights = ds.dataset(f"{root}/parquet/v1/flights", format="parquet",
                         partitioning="hive").to_table().to_pylist()
    if len(flights) != 1:
        print(f"flights: {len(flights)} rows, not 1", file=sys.stderr)
        sys.exit(1)
    ours = flights[0]
    want = expected_row(ulog)
    for key, value in want.items():
        if value == "named" and isinstance(ours.get(key), str):
            continue
        if not same(ours.get(key), value):
            errors.append(f"flights.{key}: ours {ours.get(key)!r}, pyulog {value!r}")
    if ours["dropouts_received"] is not None or ours["ulg_keys"] != []:
        errors.append("flights: a bare .ulg has no receiver's facts")
    ours_drops = []
    if os.path.isdir(f"{root}/parquet/v1/dropouts"):
        drops = ds.dataset(f"{root}/parquet/v1/dropouts", format="parquet", partitioning="hive")
        ours_drops = sorted(r["duration_ms"] for r in drops.to_table().to_pylist())
    if ours_drops != sorted(d.duration for d in ulog.dropouts):
        errors.append(f"dropouts: ours {ours_drops}, pyulog {[d.duration for d in ulog.dropouts]}")
    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(1)
    print('{"columns": %d}' % len(want))


main()
