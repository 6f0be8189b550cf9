"""pymavlink's own MAVLink FTP client (pymavlink.mavftp) against a vehicle: lists the log
directory, downloads the first log it finds and asks for its CRC32.

usage: ftp_pymavlink.py PORT OUTPUT

Listens on UDP PORT (the vehicle sends there). Prints one JSON object: the log's path, the
listed size, the CRC32 the vehicle answered, the days listed.
"""
import json
import logging
import sys

from pymavlink import mavutil
from pymavlink.mavftp import MAVFTP


def main():
    port, output = int(sys.argv[1]), sys.argv[2]
    master = mavutil.mavlink_connection(
        f"udpin:127.0.0.1:{port}", source_system=255, source_component=190
    )
    master.wait_heartbeat(timeout=10)
    ftp = MAVFTP(master, master.target_system, master.target_component)

    crcs = []

    class CrcLog(logging.Handler):
        # mavftp tells the checksum only in its log: "crc: NAME 0x%08x in %.1fs".
        def emit(self, record):
            if str(record.msg).startswith("crc:"):
                crcs.append(record.args[1])

    logging.getLogger().addHandler(CrcLog(level=logging.INFO))
    logging.getLogger().setLevel(logging.INFO)

    def listing(path):
        ret = ftp.cmd_list([path])
        assert ret.error_code == 0, f"list {path}: {ret.error_code}"
        return list(ftp.list_result)

    days = [e.name for e in listing("@MAV_LOG") if e.is_dir]
    files = [e for e in listing(f"@MAV_LOG/{days[0]}") if not e.is_dir]
    path = f"@MAV_LOG/{days[0]}/{files[0].name}"
    ret = ftp.cmd_get([path, output])
    ret = ftp.process_ftp_reply("OpenFileRO", timeout=60)
    assert ret.error_code == 0, f"get {path}: {ret.error_code}"
    ret = ftp.cmd_crc([path])
    assert ret.error_code == 0 and crcs, f"crc {path}: {ret.error_code}"
    print(
        json.dumps(
            {
                "path": path,
                "size": files[0].size_b,
                "crc32": crcs[0],
                "days": days,
            }
        )
    )


main()
