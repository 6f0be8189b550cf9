//! Fuzz target: arbitrary bytes through the whole ULog engine (reader, decoder, summary).
//! The first byte picks the piece size the bytes are pushed in, so that splits are fuzzed
//! too. It must never panic, and the reader's counters must account for every byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ulog_recv::ulog::summary::SummaryBuilder;
use ulog_recv::ulog::{Decoder, Reader};

fuzz_target!(|input: &[u8]| {
    let Some((&split, bytes)) = input.split_first() else {
        return;
    };
    let piece = usize::from(split) + 1;
    let mut reader = Reader::new();
    let mut decoder = Decoder::new();
    let mut record_bytes = 0u64;
    let mut pieces = bytes.chunks(piece).peekable();
    while let Some(p) = pieces.next() {
        reader.push(p);
        if pieces.peek().is_none() {
            reader.finish();
        }
        while let Some(item) = reader.next_record() {
            if let Ok(record) = item {
                record_bytes += record.raw.len() as u64;
                if let Ok(Some(sample)) = decoder.handle(&record.message) {
                    sample.for_each_value(|_, v| {
                        std::hint::black_box(v.as_f64());
                    });
                    let _ = sample.values().count();
                }
            }
        }
    }
    let stats = reader.stats();
    assert_eq!(stats.bytes_in, bytes.len() as u64);
    // Records never claim more bytes than came in.
    assert!(record_bytes <= stats.bytes_in);

    let mut summary = SummaryBuilder::default();
    let _ = summary.push(bytes);
    let _ = summary.finish();
});
