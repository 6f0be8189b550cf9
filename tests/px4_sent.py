"""Rebuilds the ULog stream a PX4 sent from a capture of its datagrams, with pymavlink (a
MAVLink implementation independent of ours): every LOGGING_DATA(_ACKED) payload, each
sequence number once, in order, from the first chunk of the last stream started (sequence 0
with a ULog header) on. Writes it as a .ulg that pyulog can read: what PX4 put on the wire.

usage: px4_sent.py CAPTURE OUT.ulg (CAPTURE: datagrams, each behind its length as 4 bytes
little-endian)
"""
import struct
import sys

from pymavlink.dialects.v20 import common as mavlink2

capture, out = sys.argv[1], sys.argv[2]
mav = mavlink2.MAVLink(None)
mav.robust_parsing = True
chunks = {}
with open(capture, "rb") as f:
    data = f.read()
at = 0
while at + 4 <= len(data):
    (n,) = struct.unpack_from("<I", data, at)
    datagram = data[at + 4 : at + 4 + n]
    at += 4 + n
    for msg in mav.parse_buffer(datagram) or []:
        if msg.get_type() in ("LOGGING_DATA", "LOGGING_DATA_ACKED"):
            payload = bytes(msg.data[: msg.length])
            if msg.sequence == 0 and payload.startswith(b"ULog"):
                chunks = {}
            chunks.setdefault(msg.sequence, payload)
stream = b"".join(chunks[s] for s in sorted(chunks))
with open(out, "wb") as f:
    f.write(stream)
print(len(chunks), "chunks,", len(stream), "bytes")
