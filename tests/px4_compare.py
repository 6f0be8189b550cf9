"""Holds the log ulog-recv received from a PX4 against PX4's own file log of the same boot,
both read by pyulog: samples are matched by topic, instance and timestamp.

usage: px4_compare.py [--sent SENT.ulg] [--from-start] SD_LOG SPLIT [SPLIT ...]

With --sent (the stream PX4 put on the wire, rebuilt from a capture by px4_sent.py), an SD
sample that PX4 never sent (its stream drops what does not fit under its rate limit, without
a sequence gap) is counted as not_sent, not missing.

Prints one JSON object:
- window: [first, last) data timestamps of ours (us; a sample stamped at the last instant may
  be cut by the STOP, so the window ends before it); with --from-start it opens at our log's
  start instead (its header's timestamp: when PX4 began the stream), so that what the stream
  lost before its first sample counts too (ours may hold samples stamped before it, as PX4's
  file does: a topic's last sample is logged when it is subscribed);
- sd_samples: the SD log's samples in that window; matched: those also in ours;
- missing: SD samples in the window that are neither in ours nor inside one of our dropouts
  (first_missing: the earliest one's timestamp)
  (a gap whose lost samples the dropout accounts for: from the dropout's timestamp to its
  end, with SLACK_US either side for the interleaving of topics, and a sample's own period
  before it, as PX4 logs a sample up to one period after its timestamp);
- explained: SD samples missing from ours inside our dropouts;
- not_sent: SD samples missing from ours that PX4 never sent (with --sent);
- invented: our samples that the SD log has not, outside the SD log's own dropouts;
- value_mismatches: matched samples whose values differ (a timestamp two samples of a topic
  share matches when each of ours is one of the SD log's), with mismatch_examples;
- dropouts: ours, as [timestamp, duration_ms]; sd_gaps_ms: for each of ours, the gap in the
  SD log across it: from the SD log's last sample before the samples ours lost there to its
  first after them (of the topics ours has; at the head, before the window, the span of the
  samples lost);
- postflight: ours has the perf_counter_postflight info.
"""
import bisect
import json
import math
import sys

from pyulog import ULog

SLACK_US = 50_000


def samples(ulogs):
    """(name, multi_id) -> {timestamp: [values tuple, ...]} over one or more ULog objects
    (a topic may publish two samples with one timestamp)."""
    out = {}
    for ulog in ulogs:
        for d in ulog.data_list:
            fields = [f for f in d.data.keys() if f != "timestamp"]
            table = out.setdefault((d.name, d.multi_id), {})
            columns = [d.data[f] for f in fields]
            for i, t in enumerate(d.data["timestamp"]):
                table.setdefault(int(t), []).append(tuple(c[i] for c in columns))
    return out


def same(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        try:
            if float(x) != float(y) and not (math.isnan(float(x)) and math.isnan(float(y))):
                return False
        except (TypeError, ValueError):
            if x != y:
                return False
    return True


def main():
    global real_stdout
    real_stdout, sys.stdout = sys.stdout, sys.stderr
    args = sys.argv[1:]
    sent = None
    from_start = False
    while args[0].startswith("--"):
        if args[0] == "--sent":
            sent = samples([ULog(args[1])])
            args = args[2:]
        elif args[0] == "--from-start":
            from_start = True
            args = args[1:]
        else:
            sys.exit(f"unknown option {args[0]}")
    sd = ULog(args[0])
    ours_logs = [ULog(p) for p in args[1:]]
    # What pyulog printed while parsing (its warnings go to standard output) went to stderr:
    # standard output is the report alone.
    sys.stdout = real_stdout
    theirs = samples([sd])
    ours = samples(ours_logs)
    stamps = [t for table in ours.values() for t in table]
    first, last = min(stamps), max(stamps)
    if from_start:
        first = min(u.start_timestamp for u in ours_logs)
    dropouts = [(d.timestamp, d.duration) for u in ours_logs for d in u.dropouts]
    sd_dropouts = [(d.timestamp, d.duration) for d in sd.dropouts]

    def inside(t, drops, lag=0):
        return any(ts - SLACK_US - lag <= t <= ts + ms * 1000 + SLACK_US for ts, ms in drops)

    sd_samples = matched = missing = explained = invented = mismatches = not_sent = 0
    missing_examples = []
    mismatch_examples = []
    first_missing = None
    for key, table in theirs.items():
        mine = ours.get(key, {})
        stamps = sorted(table)
        for i, (t, values) in enumerate(sorted(table.items())):
            if not first <= t < last:
                continue
            sd_samples += 1
            # PX4's logger writes the newest sample of a topic when the topic's interval
            # has passed: a sample is logged up to one of its periods after its timestamp,
            # among samples stamped that much later.
            lag = min(stamps[i + 1] - t, 1_000_000) if i + 1 < len(stamps) else 0
            if t in mine:
                matched += 1
                # Each of ours stamped t is one of the SD log's stamped t.
                if not all(any(same(v, m) for v in values) for m in mine[t]):
                    mismatches += 1
                    if len(mismatch_examples) < 10:
                        mismatch_examples.append([key[0], key[1], t])
            elif inside(t, dropouts, lag):
                explained += 1
            elif sent is not None and t not in sent.get(key, {}):
                not_sent += 1
            else:
                missing += 1
                first_missing = t if first_missing is None else min(first_missing, t)
                if len(missing_examples) < 10:
                    missing_examples.append([key[0], key[1], t])
    for key, table in ours.items():
        there = theirs.get(key, {})
        for t in table:
            if t not in there and not inside(t, sd_dropouts):
                invented += 1
    # Per dropout of ours: the SD log's gap across it, from the last sample before the
    # samples ours lost there (of the topics ours has) to the first after them. PX4 may have
    # logged nothing for part of that span (a starved process logs nothing, in its file as in
    # its stream): the span between the samples around the loss is the gap, as ours says.
    # Before the window's first sample (the stream's head) there is no sample before the
    # loss, and PX4 logs next to nothing while it sends the header: the span of the samples
    # lost.
    sd_stamps = sorted(t for key, table in theirs.items() if key in ours for t in table)
    sd_gaps = []
    for ts, ms in dropouts:
        lost = [
            t
            for key, table in theirs.items()
            for t in table
            if ts - SLACK_US <= t <= ts + ms * 1000 + SLACK_US and t not in ours.get(key, {})
        ]
        if not lost:
            sd_gaps.append(0)
            continue
        if ts < first:
            sd_gaps.append((max(lost) - min(lost)) / 1000)
            continue
        i = bisect.bisect_left(sd_stamps, min(lost))
        j = bisect.bisect_right(sd_stamps, max(lost))
        before = sd_stamps[i - 1] if i > 0 else min(lost)
        after = sd_stamps[j] if j < len(sd_stamps) else max(lost)
        sd_gaps.append((after - before) / 1000)
    print(
        json.dumps(
            {
                "window": [first, last],
                "sd_samples": sd_samples,
                "matched": matched,
                "missing": missing,
                "missing_examples": missing_examples,
                "first_missing": first_missing,
                "explained": explained,
                "not_sent": not_sent,
                "invented": invented,
                "value_mismatches": mismatches,
                "mismatch_examples": mismatch_examples,
                "dropouts": dropouts,
                "sd_gaps_ms": sd_gaps,
                "postflight": any(
                    "perf_counter_postflight" in u.msg_info_multiple_dict for u in ours_logs
                ),
            }
        )
    )


main()
