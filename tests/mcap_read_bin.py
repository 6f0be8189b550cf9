#!/usr/bin/env python3
"""Reads an ArduPilot flight's MCAP export (`ulog-recv export LOG.bin -o F.mcap`) with the
Python `mcap` and `mcap-ros2-support` packages (every CRC checked as it reads) and holds it
against pymavlink's DFReader reading the same .bin.

Usage: mcap_read_bin.py F.mcap LOG.bin

- the profile is ros2; every channel of a type is /NAME for instance 0, /NAME/N for instance
  N (the field FMTU marks `#`), its schema ardupilot_dataflash/msg/NAME;
- each channel has pymavlink's message count for its type and instance, every message's log
  time is its TimeUS in ns, and every field (named by its label in lower case) of every
  message holds pymavlink's value (texts up to their NUL, `a` arrays as lists);
- the schema says each field's unit, as FMTU and UNIT do at the type's first message;
- /log holds every MSG text in order; /diagnostics at least one status when asked.

Prints {"channels": N, "messages": N, "checked_values": N, "findings": N}; exits 1 with the
reasons."""
import collections
import json
import math
import sys

from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from pymavlink import DFReader

DEFINITIONS = {"FMT", "FMTU", "UNIT", "MULT"}


def same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    return a == b


def pymavlink_messages(path):
    r = DFReader.DFReader_binary(path)
    fmtu, by_topic, texts, first_units = {}, collections.defaultdict(list), [], {}
    while True:
        m = r.recv_msg()
        if m is None:
            break
        t = m.get_type()
        if t in DEFINITIONS:
            if t == "FMTU":
                fmtu[m.FmtType] = m.UnitIds
            continue
        if t == "MSG":
            texts.append(m.Message)
            continue
        units = fmtu.get(m.fmt.type, "")
        k = units.find("#")
        instance = int(getattr(m, m.fmt.columns[k])) if k >= 0 else 0
        topic = f"/{t}" if instance == 0 else f"/{t}/{instance}"
        values = {}
        for label, c in zip(m.fmt.columns, m.fmt.format):
            v = getattr(m, label)
            if isinstance(v, bytes):  # FILE's data: text that is not UTF-8 has ? for non-ASCII
                v = v.split(b"\0")[0]
                try:
                    v = v.decode("utf-8")
                except UnicodeDecodeError:
                    v = "".join(chr(b) if b < 128 else "?" for b in v)
            if c == "a":
                v = [int(x) for x in v]
            values[label.lower()] = v
        # The units as they were at the type's first message, when its schema was made.
        first_units.setdefault(t, units)
        by_topic[topic].append((m.TimeUS if hasattr(m, "TimeUS") else None, values, m.fmt))
    units = {chr(k) if isinstance(k, int) else k: v for k, v in r.unit_lookup.items()}
    return by_topic, texts, first_units, units


def main():
    path, log = sys.argv[1:3]
    theirs, texts, fmtu, unit_names = pymavlink_messages(log)  # fmtu: by type name
    errors, checked, messages = [], 0, 0
    ours = collections.defaultdict(list)
    logs, findings, schemas, profile = [], 0, {}, None
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        profile = reader.get_header().profile
        for schema, channel, message, decoded in reader.iter_decoded_messages():
            messages += 1
            if channel.topic == "/log":
                logs.append(decoded.msg)
            elif channel.topic == "/diagnostics":
                findings += 1
            else:
                schemas[channel.topic] = (schema.name, schema.data.decode())
                ours[channel.topic].append((message.log_time, decoded))
    if profile != "ros2":
        errors.append(f"profile {profile}")
    if logs != texts:
        errors.append(f"/log: {len(logs)} texts, pymavlink {len(texts)}")
    if sorted(ours) != sorted(theirs):
        errors.append(f"topics {sorted(set(ours) ^ set(theirs))} differ")
    for topic, want in theirs.items():
        got = ours.get(topic, [])
        if len(got) != len(want):
            errors.append(f"{topic}: {len(got)} messages, pymavlink {len(want)}")
            continue
        name = topic.split("/")[1]
        if schemas[topic][0] != f"ardupilot_dataflash/msg/{name}":
            errors.append(f"{topic}: schema {schemas[topic][0]}")
        fmt = want[0][2]
        units = fmtu.get(name, "")
        for i, label in enumerate(fmt.columns):
            unit = unit_names.get(units[i]) if i < len(units) else None
            if unit and f"# {label} [{unit}]" not in schemas[topic][1]:
                errors.append(f"{topic}.{label}: no unit {unit} in its schema")
        for (log_time, decoded), (time_us, values, _) in zip(got, want):
            if time_us is not None and log_time != time_us * 1000:
                errors.append(f"{topic}: log time {log_time}, TimeUS {time_us}")
                break
            for field, v in values.items():
                mine = getattr(decoded, field)
                if isinstance(v, list):
                    mine = list(mine)
                if not (same(mine, v) if not isinstance(v, list) else mine == v):
                    errors.append(f"{topic}.{field}: {mine!r}, pymavlink {v!r}")
                    break
                checked += 1
    if errors:
        print("\n".join(errors[:40]), file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"channels": len(ours), "messages": messages, "checked_values": checked,
                      "findings": findings}))


main()
