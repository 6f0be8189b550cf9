#!/usr/bin/env python3
"""Prints, as JSON, the web page's first-look signals of a ULog file as pyulog reads them:
battery voltage (battery_status instance 0, voltage_v), height (-vehicle_local_position.z)
and the attitude error (the rotation between vehicle_attitude.q and the latest
vehicle_attitude_setpoint.q_d no older than 1 s, in degrees), each {"t_us": [...],
"values": [...]} with NaN as null; and FIELD's values when a field (TOPIC.FIELD) is given.

Usage: signals_pyulog.py FILE.ulg [TOPIC.FIELD]"""
import json
import math
import sys

import numpy as np
from pyulog import ULog


def finite(v):
    v = float(v)
    return v if math.isfinite(v) else None


def dataset(ulog, name):
    for d in ulog.data_list:
        if d.name == name and d.multi_id == 0:
            return d
    return None


def series(t, values):
    return {"t_us": [int(x) for x in t], "values": [finite(v) for v in values]}


def attitude_error(ulog):
    att, sp = dataset(ulog, "vehicle_attitude"), dataset(ulog, "vehicle_attitude_setpoint")
    if att is None or sp is None:
        return None
    q = np.stack([att.data["q[%d]" % i].astype(np.float64) for i in range(4)], axis=1)
    qd = np.stack([sp.data["q_d[%d]" % i].astype(np.float64) for i in range(4)], axis=1)
    t_sp = sp.data["timestamp"]
    t, values = [], []
    for k, ts in enumerate(att.data["timestamp"]):
        # The latest setpoint logged at or before this sample.
        j = np.searchsorted(t_sp, ts, side="right") - 1
        if j < 0 or ts - t_sp[j] > 1_000_000:
            continue
        dot = abs(float(np.dot(q[k], qd[j])))
        t.append(ts)
        values.append(2.0 * math.degrees(math.acos(min(1.0, dot))))
    return series(t, values)


def main():
    ulog = ULog(sys.argv[1])
    out = {}
    if len(sys.argv) > 2:
        topic, field = sys.argv[2].split(".", 1)
        d = dataset(ulog, topic)
        out[sys.argv[2]] = series(d.data["timestamp"], d.data[field])
    else:
        bat = dataset(ulog, "battery_status")
        if bat is not None:
            out["battery voltage"] = series(bat.data["timestamp"], bat.data["voltage_v"])
        pos = dataset(ulog, "vehicle_local_position")
        if pos is not None:
            out["height"] = series(pos.data["timestamp"], -pos.data["z"].astype(np.float64))
        err = attitude_error(ulog)
        if err is not None:
            out["attitude error"] = err
    print(json.dumps(out))


main()
