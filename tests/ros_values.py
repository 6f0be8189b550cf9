"""Decoded ROS messages as plain JSON values, for the test readers (tests/rosbags_decode.py,
tests/mcap_read.py, tests/bag_read.py, tests/bag12_read.py), whatever library decoded them:
rosbags' dataclasses, mcap-ros2-support's and genpy's slotted classes, genpy's times.

Nested messages become objects, arrays lists (bytes too), times `{sec, nanosec}`, booleans
0 / 1, NaN and infinities "nan" / "inf" / "-inf" (as tests/pyulog_dump.py writes them).
"""

import math


def plain(value):
    if hasattr(value, "__dataclass_fields__"):
        return {
            name: plain(getattr(value, name))
            for name in value.__dataclass_fields__
            if name != "__msgtype__"
        }
    if hasattr(value, "secs") and hasattr(value, "nsecs"):
        return {"sec": value.secs, "nanosec": value.nsecs}
    if hasattr(value, "__slots__") and not isinstance(value, (int, float, str, bytes)):
        return {name: plain(getattr(value, name)) for name in value.__slots__}
    if isinstance(value, (bytes, bytearray)):
        return list(value)
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    if isinstance(value, bool):
        return int(value)
    return value
