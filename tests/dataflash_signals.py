#!/usr/bin/env python3
"""What the web page's first look of an ArduPilot flight should plot, read by pymavlink's
DFReader from the log (or a session's splits, in order), as one JSON object: for each signal
its sample count and smallest and largest value (the plot's thinning keeps both).

    dataflash_signals.py LOG.bin [LOG2.bin ...]

`battery voltage` is BAT.Volt of instance 0, `height` POS.RelHomeAlt, `attitude error` the
angle in degrees between the rotations ATT's Roll, Pitch, Yaw and DesRoll, DesPitch, DesYaw
make (yaw, then pitch, then roll), computed here with rotation matrices.
"""
import json
import math
import sys

from pymavlink import DFReader


def matrix(roll, pitch, yaw):
    """The rotation matrix of Euler angles in degrees (Z, then Y, then X)."""
    r, p, y = (math.radians(a) for a in (roll, pitch, yaw))
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return [
        [cp * cy, sr * sp * cy - cr * sy, cr * sp * cy + sr * sy],
        [cp * sy, sr * sp * sy + cr * cy, cr * sp * sy - sr * cy],
        [-sp, sr * cp, cr * cp],
    ]


def angle(a, b):
    """The angle of the rotation between two rotation matrices, in degrees."""
    trace = sum(a[k][i] * b[k][i] for i in range(3) for k in range(3))
    return math.degrees(math.acos(max(-1.0, min(1.0, (trace - 1) / 2))))


def main(paths):
    values = {"battery voltage": [], "height": [], "attitude error": []}
    for path in paths:
        log = DFReader.DFReader_binary(path, zero_time_base=True)
        while True:
            m = log.recv_match(type=["BAT", "POS", "ATT"])
            if m is None:
                break
            t = m.get_type()
            if t == "BAT" and m.Inst == 0:
                values["battery voltage"].append(m.Volt)
            elif t == "POS":
                values["height"].append(m.RelHomeAlt)
            elif t == "ATT":
                achieved = matrix(m.Roll, m.Pitch, m.Yaw)
                desired = matrix(m.DesRoll, m.DesPitch, m.DesYaw)
                values["attitude error"].append(angle(achieved, desired))
    print(json.dumps({
        name: {"samples": len(v), "min": min(v), "max": max(v)} for name, v in values.items() if v
    }))


if __name__ == "__main__":
    main(sys.argv[1:])
