//! The fill of an ArduPilot flight from the vehicle's card, its engine
//! ([`ulog_recv::fill::dataflash`]) on ArduPilot's own log: the log streamed by the
//! simulated ArduPilot through a lossy link (the vehicle's buffer overruns and it drops
//! messages at the source) and an outage longer than its patience (it drops the daemon and
//! starts its stream again), then the splits filled from the log itself as the card. The
//! splits read with the fills in place hold every card message of the streamed window,
//! read by pymavlink on both sides, and the fill read a part of the card only.

use crate::common;

use common::ardupilot::{ardupilot_logs, compare_filled, replay};
use ulog_recv::fill::dataflash::stream::BinStream;
use ulog_recv::fill::dataflash::{BinFiller, BinOutcome};

#[test]
fn a_flight_that_lost_messages_at_the_source_and_in_an_outage_is_completed_from_the_card() {
    let Some(logs) = ardupilot_logs() else { return };
    let Some(py) = common::venv_python() else {
        return;
    };
    let log = logs
        .iter()
        .find(|l| l.ends_with("sitl_copter_hover.bin"))
        .expect("the hover log");
    let impairments = [
        "--loss",
        "0.15",
        "--outage-every-ms",
        "17000",
        "--outage-ms",
        "11000",
    ];
    let (splits, counters) = replay(log, "fill-card", &impairments);
    let before = compare_filled(&py, log, &splits);
    eprintln!("streamed: {}", brief(&before));
    assert!(before["dms_dropped"].as_u64().unwrap() > 0, "{counters}");
    assert!(before["marks"].as_u64().unwrap() > 0, "{counters}");
    assert!(before["missing"].as_u64().unwrap() > 1000);

    let session = splits[0].parent().unwrap();
    let manifest = ulog_recv::store::files::read_manifest(session).unwrap();
    let bytes: Vec<Vec<u8>> = splits.iter().map(|s| std::fs::read(s).unwrap()).collect();
    let scanned: Vec<(&[u8], u64)> = bytes
        .iter()
        .zip(&manifest.splits)
        .map(|(b, s)| (&b[..], s.summary.preamble_bytes))
        .collect();
    let stream = BinStream::scan(&scanned);
    let card = std::fs::read(log).unwrap();
    let mut filler = BinFiller::new(&stream, card.len() as u64);
    let (mut outcomes, mut read) = (Vec::new(), 0u64);
    while let Some((at, n)) = filler.next_read() {
        let end = (at + n).min(card.len() as u64);
        read += end - at;
        filler.handle_read(at, &card[at as usize..end as usize]);
        outcomes.extend(std::iter::from_fn(|| filler.poll()));
    }
    outcomes.extend(std::iter::from_fn(|| filler.poll()));
    let unfilled: Vec<_> = (outcomes.iter())
        .filter(|o| matches!(o, BinOutcome::Unfilled(_)))
        .collect();
    assert!(unfilled.is_empty(), "{unfilled:?}");
    let recovered: u64 = (outcomes.iter())
        .map(|o| match o {
            BinOutcome::Filled(f) => f.records.len() as u64,
            BinOutcome::Unfilled(_) => 0,
        })
        .sum();

    // The splits with the fills in place, as one log.
    let mut merged = Vec::new();
    for (k, b) in bytes.iter().enumerate() {
        let mut fills: Vec<_> = (outcomes.iter())
            .filter_map(|o| match o {
                BinOutcome::Filled(f) if f.split == k => Some(f),
                _ => None,
            })
            .collect();
        fills.sort_by_key(|f| f.from);
        let mut at = if k == 0 {
            0
        } else {
            manifest.splits[k].summary.preamble_bytes as usize
        };
        for f in fills {
            merged.extend_from_slice(&b[at..f.from as usize]);
            merged.extend_from_slice(&f.records);
            at = f.to as usize;
        }
        merged.extend_from_slice(&b[at..]);
    }
    let dir = common::procs::fresh_dir("fill-card-merged");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("merged.bin");
    std::fs::write(&path, &merged).unwrap();
    let after = compare_filled(&py, log, &[path]);
    eprintln!(
        "filled: {}; {} outcomes, {recovered} bytes recovered, {read} of the card's {} read",
        brief(&after),
        outcomes.len(),
        card.len()
    );
    assert_eq!(after["missing"], 0, "{}", brief(&after));
    assert_eq!(after["unexplained_invented"], 0, "{}", brief(&after));
    assert!(read < card.len() as u64 / 2);
}

fn brief(report: &serde_json::Value) -> serde_json::Value {
    let mut brief = report.clone();
    brief.as_object_mut().unwrap().remove("windows");
    brief
}
