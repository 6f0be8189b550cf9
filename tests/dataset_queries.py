#!/usr/bin/env python3
"""Runs README's DuckDB queries, as printed, on a dataset of several flights and holds their
answers against what the test computes from pyulog reading the same logs.

Usage (in ROOT, as README's queries run in the dataset's root):
    dataset_queries.py README.md ROOT LOG.ulg...
(ROOT holds `ulog-recv export LOG --dataset ROOT` of every LOG; a log's flight id is its
file stem.)

The queries are the ```sql block of README's Parquet section, run in ROOT:
1. min battery voltage per vehicle per day: per (vehicle, date) of the dataset's paths, the
   least `voltage_filtered_v` pyulog reads in those flights' battery_status (NULL where no
   flight of the group has the field: `union_by_name` fills it);
2. highest point of each flight since a day: per flight dated on or after it, the largest
   -z pyulog reads in vehicle_local_position.
Prints {"queries": N, "rows": N}; exits 1 with the differences otherwise."""
import json
import pathlib
import re
import sys

import duckdb
import numpy
import pyulog


def readme_queries(readme):
    text = pathlib.Path(readme).read_text()
    block = re.search(r"```sql\n(.*?)```", text, re.S).group(1)
    return [q.strip() for q in block.split(";") if q.strip()]


def topic_values(log, topic, field):
    """Every value of `field` over every instance of `topic` in `log`, by pyulog."""
    ulog = pyulog.ULog(str(log), [topic])
    values = [d.data[field] for d in ulog.data_list if field in d.data]
    return numpy.concatenate(values) if values else None


def identity(root, topic):
    """flight id -> (vehicle, date) of the dataset's files of `topic`."""
    out = {}
    for f in pathlib.Path(root, "parquet/v1", topic).glob("date=*/vehicle=*/*.parquet"):
        out[f.stem] = (f.parent.name.split("=", 1)[1], f.parent.parent.name.split("=", 1)[1])
    return out


def main():
    readme, root, logs = sys.argv[1], sys.argv[2], [pathlib.Path(p) for p in sys.argv[3:]]
    queries = readme_queries(readme)
    if len(queries) != 2:
        sys.exit(f"README's sql block has {len(queries)} queries, not the two this test knows")
    errors = []
    con = duckdb.connect()

    # 1. min battery voltage per vehicle per day.
    got = {(v, str(d)): m for v, d, m in con.execute(queries[0]).fetchall()}
    groups = identity(root, "battery_status")
    want = {}
    for log in logs:
        if log.stem not in groups:
            continue
        values = topic_values(log, "battery_status", "voltage_filtered_v")
        key = groups[log.stem]
        low = None if values is None else float(numpy.min(values))
        if key not in want or want[key] is None:
            want[key] = low
        elif low is not None:
            want[key] = min(want[key], low)
    if got != want:
        errors.append(f"min battery voltage per vehicle per day: DuckDB {got}, pyulog {want}")

    # 2. highest point of each flight since a day.
    since = re.search(r"DATE '(\d{4}-\d\d-\d\d)'", queries[1]).group(1)
    got2 = dict(con.execute(queries[1]).fetchall())
    dated = identity(root, "vehicle_local_position")
    want2 = {}
    for log in logs:
        if log.stem in dated and dated[log.stem][1] >= since:
            z = topic_values(log, "vehicle_local_position", "z")
            want2[log.stem] = float(numpy.max(-z))
    if got2 != want2:
        errors.append(f"highest point per flight: DuckDB {got2}, pyulog {want2}")
    if not want or not want2:
        errors.append(f"nothing to compare: {want} {want2}")

    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"queries": len(queries), "rows": len(got) + len(got2)}))


main()
