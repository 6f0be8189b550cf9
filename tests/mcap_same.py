"""Compares two MCAP files as the Python `mcap` package reads them (independent of
ulog-recv): per topic, the messages (log time, publish time, data bytes) in order, and the
metadata records.

usage: mcap_same.py A.mcap B.mcap

Prints one JSON object: samples in each (messages), the topics whose messages differ (with
the counts), and whether the metadata differ.
"""
import json
import sys

from mcap.reader import make_reader


def read(path):
    topics, metadata = {}, {}
    with open(path, "rb") as f:
        reader = make_reader(f, validate_crcs=True)
        for _schema, channel, message in reader.iter_messages(log_time_order=False):
            topics.setdefault(channel.topic, []).append(
                (message.log_time, message.publish_time, bytes(message.data))
            )
    with open(path, "rb") as f:
        for m in make_reader(f).iter_metadata():
            metadata[m.name] = dict(m.metadata)
    return topics, metadata


(a, meta_a), (b, meta_b) = read(sys.argv[1]), read(sys.argv[2])
differ = {
    t: [len(a.get(t, [])), len(b.get(t, []))]
    for t in set(a) | set(b)
    if a.get(t) != b.get(t)
}
print(
    json.dumps(
        {
            "samples": [sum(map(len, a.values())), sum(map(len, b.values()))],
            "differ": differ,
            "metadata_differ": meta_a != meta_b,
        }
    )
)
