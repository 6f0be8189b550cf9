#!/usr/bin/env python3
"""Holds what the live socket published for an ArduPilot log (the lines of
`ulog-recv tail --json`) against the `.bin` splits the daemon wrote, read by pymavlink's
DFReader, and prints what it finds as one JSON object.

    dataflash_live.py LINES.ndjson RECEIVED.bin [RECEIVED2.bin ...]

Every data message of the splits (not the definitions, parameters, texts and version, which
the socket tells otherwise, nor a later split's opening records, which replay the log's
state) should be a `data` line of the same type and the same field values as DFReader reads
them (its scaling: `c` and `e` in hundredths, `L` in degrees), and no data line should be
anything else: `missing` and `invented` count the differences. A topic with an instance
field is published as one topic per instance: `bad_instances` counts lines whose
`multi_id` is not their instance field's value. Floats are compared as the 32-bit floats
most fields are.
"""
import collections
import json
import math
import struct
import sys

from pymavlink import DFReader

NOT_DATA = {"FMT", "FMTU", "UNIT", "MULT", "PARM", "VER", "MSG", "FILE"}
OPENING = {"FMT", "FMTU", "UNIT", "MULT", "PARM", "VER", "MSG", "MODE"}


def norm(v):
    if v is None:
        return "nan"
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return "nan"
        try:
            return struct.unpack("<f", struct.pack("<f", v))[0]
        except OverflowError:
            return v
    if isinstance(v, (list, tuple)):
        return tuple(norm(x) for x in v)
    return v


def received(paths):
    out = []
    for n, path in enumerate(paths):
        log = DFReader.DFReader_binary(path, zero_time_base=True)
        opening = n > 0
        while True:
            m = log.recv_msg()
            if m is None:
                break
            t = m.get_type()
            opening = opening and t in OPENING
            if opening or t in NOT_DATA:
                continue
            out.append((t, tuple(norm(getattr(m, f)) for f in m.get_fieldnames())))
    return out


def main():
    lines_path, bins = sys.argv[1], sys.argv[2:]
    published = []
    instance_fields = {}
    kinds = collections.Counter()
    bad_instances = 0
    with open(lines_path) as f:
        for text in f:
            line = json.loads(text)
            kinds[line["type"]] += 1
            if line["type"] == "topics":
                for t in line["topics"]:
                    if t.get("instance_field"):
                        instance_fields[t["name"]] = t["instance_field"]
            if line["type"] != "data":
                continue
            fields = line["fields"]
            field = instance_fields.get(line["topic"])
            if field is not None and fields.get(field) != line["multi_id"]:
                bad_instances += 1
            published.append((line["topic"], tuple(norm(v) for v in fields.values())))
    ours = collections.Counter(published)
    theirs = collections.Counter(received(bins))
    missing = theirs - ours
    invented = ours - theirs
    print(json.dumps({
        "published": len(published),
        "received": sum(theirs.values()),
        "topics": len({t for t, _ in published}),
        "missing": sum(missing.values()),
        "invented": sum(invented.values()),
        "missing_examples": [repr(k) for k in list(missing)[:3]],
        "invented_examples": [repr(k) for k in list(invented)[:3]],
        "bad_instances": bad_instances,
        "instanced_topics": sorted(instance_fields),
        "lines": dict(kinds),
    }))


if __name__ == "__main__":
    main()
