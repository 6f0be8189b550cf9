"""A TIDE reader written from the draft RRFC "TIDE log format" (RD 1, 2013-05-11:
../shared/docs/seeds/004_f989cfc8f152ca3d.txt), not from ulog-recv's writer: Python's
standard library only. Reads every block of a TIDE file and prints one JSON object.

From the text:
- a file is blocks of Tag (4 bytes), Size (u64: the data after it) and Data, little-endian; a
  reader continues Size bytes after the size field whatever it expected (extra fields of later
  minor versions, blocks it does not know);
- TIDE first (major 2), META (count u16; key u16-sized, value u32-sized), TYPE (hash u16-sized,
  syntax u8-sized, display name u16-sized, version u16-sized, definition u32-sized, acceptable
  sources u8 count of u16-sized, dependencies u16 count of u16-sized hashes), CHAN (ID u32, name
  u8-sized, source name u32-sized, source config u32-sized, type hashes u8 count of u16-sized),
  INDX (channel u32, count u32, count x {chunk start u64, time u64, offset u32 into the chunk's
  uncompressed data}), CHNK (ID u32, count u32, start u64, end u64, compression u8: 0 none,
  1 gzip, 2 bzip2; count x {channel u32, time u64, size u32, entry});
- a TYPE's definition with its dependencies' is enough to deserialise the channel's data.

What the file's writer documents and this reader takes as given: the syntax is ROS 2's message
description, entries are CDR, the type hash is opaque, a chunk's entries are compressed as one
stream, META's `ulog-recv:time_offset_ns` is what was added to the log's own times.

Prints: version, blocks by tag, compressions, unknown tags, meta, problems (every rule this
reader checks: TYPE hashes the CHAN and TYPE blocks name exist, INDX entries point at an entry
of their channel with their time, chunk start/end bound their entries, chunk counts, CDR that
decodes to the end), and per channel (in the shape of tests/mcap_read.py): topic, schemaName,
count, first and last decoded entry, first and last log time (entry time less the offset, ns
as strings), timeMismatches (entries whose log time is not their `timestamp` field, or `/log`'s
stamp, in ns), trailing (entries with bytes left after decoding); logs: the `/log` entries.

Usage: tide_read.py FILE.tide
"""

import bz2
import gzip
import json
import math
import struct
import sys


class Fields:
    """A block's data, read field by field; reading past its end raises."""

    def __init__(self, data):
        self.data = data
        self.at = 0

    def take(self, n):
        if self.at + n > len(self.data):
            raise ValueError("block ends inside a field")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def u(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def sized(self, fmt):
        return self.take(self.u(fmt))


def read_blocks(path):
    """(tag, offset, data) of every block, each read to its Size."""
    blocks = []
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        if at + 12 > len(data):
            raise ValueError(f"file ends inside a block header at {at}")
        tag = data[at : at + 4]
        (size,) = struct.unpack("<Q", data[at + 4 : at + 12])
        if at + 12 + size > len(data):
            raise ValueError(f"{tag!r} block at {at} runs past the end of the file")
        blocks.append((tag, at, data[at + 12 : at + 12 + size]))
        at += 12 + size
    return blocks


# ROS 2 message description: basic types, their struct codes (and sizes).
BASIC = {
    "bool": "B", "byte": "B", "char": "B", "int8": "b", "uint8": "B",
    "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
    "int64": "q", "uint64": "Q", "float32": "f", "float64": "d",
}


def parse_definition(text):
    """[(type, array: None | N | -1 for unbounded, name)] of a .msg text (constants skipped)."""
    fields = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        ty, rest = line.split(None, 1)
        name = rest.split()[0]
        if "=" in name or "=" in rest.split(None, 1)[0]:
            continue  # a constant
        array = None
        if "[" in ty:
            ty, n = ty[:-1].split("[")
            array = int(n) if n else -1
        fields.append((ty, array, name))
    return fields


class Cdr:
    """Little-endian CDR after a 4-byte encapsulation header; alignment counts from after it."""

    def __init__(self, data):
        if data[:2] not in (b"\x00\x01",):
            raise ValueError(f"not little-endian plain CDR: {data[:4]!r}")
        self.data = data
        self.at = 4

    def align(self, n):
        self.at += (-(self.at - 4)) % n

    def basic(self, code):
        size = struct.calcsize(code)
        self.align(size)
        if self.at + size > len(self.data):
            raise ValueError("entry ends inside a value")
        (v,) = struct.unpack_from("<" + code, self.data, self.at)
        self.at += size
        return v

    def string(self):
        n = self.basic("I")
        raw = self.data[self.at : self.at + n]
        if len(raw) != n:
            raise ValueError("entry ends inside a string")
        self.at += n
        return raw[:-1].decode("utf-8", "replace") if n else ""


def plain(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


class Types:
    """TYPE blocks by hash; a channel's type decoded with its dependencies' definitions."""

    def __init__(self):
        self.by_hash = {}

    def decode(self, hash_, cdr):
        ty = self.by_hash[hash_]
        out = {}
        for tname, array, name in ty["fields"]:
            count = 1 if array is None else array
            if array == -1:
                count = cdr.basic("I")
            values = [self.value(ty, tname, cdr) for _ in range(count)]
            out[name] = values if array is not None else values[0]
        return out

    def value(self, ty, tname, cdr):
        if tname == "string":
            return cdr.string()
        if tname in BASIC:
            v = cdr.basic(BASIC[tname])
            return int(v) if tname == "bool" else plain(v)
        # A nested type: the dependency whose display name it is (pkg/Name or pkg/msg/Name).
        package, short = tname.split("/", 1)
        short = short.split("/")[-1]
        for dep in ty["dependencies"]:
            d = self.by_hash[dep]
            if d["name"] in (f"{package}/msg/{short}", f"{package}/{short}"):
                return self.decode(dep, cdr)
        raise ValueError(f"{ty['name']}: no dependency defines {tname}")


def new_channel(ch, types):
    """A channel's report before its first entry (the shape of tests/mcap_read.py's)."""
    return {
        "topic": ch["name"],
        "schemaName": types.by_hash.get(ch["hashes"][0], {}).get("name", "?"),
        "count": 0,
        "first": None,
        "last": None,
        "firstLogTime": None,
        "lastLogTime": None,
        "timeMismatches": 0,
        "trailing": 0,
    }


def main():
    path = sys.argv[1]
    blocks = read_blocks(path)
    problems = []
    if not blocks or blocks[0][0] != b"TIDE":
        raise SystemExit("not a TIDE file: the first block is not TIDE")
    tide = Fields(blocks[0][2])
    version = (tide.u("B"), tide.u("B"))
    if version[0] != 2:
        raise SystemExit(f"TIDE major version {version[0]}: this reader reads 2")
    tags = {}
    unknown = []
    meta = []
    types = Types()
    channels = {}
    indexes = []  # (channel, chunk start, time, offset)
    chunks = {}  # offset -> (id, count, start, end, compression, entries)
    compressions = set()
    for tag, at, data in blocks:
        name = tag.decode("latin-1")
        tags[name] = tags.get(name, 0) + 1
        b = Fields(data)
        if tag == b"TIDE":
            if at != 0:
                problems.append(f"a second TIDE block at {at}")
        elif tag == b"META":
            for _ in range(b.u("H")):
                key = b.sized("H").decode()
                value = b.sized("I").decode()
                meta.append([key, value])
        elif tag == b"TYPE":
            hash_ = b.sized("H")
            syntax = b.sized("B").decode()
            display = b.sized("H").decode()
            b.sized("H")  # version
            definition = b.sized("I").decode()
            for _ in range(b.u("B")):
                b.sized("H")
            deps = [b.sized("H") for _ in range(b.u("H"))]
            types.by_hash[hash_] = {
                "name": display,
                "syntax": syntax,
                "fields": parse_definition(definition),
                "dependencies": deps,
            }
        elif tag == b"CHAN":
            cid = b.u("I")
            cname = b.sized("B").decode()
            source = b.sized("I").decode()
            config = b.sized("I")
            hashes = [b.sized("H") for _ in range(b.u("B"))]
            channels[cid] = {"name": cname, "source": source, "config": config, "hashes": hashes}
        elif tag == b"INDX":
            cid = b.u("I")
            for _ in range(b.u("I")):
                indexes.append((cid, b.u("Q"), b.u("Q"), b.u("I")))
        elif tag == b"CHNK":
            chunk_id, count, start, end, compression = b.u("I"), b.u("I"), b.u("Q"), b.u("Q"), b.u("B")
            rest = data[b.at :]
            if compression == 0:
                raw = rest
            elif compression == 1:
                raw = gzip.decompress(rest)
            elif compression == 2:
                raw = bz2.decompress(rest)
            else:
                problems.append(f"chunk {chunk_id}: compression {compression}")
                continue
            compressions.add({0: "none", 1: "gzip", 2: "bzip2"}[compression])
            entries = {}
            e = Fields(raw)
            while e.at < len(raw):
                offset = e.at
                cid, time = e.u("I"), e.u("Q")
                entries[offset] = (cid, time, e.sized("I"))
            if len(entries) != count:
                problems.append(f"chunk {chunk_id}: {len(entries)} entries, its count says {count}")
            times = [t for _, t, _ in entries.values()]
            if times and (min(times) < start or max(times) > end):
                problems.append(f"chunk {chunk_id}: entries outside its start and end")
            chunks[at] = (chunk_id, entries)
        else:
            unknown.append(name)

    # Every hash a CHAN or TYPE names is a TYPE block's.
    for cid, ch in channels.items():
        for h in ch["hashes"]:
            if h not in types.by_hash:
                problems.append(f"channel {ch['name']}: no TYPE block has its type hash")
    for t in types.by_hash.values():
        for h in t["dependencies"]:
            if h not in types.by_hash:
                problems.append(f"type {t['name']}: a dependency hash no TYPE block has")

    # Every index entry points at an entry of its channel, with its time; every entry indexed.
    indexed = set()
    for cid, start, time, offset in indexes:
        entry = chunks.get(start, (None, {}))[1].get(offset)
        if entry is None or entry[0] != cid or entry[1] != time:
            problems.append(f"index entry of channel {cid} at chunk {start}+{offset}: no such entry")
        indexed.add((start, offset))
    total = sum(len(c[1]) for c in chunks.values())
    if len(indexed) != total:
        problems.append(f"{total - len(indexed)} entries no INDX block points at")

    offset_ns = int(dict(meta).get("ulog-recv:time_offset_ns", "0"))
    report = {}
    logs = []
    for start in sorted(chunks):
        for offset in sorted(chunks[start][1]):
            cid, time, payload = chunks[start][1][offset]
            ch = channels.get(cid)
            if ch is None:
                problems.append(f"an entry of channel {cid}, which has no CHAN block")
                continue
            hash_ = ch["hashes"][0]
            cdr = Cdr(payload)
            try:
                value = types.decode(hash_, cdr)
            except (ValueError, KeyError, struct.error) as err:
                problems.append(f"{ch['name']}: an entry does not decode: {err}")
                continue
            state = report.setdefault(cid, new_channel(ch, types))
            log_time = time - offset_ns
            state["count"] += 1
            if state["first"] is None:
                state["first"] = value
                state["firstLogTime"] = str(log_time)
            state["last"] = value
            state["lastLogTime"] = str(log_time)
            # CDR pads the end to the alignment of nothing: any byte left is one too many.
            if cdr.at != len(payload):
                state["trailing"] += 1
            if ch["name"] == "/log":
                logs.append(value)
                stamp = value["stamp"]["sec"] * 1_000_000_000 + value["stamp"]["nanosec"]
                if stamp != log_time:
                    state["timeMismatches"] += 1
            elif value["timestamp"] * 1000 != log_time:
                state["timeMismatches"] += 1
    # Channels without entries are listed too.
    for cid, ch in channels.items():
        report.setdefault(cid, new_channel(ch, types))
    if len(problems) > 20:
        problems[20:] = [f"... and {len(problems) - 20} more"]
    json.dump(
        {
            "version": list(version),
            "blocks": tags,
            "unknown": unknown,
            "compressions": sorted(compressions),
            "meta": meta,
            "sources": {ch["name"]: [ch["source"], ch["config"].decode()] for ch in channels.values()},
            "syntaxes": sorted({t["syntax"] for t in types.by_hash.values()}),
            "problems": problems,
            "channels": [report[c] for c in sorted(report)],
            "logs": logs,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
