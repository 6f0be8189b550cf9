#!/usr/bin/env python3
"""Reads an exported dataset (`ulog-recv export FLIGHT --dataset ROOT`) with pyarrow alone and
holds it against what pyulog decodes from the same log (its `.expected.json` dump).

Usage: dataset_read.py ROOT EXPECTED.json

For every dataset (topic, multi_id) pyulog has:
- the topic's table is one file under ROOT/parquet/v1/TOPIC/date=*/vehicle=*/, read through
  pyarrow's dataset API with Hive partitioning (the `date` and `vehicle` keys);
- its rows of that multi_id number pyulog's count, and are sorted by timestamp;
- the first and last rows hold pyulog's first and last samples, field by field, under the
  documented names (`esc[0].esc_rpm` -> `esc_0_esc_rpm`), a `char[N]` as one string cut at
  its first NUL, padding left out;
- every column's sum over the rows is pyulog's (NaN skipped), so every sample is checked;
- types are the documented ones: Int32 for 8/16/32-bit integers, Int64 for uint32, int64 and
  uint64, float32/float64, bool, string; each field's metadata names its ULog field.
Every file says the identity columns and the key/value metadata (topic, format text).
Beside the topics: `log_messages` holds pyulog's logged strings, tagged and not (time, level,
tag, text), sorted by time; `params` its initial parameters and every change with its time.

Prints one JSON object: {"tables": N, "rows": N, "checked_values": N}; exits 1 with the
reasons when anything differs."""
import json
import math
import re
import sys
from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

INT32 = {"int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t"}
INT64 = {"uint32_t", "int64_t", "uint64_t"}
IDENTITY = ["flight_id", "vehicle_uid", "flight_date", "multi_id", "timestamp", "timestamp_utc"]


def column_name(ulog_name):
    name = re.sub(r"[^A-Za-z0-9_]", "_", ulog_name.replace("]", ""))
    return "_" + name if not name or name[0].isdigit() else name


def load_python_json(path):
    text = open(path).read()
    return json.loads(text, parse_constant=lambda c: {"NaN": math.nan, "Infinity": math.inf,
                                                       "-Infinity": -math.inf}[c])


def as_float(v):
    if isinstance(v, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[v]
    return float(v)


def same(ours, theirs, ty):
    if ty == "float":
        a, b = as_float(ours), as_float(theirs)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or abs(a - b) <= 1e-6 * max(abs(a), abs(b))
    if ty == "double":
        a, b = as_float(ours), as_float(theirs)
        return (math.isnan(a) and math.isnan(b)) or a == b
    if ty == "bool":
        return bool(ours) == bool(theirs)
    if ty == "uint64_t" and ours < 0:
        ours += 1 << 64
    return ours == theirs


# Bytes a value takes stored plain, by Arrow type (strings: the writer's guess).
PLAIN_WIDTH = {"int32": 4, "int64": 8, "float": 4, "double": 8, "bool": 1, "date32[day]": 4,
               "timestamp[us, tz=UTC]": 8, "string": 16}


def compression_problems(topic, metadata, schema):
    """The documented rule, chunk by chunk of the first row group: the flight's columns
    uncompressed; any other zstd when its rows times its plain width reach 256 bytes,
    uncompressed below."""
    problems = []
    group = metadata.row_group(0)
    for i in range(group.num_columns):
        chunk = group.column(i)
        name = chunk.path_in_schema
        plain = group.num_rows * PLAIN_WIDTH[str(schema.field(name).type)]
        want = ("UNCOMPRESSED" if name in IDENTITY[:4] or plain < 256 else "ZSTD")
        if chunk.compression != want:
            problems.append(f"{topic}.{name}: {chunk.compression}, not {want} "
                            f"({group.num_rows} rows, {plain} bytes plain)")
    return problems


def main():
    root, expected_path = sys.argv[1], sys.argv[2]
    expected = load_python_json(expected_path)
    errors = []
    tables = {}
    checked = 0
    rows_total = 0
    by_topic = defaultdict(list)
    for d in expected["datasets"]:
        by_topic[d["name"]].append(d)
    for topic, datasets in sorted(by_topic.items()):
        path = f"{root}/parquet/v1/{topic}"
        try:
            dataset = ds.dataset(path, format="parquet", partitioning="hive")
        except (FileNotFoundError, pa.ArrowInvalid) as e:
            errors.append(f"{topic}: no table ({e})")
            continue
        files = dataset.files
        if len(files) != 1:
            errors.append(f"{topic}: {len(files)} files, not one: {files}")
            continue
        table = dataset.to_table()
        schema = pq.read_schema(files[0])
        kv = pq.read_metadata(files[0]).metadata or {}
        meta = {k.decode(): v.decode() for k, v in kv.items()}
        if meta.get("ulog.topic") != topic:
            errors.append(f"{topic}: metadata ulog.topic is {meta.get('ulog.topic')!r}")
        if not meta.get("ulog.format", "").startswith(f"{topic}:"):
            errors.append(f"{topic}: metadata ulog.format does not start with its format")
        errors += compression_problems(topic, pq.read_metadata(files[0]), schema)
        names = schema.names
        if names[:len(IDENTITY)] != IDENTITY:
            errors.append(f"{topic}: columns start {names[:len(IDENTITY)]}, not {IDENTITY}")
        for key in ["date", "vehicle"]:
            if key not in table.column_names:
                errors.append(f"{topic}: no partition key {key} from the path")
        if schema.field("timestamp").type != pa.int64():
            errors.append(f"{topic}: timestamp is {schema.field('timestamp').type}")
        tables[topic] = len(table)
        rows_total += len(table)
        for d in datasets:
            rows = table.filter(pc.equal(table["multi_id"], d["multi_id"]))
            where = f"{topic}/{d['multi_id']}"
            if len(rows) != d["count"]:
                errors.append(f"{where}: {len(rows)} rows, pyulog {d['count']}")
                continue
            ts = rows["timestamp"].to_pylist()
            if ts != sorted(ts):
                errors.append(f"{where}: rows not sorted by timestamp")
            fields = [(n, t) for n, t in d["fields"] if "_padding" not in n]
            # char[N] leaves (`label[0]`, `label[1]`, ...) are one string column.
            chars = defaultdict(list)
            plain = []
            for n, t in fields:
                m = re.fullmatch(r"(.*)\[(\d+)\]", n)
                if t == "char" and m:
                    chars[m.group(1)].append(n)
                elif t == "char":
                    chars[n].append(n)
                else:
                    plain.append((n, t))
            for n, t in plain:
                col = column_name(n)
                if col not in rows.column_names:
                    errors.append(f"{where}: no column {col} for {n}")
                    continue
                field = schema.field(col)
                want = (pa.int32() if t in INT32 else pa.int64() if t in INT64 else
                        pa.float32() if t == "float" else pa.float64() if t == "double" else
                        pa.bool_())
                if field.type != want:
                    errors.append(f"{where}: {col} is {field.type}, want {want} for {t}")
                fmeta = {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}
                if fmeta.get("ulog_name") != n or fmeta.get("ulog_type") != t:
                    errors.append(f"{where}: {col}'s metadata {fmeta} does not name {n} {t}")
                values = rows[col]
                for which, row in (("first", 0), ("last", len(rows) - 1)):
                    ours = values[row].as_py()
                    if not same(ours, d[which][n], t):
                        errors.append(f"{where}: {which} {n} = {ours}, pyulog {d[which][n]}")
                    checked += 1
                if n != "timestamp" and t not in ("bool",):
                    floats = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
                    if t == "uint64_t":
                        floats = [v + 2.0 ** 64 if v < 0 else v for v in floats]
                    nans = sum(1 for v in floats if math.isnan(v))
                    total = math.fsum(v for v in floats if not math.isnan(v))
                    want_sum = as_float(d["sums"][n]["sum"])
                    if nans != d["sums"][n]["nan"]:
                        errors.append(f"{where}: {n} has {nans} NaN, pyulog {d['sums'][n]['nan']}")
                    elif not (total == want_sum or abs(total - want_sum) <=
                              1e-9 * max(1.0, abs(want_sum)) or
                              (math.isinf(want_sum) and total == want_sum)):
                        errors.append(f"{where}: sum of {n} = {total}, pyulog {want_sum}")
                    checked += len(rows)
            for stem, leaves in chars.items():
                col = column_name(stem)
                if col not in rows.column_names:
                    errors.append(f"{where}: no string column {col} for {stem}")
                    continue
                if schema.field(col).type != pa.string():
                    errors.append(f"{where}: {col} is {schema.field(col).type}, not a string")
                for which, row in (("first", 0), ("last", len(rows) - 1)):
                    raw = bytes(d[which][leaf] for leaf in leaves)
                    want = raw.split(b"\0")[0].decode("utf-8", "replace")
                    ours = rows[col][row].as_py()
                    if ours != want:
                        errors.append(f"{where}: {which} {stem} = {ours!r}, pyulog {want!r}")
                    checked += 1
    # The tables beside the topics: the logged strings and the parameters.
    logged = [(t, lvl, None, text) for t, lvl, text in expected["logged_messages"]]
    for tag, messages in expected["logged_messages_tagged"].items():
        logged += [(t, lvl, int(tag), text) for t, lvl, text in messages]
    if logged:
        t = ds.dataset(f"{root}/parquet/v1/log_messages", format="parquet",
                       partitioning="hive").to_table()
        tables["log_messages"] = len(t)
        rows = t.to_pylist()
        # Sorted with an untagged string's tag as -1 (None does not compare with numbers).
        ours = sorted((r["timestamp"], r["level"], -1 if r["tag"] is None else r["tag"],
                       r["message"]) for r in rows)
        theirs = sorted((ts, lvl - ord("0"), -1 if tag is None else tag, text)
                        for ts, lvl, tag, text in logged)
        if ours != theirs:
            diff = [(a, b) for a, b in zip(ours, theirs) if a != b][:3]
            errors.append(f"log_messages: {len(ours)} rows, pyulog {len(theirs)}; first differences {diff}")
        if [r["timestamp"] for r in rows] != sorted(r["timestamp"] for r in rows):
            errors.append("log_messages: not sorted by timestamp")
        checked += len(rows)
    t = ds.dataset(f"{root}/parquet/v1/params", format="parquet", partitioning="hive").to_table()
    tables["params"] = len(t)
    rows = t.to_pylist()
    initial = {r["name"]: r["value"] for r in rows if not r["changed"]}
    if initial != {k: float(v) for k, v in expected["initial_parameters"].items()}:
        errors.append(f"params: {len(initial)} initial, pyulog {len(expected['initial_parameters'])}, or values differ")
    changed = sorted((r["timestamp"], r["name"], r["value"]) for r in rows if r["changed"])
    if changed != sorted((ts, n, float(v)) for ts, n, v in expected["changed_parameters"]):
        errors.append(f"params: changes {changed[:3]}, pyulog {expected['changed_parameters'][:3]}")
    if any(r["timestamp"] is None for r in rows if r["changed"]) or \
            any(r["timestamp"] is not None for r in rows if not r["changed"]):
        errors.append("params: a change without its time, or an initial value with one")
    checked += len(rows)
    missing = set(by_topic) - set(tables)
    if missing:
        errors.append(f"topics without a table: {sorted(missing)}")
    if errors:
        print("\n".join(errors[:60]), file=sys.stderr)
        print(f"{len(errors)} differences", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"tables": len(tables), "rows": rows_total, "checked_values": checked}))


main()
