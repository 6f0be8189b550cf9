#!/usr/bin/env python3
"""What an ArduPilot log says of itself, read by pymavlink's DFReader (the reference reader),
as one JSON object: the receiver's flight diagnostics are held against it.

    dataflash_vehicle_said.py LOG.bin [LOG2.bin ...]

Several files are one flight's splits, in order (each split's replayed preamble holds no ERR,
EV, ARM or RCI2). `records` lists every ERR (`subsystem`, `code`) and EV (`id`) with its
`TimeUS`; `armed` the spans the vehicle was armed (ARM.ArmState, from arming to disarming);
`rc_failsafe` the spans, while armed, that RCI2.Flags had its failsafe bit (2) set, each from
the first message with it to the first without (or the disarm); `battery_first_volt` the
first BAT instance 0 voltage; `longest_saturated_run` the most RCOU messages in a row, while
armed, with one of C1 to C4 at 1900 or more (the same output all along).
"""
import json
import sys

from pymavlink import DFReader


def main(paths):
    records = []
    armed_spans = []
    rc_spans = []
    armed_since = None
    rc_since = None
    first_volt = None
    runs = [0, 0, 0, 0]
    longest = 0
    for path in paths:
        log = DFReader.DFReader_binary(path, zero_time_base=True)
        while True:
            m = log.recv_msg()
            if m is None:
                break
            t = m.get_type()
            if t == "ERR":
                records.append(
                    {"timestamp_us": m.TimeUS, "record": "ERR", "subsystem": m.Subsys, "code": m.ECode}
                )
            elif t == "EV":
                records.append({"timestamp_us": m.TimeUS, "record": "EV", "id": m.Id})
            elif t == "ARM":
                if m.ArmState and armed_since is None:
                    armed_since = m.TimeUS
                elif not m.ArmState and armed_since is not None:
                    if rc_since is not None:
                        rc_spans.append([rc_since, m.TimeUS])
                        rc_since = None
                    armed_spans.append([armed_since, m.TimeUS])
                    armed_since = None
            elif t == "RCI2" and armed_since is not None:
                lost = bool(m.Flags & 2)
                if lost and rc_since is None:
                    rc_since = m.TimeUS
                elif not lost and rc_since is not None:
                    rc_spans.append([rc_since, m.TimeUS])
                    rc_since = None
            elif t == "RCOU":
                outputs = [m.C1, m.C2, m.C3, m.C4]
                runs = [
                    n + 1 if armed_since is not None and pwm >= 1900 else 0
                    for n, pwm in zip(runs, outputs)
                ]
                longest = max(longest, *runs)
            elif t == "BAT" and first_volt is None and m.Inst == 0:
                first_volt = m.Volt
    print(
        json.dumps(
            {
                "records": records,
                "armed": armed_spans,
                "rc_failsafe": rc_spans,
                "battery_first_volt": first_volt,
                "longest_saturated_run": longest,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
