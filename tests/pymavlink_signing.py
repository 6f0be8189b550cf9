#!/usr/bin/env python3
"""MAVLink 2 signing by pymavlink, an independent implementation, for tests/it/signing.rs.

  pymavlink_signing.py sign KEY_HEX LINK_ID TIMESTAMP
      Prints, one hex frame per line, frames signed by pymavlink as a PX4 vehicle (system 1,
      component 1) would send them: HEARTBEAT, COMMAND_ACK, LOGGING_DATA_ACKED, LOGGING_DATA.
  pymavlink_signing.py verify KEY_HEX
      Reads hex frames (one per line) on stdin and prints one JSON object per frame: the
      message name and fields pymavlink decoded once the signature verified, or the error.
  pymavlink_signing.py derive PASSPHRASE
      Prints the key QGroundControl derives from a passphrase (SHA-256), in hex.
"""
import hashlib
import json
import os
import sys

os.environ["MAVLINK20"] = "1"
# ArduPilot's dialect holds the common one, and ArduPilot's log blocks.
from pymavlink.dialects.v20 import ardupilotmega as mavlink  # noqa: E402


def sign(key_hex, link_id, timestamp):
    mav = mavlink.MAVLink(None, 1, 1)
    mav.signing.secret_key = bytes.fromhex(key_hex)
    mav.signing.link_id = int(link_id)
    mav.signing.timestamp = int(timestamp)
    mav.signing.sign_outgoing = True
    data = bytes(range(100, 200)) + bytes(149)
    messages = [
        mavlink.MAVLink_heartbeat_message(2, 12, 81, 0, 3, 3),
        mavlink.MAVLink_command_ack_message(2511, 0),
        mavlink.MAVLink_logging_data_acked_message(1, 155, 7, 100, 0, data),
        mavlink.MAVLink_logging_data_message(1, 155, 8, 100, 255, data),
    ]
    for m in messages:
        print(m.pack(mav).hex())


def verify(key_hex):
    mav = mavlink.MAVLink(None, 255, 0)
    mav.signing.secret_key = bytes.fromhex(key_hex)
    mav.signing.allow_unsigned_callback = lambda _mav, _msg_id: False
    for line in sys.stdin:
        frame = bytes.fromhex(line.strip())
        try:
            got = mav.parse_buffer(frame) or []
            out = [
                {"name": m.get_type(), "fields": m.to_dict(), "system": m.get_srcSystem()}
                for m in got
            ]
            print(json.dumps(out[0] if out else {"error": "no message"}, default=list))
        except mavlink.MAVError as e:
            print(json.dumps({"error": str(e)}))
            # A fresh parser state for the next frame.
            mav.buf = bytearray()
            mav.buf_index = 0


def main():
    command = sys.argv[1]
    if command == "sign":
        sign(*sys.argv[2:5])
    elif command == "verify":
        verify(sys.argv[2])
    elif command == "derive":
        print(hashlib.sha256(sys.argv[2].encode()).hexdigest())
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
