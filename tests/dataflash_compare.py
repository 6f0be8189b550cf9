#!/usr/bin/env python3
"""Holds a received DataFlash log against the vehicle's own card log, both read by
pymavlink's DFReader (the reference reader), and prints what it finds as one JSON object.

    dataflash_compare.py CARD.BIN RECEIVED.bin [RECEIVED2.bin ...]

Several received files are one flight's splits, in order. With `--filled` (a flight filled
from the card, its gaps filled), the window is one, from the first stream's startup to the
last message, and the texts a restart of the stream wrote again are left out. The window compared is the
stretch the stream carried: from the first timed message after the received log's startup
records to its last. Inside it, every card message should be in the received log with the
same fields (`missing` counts those that are not), and every received message should be in
the card log (`invented`). The two backends drop independently when their buffers are full,
and count it: a missing message is explained when the stream's DMS.Dp rose in its second, an
invented one when the card's DSF.Dp did; `unexplained_missing` and `unexplained_invented`
count the rest, which must be none. The startup records the vehicle writes again at each start of
its stream (FMT, FMTU, UNIT, MULT, PARM, VER, and the startup MSGs), our dropout marks and
the splits' replayed preambles are not data and are left out; the window of each stream
begins after its startup (its parameters, the texts written again, its first MODE and ORGN),
and a second more, as the vehicle skips data while it writes them. `dms_dropped` is the sum of
the vehicle's own count of messages it dropped at the source (DMS.Dp, per stream), the one
loss a receiver cannot recover; `flight` what the received log says the vehicle did (armed,
disarmed, its highest CTUN.Alt).
"""
import collections
import json
import math
import sys

from pymavlink import DFReader

DEFINITIONS = {"FMT", "FMTU", "UNIT", "MULT", "PARM", "VER", "FILE"}
# Each backend's own statistics (the card's file backend, the stream's MAVLink backend).
BACKEND_STATS = {"DMS", "DSF"}
MARK = "ulog-recv: dropout of "
STARTUP_TAIL_US = 1_000_000
OPENING = {"FMT", "FMTU", "UNIT", "MULT", "PARM", "VER", "MSG", "MODE"}


def key(m):
    values = []
    for f in m.get_fieldnames():
        v = getattr(m, f)
        if isinstance(v, float) and math.isnan(v):
            v = "nan"
        elif isinstance(v, bytes):
            v = v.hex()
        values.append(v)
    return (m.get_type(), tuple(values))


def messages(path):
    log = DFReader.DFReader_binary(path, zero_time_base=True)
    out = []
    while True:
        m = log.recv_msg()
        if m is None:
            return out
        out.append(m)


def main():
    args = sys.argv[1:]
    filled = "--filled" in args
    args = [a for a in args if a != "--filled"]
    card_path, received_paths = args[0], args[1:]
    card_all = [m for m in messages(card_path) if hasattr(m, "TimeUS")]
    card_keys = set(key(m) for m in card_all) if filled else set()
    card_end = max(m.TimeUS for m in card_all)
    stream_drops = []
    card_texts = collections.defaultdict(set)
    for m in card_all:
        if m.get_type() == "MSG":
            card_texts[str(m.Message)].add(m.TimeUS)
    # The received log as streams: a new one after each dropout mark (a restart of the
    # vehicle's stream, whose startup records come again). Each stream's window begins
    # after its startup (its parameters and the startup texts written again: the vehicle
    # skips data while it writes them) and ends at its last message.
    streams = [[]]
    marks = 0
    mark_ms = []
    dms_dropped = 0
    for n, path in enumerate(received_paths):
        # A split after the first opens with the preamble that replays the log's state (its
        # definitions, parameters, startup texts and mode): the same records again.
        opening = n > 0
        for m in messages(path):
            is_mark = m.get_type() == "MSG" and str(m.Message).startswith(MARK)
            # A split that begins at a gap opens with its mark, right after the preamble.
            opening = opening and m.get_type() in OPENING and not is_mark
            if opening:
                continue
            if not hasattr(m, "TimeUS") and m.get_type() != "MSG":
                continue
            if is_mark:
                marks += 1
                words = str(m.Message)[len(MARK):]
                mark_ms.append(int(words[:-3]) if words.endswith(" ms") else None)
                streams.append([])
                continue
            streams[-1].append(m)
    if filled:
        # Filled from the card: one window over every stream, its gaps filled in between.
        streams = [[m for stream in streams for m in stream]]
    received = []
    windows = []
    for stream in streams:
        rewrites = [
            m
            for m in stream
            if m.get_type() == "MSG"
            and card_texts.get(str(m.Message))
            and m.TimeUS not in card_texts[str(m.Message)]
        ]
        # The startup's parameters: the first run of PARM records (a PARM later on is a
        # parameter changed in flight, in the card log too).
        startup = []
        for m in stream:
            if m.get_type() == "PARM":
                startup.append(m.TimeUS)
            elif startup and m.get_type() not in ("FMT", "FMTU", "UNIT", "MULT"):
                break
        startup += [m.TimeUS for m in stream if m.get_type() == "VER"][:1]
        if filled:
            # What a restart of the stream wrote again (its texts, its mode) is not data.
            stream = [
                m
                for m in stream
                if not (m.get_type() in OPENING and key(m) not in card_keys)
            ]
        else:
            startup += [m.TimeUS for m in rewrites]
        # The vehicle's startup ends with its own startup records (the flight mode, the
        # EKF origin), written to the card too: the data of that moment is skipped.
        if startup:
            base = max(startup)
            for t in ("MODE", "ORGN"):
                startup += [
                    m.TimeUS
                    for m in stream
                    if m.get_type() == t and base <= m.TimeUS <= base + 1_000_000
                ][:1]
        data = [m for m in stream if m.get_type() not in DEFINITIONS]
        if not data:
            continue
        begin = max(startup) if startup else min(m.TimeUS for m in data) - 1
        # The vehicle's startup writer goes on past its last startup record (the mission,
        # fences and rally points), skipping data uncounted meanwhile (seen: 50 ms after
        # it): the window begins a second after the startup.
        begin += STARTUP_TAIL_US
        # The stream's last moment may be cut (its last block lost at a gap, or the stop):
        # the window ends before it, and where the card log ends (the SITL stopped).
        end = min(max(m.TimeUS for m in data), card_end)
        windows.append((begin, end))
        # DMS.Dp counts from the stream's start: the seconds in which it rose.
        last = (begin, 0)
        for m in data:
            if m.get_type() == "DMS":
                if m.Dp > last[1]:
                    stream_drops.append((last[0], m.TimeUS))
                last = (m.TimeUS, m.Dp)
            if begin < m.TimeUS < end and m.get_type() not in BACKEND_STATS:
                received.append(m)
        dms_dropped += last[1]
    in_window = lambda t: any(b < t < e for b, e in windows)
    # DSF.Dp: the card's own drops (its buffer full), since boot.
    card_drops = []
    last = (0, 0)
    for m in card_all:
        if m.get_type() == "DSF":
            if m.Dp > last[1]:
                card_drops.append((last[0], m.TimeUS))
            last = (m.TimeUS, m.Dp)
    explained = lambda t, drops: any(a <= t <= b for a, b in drops)
    card = [
        m
        for m in card_all
        if m.get_type() not in DEFINITIONS | BACKEND_STATS and in_window(m.TimeUS)
    ]
    have = collections.Counter(key(m) for m in received)
    want = collections.Counter(key(m) for m in card)
    missing = want - have
    invented = have - want
    times = {}
    for m in card + received:
        times.setdefault(key(m), m.TimeUS)
    unexplained_missing = sum(
        n for k, n in missing.items() if not explained(times[k], stream_drops)
    )
    unexplained_invented = sum(
        n for k, n in invented.items() if not explained(times[k], card_drops)
    )
    # What the received log says the vehicle did: armed and disarmed (ARM.ArmState), how
    # high it climbed (CTUN.Alt, metres above home).
    flight = {
        "armed": sum(1 for m in received if m.get_type() == "ARM" and m.ArmState == 1),
        "disarmed": sum(1 for m in received if m.get_type() == "ARM" and m.ArmState == 0),
        "max_alt_m": max(
            (m.Alt for m in received if m.get_type() == "CTUN"), default=0.0
        ),
    }
    missing_types = collections.Counter(k[0] for k in missing.elements())
    invented_types = collections.Counter(k[0] for k in invented.elements())
    print(
        json.dumps(
            {
                "card_in_window": sum(want.values()),
                "received": sum(have.values()),
                "missing": sum(missing.values()),
                "invented": sum(invented.values()),
                "missing_types": dict(missing_types.most_common(10)),
                "invented_types": dict(invented_types.most_common(10)),
                "dms_dropped": dms_dropped,
                "unexplained_missing": unexplained_missing,
                "unexplained_invented": unexplained_invented,
                "marks": marks,
                "mark_ms": mark_ms,
                "types": len({k[0] for k in have}),
                "flight": flight,
                "windows": windows,
            }
        )
    )


if __name__ == "__main__":
    main()
