//! Fuzz target: arbitrary bytes through the whole ULog engine (reader, decoder, summary).
//! The first byte picks the piece size the bytes are pushed in, so that splits are fuzzed
//! too. It must never panic, and the reader's counters must account for every byte. A decoder
//! fed the reader's records (sharing its formats) must decode exactly what a decoder fed the
//! bare messages (parsing them itself) decodes.
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
    let mut alone = Decoder::new();
    let mut record_bytes = 0u64;
    let mut pieces = bytes.chunks(piece).peekable();
    while let Some(p) = pieces.next() {
        reader.push(p);
        if pieces.peek().is_none() {
            reader.finish();
        }
        while let Some(item) = &reader.next_record() {
            if let Ok(record) = item {
                record_bytes += record.raw.len() as u64;
                let shared = decoder.handle_record(record);
                let own = alone.handle(&record.message);
                match (shared, own) {
                    (Ok(Some(a)), Ok(Some(b))) => {
                        let mut values = Vec::new();
                        a.for_each_value(|i, v| values.push((i, v)));
                        let mut expected = Vec::new();
                        b.for_each_value(|i, v| expected.push((i, v)));
                        assert_eq!(values.len(), expected.len());
                        for ((i, v), (j, w)) in values.iter().zip(&expected) {
                            assert_eq!(i, j);
                            assert_eq!(v.as_f64().to_bits(), w.as_f64().to_bits());
                        }
                        assert_eq!(a.timestamp, b.timestamp);
                        assert_eq!(a.layout.field_names(), b.layout.field_names());
                        assert_eq!(a.values().count(), a.layout.fields.len());
                    }
                    (Ok(None), Ok(None)) => {}
                    (Err(a), Err(b)) => assert_eq!(a, b),
                    (a, b) => panic!("shared definitions gave {a:?}, parsing alone {b:?}"),
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
