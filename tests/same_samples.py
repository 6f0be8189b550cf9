"""Compares the samples of two ULog files as pyulog reads them: per topic instance, the rows
(all fields) as a multiset.

usage: same_samples.py A.ulg B.ulg

Prints one JSON object: instances in each, samples in each, the instances whose rows differ
(with the counts), and how many rows of A appear more often than in B (duplicates).
"""
import json
import sys
from collections import Counter

from pyulog import ULog


def rows(path):
    out = {}
    for d in ULog(path).data_list:
        keys = sorted(d.data.keys())
        n = len(d.data["timestamp"])
        out[f"{d.name}/{d.multi_id}"] = Counter(
            tuple(repr(d.data[k][i]) for k in keys) for i in range(n)
        )
    return out


a, b = rows(sys.argv[1]), rows(sys.argv[2])
differ = {
    k: [sum(a.get(k, Counter()).values()), sum(b.get(k, Counter()).values())]
    for k in set(a) | set(b)
    if a.get(k) != b.get(k)
}
extra = sum(((a[k] - b.get(k, Counter())).total() for k in a), 0)
print(
    json.dumps(
        {
            "instances": [len(a), len(b)],
            "samples": [sum(c.total() for c in a.values()), sum(c.total() for c in b.values())],
            "differ": differ,
            "extra_in_a": extra,
        }
    )
)
