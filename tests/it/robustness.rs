//! Bad input never panics, and loses nothing that was good: random bytes, random truncation,
//! and corrupted regions inside real logs, through the reader, the decoder and the summary.
//! After a corrupted region, the messages that follow the next sync message are recovered
//! (all of them, even when the region swallowed subscriptions that later data needs).

use crate::common;

use common::all_logs;
use proptest::prelude::*;
use ulog_recv::ulog::summary::SummaryBuilder;
use ulog_recv::ulog::{Decoder, Message, Reader, message::SYNC_MAGIC};

/// Runs the whole engine over `bytes`; returns the (offset, raw) of every record.
fn run_engine(bytes: &[u8], chunk: usize) -> Vec<RawRecord> {
    let mut reader = Reader::new();
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    let mut pieces = bytes.chunks(chunk.max(1)).peekable();
    while let Some(piece) = pieces.next() {
        reader.push(piece);
        if pieces.peek().is_none() {
            reader.finish();
        }
        while let Some(item) = reader.next_record() {
            if let Ok(record) = item {
                if let Ok(Some(sample)) = decoder.handle(&record.message) {
                    // Touch every field, as a consumer would.
                    let _ = sample.values().map(|(_, v)| v.as_f64()).sum::<f64>();
                }
                out.push((record.offset, record.raw.to_vec()));
            }
        }
    }
    let mut summary = SummaryBuilder::default();
    let _ = summary.push(bytes);
    let _ = summary.finish();
    out
}

/// A record as the tests compare it: stream offset and raw bytes.
type RawRecord = (u64, Vec<u8>);

fn logs_with_sync() -> Vec<(Vec<u8>, Vec<RawRecord>)> {
    all_logs()
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .filter(|b| b.windows(8).any(|w| w == SYNC_MAGIC))
        .map(|b| {
            let records = run_engine(&b, b.len());
            (b, records)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        run_engine(&bytes, 7);
        // The same bytes behind a valid header reach the message parsers.
        let mut log = ulog_recv::ulog::Writer::new();
        log.header(1, 0);
        let mut with_header = log.take();
        with_header.extend_from_slice(&bytes);
        run_engine(&with_header, 64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_truncation_keeps_every_complete_message(
        which in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let logs = all_logs();
        let bytes = std::fs::read(which.get(&logs)).unwrap();
        let full = run_engine(&bytes, bytes.len());
        let at = cut.index(bytes.len());
        let truncated = run_engine(&bytes[..at], 4096);
        // Exactly the records that end before the cut survive, unchanged.
        let expected: Vec<_> = full
            .into_iter()
            .filter(|(off, raw)| *off + raw.len() as u64 <= at as u64)
            .collect();
        prop_assert_eq!(truncated, expected);
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn corrupted_regions_recover_after_the_next_sync(
        which in any::<prop::sample::Index>(),
        start in any::<prop::sample::Index>(),
        garbage in prop::collection::vec(any::<u8>(), 1..2000),
    ) {
        let logs = logs_with_sync();
        let (bytes, original) = which.get(&logs);
        // Corrupt the data section (after the definitions, where the sync messages are).
        let data_start = original
            .iter()
            .find(|(_, raw)| raw.len() > 2 && raw[2] == b'A')
            .map(|(off, _)| *off as usize)
            .unwrap();
        let at = data_start + start.index(bytes.len() - data_start);
        let end = (at + garbage.len()).min(bytes.len());
        let mut corrupted = bytes.clone();
        corrupted[at..end].copy_from_slice(&garbage[..end - at]);
        let got: std::collections::HashSet<RawRecord> =
            run_engine(&corrupted, 1024).into_iter().collect();

        // Everything before the corrupted region is intact…
        for rec in original.iter().filter(|(off, raw)| off + raw.len() as u64 <= at as u64) {
            prop_assert!(got.contains(rec), "lost record at {} before the corruption", rec.0);
        }
        // …and every message after the first sync message that follows the region.
        let next_sync = original.iter().find(|(off, raw)| {
            *off >= end as u64 && matches!(Message::parse(b'S', &raw[3..]), Ok(Message::Sync)) && raw[2] == b'S'
        });
        if let Some((sync_off, _)) = next_sync {
            let after: Vec<_> = original.iter().filter(|(off, _)| off > sync_off).collect();
            let recovered = after.iter().filter(|rec| got.contains(rec)).count();
            prop_assert!(
                recovered == after.len(),
                "recovered {recovered} of {} records after the sync at {sync_off}, corrupted {at}..{end}",
                after.len()
            );
        }
    }
}

/// Inputs the fuzz target once crashed on (`fuzz/fuzz_targets/ulog_engine.rs`: the first byte
/// picks the piece size), kept so that the fix stays in place.
#[test]
fn fuzz_regressions_do_not_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fuzz-regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("ulog_engine-")
        {
            continue;
        }
        let input = std::fs::read(&path).unwrap();
        let (&split, bytes) = input.split_first().unwrap();
        run_engine(bytes, usize::from(split) + 1);
        n += 1;
    }
    assert!(n > 0, "no regression inputs in {}", dir.display());
}

#[test]
fn a_wrong_sized_sample_cut_off_by_the_end_of_the_stream_stays_pending() {
    let mut log = ulog_recv::ulog::Writer::new();
    log.header(0, 0);
    log.flag_bits([0; 8], [0; 8], [0; 3]).unwrap();
    log.write(&Message::Format("t:uint64_t timestamp;"))
        .unwrap();
    log.write(&Message::AddLogged {
        multi_id: 0,
        msg_id: 0,
        name: "t",
    })
    .unwrap();
    let mut bytes = log.take();
    // A data message claiming 200 bytes (the format needs 8), of which 20 arrived.
    bytes.extend_from_slice(&[202, 0, b'D', 0, 0]);
    bytes.extend_from_slice(&[0; 20]);
    let records = run_engine(&bytes, 7);
    assert_eq!(records.len(), 4, "header, flag bits, format, subscription");
}
