"""Reads an MCAP file with the Python `mcap` and `mcap-ros2-support` packages (independent of
ulog-recv) and prints one JSON object:

- profile, the chunks' compressions, whether every chunk has message indexes (the reader
  checks every CRC the file holds as it goes);
- channels: per channel its topic, schema name, message count, first and last decoded message
  (nested messages as objects, arrays as lists, NaN and infinities as "nan" / "inf" /
  "-inf"), first and last log time (ns, as strings), the count of messages whose log time is
  not their `timestamp` field (or `/log`'s stamp) in ns;
- logs: the decoded `/log` messages; diagnostics: the decoded `/diagnostics` messages, each
  with its log time (`logTime`, ns as a string); metadata: name -> entries;
- window (with a second argument START_NS:END_NS): the chunks the summary's chunk index says
  overlap the window, all chunks, and the messages the indexed reader returns for the window
  against those counted while reading everything.

Usage: mcap_read.py FILE.mcap [START_NS:END_NS]
"""

import json
import sys

from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory

from ros_values import plain


def main():
    path = sys.argv[1]
    window = None
    if len(sys.argv) > 2:
        start, end = sys.argv[2].split(":")
        window = (int(start), int(end))
    channels = {}
    logs = []
    diagnostics = []
    in_window = 0
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()], validate_crcs=True)
        header = reader.get_header()
        summary = reader.get_summary()
        for schema, channel, message, decoded in reader.iter_decoded_messages(log_time_order=False):
            state = channels.setdefault(
                channel.id,
                {
                    "topic": channel.topic,
                    "schemaName": schema.name,
                    "count": 0,
                    "first": None,
                    "last": None,
                    "firstLogTime": None,
                    "lastLogTime": None,
                    "timeMismatches": 0,
                    "trailing": 0,
                },
            )
            value = plain(decoded)
            state["count"] += 1
            if state["first"] is None:
                state["first"] = value
                state["firstLogTime"] = str(message.log_time)
            state["last"] = value
            state["lastLogTime"] = str(message.log_time)
            if channel.topic == "/log":
                logs.append(value)
                stamp = decoded.stamp.sec * 1_000_000_000 + decoded.stamp.nanosec
                if stamp != message.log_time:
                    state["timeMismatches"] += 1
            elif channel.topic == "/diagnostics":
                diagnostics.append({"logTime": str(message.log_time), "message": value})
                stamp = decoded.header.stamp.sec * 1_000_000_000 + decoded.header.stamp.nanosec
                if stamp != message.log_time:
                    state["timeMismatches"] += 1
            elif decoded.timestamp * 1000 != message.log_time:
                state["timeMismatches"] += 1
            if window and window[0] <= message.log_time <= window[1]:
                in_window += 1
        metadata = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
        out = {
            "profile": header.profile,
            "compressions": sorted({c.compression for c in summary.chunk_indexes}),
            "indexed": all(c.message_index_offsets for c in summary.chunk_indexes),
            "chunks": len(summary.chunk_indexes),
            "channels": list(channels.values()),
            "logs": logs,
            "diagnostics": diagnostics,
            "statuses": [],
            "metadata": metadata,
        }
        if window:
            touched = [
                c
                for c in summary.chunk_indexes
                if c.message_start_time <= window[1] and c.message_end_time >= window[0]
            ]
            through_index = sum(
                1 for _ in reader.iter_messages(start_time=window[0], end_time=window[1] + 1)
            )
            out["window"] = {
                "chunks_touched": len(touched),
                "messages_through_index": through_index,
                "messages_in_window": in_window,
            }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
