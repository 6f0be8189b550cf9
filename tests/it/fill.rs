//! Filling a received flight's dropouts from the vehicle's SD log, in memory: the session
//! receives the simulated vehicle's stream through loss (a fake clock), each dropout is
//! located in the SD log by the locator's own byte ranges, and the flight with the recovered
//! records in place of its dropouts holds exactly the SD log's records, in its order, each
//! once. (Over the link, with FTP, the daemon and the `fill` command: `tests/it/fill_e2e.rs`.)

use crate::common::{self, ulog_records};

use std::time::{Duration, Instant};

use ulog_recv::fill::{ColumnSplits, Edge, Filler, Flight, Locator, Outcome, Unfilled};
use ulog_recv::link::{Event, Session, SessionConfig};
use ulog_recv::sim::{Impairment, SimVehicle, VehicleConfig, chunk_log};
use ulog_recv::ulog::message::{FILE_HEADER_LEN, framed, is_postflight, msg_type};

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

/// What a fill of a flight from an SD log came to.
struct Filled {
    /// Each column's splits with their fills in place.
    splits: Vec<Vec<Vec<u8>>>,
    /// Each column's dropouts' outcomes, in the order of its sites.
    outcomes: Vec<Vec<Outcome>>,
    /// Bytes of the SD log read, and the dropouts read where the gap before put them.
    read: u64,
    walked: usize,
}

/// Fills a flight stored in `columns` (each its splits `(name, bytes, preamble bytes)`)
/// from `sd`, as the shell does it: the [`Filler`] asks for byte ranges, they are read.
fn fill_columns(columns: &[Vec<(&str, Vec<u8>, usize)>], sd: &[u8]) -> Filled {
    fill_columns_counted(columns, sd, None)
}

/// [`fill_columns`], the chunks the link lost at the stream's end counted (as the manifest
/// says them).
fn fill_columns_counted(
    columns: &[Vec<(&str, Vec<u8>, usize)>],
    sd: &[u8],
    end_lost_chunks: Option<u64>,
) -> Filled {
    fill_columns_routed(columns, &[], sd, end_lost_chunks)
}

/// [`fill_columns_counted`], the columns after the main one with their topic patterns
/// (`patterns[k - 1]` for column `k`; none when left out).
fn fill_columns_routed(
    columns: &[Vec<(&str, Vec<u8>, usize)>],
    patterns: &[&[String]],
    sd: &[u8],
    end_lost_chunks: Option<u64>,
) -> Filled {
    let splits: Vec<ColumnSplits> = columns
        .iter()
        .enumerate()
        .map(|(k, c)| ColumnSplits {
            splits: c.iter().map(|(n, b, p)| (*n, &b[..], *p)).collect(),
            patterns: k
                .checked_sub(1)
                .and_then(|c| patterns.get(c))
                .copied()
                .unwrap_or_default(),
            windows: None,
        })
        .collect();
    let (mut flight, _) = Flight::new(&splits);
    flight.stream_end.lost_chunks = end_lost_chunks;
    let sites = |c: usize| flight.columns[c].flight.sites.len();
    let filled = (0..columns.len()).map(|c| vec![false; sites(c)]).collect();
    let sd_start = sd
        .get(8..16)
        .map_or(0, |t| u64::from_le_bytes(t.try_into().unwrap()));
    let probe = flight.probe(|_, _| true);
    let mut filler = Filler::new(&flight, filled, probe, sd.len() as u64, sd_start);
    let mut outcomes: Vec<Vec<Option<Outcome>>> =
        (0..columns.len()).map(|c| vec![None; sites(c)]).collect();
    let (mut read, mut walked) = (0u64, 0usize);
    loop {
        while let Some(done) = filler.poll() {
            walked += usize::from(done.walked);
            outcomes[done.column][done.site] = Some(done.outcome);
        }
        let Some((at, n)) = filler.next_read() else {
            break;
        };
        let end = ((at + n) as usize).min(sd.len());
        let data = sd.get(at as usize..end).unwrap_or_default();
        read += data.len() as u64;
        filler.handle_read(at, data);
    }
    // An SD log that is not the flight's: every dropout stays one.
    let why = filler.wrong_log().unwrap_or(Unfilled::NoRecordBefore);
    let outcomes: Vec<Vec<Outcome>> = outcomes
        .into_iter()
        .map(|c| {
            c.into_iter()
                .map(|o| o.unwrap_or(Outcome::Unfilled(why)))
                .collect()
        })
        .collect();
    let mut edited: Vec<Vec<Vec<u8>>> = columns
        .iter()
        .map(|c| c.iter().map(|s| s.1.clone()).collect())
        .collect();
    for (c, column) in outcomes.iter().enumerate() {
        let mut edits: Vec<(usize, usize, usize, &[u8])> = Vec::new();
        for (k, outcome) in column.iter().enumerate() {
            if let Outcome::Filled {
                from, to, records, ..
            } = outcome
            {
                let site = &flight.columns[c].flight.sites[k];
                let split = columns[c].iter().position(|s| s.0 == site.split).unwrap();
                edits.push((split, *from as usize, *to as usize, records));
            }
        }
        edits.sort_by_key(|e| (e.0, e.1));
        for (split, from, to, records) in edits.into_iter().rev() {
            edited[c][split].splice(from..to, records.iter().copied());
        }
    }
    Filled {
        splits: edited,
        outcomes,
        read,
        walked,
    }
}

/// Fills a flight received as one log `ours` from `sd`: the flight with each recovered run
/// in place of its dropouts, the bytes read, and each dropout's outcome.
fn fill(ours: &[u8], sd: &[u8]) -> (Vec<u8>, u64, Vec<Outcome>) {
    let mut filled = fill_columns(&[vec![("log", ours.to_vec(), 0)]], sd);
    (
        filled.splits.remove(0).remove(0),
        filled.read,
        filled.outcomes.remove(0),
    )
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
        let (filled, read, outcomes) = fill(&ours, &sd);
        let lost = ulog_records(&sd).len() - ulog_records(&ours).len();
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
        let sd_records = ulog_records(&sd);
        let got = ulog_records(&filled);
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
        let (filled, read, outcomes) = fill(&ours, &sd);
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
        let lost_bytes: usize = ulog_records(&sd).iter().map(Vec::len).sum::<usize>()
            - ulog_records(&ours).iter().map(Vec::len).sum::<usize>();
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
    let (got, want) = (ulog_records(got), ulog_records(want));
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
    let mut filled = fill_columns(&[splits.to_vec()], sd);
    let mut joined = Vec::new();
    for (k, bytes) in filled.splits[0].iter().enumerate() {
        joined.extend_from_slice(if k == 0 { bytes } else { &bytes[splits[k].2..] });
    }
    (joined, filled.outcomes.remove(0))
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
        let (filled, read, outcomes) = fill(&cut, &sd);
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
        let (filled, _, outcomes) = fill(&cut, &sd);
        let Outcome::Filled {
            recovered, edge, ..
        } = outcomes.last().unwrap()
        else {
            panic!("{name}: the tail: {:?}", outcomes.last())
        };
        assert_eq!(*edge, Some(Edge::Tail));
        assert!(
            *recovered as usize >= ulog_records(&sd).len() - ulog_records(&cut).len(),
            "{name}"
        );
        assert_same_records(&filled, &sd, &name);
        // With a dropout written at the end (the receiver saw the gap), the same.
        let marked = lose(&ours, starts.len() * 7 / 10..starts.len(), true);

        let (filled, _, _) = fill(&marked, &sd);
        assert_same_records(&filled, &sd, &format!("{name} with a dropout at the end"));
    }
}

#[test]
fn a_tail_lost_with_the_link_back_before_the_stop_is_filled_to_the_sd_logs_end() {
    // The link gone at 70 % of the flight and back for the STOP: the stream has a dropout
    // and then PX4's post-flight records, which carry no time. It stopped, but not where
    // its last sample is: the SD log's records after it are all taken, and the flight has
    // one set of post-flight records, the stream's, after them. The SD log as PX4 leaves
    // it: with the same post-flight records (the simulator's), with its own (its logger
    // stopped later, other counts), or with none (still logging).
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.0, 4);
        let (starts, _) = message_starts(&ours);
        let postflight = first_postflight(&ours, &starts);
        let cut = lose(&ours, starts.len() * 7 / 10..postflight, true);
        let flight = ulog_recv::fill::scan::scan([("log", &cut[..], 0)]);
        assert!(flight.stopped, "{name}");
        let tail = flight.sites.last().unwrap();
        assert!(tail.lost_end(), "{name}");
        let stream_postflight: Vec<Vec<u8>> = postflight_records(&ours);
        let sd_postflight = postflight_records(&sd);
        let sd_records_end = sd.len() - sd_postflight.iter().map(Vec::len).sum::<usize>();
        let their_own: Vec<u8> = sd_postflight
            .iter()
            .flat_map(|m| {
                let mut m = m.clone();
                let last = m.len() - 1;
                m[last] ^= 0x20;
                m
            })
            .collect();
        for (what, sd) in [
            ("the same post-flight records", sd.clone()),
            (
                "its own post-flight records",
                [&sd[..sd_records_end], &their_own[..]].concat(),
            ),
            ("no post-flight records", sd[..sd_records_end].to_vec()),
        ] {
            let (filled, read, outcomes) = fill(&cut, &sd);
            let Outcome::Filled {
                recovered, edge, ..
            } = outcomes.last().unwrap()
            else {
                panic!("{name}, {what}: the tail: {:?}", outcomes.last())
            };
            assert_eq!(*edge, Some(Edge::Tail));
            assert!(
                *recovered as usize >= ulog_records(&sd).len() - ulog_records(&cut).len(),
                "{name}, {what}"
            );
            assert_same_records(&filled, &sd, &format!("{name}, {what}"));
            // The stream's post-flight records once, last.
            assert_eq!(
                postflight_records(&filled),
                stream_postflight,
                "{name}, {what}"
            );
            let (filled_starts, _) = message_starts(&filled);
            let last_record = filled_starts
                .iter()
                .rposition(|at| filled[at + 2] == msg_type::DATA)
                .unwrap();
            let first_postflight = filled_starts
                .iter()
                .position(|at| is_postflight(message_at(&filled, *at)))
                .unwrap();
            assert!(last_record < first_postflight, "{name}, {what}");
            eprintln!("{name}, {what}: {recovered} records recovered, {read} bytes read");
        }
    }
}

#[test]
fn a_tail_lost_with_the_link_whose_chunks_were_counted_ends_where_the_stream_stopped() {
    // The link lost the stream's last chunks before the STOP (a lossy link, or out of range
    // for a moment) and came back for the post-flight records; PX4 stopped streaming at 70 %
    // of its log and logged on to its card. The receiver counted the chunks lost: the flight
    // takes them and ends at the stop, not at the SD log's end (which it does, uncounted).
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.0, 4);
        let (starts, _) = message_starts(&ours);
        let postflight = first_postflight(&ours, &starts);
        let (lost_from, stop) = (starts.len() * 6 / 10, starts.len() * 7 / 10);
        let cut = lose(&ours, lost_from..postflight, true);
        let chunks = ((starts[stop] - starts[lost_from]) as u64).div_ceil(249);
        let mut filled = fill_columns_counted(&[vec![("log", cut.clone(), 0)]], &sd, Some(chunks));
        let (filled, outcomes) = (filled.splits.remove(0).remove(0), filled.outcomes.remove(0));
        let Outcome::Filled { edge, .. } = outcomes.last().unwrap() else {
            panic!("{name}: the tail: {:?}", outcomes.last())
        };
        assert_eq!(*edge, Some(Edge::Tail), "{name}");
        let (got, want) = (ulog_records(&filled), ulog_records(&ours[..starts[stop]]));
        assert!(
            got.len() >= want.len() && got[..want.len()] == want[..],
            "{name}: the records up to the stop, in order: {} of {}",
            got.len(),
            want.len()
        );
        // Past the stop only what PX4 logged late, stamped before it, as a clean stop there
        // takes, and the records of the partial chunks around those counted (~750 bytes):
        // nowhere near the SD log's end.
        let rest = ulog_records(&sd).len() - want.len();
        let clean = [&ours[..starts[stop]], &ours[starts[postflight]..]].concat();
        let (clean, _, _) = fill(&clean, &sd);
        let clean_past = ulog_records(&clean).len() - want.len();
        let past = got.len() - want.len();
        assert!(
            past <= clean_past + 32 && past < rest / 10,
            "{name}: {past} records past the stop of the SD log's {rest}, {clean_past} after \
             a clean stop there"
        );
        assert_eq!(
            postflight_records(&filled),
            postflight_records(&ours),
            "{name}"
        );
        let (uncounted, _, _) = fill(&cut, &sd);
        assert_eq!(
            ulog_records(&uncounted).len(),
            ulog_records(&sd).len(),
            "{name}: uncounted, the tail runs to the SD log's end"
        );
        eprintln!(
            "{name}: {chunks} chunks counted, {past} records past the stop of {rest} \
             ({clean_past} after a clean stop)"
        );
    }
}

/// The index among `starts` (`log`'s messages) of the first of its post-flight records,
/// those that end it.
fn first_postflight(log: &[u8], starts: &[usize]) -> usize {
    (0..starts.len())
        .rev()
        .take_while(|i| is_postflight(message_at(log, starts[*i])))
        .last()
        .expect("post-flight records at the log's end")
}

/// The whole message of `log` at `at`.
fn message_at(log: &[u8], at: usize) -> &[u8] {
    let size = u16::from_le_bytes([log[at], log[at + 1]]) as usize;
    &log[at..at + 3 + size]
}

/// The post-flight records of `log`, whole, in order.
fn postflight_records(log: &[u8]) -> Vec<Vec<u8>> {
    framed(&log[FILE_HEADER_LEN..])
        .filter(|m| is_postflight(m))
        .map(|m| m.to_vec())
        .collect()
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
        let (filled, _, outcomes) = fill(&cut, &sd);
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
        let (filled, _, _) = fill(&stopped, &sd);
        let (got, want) = (ulog_records(&filled), ulog_records(&ours[..starts[stop]]));
        assert!(
            got.starts_with(&want),
            "{name}: the stream's records up to its stop: {} of {}",
            got.len(),
            want.len()
        );
        // After them, only samples stamped before the stop that PX4 logged late: a few,
        // never the rest of the SD log.
        let after_stop = ulog_records(&sd).len() - want.len();
        let extra = got.len() - want.len();
        assert!(
            extra * 10 < after_stop,
            "{name}: {extra} records taken past the stop, of {after_stop}"
        );
        // And every sample of the SD log past the stop stamped no later than the stream's
        // end (and dated: a topic without a time has none to go by) is among them (a slow topic PX4 logged late: the tail reads on, or skips to
        // where it is due, until none can still come).
        let end = flight
            .sites
            .iter()
            .find(|s| s.edge() == Some(Edge::Tail))
            .unwrap()
            .last_before_us;
        let stamp = |r: &Vec<u8>| u64::from_le_bytes(r[5..13].try_into().unwrap());
        let sd_records = ulog_records(&sd);
        let late: Vec<&Vec<u8>> = sd_records[want.len()..]
            .iter()
            .filter(|r| r[2] == msg_type::DATA && (1..=end).contains(&stamp(r)))
            .collect();
        for record in &late {
            assert!(
                got[want.len()..].contains(record),
                "{name}: a sample stamped {} (the stream ended at {end}) not taken",
                stamp(record)
            );
        }
        println!(
            "{name}: {} samples past the stop stamped before it",
            late.len()
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
    let (filled, _, outcomes) = fill(&file, &file);
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
    let (_, read, outcomes) = fill(&file, &junk);
    assert!(read <= junk.len() as u64);
    assert!(outcomes.iter().all(|o| matches!(o, Outcome::Unfilled(_))));
}

/// The data records and strings of every column's splits, and of `sd`, as sorted lists (a
/// flight in columns holds the SD log's records, split among them).
fn sorted_records<'a>(logs: impl IntoIterator<Item = &'a [u8]>) -> Vec<Vec<u8>> {
    let mut all: Vec<Vec<u8>> = logs.into_iter().flat_map(ulog_records).collect();
    all.sort();
    all
}

#[test]
fn each_gap_is_read_where_the_gap_before_puts_it_for_little_more_than_what_it_lost() {
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.01, 11);
        let sites = ulog_recv::fill::scan::scan([("log", &ours[..], 0)])
            .sites
            .len();
        let filled = fill_columns(&[vec![("log", ours.clone(), 0)]], &sd);
        assert_same_records(&filled.splits[0][0], &sd, &name);
        let lost: usize = ulog_records(&sd).iter().map(Vec::len).sum::<usize>()
            - ulog_records(&ours).iter().map(Vec::len).sum::<usize>();
        eprintln!(
            "{name}: {sites} dropouts, {} walked, {lost} bytes lost, {} read",
            filled.walked, filled.read
        );
        // The head and the tail are searched for, and the gaps where the two logs differ;
        // the others are walked.
        assert!(
            filled.walked * 10 >= sites * 7,
            "{name}: {} of {sites} walked",
            filled.walked
        );
    }
}

#[test]
fn where_the_sd_log_differs_from_the_stream_the_gap_is_searched_for_and_the_walk_goes_on() {
    // A sync message only the SD log has, in the middle of the flight: the gap after it is
    // not where the stream's bytes put it, so it is searched for by time, and the walk
    // picks up again from where the search found the stream resuming.
    const SYNC: [u8; 11] = [
        8,
        0,
        msg_type::SYNC,
        0x2F,
        0x73,
        0x13,
        0x20,
        0x25,
        0x0C,
        0xBB,
        0x12,
    ];
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.02, 8);
        let plain = fill_columns(&[vec![("log", ours.clone(), 0)]], &sd);
        let (starts, _) = message_starts(&sd);
        let at = starts[starts.len() / 2];
        let differs = [&sd[..at], &SYNC[..], &sd[at..]].concat();
        let filled = fill_columns(&[vec![("log", ours.clone(), 0)]], &differs);
        assert_same_records(&filled.splits[0][0], &sd, &name);
        eprintln!(
            "{name}: {} walked, {} where the SD log differs",
            plain.walked, filled.walked
        );
        assert!(filled.walked < plain.walked, "{name}: the miss went unseen");
        assert!(
            filled.walked + 3 >= plain.walked,
            "{name}: the walk did not go on"
        );
    }
}

#[test]
fn a_flight_stored_in_columns_is_walked_gap_by_gap_for_every_column_at_once() {
    use ulog_recv::store::columns::{ColumnRouter, ColumnSpec};
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.01, 12);
        let mut router =
            ColumnRouter::new(vec![ColumnSpec::parse("imu=sensor_*,vehicle_*").unwrap()]);
        let mut out = vec![bytes::BytesMut::new(); 2];
        router.push(&ours, &mut out);
        let (main, imu) = (out[0].to_vec(), out[1].to_vec());
        let filled = fill_columns(
            &[
                vec![("split_0000.ulg", main.clone(), 0)],
                vec![("imu/split_0000.ulg", imu.clone(), 0)],
            ],
            &sd,
        );
        let one = fill_columns(&[vec![("log", ours.clone(), 0)]], &sd);
        let got = sorted_records(filled.splits.iter().map(|c| &c[0][..]));
        assert!(
            got == sorted_records([&sd[..]]),
            "{name}: the columns' records are not the SD log's"
        );
        let sites: usize = filled.outcomes.iter().map(Vec::len).sum();
        eprintln!(
            "{name}: {sites} dropouts in two columns, {} walked, {} bytes read ({} as one column)",
            filled.walked, filled.read, one.read
        );
        assert!(
            filled.walked * 10 >= sites * 7,
            "{name}: {} of {sites} walked",
            filled.walked
        );
        // Each gap read once for both columns (each column's head and tail searched alone).
        assert!(
            filled.read <= one.read * 3 / 2 + 65_536,
            "{name}: {} against {}",
            filled.read,
            one.read
        );
    }
}

#[test]
fn a_session_whose_column_lost_all_its_splits_is_filled_with_the_sd_logs_definitions() {
    // The disk was full when the session began: the imu column kept no split, and its
    // formats and subscriptions went with them. Without them, no chain of the SD log's
    // records fits (the imu's are most of them). The main column's dropouts are filled all
    // the same, read with the SD log's own definitions, and take none of the imu's records.
    use ulog_recv::store::columns::{ColumnRouter, ColumnSpec};
    let spec = ColumnSpec::parse("imu=sensor_*,vehicle_*").unwrap();
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.01, 12);
        let route = |log: &[u8]| {
            let mut out = vec![bytes::BytesMut::new(); 2];
            ColumnRouter::new(vec![spec.clone()]).push(log, &mut out);
            out[0].to_vec()
        };
        let main = route(&ours);
        let filled = fill_columns_routed(
            &[vec![("split_0000.ulg", main, 0)], vec![]],
            &[&spec.patterns],
            &sd,
            None,
        );
        let outcomes = &filled.outcomes[0];
        assert!(
            !outcomes.is_empty() && outcomes.iter().all(|o| matches!(o, Outcome::Filled { .. })),
            "{name}: {outcomes:?}"
        );
        assert!(
            sorted_records([&filled.splits[0][0][..]]) == sorted_records([&route(&sd)[..]]),
            "{name}: the main column's records are not the SD log's of its topics"
        );
    }
}

#[test]
fn the_fill_reads_in_packets_of_the_ftp_clients_size() {
    assert_eq!(
        ulog_recv::fill::cache::PACKET,
        ulog_recv::link::ftp::wire::MAX_DATA as u64
    );
}

#[test]
fn a_column_whose_last_records_a_dropout_took_still_gets_back_what_the_stop_discarded() {
    // Two columns; the stream stops with its last partial chunk discarded (imu samples in
    // it), and just before, a dropout took the imu column's last records: only the main
    // column's records lie between that dropout and the stop. The imu column's tail begins
    // at its own last record, before the dropout: what the dropout lost is no part of what
    // the stop discarded, and must not hide the imu samples the stop took.
    use ulog_recv::store::columns::{ColumnRouter, ColumnSpec};
    let spec = || ColumnSpec::parse("imu=sensor_*,vehicle_*").unwrap();
    let mut tested = 0;
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.0, 21);
        let (starts, _) = message_starts(&ours);
        // Which data messages go to the imu column: the names of the 'A' messages.
        let imu_ids: std::collections::HashSet<u16> = topic_names(&ours)
            .into_iter()
            .filter(|(_, topic)| topic.starts_with("sensor_") || topic.starts_with("vehicle_"))
            .map(|(id, _)| id)
            .collect();
        let kind = |i: usize| {
            let m = &ours[starts[i]..];
            match m[2] {
                msg_type::DATA if imu_ids.contains(&u16::from_le_bytes([m[3], m[4]])) => 2,
                msg_type::DATA => 1,
                _ => 0,
            }
        };
        let postflight = (0..starts.len())
            .rev()
            .take_while(|i| ours[starts[*i] + 2] == msg_type::INFO_MULTIPLE)
            .last()
            .unwrap();
        // A stop whose discarded chunk (200 bytes) holds imu samples, after a run of main
        // records only, after 300 bytes a dropout took (imu samples among them).
        let found = (starts.len() / 2..starts.len() * 9 / 10)
            .rev()
            .find_map(|stop| {
                let mut first = stop;
                while starts[stop] - starts[first - 1] <= 200 {
                    first -= 1;
                }
                if !(first..stop).any(|i| kind(i) == 2) {
                    return None;
                }
                let mut b = first;
                while kind(b - 1) == 1 {
                    b -= 1;
                }
                if first - b < 2 {
                    return None;
                }
                let mut a = b;
                while starts[b] - starts[a - 1] <= 300 {
                    a -= 1;
                }
                (a..b).any(|i| kind(i) == 2).then_some((a, b, first, stop))
            });
        let Some((a, b, first, stop)) = found else {
            eprintln!("{name}: no such stop in this log");
            continue;
        };
        tested += 1;
        let stopped = lose(&ours, first..postflight, false);
        let cut = lose(&stopped, a..b, true);
        let mut router = ColumnRouter::new(vec![spec()]);
        let mut out = vec![bytes::BytesMut::new(); 2];
        router.push(&cut, &mut out);
        let filled = fill_columns(
            &[
                vec![("split_0000.ulg", out[0].to_vec(), 0)],
                vec![("imu/split_0000.ulg", out[1].to_vec(), 0)],
            ],
            &sd,
        );
        let got = sorted_records(filled.splits.iter().map(|c| &c[0][..]));
        let missing: Vec<_> = ulog_records(&ours[..starts[stop]])
            .into_iter()
            .filter(|r| got.binary_search(r).is_err())
            .collect();
        assert!(
            missing.is_empty(),
            "{name}: {} of the stream's records before its stop missing after the fill",
            missing.len()
        );
    }
    assert!(tested > 0, "no log had such a stop");
}

/// Every 'A' message's id and its topic instance as `name[multi_id]`, of `log`.
fn topic_names(log: &[u8]) -> std::collections::HashMap<u16, String> {
    framed(&log[FILE_HEADER_LEN..])
        .filter(|m| m[2] == msg_type::ADD_LOGGED)
        .map(|m| {
            let name = String::from_utf8_lossy(&m[6..]);
            (
                u16::from_le_bytes([m[4], m[5]]),
                format!("{name}[{}]", m[3]),
            )
        })
        .collect()
}

#[test]
fn wherever_a_stream_stops_its_tail_gets_back_every_sample_stamped_before_it() {
    // The stream stopped at one record after another of each log (its last 200 bytes lost
    // with the partial chunk, its post-flight records right after): PX4's SD log goes on,
    // and the samples of it stamped before the stream's end but written after it (a slow
    // topic's, logged once an interval: PX4's `telemetry_status` up to a second late, its
    // `rtl_status` 1.6 s) must all come back. Whether one is still to come depends on
    // where the stop falls between its writes, so a tail that gives up early misses one
    // at some stops and not at others: every stop is tried here (`TAIL_STOPS` of them).
    //
    // Left out of the count: a topic the stream never had a sample of before its stop. Its
    // first sample, stamped just before the stop, may be written any time after (PX4's
    // `yaw_estimator_status` in sample_log_small.ulg), and the stream tells nothing of it;
    // after a real STOP, PX4's logger writes it in its pass over its topics when it
    // resumes, which the tail reads through. And a stop in the log's first seconds, where
    // PX4's logger writes every topic's first sample in one pass (PX4 streams none of it:
    // it drops what it logs while it sends the header).
    let stamp = |r: &[u8]| u64::from_le_bytes(r[5..13].try_into().unwrap());
    let mut late_checked = 0;
    for (name, file) in edge_logs() {
        let (ours, sd) = receive(&file, 0.0, 5);
        let (starts, _) = message_starts(&ours);
        let postflight = first_postflight(&ours, &starts);
        let topics = topic_names(&sd);
        let sd_records = ulog_records(&sd);
        let start_us = u64::from_le_bytes(ours[8..16].try_into().unwrap());
        let (mut read, mut tails, mut late_here) = (0u64, 0u64, 0usize);
        let points = common::env_number("TAIL_STOPS", 120) as usize;
        for k in 1..points {
            let stop = postflight * k / points;
            let mut first = stop;
            while first > 1 && starts[stop] - starts[first - 1] <= 200 {
                first -= 1;
            }
            let stopped = lose(&ours, first..postflight, false);
            let flight = ulog_recv::fill::scan::scan([("log", &stopped[..], 0)]);
            let Some(site) = flight.sites.iter().find(|s| s.edge() == Some(Edge::Tail)) else {
                continue;
            };
            let end = site.last_before_us;
            if end < start_us + ulog_recv::fill::pace::MAX_LAG_US {
                continue;
            }
            let (filled, bytes, _) = fill(&stopped, &sd);
            read += bytes;
            tails += 1;
            let kept = ulog_records(&stopped);
            let got = ulog_records(&filled);
            // The SD log past the stream's last record, and the topics seen before it.
            let last = kept.iter().rev().find(|r| r[2] == msg_type::DATA).unwrap();
            let at = sd_records.iter().position(|r| r == last).unwrap() + 1;
            let seen: std::collections::HashSet<[u8; 2]> = sd_records[..at]
                .iter()
                .filter(|r| r[2] == msg_type::DATA && stamp(r) > 0)
                .map(|r| [r[3], r[4]])
                .collect();
            let got_after = &got[got.iter().position(|r| r == last).unwrap() + 1..];
            for record in &sd_records[at..] {
                if record[2] != msg_type::DATA
                    || !(1..=end).contains(&stamp(record))
                    || !seen.contains(&[record[3], record[4]])
                {
                    continue;
                }
                late_here += 1;
                let id = u16::from_le_bytes([record[3], record[4]]);
                assert!(
                    got_after.contains(record),
                    "{name}, the stream stopped at {end} µs (record {stop}): the sample of {} \
                     stamped {} µs, written after the stop, not taken",
                    topics.get(&id).map_or("?", |t| t.as_str()),
                    stamp(record)
                );
            }
        }
        println!(
            "{name}: {tails} stops, {late_here} samples written after the stop stamped before \
             it, all taken; {} bytes of the SD log read a stop",
            read / tails.max(1)
        );
        late_checked += late_here;
    }
    assert!(
        late_checked > 100,
        "only {late_checked} late samples to check"
    );
}
