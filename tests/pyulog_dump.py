#!/usr/bin/env python3
"""Prints what pyulog decodes from a ULog file, in the shape of ../shared's NAME.expected.json:
info, parameters, logged messages, dropouts, formats, and per dataset its fields, count, first
and last sample and per-field float64 sums (NaN skipped, counted). NaN and infinities are
written as the strings "nan", "inf", "-inf".

Usage: pyulog_dump.py FILE.ulg"""
import json
import math
import sys

import numpy as np
from pyulog import ULog


def clean(v):
    if isinstance(v, (bytes, bytearray)):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    return v


def main(path):
    u = ULog(path)
    out = {
        "decoder": "pyulog",
        "file": path.rsplit("/", 1)[-1],
        "file_corruption": bool(u.file_corruption),
        "start_timestamp": u.start_timestamp,
        "last_timestamp": u.last_timestamp,
        "compat_flags": list(u._compat_flags),
        "incompat_flags": list(u._incompat_flags),
        "appended_offsets": list(u._appended_offsets),
        "info": u.msg_info_dict,
        "info_multiple": u.msg_info_multiple_dict,
        "initial_parameters": u.initial_parameters,
        "changed_parameters": [list(c) for c in u.changed_parameters],
        "default_parameters": {str(k): v for k, v in u._default_parameters.items()},
        "logged_messages": [[m.timestamp, m.log_level, m.message] for m in u.logged_messages],
        "logged_messages_tagged": {
            str(tag): [[m.timestamp, m.log_level, m.message] for m in ms]
            for tag, ms in u.logged_messages_tagged.items()
        },
        "dropouts": [[d.timestamp, d.duration] for d in u.dropouts],
        "formats": {
            name: [[t, n, f] for (t, n, f) in fmt.fields] for name, fmt in u.message_formats.items()
        },
        "datasets": [],
    }
    for d in u.data_list:
        names = [f.field_name for f in d.field_data]
        count = len(d.data[names[0]])
        sums = {}
        for f in names:
            col = d.data[f].astype(np.float64)
            nan = int(np.isnan(col).sum())
            sums[f] = {"nan": nan, "sum": float(np.nansum(col))}
        out["datasets"].append({
            "name": d.name,
            "multi_id": d.multi_id,
            "msg_id": d.msg_id,
            "count": count,
            "fields": [[f.field_name, f.type_str] for f in d.field_data],
            "first": {f: d.data[f][0] for f in names},
            "last": {f: d.data[f][-1] for f in names},
            "sums": sums,
        })
    json.dump(clean(out), sys.stdout, indent=1, sort_keys=True, allow_nan=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
