//! Filling a received flight's dropouts from the vehicle's SD log, in memory: the session
//! receives the simulated vehicle's stream through loss (a fake clock), each dropout is
//! located in the SD log by the locator's own byte ranges, and the flight with the recovered
//! records in place of its dropouts holds exactly the SD log's records, in its order, each
//! once. (Over the link, with FTP, the daemon and the `fill` command: `tests/fill_e2e.rs`.)

mod common;

use std::time::{Duration, Instant};

use ulog_recv::fill::{BlockCache, Edge, FlightScan, Landmark, Locator, Outcome};
use ulog_recv::link::{Event, Session, SessionConfig};
use ulog_recv::sim::{Impairment, SimVehicle, VehicleConfig, chunk_log};
use ulog_recv::ulog::message::{FILE_HEADER_LEN, framed, msg_type};

/// The log the session received from a vehicle streaming `file` through `loss`, and the
/// vehicle's SD log.
fn receive(file: &[u8], loss: f64, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let now0 = Instant::now();
    let mut now = now0;
    let config = VehicleConfig {
        link_rate: Some(2_800_000),
        impairment: Impairment {
            loss,
            ..Impairment::NONE
        },
        seed,
        ..VehicleConfig::default()
    };
    let mut vehicle = SimVehicle::new(
        chunk_log(file, 0).unwrap(),
        config,
        now,
        std::time::SystemTime::now(),
    );
    let mut session = Session::new(SessionConfig::default(), now);
    let mut log = Vec::new();
    let mut shut = false;
    loop {
        loop {
            let mut moved = false;
            while let Some(f) = vehicle.poll_transmit() {
                session.handle_bytes(&f, now);
                moved = true;
            }
            while let Some(f) = session.poll_transmit() {
                vehicle.handle_bytes(&f, now);
                moved = true;
            }
            while let Some(e) = session.poll_event() {
                if let Event::LogBytes(b) = e {
                    log.extend_from_slice(&b);
                }
            }
            if !moved {
                break;
            }
        }
        if session.is_closed() {
            break;
        }
        if vehicle.finished() && !shut {
            now += Duration::from_millis(500);
            session.handle_timeout(now);
            session.shutdown(now);
            shut = true;
            continue;
        }
        assert!(now - now0 < Duration::from_secs(600));
        let next = [vehicle.poll_timeout(), session.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .unwrap();
        now = now.max(next);
        vehicle.handle_timeout(now);
        session.handle_timeout(now);
    }
    let (_, sd) = vehicle.sd_log().unwrap();
    (log, sd.to_vec())
}

/// The data records and strings after the definitions of a log (whole messages), dropouts
/// and syncs left out.
fn records(log: &[u8]) -> Vec<Vec<u8>> {
    framed(&log[FILE_HEADER_LEN..])
        .filter(|m| {
            matches!(
                m[2],
                msg_type::DATA | msg_type::LOGGING | msg_type::LOGGING_TAGGED
            )
        })
        .map(|m| m.to_vec())
        .collect()
}

/// Runs the locator of every dropout of `flight` against `sd`, each from where the one
/// before predicts it; the flight with each recovered run in place of its 'O', the bytes
/// read, and the outcomes.
fn fill(ours: &[u8], flight: &FlightScan, sd: &[u8]) -> (Vec<u8>, u64, Vec<Outcome>) {
    fill_hinted(ours, flight, sd, |hint| hint)
}

/// [`fill`], with each hint the landmarks give passed through `hint` first.
fn fill_hinted(
    ours: &[u8],
    flight: &FlightScan,
    sd: &[u8],
    hint: impl Fn(Option<u64>) -> Option<u64>,
) -> (Vec<u8>, u64, Vec<Outcome>) {
    let mut out = ours.to_vec();
    let mut landmark: Option<Landmark> = None;
    let mut read = 0u64;
    let mut outcomes = Vec::new();
    let mut from = 0;
    let mut replaced: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    // What the shell does: blocks fetched once.
    let mut cache = BlockCache::new(sd.len() as u64, 4 << 20);
    for site in &flight.sites {
        // What the shell does: the SD log's start from its header.
        let sd_start = sd
            .get(8..16)
            .map_or(0, |t| u64::from_le_bytes(t.try_into().unwrap()));
        let mut locator = Locator::new(flight, site, sd.len() as u64, from).with_sd_start(sd_start);
        if let Some(at) = hint(landmark.as_ref().and_then(|l| l.hint(site))) {
            locator = locator.with_hint(at);
        }
        while let Some((offset, len)) = locator.next_read() {
            while let Some((at, n)) = cache.missing(offset, len) {
                let end = ((at + n) as usize).min(sd.len());
                read += (end - at as usize) as u64;
                cache.insert(at, &sd[at as usize..end]);
            }
            locator.handle_read(offset, &cache.get(offset, len).unwrap());
        }
        if let Some(s) = locator.scan_start() {
            from = s;
        }
        landmark = locator.landmark();
        let outcome = locator.outcome().cloned().expect("an outcome");
        if let Outcome::Filled {
            from, to, records, ..
        } = &outcome
        {
            replaced.push((*from as usize, *to as usize, records.clone()));
        }
        outcomes.push(outcome);
    }
    replaced.sort_by_key(|r| r.0);
    for (from, to, records) in replaced.into_iter().rev() {
        out.splice(from..to, records);
    }
    (out, read, outcomes)
}

#[test]
fn every_dropout_is_filled_with_exactly_the_records_the_stream_lost() {
    let file = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/synthetic.ulg"
    ))
    .unwrap();
    for seed in 1..=4 {
        let (ours, sd) = receive(&file, 0.05, seed);
        let flight = ulog_recv::fill::scan::scan([("log", &ours[..], 0)]);
        assert!(
            flight.sites.len() >= 3,
            "seed {seed}: {} dropouts",
            flight.sites.len()
        );
        let (filled, read, outcomes) = fill(&ours, &flight, &sd);
        let lost = records(&sd).len() - records(&ours).len();
        for (site, outcome) in flight.sites.iter().zip(&outcomes) {
            // The synthetic log has dropouts of its own: a fill that holds one is partial.
            let Outcome::Filled {
                records, complete, ..
            } = outcome
            else {
                panic!("seed {seed}: dropout at {}: {outcome:?}", site.offset)
            };
            let has_dropout = framed(records).any(|m| m[2] == msg_type::DROPOUT);
            assert_eq!(*complete, !has_dropout, "seed {seed}");
        }
        let sd_records = records(&sd);
        let got = records(&filled);
        assert_eq!(got.len(), sd_records.len(), "seed {seed}: {lost} lost");
        assert!(
            got == sd_records,
            "seed {seed}: the records differ from the SD log's"
        );
        // Each 'O' left is one of the SD log's own.
        let dropouts = |log: &[u8]| {
            framed(&log[FILE_HEADER_LEN..])
                .filter(|m| m[2] == msg_type::DROPOUT)
                .count()
        };
        assert_eq!(dropouts(&filled), dropouts(&sd), "seed {seed}");
        eprintln!(
            "seed {seed}: {} dropouts, {lost} records lost and recovered, {read} bytes read of {}",
            flight.sites.len(),
            sd.len()
        );
    }
}

#[test]
fn on_real_px4_logs_the_fill_reads_a_little_around_each_dropout_not_the_file() {
    let Some(logs) = common::shared_logs() else {
        return;
    };
    for log in logs {
        let file = std::fs::read(&log).unwrap();
        let (ours, sd) = receive(&file, 0.002, 7);
        let flight = ulog_recv::fill::scan::scan([("log", &ours[..], 0)]);
        let (filled, read, outcomes) = fill(&ours, &flight, &sd);
        let name = log.file_name().unwrap().to_string_lossy();
        // The head and the tail too: every dropout is found again.
        let unfilled: Vec<_> = outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Unfilled(u) => Some(*u),
                Outcome::Filled { .. } => None,
            })
            .collect();
        assert!(unfilled.is_empty(), "{name}: {unfilled:?}");
        let lost_bytes: usize = records(&sd).iter().map(Vec::len).sum::<usize>()
            - records(&ours).iter().map(Vec::len).sum::<usize>();
        let bound = 2 * lost_bytes as u64 + 65_536 * flight.sites.len() as u64;
        eprintln!(
            "{name}: {} dropouts, {lost_bytes} bytes of records lost, {read} bytes read of {} \
             (bound {bound})",
            flight.sites.len(),
            sd.len()
        );
        assert!(read <= bound, "{name}: read {read}, bound {bound}");
        assert_same_records(&filled, &sd, &name);
    }
}

/// The data records and strings of `got` are those of `want`, in order.
fn assert_same_records(got: &[u8], want: &[u8], what: &str) {
    let (got, want) = (records(got), records(want));
    let first = got.iter().zip(&want).position(|(a, b)| a != b);
    assert!(
        got == want,
        "{what}: the records differ: {} against {}, first at {first:?}",
        got.len(),
        want.len()
    );
}

/// Where each message after the definitions starts in `log` (its data section), and where
/// the messages end.
fn message_starts(log: &[u8]) -> (Vec<usize>, usize) {
    let mut at = FILE_HEADER_LEN;
    let mut starts = Vec::new();
    let mut data = false;
    for m in framed(&log[FILE_HEADER_LEN..]) {
        data |= matches!(m[2], msg_type::DATA | msg_type::LOGGING | msg_type::DROPOUT);
        if data {
            starts.push(at);
        }
        at += m.len();
    }
    (starts, at)
}

/// `log` as a receiver has it when the link lost its data messages `range` (indexes into
/// the data section's messages): a dropout in their place, as the session writes one.
fn lose(log: &[u8], range: std::ops::Range<usize>, dropout: bool) -> Vec<u8> {
    let (starts, end) = message_starts(log);
    let from = starts[range.start];
    let to = starts.get(range.end).copied().unwrap_or(end);
    let mut out = log[..from].to_vec();
    if dropout {
        out.extend_from_slice(&[2, 0, msg_type::DROPOUT, 100, 0]);
    }
    out.extend_from_slice(&log[to..]);
    out
}

/// The logs the edge tests stream: the synthetic one and every real one beside the project.
fn edge_logs() -> Vec<(String, Vec<u8>)> {
    let synthetic = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/synthetic.ulg");
    let mut logs = vec![std::path::PathBuf::from(synthetic)];
    logs.extend(common::shared_logs().unwrap_or_default());
    logs.iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(p).unwrap())
        })
        .collect()
}

/// Fills a flight stored in `splits` (`(name, bytes, preamble bytes)`) from `sd`; the
/// splits with their fills, joined (each after the first without its preamble), and the
/// outcomes.
fn fill_splits(splits: &[(&str, Vec<u8>, usize)], sd: &[u8]) -> (Vec<u8>, Vec<Outcome>) {
    let flight = ulog_recv::fill::scan::scan(
        splits
            .iter()
            .enumerate()
            .map(|(k, (name, bytes, skip))| (*name, &bytes[..], if k == 0 { 0 } else { *skip })),
    );
    let mut edited: Vec<Vec<u8>> = splits.iter().map(|s| s.1.clone()).collect();
    let mut edits: Vec<(usize, usize, usize, Vec<u8>)> = Vec::new();
    let mut outcomes = Vec::new();
    let mut cache = BlockCache::new(sd.len() as u64, 4 << 20);
    for site in &flight.sites {
        let mut locator = Locator::new(&flight, site, sd.len() as u64, 0);
        while let Some((offset, len)) = locator.next_read() {
            while let Some((at, n)) = cache.missing(offset, len) {
                let end = ((at + n) as usize).min(sd.len());
                cache.insert(at, &sd[at as usize..end]);
            }
            locator.handle_read(offset, &cache.get(offset, len).unwrap());
        }
        let outcome = locator.outcome().cloned().expect("an outcome");
        if let Outcome::Filled {
            from, to, records, ..
        } = &outcome
        {
            let k = splits.iter().position(|s| s.0 == site.split).unwrap();
            edits.push((k, *from as usize, *to as usize, records.clone()));
        }
        outcomes.push(outcome);
    }
    edits.sort_by_key(|e| (e.0, e.1));
    for (k, from, to, records) in edits.into_iter().rev() {
        edited[k].splice(from..to, records);
    }
    let mut joined = Vec::new();
    for (k, bytes) in edited.iter().enumerate() {
        joined.extend_from_slice(if k == 0 { bytes } else { &bytes[splits[k].2..] });
    }
    (joined, outcomes)
}

#[test]
fn a_dropout_at_a_splits_last_or_first_message_is_filled_by_the_next_or_previous_splits_anchors() {
    // A split closes (or opens) right at a gap: its anchors on one side are in the split
    // beside it, whose messages stay where they are.
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.0, 6);
        let (starts, _) = message_starts(&ours);
        let m = starts.len() * 2 / 5;
        let cut = lose(&ours, m..m + 4, true);
        let (cut_starts, _) = message_starts(&cut);
        let preamble = cut[..cut_starts[0]].to_vec();
        // The 'O' at cut_starts[m]: the last message of the first split, then the first of
        // the second.
        for (what, at) in [("last", cut_starts[m + 1]), ("first", cut_starts[m])] {
            let second = [&preamble[..], &cut[at..]].concat();
            let splits = [
                ("split_0000.ulg", cut[..at].to_vec(), 0),
                ("split_0001.ulg", second, preamble.len()),
            ];
            let (joined, outcomes) = fill_splits(&splits, &sd);
            let unfilled: Vec<_> = outcomes
                .iter()
                .filter(|o| matches!(o, Outcome::Unfilled(_)))
                .collect();
            assert!(
                unfilled.is_empty(),
                "{name}, the dropout the {what} message: {unfilled:?}"
            );
            assert_same_records(
                &joined,
                &sd,
                &format!("{name}, the dropout the {what} message"),
            );
        }
    }
}

#[test]
fn the_head_before_the_first_sample_is_filled_from_the_streams_start() {
    // PX4 drops ~1.5 s right after every acked header: a dropout before any sample. Real
    // logs carry samples stamped before their header (a topic's last sample is logged when
    // it is subscribed): the head is found by records, not by comparing times.
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.0, 3);
        let (starts, _) = message_starts(&ours);
        let cut = lose(&ours, 0..starts.len() / 10, true);
        let flight = ulog_recv::fill::scan::scan([("log", &cut[..], 0)]);
        let head = &flight.sites[0];
        assert_eq!(head.edge(), Some(Edge::Head), "{name}");
        assert!(head.starts_flight, "{name}");
        let (filled, read, outcomes) = fill(&cut, &flight, &sd);
        let Outcome::Filled {
            recovered, edge, ..
        } = &outcomes[0]
        else {
            panic!("{name}: the head: {:?}", outcomes[0])
        };
        assert_eq!(*edge, Some(Edge::Head));
        eprintln!("{name}: head: {recovered} records recovered, {read} bytes read");
        assert_same_records(&filled, &sd, &name);
    }
}

#[test]
fn a_tail_the_link_lost_is_filled_to_the_sd_logs_end() {
    // The link gone before the end, STOP and post-flight data included: where the stream
    // ended is not known, so the SD log's records after the last anchor are all taken.
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.0, 4);
        let (starts, _) = message_starts(&ours);
        let cut = lose(&ours, starts.len() * 7 / 10..starts.len(), false);
        let flight = ulog_recv::fill::scan::scan([("log", &cut[..], 0)]);
        assert!(!flight.stopped, "{name}");
        let tail = flight.sites.last().unwrap();
        assert_eq!(tail.edge(), Some(Edge::Tail), "{name}");
        assert!(tail.ends_flight, "{name}");
        let (filled, _, outcomes) = fill(&cut, &flight, &sd);
        let Outcome::Filled {
            recovered, edge, ..
        } = outcomes.last().unwrap()
        else {
            panic!("{name}: the tail: {:?}", outcomes.last())
        };
        assert_eq!(*edge, Some(Edge::Tail));
        assert!(
            *recovered as usize >= records(&sd).len() - records(&cut).len(),
            "{name}"
        );
        assert_same_records(&filled, &sd, &name);
        // With a dropout written at the end (the receiver saw the gap), the same.
        let marked = lose(&ours, starts.len() * 7 / 10..starts.len(), true);
        let flight = ulog_recv::fill::scan::scan([("log", &marked[..], 0)]);
        let (filled, _, _) = fill(&marked, &flight, &sd);
        assert_same_records(&filled, &sd, &format!("{name} with a dropout at the end"));
    }
}

#[test]
fn a_clean_stop_that_lost_its_last_partial_chunk_gets_it_back_and_no_more() {
    // PX4 discards the partial chunk pending at a STOP: the stream's last records, fewer
    // than a chunk's bytes, are missing before its post-flight data.
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.0, 5);
        let flight = ulog_recv::fill::scan::scan([("log", &ours[..], 0)]);
        assert!(flight.stopped, "{name}: the stream ended with a STOP");
        // The last data records, up to 200 bytes of them, lost.
        let (starts, _) = message_starts(&ours);
        let last_record = (0..starts.len())
            .rev()
            .find(|i| ours[starts[*i] + 2] == msg_type::DATA)
            .unwrap();
        let mut first = last_record;
        while first > 0
            && ours[starts[first - 1] + 2] == msg_type::DATA
            && starts[last_record + 1] - starts[first - 1] <= 200
        {
            first -= 1;
        }
        let cut = lose(&ours, first..last_record + 1, false);
        let flight = ulog_recv::fill::scan::scan([("log", &cut[..], 0)]);
        let (filled, _, outcomes) = fill(&cut, &flight, &sd);
        let Outcome::Filled { recovered, .. } = outcomes.last().unwrap() else {
            panic!("{name}: {:?}", outcomes.last())
        };
        assert_eq!(*recovered as usize, last_record + 1 - first, "{name}");
        assert_same_records(&filled, &sd, &name);
        // PX4's SD log goes on after the stream stopped: here the stream stopped at 70 %
        // of the flight (its post-flight data right after, its last 200 bytes of records
        // lost): those come back.
        let stop = starts.len() * 7 / 10;
        let postflight = (0..starts.len())
            .rev()
            .take_while(|i| ours[starts[*i] + 2] == msg_type::INFO_MULTIPLE)
            .last()
            .unwrap();
        let mut first = stop;
        while starts[stop] - starts[first - 1] <= 200 {
            first -= 1;
        }
        let stopped = lose(&ours, first..postflight, false);
        let flight = ulog_recv::fill::scan::scan([("log", &stopped[..], 0)]);
        assert!(flight.stopped);
        let (filled, _, _) = fill(&stopped, &flight, &sd);
        let (got, want) = (records(&filled), records(&ours[..starts[stop]]));
        assert!(
            got.starts_with(&want),
            "{name}: the stream's records up to its stop: {} of {}",
            got.len(),
            want.len()
        );
        // After them, only samples stamped before the stop that PX4 logged late: a few,
        // never the rest of the SD log.
        let after_stop = records(&sd).len() - want.len();
        let extra = got.len() - want.len();
        assert!(
            extra * 10 < after_stop,
            "{name}: {extra} records taken past the stop, of {after_stop}"
        );
    }
}

#[test]
fn a_dropout_the_sd_log_has_too_stays_and_nothing_is_added() {
    // The synthetic log has a dropout of its own: against itself as the SD log, the gap is
    // found, nothing was lost in between, and the flight reads byte for byte as before.
    let file = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/synthetic.ulg"
    ))
    .unwrap();
    let flight = ulog_recv::fill::scan::scan([("split_0000.ulg", &file[..], 0)]);
    assert!(!flight.sites.is_empty());
    let (filled, _, outcomes) = fill(&file, &flight, &file);
    for o in &outcomes {
        assert!(
            matches!(
                o,
                Outcome::Filled {
                    recovered: 0,
                    complete: false,
                    edge: None,
                    ..
                } | Outcome::Filled {
                    recovered: 0,
                    complete: true,
                    edge: Some(Edge::Tail),
                    ..
                }
            ),
            "{o:?}"
        );
    }
    assert!(filled == file, "the flight changed");
}

#[test]
fn an_empty_or_junk_sd_log_ends_the_search_at_once() {
    // The fuzzer's find: an empty file asked for a read of nothing, forever.
    let file = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/testdata/synthetic.ulg"
    ))
    .unwrap();
    let flight = ulog_recv::fill::scan::scan([("split_0000.ulg", &file[..], 0)]);
    let site = &flight.sites[0];
    let empty = Locator::new(&flight, site, 0, 0);
    assert_eq!(empty.next_read(), None);
    assert!(matches!(empty.outcome(), Some(Outcome::Unfilled(_))));
    let junk: Vec<u8> = (0..50_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let (_, read, outcomes) = fill(&file, &flight, &junk);
    assert!(read <= junk.len() as u64);
    assert!(outcomes.iter().all(|o| matches!(o, Outcome::Unfilled(_))));
}

#[test]
fn each_dropout_read_where_the_one_before_says_costs_a_few_packets_and_a_wrong_hint_nothing() {
    let Some(logs) = common::shared_logs() else {
        return;
    };
    for log in logs {
        let file = std::fs::read(&log).unwrap();
        let name = log.file_name().unwrap().to_string_lossy().into_owned();
        let (ours, sd) = receive(&file, 0.01, 11);
        let flight = ulog_recv::fill::scan::scan([("log", &ours[..], 0)]);
        let (hinted, read_hinted, _) = fill(&ours, &flight, &sd);
        let (unhinted, read_unhinted, _) = fill_hinted(&ours, &flight, &sd, |_| None);
        // A hint one byte off (or past the end) is refused by the anchor's bytes.
        let (off, read_off, _) = fill_hinted(&ours, &flight, &sd, |h| h.map(|h| h + 1));
        let (past, _, _) = fill_hinted(&ours, &flight, &sd, |h| h.map(|_| u64::MAX / 2));
        for (got, how) in [
            (&hinted, "hinted"),
            (&off, "off by one"),
            (&past, "past the end"),
        ] {
            assert_same_records(got, &sd, &format!("{name}, {how}"));
        }
        assert_eq!(hinted, unhinted, "{name}");
        let lost: usize = records(&sd).iter().map(Vec::len).sum::<usize>()
            - records(&ours).iter().map(Vec::len).sum::<usize>();
        eprintln!(
            "{name}: {} dropouts, {lost} bytes lost; read {read_hinted} hinted, {read_unhinted} \
             without hints, {read_off} with hints one byte off",
            flight.sites.len()
        );
        assert!(
            read_hinted * 2 < read_unhinted,
            "{name}: {read_hinted} hinted, {read_unhinted} not"
        );
    }
}
