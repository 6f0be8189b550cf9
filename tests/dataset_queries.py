#!/usr/bin/env python3
"""Runs the guide's queries (docs/src/tables.md), as printed, on a dataset of several flights, in DuckDB and (with
--spark) in Spark SQL (pyspark, local mode, the installed JDK), and holds their answers
against what this script computes from pyulog reading the same logs.

Usage (in ROOT, as the guide's queries run in the dataset's root):
    dataset_queries.py docs/src/tables.md ROOT [--spark] LOG.ulg...
(ROOT holds `ulog-recv export LOG --dataset ROOT`, or a fleet's uploaded tables, of every LOG;
a log's flight id is its file stem.)

The guide's tables chapter has two ```sql blocks, DuckDB's and Spark's (the one that starts
with "-- Spark SQL"), each of the same three queries:
1. flights with a failsafe: the flights whose vehicle_status says failsafe at any sample, with
   their vehicle and day (from the dataset's paths), duration (the log's header to its
   latest sample) and least battery voltage (voltage_v above 0);
2. min battery voltage per vehicle per day: per (vehicle, date), the least voltage_v above 0
   pyulog reads in those flights' battery_status;
3. a topic joined to flights: per flight dated on or after the query's day, its airframe
   (SYS_AUTOSTART), firmware (ver_sw_release as v1.2.3) and the largest -z pyulog reads in
   vehicle_local_position;
4. flights with GPS interference since a day: per flight dated on or after the query's day
   where Flight Review v2's converter (`ulog-convert batch --diagnostics`, from
   ../shared/vendor/flight-review-rs or $FLIGHT_REVIEW_CONVERT) finds GPS interference, its
   vehicle, day, how many findings and the worst severity;
5. the lowest battery voltage of every flight, PX4's and ArduPilot's alike: its autopilot,
   vehicle, flight and least voltage (pyulog's battery_status.voltage_v above 0; pymavlink's
   BAT.Volt of the first battery above 0).
An ArduPilot log (LOG.bin) is read by pymavlink's DFReader: its failsafe is an ERR of a
failsafe subsystem saying it occurred, its duration its first TimeUS to its last; Flight
Review reads ULog only.
Prints {"queries": N, "rows": N, "engines": [...]}; exits 1 with the differences."""
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import duckdb
import numpy
import pyulog
from pymavlink import DFReader

# ArduPilot's failsafe subsystems in ERR records.
FAILSAFES = {5, 6, 7, 8, 9, 17, 20, 23, 26, 27, 29, 31}


def guide_blocks(chapter):
    """The chapter's DuckDB and Spark SQL statements."""
    text = pathlib.Path(chapter).read_text()
    blocks = re.findall(r"```sql\n(.*?)```", text, re.S)
    statements = [[q.strip() for q in b.split(";") if q.strip()] for b in blocks]
    spark = [s for s in statements if s[0].startswith("-- Spark SQL")]
    duck = [s for s in statements if not s[0].startswith("-- Spark SQL")]
    if len(spark) != 1 or len(duck) != 1:
        sys.exit(f"{chapter} has {len(duck)} DuckDB and {len(spark)} Spark SQL blocks, not one each")
    return duck[0], spark[0]


def identity(root, topic):
    """flight id -> (vehicle, date) of the dataset's files of `topic`."""
    out = {}
    for f in pathlib.Path(root, "parquet/v1", topic).glob("date=*/vehicle=*/*.parquet"):
        out[f.stem] = (f.parent.name.split("=", 1)[1], f.parent.parent.name.split("=", 1)[1])
    return out


def release_text(release):
    major, minor, patch, kind = (release >> 24) & 255, (release >> 16) & 255, (release >> 8) & 255, release & 255
    suffix = "" if kind == 255 else "-dev" if kind < 64 else "-alpha" if kind < 128 else "-beta" if kind < 192 else "-rc"
    return f"v{major}.{minor}.{patch}{suffix}"


def values(ulog, topic, field):
    """Every value of `field` over every instance of `topic`, by pyulog."""
    found = [d.data[field] for d in ulog.data_list if d.name == topic and field in d.data]
    return numpy.concatenate(found) if found else numpy.array([])


def ardupilot_flight(log):
    """(duration s, least battery voltage or None, failsafe) pymavlink reads in a .bin."""
    r = DFReader.DFReader_binary(str(log))
    times, volts, failsafe = [], [], False
    while True:
        m = r.recv_msg()
        if m is None:
            break
        t = m.get_type()
        if hasattr(m, "TimeUS"):
            times.append(m.TimeUS)
        if t == "BAT" and m.Inst == 0 and m.Volt > 0:
            volts.append(float(m.Volt))
        elif t == "ERR" and m.Subsys in FAILSAFES and m.ECode != 0:
            failsafe = True
    return (max(times) - min(times)) / 1e6, min(volts, default=None), failsafe


def flight_review_findings(project, logs):
    """Absolute path of each log -> Flight Review v2's findings in it."""
    converter = os.environ.get("FLIGHT_REVIEW_CONVERT") or str(
        project.parent / "shared/vendor/flight-review-rs/bin/ulog-convert")
    found = {}
    for folder in sorted({log.resolve().parent for log in logs}):
        out = subprocess.run([converter, "batch", str(folder), "--diagnostics", "--format", "json",
                              "-j", "1"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            try:
                report = json.loads(line)
            except ValueError:
                continue
            path = pathlib.Path(report["file"])
            path = (path if path.is_absolute() else pathlib.Path.cwd() / path).resolve()
            found[path] = report.get("diagnostics", [])
    return found


def expected(root, logs, since, project):
    flights = identity(root, "flights")
    failsafe, voltage, heights, gps, batteries = [], {}, [], [], []
    diagnostics = flight_review_findings(project, [log for log in logs if log.suffix == ".ulg"])
    for log in logs:
        if log.stem not in flights:
            continue
        vehicle, date = flights[log.stem]
        if log.suffix == ".bin":
            duration, least, failed = ardupilot_flight(log)
            if failed:
                failsafe.append((vehicle, date, log.stem, duration, least))
            batteries.append(("ardupilot", vehicle, log.stem, least))
            continue
        ulog = pyulog.ULog(str(log))
        volts = [float(v) for v in values(ulog, "battery_status", "voltage_v") if v > 0]
        if any(values(ulog, "vehicle_status", "failsafe")):
            duration = (ulog.last_timestamp - ulog.start_timestamp) / 1e6
            failsafe.append((vehicle, date, log.stem, duration, min(volts, default=None)))
        batteries.append(("px4", vehicle, log.stem, min(volts, default=None)))
        if volts:
            key = (vehicle, date)
            voltage[key] = min(voltage.get(key, math.inf), min(volts))
        z = values(ulog, "vehicle_local_position", "z")
        if len(z) and date >= since:
            params, info = ulog.initial_parameters, ulog.msg_info_dict
            airframe = int(params["SYS_AUTOSTART"]) if "SYS_AUTOSTART" in params else None
            release = release_text(info["ver_sw_release"]) if "ver_sw_release" in info else None
            heights.append((log.stem, airframe, release, float(numpy.max(-z))))
        found = [f for f in diagnostics.get(log.resolve(), []) if f["id"] == "gps_interference"]
        if found and date >= since:
            worst = "critical" if any(f["severity"] == "critical" for f in found) else "warning"
            gps.append((vehicle, date, log.stem, len(found), worst))
    return [sorted(failsafe), sorted((v, d, m) for (v, d), m in voltage.items()), sorted(heights),
            sorted(gps), sorted(batteries, key=lambda b: b[:3])]


def same_rows(got, want):
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            if isinstance(x, float) and isinstance(y, float):
                if not math.isclose(x, y, rel_tol=1e-9):
                    return False
            elif x != y:
                return False
    return True


def as_rows(rows):
    """Rows as tuples, dates as text."""
    return sorted(tuple(str(v) if hasattr(v, "isoformat") and not isinstance(v, float) else v
                        for v in row) for row in rows)


def main():
    args = sys.argv[1:]
    spark_too = "--spark" in args
    args = [a for a in args if a != "--spark"]
    chapter, root, logs = args[0], args[1], [pathlib.Path(p) for p in args[2:]]
    duck_queries, spark_statements = guide_blocks(chapter)
    if len(duck_queries) != 5:
        sys.exit(f"The guide's DuckDB block has {len(duck_queries)} queries, not the five this test knows")
    since = re.search(r"DATE '(\d{4}-\d\d-\d\d)'", duck_queries[2]).group(1)
    if re.search(r"DATE '(\d{4}-\d\d-\d\d)'", duck_queries[3]).group(1) != since:
        sys.exit("The guide's third and fourth queries must start on the same day")
    project = pathlib.Path(chapter).resolve().parents[2]
    want = expected(root, logs, since, project)
    bins = [log for log in logs if log.suffix == ".bin"]
    errors = []
    answers = {}
    con = duckdb.connect()
    answers["duckdb"] = [as_rows(con.execute(q).fetchall()) for q in duck_queries]
    if spark_too:
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]").appName("ulog-recv-test")
                 .config("spark.ui.enabled", "false")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        results = [spark.sql(s).collect() for s in spark_statements]
        # The SET statement's answer aside.
        queries = [r for s, r in zip(spark_statements, results) if not re.search(r"^SET ", s, re.M)]
        answers["spark"] = [as_rows(tuple(row) for row in r) for r in queries]
        spark.stop()
    names = ["flights with a failsafe", "min battery voltage per vehicle per day",
             "highest point per flight joined to flights", "flights with GPS interference",
             "least battery voltage per flight, either autopilot"]
    for engine, got in answers.items():
        for name, g, w in zip(names, got, want):
            if not same_rows(g, w):
                errors.append(f"{engine}, {name}: {g}, pyulog {w}")
    if not want[1] or not want[2]:
        errors.append(f"nothing to compare: {want}")
    if bins and not any(b[0] == "ardupilot" and b[3] for b in want[4]):
        errors.append(f"no ArduPilot flight's battery to compare: {want[4]}")
    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"queries": len(duck_queries), "rows": sum(len(w) for w in want),
                      "failsafe_flights": len(want[0]), "gps_flights": len(want[3]),
                      "ardupilot_flights": sum(1 for b in want[4] if b[0] == "ardupilot"),
                      "engines": sorted(answers)}))


main()
