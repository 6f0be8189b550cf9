"""Decodes CDR messages with rosbags, an independent ROS 2 implementation in Python.

Reads a JSON list of {"type", "schema", "cdr" (hex)} from the file named by the first
argument; registers each schema text with rosbags' ros2msg parser and deserialises the CDR.
Prints a JSON list of the messages: nested messages as objects, arrays as lists, strings as
strings, NaN and infinities as "nan" / "inf" / "-inf" (as tests/pyulog_dump.py writes them).
"""

import json
import sys

from rosbags.typesys import Stores, get_typestore, get_types_from_msg

from ros_values import plain


def main():
    with open(sys.argv[1]) as f:
        items = json.load(f)
    out = []
    for item in items:
        store = get_typestore(Stores.EMPTY)
        store.register(get_types_from_msg(item["schema"], item["type"]))
        msg = store.deserialize_cdr(bytes.fromhex(item["cdr"]), item["type"])
        out.append(plain(msg))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
