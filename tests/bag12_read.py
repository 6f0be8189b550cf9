"""Reads a ROS bag in format 1.2 with ROS's own `rosbag` library (PyPI `rosbag-standalone`,
independent of ulog-recv) and prints one JSON object in the shape tests/mcap_read.py prints:
per topic its type, message count, first and last deserialised message, first and last time
(ns, as strings), the count of messages whose time is not their `timestamp` field (or
`/log`'s header stamp) in ns; the `/log` messages, their stamp as `{sec, nanosec}`.

rosbag's 1.2 reader is reached through `Bag._reader.read_messages(...)`: its front end passes
the reader one argument too many. It reads the topics' index (version 0) and seeks each
message through it.

Usage: bag12_read.py FILE.bag
"""

import json
import sys

import rosbag

from ros_values import plain


def main():
    bag = rosbag.Bag(sys.argv[1])
    assert bag.version == 102, bag.version
    channels = {}
    logs = []
    for topic, msg, t in bag._reader.read_messages(None, None, None, None, False):
        time = t.secs * 1_000_000_000 + t.nsecs
        state = channels.setdefault(
            topic,
            {
                "topic": topic,
                "schemaName": msg._type,
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
        if topic == "/log":
            stamp = msg.header.stamp
            value["stamp"] = {"sec": stamp.secs, "nanosec": stamp.nsecs}
            logs.append(value)
            if stamp.secs * 1_000_000_000 + stamp.nsecs != time:
                state["timeMismatches"] += 1
        elif msg.timestamp * 1000 != time:
            state["timeMismatches"] += 1
        state["count"] += 1
        if state["first"] is None:
            state["first"] = value
            state["firstLogTime"] = str(time)
        state["last"] = value
        state["lastLogTime"] = str(time)
    bag.close()
    json.dump({"channels": list(channels.values()), "logs": logs, "statuses": []}, sys.stdout)


if __name__ == "__main__":
    main()
