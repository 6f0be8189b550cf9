#!/usr/bin/env python3
"""Reads a fleet's Parquet tables where `--upload-tables` put them, with tools independent of
ours: pyarrow's dataset API straight from the S3 bucket (partitions pruned from the keys),
and pyiceberg registering the files into an Iceberg table (SQL catalog on SQLite) without
rewriting them. Every count is held against pyulog's reading of the flights' logs.

Usage: fleet_bucket.py ENDPOINT REGION BUCKET PREFIX MIRROR WORK LOG.ulg...
(credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; MIRROR: the bucket's
PREFIX/parquet/ downloaded under MIRROR/parquet/ by boto3, for the tools that read local
files; WORK: a scratch folder; a log's flight id is its file stem.)

Checks:
- pyarrow from the bucket: battery_status has pyulog's rows for every flight; filtered on one
  (date, vehicle), pyarrow keeps one file of the table's files and reads that flight's rows;
- the mirror is the bucket's tables byte for byte (boto3 downloads them);
- each `flights` row lists its flight's .ulg objects, which the bucket holds;
- pyiceberg: add_files of every battery_status file into a new table keeps the files where
  they are, unchanged, and a scan reads every row pyulog has, per flight.
Prints {"flights": N, "files": N, "rows": N, "pruned_to": N}; exits 1 otherwise."""
import hashlib
import json
import os
import pathlib
import sys

import boto3
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs
import pyarrow.parquet as pq
from botocore.config import Config
from pyulog import ULog


def pyulog_rows(log, topic):
    return sum(len(d.data["timestamp"]) for d in ULog(str(log), [topic]).data_list)


def mirror(endpoint, region, bucket, prefix, root):
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name=region,
                      config=Config(s3={"addressing_style": "path"}))
    hashes, ulgs = {}, []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        ulgs += [item["Key"] for item in page.get("Contents", []) if item["Key"].endswith(".ulg")]
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/parquet/"):
        for item in page.get("Contents", []):
            key = item["Key"]
            local = pathlib.Path(root, key[len(prefix) + 1:])
            local.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(local))
            hashes[str(local)] = hashlib.sha256(local.read_bytes()).hexdigest()
    return hashes, ulgs


def main():
    endpoint, region, bucket, prefix, root, work = sys.argv[1:7]
    logs = [pathlib.Path(p) for p in sys.argv[7:]]
    errors = []
    hashes, ulgs = mirror(endpoint, region, bucket, prefix, root)
    want = {log.stem: pyulog_rows(log, "battery_status") for log in logs}

    # Each flight's row names its .ulg objects, which are in the bucket.
    flights = ds.dataset(f"{root}/parquet/v1/flights", format="parquet", partitioning="hive")
    for row in flights.to_table(columns=["flight_id", "ulg_keys"]).to_pylist():
        theirs = sorted(k for k in ulgs if f"/{row['flight_id']}/" in k)
        if sorted(row["ulg_keys"]) != theirs or not theirs:
            errors.append(f"flights.ulg_keys of {row['flight_id']}: {row['ulg_keys']}, bucket {theirs}")

    # pyarrow, from the bucket.
    host = endpoint.split("://", 1)[1]
    s3 = pyarrow.fs.S3FileSystem(endpoint_override=host, scheme="http", region=region,
                                 access_key=os.environ["AWS_ACCESS_KEY_ID"],
                                 secret_key=os.environ["AWS_SECRET_ACCESS_KEY"])
    table = ds.dataset(f"{bucket}/{prefix}/parquet/v1/battery_status", filesystem=s3,
                       format="parquet", partitioning="hive")
    files = list(table.get_fragments())
    got = table.to_table(columns=["flight_id"]).column("flight_id").value_counts().to_pylist()
    got = {g["values"]: g["counts"] for g in got}
    if got != want:
        errors.append(f"pyarrow from the bucket: rows per flight {got}, pyulog {want}")
    one = next(f for f in files)
    keys = ds.get_partition_keys(one.partition_expression)
    chosen = (ds.field("date") == keys["date"]) & (ds.field("vehicle") == keys["vehicle"])
    pruned = list(table.get_fragments(filter=chosen))
    rows = table.to_table(filter=chosen, columns=["flight_id"]).column("flight_id")
    flights_there = set(rows.unique().to_pylist())
    if len(pruned) >= len(files) or not flights_there or \
            len(rows) != sum(want[f] for f in flights_there):
        errors.append(f"partition pruning: {len(pruned)} of {len(files)} files read for {keys}, "
                      f"{len(rows)} rows of {flights_there}")

    # pyiceberg: the mirror's files registered as they are.
    from pyiceberg.catalog.sql import SqlCatalog
    os.makedirs(work, exist_ok=True)
    catalog = SqlCatalog("fleet", uri=f"sqlite:///{work}/catalog.db",
                         warehouse=f"file://{work}/warehouse")
    catalog.create_namespace("fleet")
    paths = sorted(str(p) for p in pathlib.Path(root, "parquet/v1/battery_status").rglob("*.parquet"))
    schema = pq.read_schema(paths[0])
    iceberg = catalog.create_table("fleet.battery_status", schema=schema)
    iceberg.add_files(file_paths=[f"file://{p}" for p in paths])
    scanned = iceberg.scan().to_arrow()
    per_flight = {g["values"]: g["counts"] for g in
                  pc.value_counts(scanned.column("flight_id")).to_pylist()}
    if per_flight != want:
        errors.append(f"Iceberg scan: rows per flight {per_flight}, pyulog {want}")
    registered = sorted(task.file.file_path for task in iceberg.scan().plan_files())
    if registered != [f"file://{p}" for p in paths]:
        errors.append(f"Iceberg's data files are not the files given: {registered[:2]}")
    changed = [p for p in paths if hashlib.sha256(pathlib.Path(p).read_bytes()).hexdigest() != hashes[p]]
    if changed:
        errors.append(f"add_files rewrote {changed}")

    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"flights": len(want), "files": len(hashes), "rows": sum(want.values()),
                      "pruned_to": len(pruned)}))


main()
