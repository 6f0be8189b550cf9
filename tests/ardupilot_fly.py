#!/usr/bin/env python3
"""Flies ArduPilot's SITL as a ground station does, over its SERIAL0 with pymavlink:
waits until it is ready to arm, switches to GUIDED, arms, takes off to ALT metres, hovers
HOVER seconds, lands and waits until it disarms by itself.

    ardupilot_fly.py PORT ALT HOVER [rc|failures]

With `rc`, the hover ends in a radio failure instead of a LAND: the SITL's receiver stops
(`SIM_RC_FAIL` 1, no pulses), and the vehicle's radio failsafe brings it home and down by
itself (stage `rc_lost` when the failure is asked for).

With `failures`, the hover goes through the failures of `FAILURES` one after the other, each
set by the SITL's `SIM_` parameters, held, taken back, and followed by a calm stretch (a
stage line with its name as it is set), then LANDs. The battery's low-voltage failsafe is
set to warn only (`BATT_FS_LOW_ACT` 0), so that the vehicle logs its failsafe and flies on.

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

# Set before arming for `failures`: a pack below 10.5 V for 1 s is the vehicle's low-battery
# failsafe, which only warns.
BATTERY_FAILSAFE = [("BATT_LOW_VOLT", 10.5), ("BATT_LOW_TIMER", 1), ("BATT_FS_LOW_ACT", 0)]

# (stage, parameters set, seconds held, parameters that take it back, calm seconds after).
FAILURES = [
    # Three satellites where there were ten: the fix goes on (the vehicle logs no ERR).
    ("gps_few", [("SIM_GPS_NUMSATS", 3)], 6, [("SIM_GPS_NUMSATS", 10)], 6),
    # Every fix 55 m off where it was: the EKF rejects the GPS (a glitch, say its ERR).
    ("gps_glitch", [("SIM_GPS_GLITCH_X", 0.0005)], 10, [("SIM_GPS_GLITCH_X", 0)], 15),
    # The simulated pack at 9.6 V, 3.2 V a cell.
    ("battery_low", [("SIM_BATT_VOLTAGE", 9.6)], 6, [("SIM_BATT_VOLTAGE", 12.6)], 8),
    # The first motor gives half its thrust: the vehicle sinks, the motor saturates (long
    # enough for 50 of RCOU's samples, logged at 10 Hz, after the vehicle's thrust boost).
    ("motor_weak", [("SIM_ENGINE_FAIL", 0), ("SIM_ENGINE_MUL", 0.5)], 12,
     [("SIM_ENGINE_MUL", 1)], 8),
]


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

    def set_parameters(parameters):
        for name, value in parameters:
            link.mav.param_set_send(
                link.target_system,
                link.target_component,
                name.encode(),
                value,
                mavutil.mavlink.MAV_PARAM_TYPE_REAL32,
            )

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

    if fault == "failures":
        set_parameters(BATTERY_FAILSAFE)
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
    pump(lambda m: False, None, hover)
    if fault == "failures":
        for stage, failure, held_s, back, calm_s in FAILURES:
            set_parameters(failure)
            say(stage)
            pump(lambda m: False, None, held_s)
            set_parameters(back)
            pump(lambda m: False, None, calm_s)
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
