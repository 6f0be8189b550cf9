"""Reads a ROS 1 bag (format 2.0) with rosbags (independent of ulog-recv) and prints one JSON
object in the shape tests/mcap_read.py prints:

- channels: per connection its topic, type, message count, first and last deserialised
  message, first and last time (ns, as strings), the count of messages whose time is not their
  `timestamp` field (or `/log`'s header stamp) in ns; and `md5_mismatches`: connections whose
  MD5 sum is not the one rosbags computes from the definition the connection carries;
- logs: the `/log` messages, their stamp as `{sec, nanosec}`;
- chunks: how many chunks the bag's index lists.

Usage: bag_read.py FILE.bag
"""

import json
import sys

from rosbags.rosbag1 import Reader
from rosbags.typesys import Stores, get_typestore, get_types_from_msg

from ros_values import plain


def main():
    store = get_typestore(Stores.EMPTY)
    channels = {}
    logs = []
    md5_mismatches = []
    with Reader(sys.argv[1]) as reader:
        for c in reader.connections:
            store.register(get_types_from_msg(c.msgdef.data, c.msgtype))
        for c in reader.connections:
            _, digest = store.generate_msgdef(c.msgtype, ros_version=1)
            if digest != c.digest:
                md5_mismatches.append(f"{c.topic}: {c.digest} vs rosbags {digest}")
        for c, time, raw in reader.messages():
            msg = store.deserialize_ros1(raw, c.msgtype)
            state = channels.setdefault(
                c.id,
                {
                    "topic": c.topic,
                    "schemaName": c.msgtype,
                    "count": 0,
                    "first": None,
                    "last": None,
                    "firstLogTime": None,
                    "lastLogTime": None,
                    "timeMismatches": 0,
                    "trailing": 0,
                },
            )
            value = plain(msg)
            if c.topic == "/log":
                stamp = msg.header.stamp
                value["stamp"] = {"sec": stamp.sec, "nanosec": stamp.nanosec}
                logs.append(value)
                if stamp.sec * 1_000_000_000 + stamp.nanosec != time:
                    state["timeMismatches"] += 1
            elif msg.timestamp * 1000 != time:
                state["timeMismatches"] += 1
            state["count"] += 1
            if state["first"] is None:
                state["first"] = value
                state["firstLogTime"] = str(time)
            state["last"] = value
            state["lastLogTime"] = str(time)
        chunks = len(reader.chunk_infos)
    json.dump(
        {
            "channels": list(channels.values()),
            "logs": logs,
            "statuses": [],
            "md5_mismatches": md5_mismatches,
            "chunks": chunks,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
