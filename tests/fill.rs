//! Filling a received flight's dropouts from the vehicle's SD log, in memory: the session
//! receives the simulated vehicle's stream through loss (a fake clock), each dropout is
//! located in the SD log by the locator's own byte ranges, and the flight with the recovered
//! records in place of its dropouts holds exactly the SD log's records, in its order, each
//! once. (Over the link, with FTP, the daemon and the `fill` command: `tests/fill_e2e.rs`.)

mod common;

use std::time::{Duration, Instant};

use ulog_recv::fill::{BlockCache, FlightScan, Locator, Outcome};
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

/// Runs the locator of every dropout of `flight` against `sd`; the flight with each
/// recovered run in place of its 'O', the bytes read, and the outcomes.
fn fill(ours: &[u8], flight: &FlightScan, sd: &[u8]) -> (Vec<u8>, u64, Vec<Outcome>) {
    let mut out = ours.to_vec();
    let mut read = 0u64;
    let mut outcomes = Vec::new();
    let mut from = 0;
    let mut replaced: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    // What the shell does: blocks fetched once.
    let mut cache = BlockCache::new(sd.len() as u64, 4 << 20);
    for site in &flight.sites {
        let mut locator = Locator::new(flight, site, sd.len() as u64, from);
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
        let filled_count = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Filled { .. }))
            .count();
        // A dropout before the first sample or after the last has nothing to find it by.
        let edges = outcomes.len() - filled_count;
        let unfilled: Vec<_> = outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Unfilled(u) => Some(*u),
                Outcome::Filled { .. } => None,
            })
            .collect();
        assert!(edges <= 2, "{name}: {unfilled:?}");
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
        if edges == 0 {
            let (got, want) = (records(&filled), records(&sd));
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                got == want,
                "{name}: the records differ: {} against {}, first at {first:?}",
                got.len(),
                want.len()
            );
        }
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
