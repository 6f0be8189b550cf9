#!/usr/bin/env python3
"""Downloads ArduPilot's newest card log whole by the log protocol every ground station
uses, with pymavlink: LOG_REQUEST_LIST, then LOG_REQUEST_DATA for the whole log and again
for each range still missing (LOG_DATA carries 90 bytes at an offset) until every byte came,
then LOG_REQUEST_END. The vehicle serves one request at a time (a new one replaces the one
under way), so each range is asked for once the one before came whole or went quiet. What a ground station does to bring a flight's log home.

    ardupilot_log_download.py PORT OUT

PORT is the UDP port the vehicle sends to (`udpin:127.0.0.1:PORT`); the log is written to
OUT. Prints one JSON object: the log's id and size, the bytes received (duplicates
included), the requests sent and the seconds it took.
"""
import json
import sys
import time

from pymavlink import mavutil

DATA = 90
# A range missing this long after the last LOG_DATA is asked for again.
QUIET_S = 0.5
TIMEOUT_S = 600


def main():
    port, out = int(sys.argv[1]), sys.argv[2]
    link = mavutil.mavlink_connection(f"udpin:127.0.0.1:{port}", source_system=255)
    if link.wait_heartbeat(timeout=30) is None:
        sys.exit("no heartbeat")
    target = (link.target_system, link.target_component)
    t0 = time.monotonic()
    entries = {}
    total = None
    while total is None or len(entries) < total:
        link.mav.log_request_list_send(*target, 0, 0xFFFF)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and (total is None or len(entries) < total):
            m = link.recv_match(type="LOG_ENTRY", blocking=True, timeout=0.5)
            if m is not None and m.num_logs > 0:
                total = m.num_logs
                entries[m.id] = m.size
        if total is None and time.monotonic() - t0 > 30:
            sys.exit("no LOG_ENTRY")
    log_id = max(entries)
    size = entries[log_id]
    have = bytearray(size)
    got = [False] * ((size + DATA - 1) // DATA)
    received = 0
    requests = 0
    while not all(got):
        if time.monotonic() - t0 > TIMEOUT_S:
            sys.exit(f"{sum(got)} of {len(got)} pieces in {TIMEOUT_S} s")
        # The first range still missing, as far as it goes.
        first = got.index(False)
        last = first
        while last + 1 < len(got) and not got[last + 1]:
            last += 1
        count = min(size, (last + 1) * DATA) - first * DATA
        link.mav.log_request_data_send(*target, log_id, first * DATA, count)
        requests += 1
        # Until the range asked for came whole, or nothing came for a while.
        while not all(got[first:last + 1]):
            m = link.recv_match(type="LOG_DATA", blocking=True, timeout=QUIET_S)
            if m is None:
                break
            if m.id != log_id or m.count == 0:
                continue
            received += m.count
            piece = m.ofs // DATA
            if m.ofs % DATA == 0 and piece < len(got):
                have[m.ofs:m.ofs + m.count] = bytes(m.data[:m.count])
                got[piece] = True
    link.mav.log_request_end_send(*target)
    seconds = time.monotonic() - t0
    with open(out, "wb") as f:
        f.write(have)
    print(json.dumps({
        "id": log_id,
        "size": size,
        "received_bytes": received,
        "requests": requests,
        "seconds": round(seconds, 2),
    }))


if __name__ == "__main__":
    main()
