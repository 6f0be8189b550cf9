#!/usr/bin/env python3
"""Flies ArduPilot's SITL as a ground station does, over its SERIAL0 with pymavlink:
waits until it is ready to arm, switches to GUIDED, arms, takes off to ALT metres, hovers
HOVER seconds, lands and waits until it disarms by itself.

    ardupilot_fly.py PORT ALT HOVER [rc]

With `rc`, the hover ends in a radio failure instead of a LAND: the SITL's receiver stops
(`SIM_RC_FAIL` 1, no pulses), and the vehicle's radio failsafe brings it home and down by
itself (stage `rc_lost` when the failure is asked for).

PORT is the UDP port the SITL's SERIAL0 sends to (`--serial0 udpclient:127.0.0.1:PORT`).
Each stage prints one line as it is reached (`armed`, `airborne`, `hovering`, `landing`,
`landed`) and flushes it, so that a test can act at a stage (cut the link in flight). Any
failure (a refusal, a timeout) ends the script with the vehicle's last words on stderr and
exit status 1.
"""
import sys
import time

from pymavlink import mavutil

TIMEOUT_READY_S = 120


def is_armed(m):
    """A heartbeat of the autopilot itself that says it is armed."""
    return (
        m.get_type() == "HEARTBEAT"
        and m.get_srcComponent() == 1
        and bool(m.base_mode & mavutil.mavlink.MAV_MODE_FLAG_SAFETY_ARMED)
    )


def say(stage):
    print(stage, flush=True)


def fail(why, texts):
    sys.stderr.write(f"{why}\nthe vehicle said: {texts[-10:]}\n")
    sys.exit(1)


def main():
    port, alt, hover = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    fault = sys.argv[4] if len(sys.argv) > 4 else None
    link = mavutil.mavlink_connection(f"udpin:127.0.0.1:{port}", source_system=255)
    link.wait_heartbeat(timeout=60)
    # Positions (GLOBAL_POSITION_INT) four times a second: a ground station asks for them.
    link.mav.request_data_stream_send(
        link.target_system, link.target_component, mavutil.mavlink.MAV_DATA_STREAM_ALL, 4, 1
    )
    texts = []

    def pump(until, why, timeout):
        """Reads the vehicle until `until(message)` is true (returns it) or `timeout`
        passes (fails saying `why`; returns None when there is no `why`)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            m = link.recv_match(blocking=True, timeout=0.5)
            if m is None:
                continue
            if m.get_type() == "STATUSTEXT":
                texts.append(m.text)
            if until(m):
                return m
        if why:
            fail(why, texts)
        return None

    # GUIDED, then arm, until the vehicle takes it: its pre-arm checks (GPS lock, the EKF
    # aligned, a receiver taking the log stream) pass within a minute of boot.
    t0 = time.monotonic()
    while True:
        if time.monotonic() - t0 > TIMEOUT_READY_S:
            fail("not armed within 120 s", texts)
        link.set_mode("GUIDED")
        link.mav.command_long_send(
            link.target_system,
            link.target_component,
            mavutil.mavlink.MAV_CMD_COMPONENT_ARM_DISARM,
            0, 1, 0, 0, 0, 0, 0, 0,
        )
        if pump(is_armed, None, timeout=2):
            break
    say("armed")
    link.mav.command_long_send(
        link.target_system,
        link.target_component,
        mavutil.mavlink.MAV_CMD_NAV_TAKEOFF,
        0, 0, 0, 0, 0, 0, 0, alt,
    )
    ack = pump(
        lambda m: m.get_type() == "COMMAND_ACK"
        and m.command == mavutil.mavlink.MAV_CMD_NAV_TAKEOFF,
        "no answer to the take-off",
        5,
    )
    if ack.result != mavutil.mavlink.MAV_RESULT_ACCEPTED:
        fail(f"take-off refused: result {ack.result}", texts)
    pump(
        lambda m: m.get_type() == "GLOBAL_POSITION_INT" and m.relative_alt > 1000,
        "never left the ground",
        30,
    )
    say("airborne")
    pump(
        lambda m: m.get_type() == "GLOBAL_POSITION_INT"
        and m.relative_alt > 0.9 * alt * 1000,
        f"never reached {alt} m",
        60,
    )
    say("hovering")
    t0 = time.monotonic()
    while time.monotonic() - t0 < hover:
        m = link.recv_match(blocking=True, timeout=0.5)
        if m is not None and m.get_type() == "STATUSTEXT":
            texts.append(m.text)
    if fault == "rc":
        link.mav.param_set_send(
            link.target_system,
            link.target_component,
            b"SIM_RC_FAIL",
            1,
            mavutil.mavlink.MAV_PARAM_TYPE_REAL32,
        )
        say("rc_lost")
    else:
        link.set_mode("LAND")
        say("landing")
    pump(
        lambda m: m.get_type() == "HEARTBEAT"
        and m.get_srcComponent() == 1
        and not is_armed(m),
        "not landed and disarmed within 120 s",
        120,
    )
    say("landed")


if __name__ == "__main__":
    main()
