//! The filler on a card and a stream made alike as `AP_Logger` makes them: the same records
//! in the same order, the card with its own `DSF` and its definitions where it wants them,
//! the stream with its own `DMS`, its startup timed at its start, what the link lost marked
//! and what the vehicle dropped at the source counted in `DMS.Dp` only.

use super::stream::BinStream;
use super::*;
use crate::dataflash::Format;
use crate::dataflash::testing::{df, df_format, padded};

struct Types {
    att: Format,
    bat: Format,
    msg: Format,
    parm: Format,
    dms: Format,
    dsf: Format,
}

fn types() -> Types {
    Types {
        att: df_format(35, "ATT", "Qfff", "TimeUS,Roll,Pitch,Yaw"),
        bat: df_format(40, "BAT", "QBf", "TimeUS,Inst,Volt"),
        msg: df_format(91, "MSG", "QZ", "TimeUS,Message"),
        parm: df_format(64, "PARM", "QNf", "TimeUS,Name,Value"),
        dms: df_format(92, "DMS", "QII", "TimeUS,N,Dp"),
        dsf: df_format(93, "DSF", "QI", "TimeUS,Dp"),
    }
}

fn timed(t: u64, rest: &[&[u8]]) -> Vec<u8> {
    let mut b = t.to_le_bytes().to_vec();
    rest.iter().for_each(|r| b.extend_from_slice(r));
    b
}

fn text(f: &Format, t: u64, s: &str) -> Vec<u8> {
    df(f, &timed(t, &[&padded::<64>(s)]))
}

/// What the vehicle wrote from 1 s on, for `seconds`: ATT at 100 Hz, BAT at 10 Hz, a text
/// now and then (each record `(time, bytes)`).
fn flight(ty: &Types, seconds: u64, rng: &mut fastrand::Rng) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    for tick in 0..seconds * 100 {
        let t = 1_000_000 + tick * 10_000 + rng.u64(0..50);
        let mut f = || rng.f32().to_le_bytes();
        let (r, p, y) = (f(), f(), f());
        out.push((t, df(&ty.att, &timed(t, &[&r, &p, &y]))));
        if tick % 10 == 3 {
            let v = (16.0f32 - tick as f32 / 1e4).to_le_bytes();
            out.push((t + 5, df(&ty.bat, &timed(t + 5, &[&[0], &v]))));
        }
        if tick % 700 == 350 {
            out.push((t + 7, text(&ty.msg, t + 7, &format!("event {tick}"))));
        }
    }
    out
}

/// A card and a stream of the same flight, and the card's records the stream lacks.
struct Made {
    card: Vec<u8>,
    /// Each record's log time.
    times: Vec<u64>,
    splits: Vec<(Vec<u8>, u64)>,
    lost: usize,
}

/// `marked`: the runs of records the link lost (start index, count); `dropped`: single
/// records the vehicle dropped at the source.
fn make(seconds: u64, marked: &[(usize, usize)], dropped: &[usize], seed: u64) -> Made {
    let ty = types();
    let mut rng = fastrand::Rng::with_seed(seed);
    let records = flight(&ty, seconds, &mut rng);
    let defs = |with: &[&Format]| -> Vec<u8> { with.iter().flat_map(|f| f.to_bytes()).collect() };
    // The card: its definitions, its startup at 0.5 s, the records, its DSF every 10 s.
    let mut card = defs(&[&ty.att, &ty.bat, &ty.msg, &ty.parm, &ty.dsf]);
    card.extend(df(
        &ty.parm,
        &timed(
            500_000,
            &[&padded::<16>("LOG_BACKEND_TYPE"), &3f32.to_le_bytes()],
        ),
    ));
    for (k, (t, r)) in records.iter().enumerate() {
        card.extend(r);
        if k % 1000 == 999 {
            card.extend(df(&ty.dsf, &timed(t + 1, &[&0u32.to_le_bytes()])));
        }
    }
    // The stream: its definitions and startup at 0.9 s, then the records with its own DMS
    // once a second, less what was lost.
    let mut stream = defs(&[&ty.att, &ty.bat, &ty.msg, &ty.parm, &ty.dms]);
    stream.extend(df(
        &ty.parm,
        &timed(
            900_000,
            &[&padded::<16>("LOG_BACKEND_TYPE"), &3f32.to_le_bytes()],
        ),
    ));
    let mut lost = 0;
    let mut dp = 0u32;
    let mut next_dms = 2_000_000;
    let mut k = 0;
    let mut split_at = None;
    while k < records.len() {
        let (t, r) = &records[k];
        if *t >= next_dms {
            stream.extend(df(
                &ty.dms,
                &timed(*t, &[&1u32.to_le_bytes(), &dp.to_le_bytes()]),
            ));
            next_dms += 1_000_000;
        }
        if split_at.is_none() && k >= records.len() / 2 {
            split_at = Some(stream.len());
        }
        if let Some(&(_, n)) = marked.iter().find(|(at, _)| *at == k) {
            let after = records[k + n].0;
            let ms = (after - records[k - 1].0) / 1000;
            lost += n;
            k += n;
            stream.extend(text(
                &ty.msg,
                after,
                &format!("ulog-recv: dropout of {ms} ms"),
            ));
            continue;
        }
        if dropped.contains(&k) {
            dp += 1;
            lost += 1;
            k += 1;
            continue;
        }
        stream.extend(r);
        k += 1;
    }
    // Two splits, the second opening with the definitions replayed.
    let at = split_at.unwrap();
    let preamble = defs(&[&ty.att, &ty.bat, &ty.msg, &ty.parm, &ty.dms]);
    let mut second = preamble.clone();
    second.extend_from_slice(&stream[at..]);
    Made {
        card,
        times: records.iter().map(|(t, _)| *t).collect(),
        splits: vec![(stream[..at].to_vec(), 0), (second, preamble.len() as u64)],
        lost,
    }
}

/// Runs the filler over `card`: what it handed out, and the card bytes it read.
fn fill(made: &Made) -> (Vec<BinOutcome>, u64, bool) {
    let splits: Vec<(&[u8], u64)> = made.splits.iter().map(|(b, p)| (&b[..], *p)).collect();
    let stream = BinStream::scan(&splits);
    let mut filler = BinFiller::new(&stream, made.card.len() as u64);
    let (mut out, mut read) = (Vec::new(), 0u64);
    while let Some((at, n)) = filler.next_read() {
        let end = (at + n).min(made.card.len() as u64);
        read += end - at;
        filler.handle_read(at, &made.card[at as usize..end as usize]);
        out.extend(std::iter::from_fn(|| filler.poll()));
    }
    out.extend(std::iter::from_fn(|| filler.poll()));
    (out, read, filler.found())
}

/// The splits read with the fills in place, as one run of records.
fn merged(made: &Made, outcomes: &[BinOutcome]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, (bytes, preamble)) in made.splits.iter().enumerate() {
        let mut fills: Vec<&BinGapFill> = outcomes
            .iter()
            .filter_map(|o| match o {
                BinOutcome::Filled(f) if f.split == k => Some(f),
                _ => None,
            })
            .collect();
        fills.sort_by_key(|f| f.from);
        let mut at = if k == 0 { 0 } else { *preamble as usize };
        for f in fills {
            out.extend_from_slice(&bytes[at..f.from as usize]);
            out.extend_from_slice(&f.records);
            at = f.to as usize;
        }
        out.extend_from_slice(&bytes[at..]);
    }
    out
}

/// The data records of a log (no definitions, parameters, either backend's statistics or
/// dropout marks), from log time 1 s on.
fn data(log: &[u8]) -> Vec<Vec<u8>> {
    let mut framer = Framer::new();
    let mut out = Vec::new();
    framer.push(log, |m, f| {
        let skip = matches!(f.name.as_str(), "FMT" | "PARM" | "DMS" | "DSF")
            || crate::dataflash::gaps::dropout_ms(m, f).is_some()
            || leading_time_us(m).is_some_and(|t| t < 1_000_000);
        if !skip {
            out.push(m.to_vec());
        }
    });
    out
}

#[test]
fn a_clean_flight_reads_next_to_nothing_of_the_card() {
    let made = make(30, &[], &[], 1);
    let (out, read, found) = fill(&made);
    assert!(out.is_empty(), "{out:?}");
    // Nothing to fill: not even the probe (nothing asked of the card).
    assert_eq!(read, 0);
    assert!(!found);
    assert_eq!(data(&merged(&made, &out)), data(&made.card));
}

#[test]
fn what_the_link_lost_comes_back_in_place_at_little_more_than_its_own_cost() {
    // Blocks of 200 bytes lost: about nine records each, and the records torn at their ends.
    let marked: Vec<(usize, usize)> = (0..30).map(|k| (200 + k * 100, 8 + k % 5)).collect();
    let made = make(30, &marked, &[], 2);
    let (out, read, found) = fill(&made);
    assert!(found);
    let filled: Vec<&BinGapFill> = out
        .iter()
        .map(|o| match o {
            BinOutcome::Filled(f) => f,
            other => panic!("{other:?}"),
        })
        .collect();
    let froms: Vec<(usize, u64, u64)> = filled.iter().map(|f| (f.split, f.from, f.count)).collect();
    assert_eq!(filled.len(), marked.len(), "{froms:?}");
    assert!(filled.iter().all(|f| f.marked));
    let recovered: u64 = filled.iter().map(|f| f.records.len() as u64).sum();
    assert_eq!(
        filled.iter().map(|f| f.count).sum::<u64>(),
        made.lost as u64
    );
    assert_eq!(data(&merged(&made, &out)), data(&made.card));
    // Finding the flight on the card costs a few KB whatever was lost (a bisection on its
    // times); each gap, about what it recovers.
    let finding = 12 << 10;
    assert!(
        read <= 2 * recovered + finding,
        "read {read} for {recovered}"
    );
    assert!(read < made.card.len() as u64 / 2, "read {read}");
}

#[test]
fn what_the_vehicle_dropped_at_the_source_comes_back_where_its_count_rose() {
    let dropped = [150, 151, 900, 2222, 2223, 2224, 2500];
    let made = make(30, &[(1200, 3)], &dropped, 3);
    let (out, read, _) = fill(&made);
    let unmarked = out
        .iter()
        .filter(|o| matches!(o, BinOutcome::Filled(f) if !f.marked))
        .count();
    assert!(unmarked >= 4, "{out:?}");
    assert_eq!(data(&merged(&made, &out)), data(&made.card));
    // Not each second whose count rose: where the stream's bytes put its samples, a few
    // of them, read alone, tell where the drops are (4 KB to find the flight on the card
    // aside: a bisection on its times).
    let seconds: std::collections::BTreeSet<u64> =
        dropped.iter().map(|&k| made.times[k] / 1_000_000).collect();
    let per_second = made.card.len() as u64 / 30;
    let finding = 4 << 10;
    assert!(
        read < finding + per_second * seconds.len() as u64 / 2,
        "read {read}; a second is {per_second} bytes"
    );
}

#[test]
fn another_flights_card_is_refused_without_reading_it_whole() {
    let made = make(30, &[(500, 2)], &[], 4);
    let other = make(30, &[], &[], 5);
    let splits: Vec<(&[u8], u64)> = made.splits.iter().map(|(b, p)| (&b[..], *p)).collect();
    let stream = BinStream::scan(&splits);
    let mut filler = BinFiller::new(&stream, other.card.len() as u64);
    let mut read = 0;
    while let Some((at, n)) = filler.next_read() {
        let end = (at + n).min(other.card.len() as u64);
        read += end - at;
        filler.handle_read(at, &other.card[at as usize..end as usize]);
    }
    assert!(filler.wrong_log().is_some());
    assert!(filler.poll().is_none());
    assert!((read as f64) < 0.5 * other.card.len() as f64, "{read}");
}
