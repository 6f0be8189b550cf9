"""A ground station's stand-in, built on pymavlink: it sends a GCS heartbeat every second and
prints, one JSON line each as they come, the STATUSTEXTs it hears (source system and
component, severity, text), until it is terminated. Its first line is `ready`.

usage: gcs_statustext.py PORT   (listens on UDP 127.0.0.1:PORT)
"""
import json
import signal
import sys
import time

from pymavlink import mavutil


def main():
    port = int(sys.argv[1])
    gcs = mavutil.mavlink_connection(
        f"udpin:127.0.0.1:{port}", source_system=255, source_component=190
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    next_beat = 0.0
    while True:
        now = time.monotonic()
        if now >= next_beat:
            # Sent once the router has been heard (pymavlink's udpin answers its last peer).
            gcs.mav.heartbeat_send(
                mavutil.mavlink.MAV_TYPE_GCS, mavutil.mavlink.MAV_AUTOPILOT_INVALID, 0, 0, 0
            )
            next_beat = now + 1.0
        m = gcs.recv_match(type="STATUSTEXT", blocking=True, timeout=0.2)
        if m is None:
            continue
        print(
            json.dumps(
                {
                    "system": m.get_srcSystem(),
                    "component": m.get_srcComponent(),
                    "severity": m.severity,
                    "text": m.text,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
