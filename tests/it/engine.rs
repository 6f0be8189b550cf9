//! The reader and writer on whole logs: byte-exact round trips, chunking that changes
//! nothing, every message type of the spec, and the edge cases of the framing.

use crate::common;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use common::{all_logs, shared_logs, synthetic_logs};
use proptest::prelude::*;
use ulog_recv::ulog::{Layout, Message, ReadError, Reader, Writer};

/// A digest of every record (offset, bytes) and error the reader produces, with the count.
fn digest_with_splits(bytes: &[u8], splits: impl Iterator<Item = usize>) -> (u64, u64) {
    let mut reader = Reader::new();
    let mut h = DefaultHasher::new();
    let mut n = 0;
    let mut at = 0;
    let mut drain = |reader: &mut Reader, h: &mut DefaultHasher| {
        while let Some(item) = reader.next_record() {
            match item {
                Ok(r) => (r.offset, r.raw).hash(h),
                Err(e) => e.to_string().hash(h),
            }
            n += 1;
        }
    };
    for len in splits {
        let end = (at + len).min(bytes.len());
        reader.push(&bytes[at..end]);
        drain(&mut reader, &mut h);
        at = end;
        if at == bytes.len() {
            break;
        }
    }
    reader.push(&bytes[at..]);
    drain(&mut reader, &mut h);
    (h.finish(), n)
}

fn read(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn read_then_write_reproduces_every_log_byte_for_byte() {
    for log in all_logs() {
        let input = read(&log);
        let mut reader = Reader::new();
        reader.push(&input);
        let mut writer = Writer::new();
        let mut raw_concat = Vec::new();
        while let Some(item) = reader.next_record() {
            let record = item.unwrap_or_else(|e| panic!("{}: {e}", log.display()));
            writer.write(&record.message).unwrap();
            raw_concat.extend_from_slice(record.raw);
        }
        assert_eq!(reader.pending_bytes(), 0, "{}", log.display());
        // Each message is rewritten exactly as it was read…
        assert!(
            writer.bytes() == raw_concat,
            "{}: rewrite differs",
            log.display()
        );
        // …and the whole file comes back, except the cut-off bytes before appended data.
        let gaps = reader.stats().appended_gap_bytes as usize;
        assert_eq!(writer.len() + gaps, input.len(), "{}", log.display());
        if gaps == 0 {
            assert!(
                writer.bytes() == input,
                "{}: not byte-identical",
                log.display()
            );
        }
    }
}

#[test]
fn real_logs_are_reproduced_byte_for_byte() {
    let Some(logs) = shared_logs() else { return };
    assert_eq!(logs.len(), 5, "the five real logs of ../shared");
    for log in logs {
        let input = read(&log);
        let mut reader = Reader::new();
        reader.push(&input);
        let mut writer = Writer::new();
        while let Some(item) = reader.next_record() {
            writer.write(&item.unwrap().message).unwrap();
        }
        assert!(writer.bytes() == input, "{}", log.display());
    }
}

#[test]
fn every_chunk_size_from_1_to_300_reads_the_same_records() {
    for log in all_logs() {
        let bytes = read(&log);
        let whole = digest_with_splits(&bytes, std::iter::once(bytes.len()));
        assert!(whole.1 > 100, "{}: too few records", log.display());
        for chunk in 1..=300 {
            let split = digest_with_splits(&bytes, std::iter::repeat(chunk));
            assert_eq!(split, whole, "{} in chunks of {chunk}", log.display());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_splits_read_the_same_records(
        which in any::<prop::sample::Index>(),
        splits in prop::collection::vec(1usize..20_000, 1..200),
    ) {
        let logs = all_logs();
        let log = which.get(&logs);
        let bytes = read(log);
        let whole = digest_with_splits(&bytes, std::iter::once(bytes.len()));
        let split = digest_with_splits(&bytes, splits.into_iter().cycle());
        prop_assert_eq!(split, whole);
    }
}

#[test]
fn synthetic_testdata_is_what_the_generator_writes_now() {
    let path = &synthetic_logs()[0];
    let now = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions::default());
    if std::env::var_os("UPDATE_TESTDATA").is_some() {
        std::fs::write(path, &now).unwrap();
    }
    let committed = read(path);
    assert!(
        committed == now,
        "testdata/synthetic.ulg is stale: run `UPDATE_TESTDATA=1 cargo test --test it \
         synthetic_testdata`, then `.venv/bin/python tests/pyulog_dump.py \
         testdata/synthetic.ulg > testdata/synthetic.expected.json`"
    );
}

#[test]
fn synthetic_log_holds_every_message_type() {
    let bytes = read(&synthetic_logs()[0]);
    let mut reader = Reader::new();
    reader.push(&bytes);
    let mut types = std::collections::BTreeSet::new();
    while let Some(item) = reader.next_record() {
        if let Some(t) = item.unwrap().message.msg_type() {
            types.insert(t as char);
        }
    }
    let all: std::collections::BTreeSet<char> = "BFIMPQARDLCSOX".chars().collect();
    assert_eq!(types, all);
    assert_eq!(reader.stats().unknown_messages, 1);
    assert!(reader.stats().appended_gap_bytes > 0);
}

fn tiny_log(version: u8, incompat0: u8, incompat7: u8) -> Vec<u8> {
    let mut w = Writer::new();
    w.header(version, 1000);
    w.flag_bits([0; 8], [incompat0, 0, 0, 0, 0, 0, 0, incompat7], [0; 3])
        .unwrap();
    w.message(b'F', &[b"t:uint64_t timestamp;float x;"])
        .unwrap();
    w.write(&Message::AddLogged {
        multi_id: 0,
        msg_id: 7,
        name: "t",
    })
    .unwrap();
    for i in 0..3u64 {
        let mut d = (1000 + i).to_le_bytes().to_vec();
        d.extend_from_slice(&(i as f32).to_le_bytes());
        w.write(&Message::Data {
            msg_id: 7,
            data: &d,
        })
        .unwrap();
    }
    w.take()
}

fn records(bytes: &[u8]) -> (Vec<String>, Vec<ReadError>, Reader) {
    let mut reader = Reader::new();
    reader.push(bytes);
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    while let Some(item) = reader.next_record() {
        match item {
            Ok(r) => ok.push(format!("{:?}", r.message.msg_type().map(char::from))),
            Err(e) => errors.push(e),
        }
    }
    (ok, errors, reader)
}

#[test]
fn a_newer_file_version_is_read_anyway() {
    let (ok, errors, _) = records(&tiny_log(7, 0, 0));
    assert!(errors.is_empty());
    assert_eq!(ok.len(), 1 + 1 + 1 + 1 + 3);
}

#[test]
fn unknown_incompat_flags_refuse_the_log() {
    let (ok, errors, reader) = records(&tiny_log(1, 0, 0x80));
    assert_eq!(ok.len(), 1, "only the header");
    assert!(matches!(errors[..], [ReadError::IncompatibleFlags { .. }]));
    assert!(errors[0].is_fatal());
    assert!(errors[0].to_string().contains("incompatible"));
    assert!(reader.has_failed());
    // The known bit (appended data) alone is fine.
    assert!(records(&tiny_log(1, 1, 0)).1.is_empty());
}

#[test]
fn a_truncated_last_message_is_dropped_and_reported_as_pending() {
    let log = tiny_log(1, 0, 0);
    let (ok, errors, reader) = records(&log[..log.len() - 5]);
    assert!(errors.is_empty());
    assert_eq!(ok.len(), 1 + 1 + 1 + 1 + 2);
    assert_eq!(reader.pending_bytes(), 3 + 2 + 12 - 5);
}

#[test]
fn bad_magic_is_a_clear_fatal_error() {
    let (_, errors, _) = records(b"this is not a ulog file at all");
    assert_eq!(errors, [ReadError::BadMagic]);
    // Fewer bytes than a header: a wrong start is wrong already.
    let (_, errors, _) = records(b"junk\n");
    assert_eq!(errors, [ReadError::BadMagic]);
    // A right start waits for the rest of the header.
    let (_, errors, reader) = records(b"ULog\x01");
    assert!(errors.is_empty());
    assert_eq!(reader.pending_bytes(), 5);
}

#[test]
fn unknown_message_types_are_skipped_and_counted() {
    let mut log = tiny_log(1, 0, 0);
    let mut w = Writer::new();
    w.message(b'Z', &[b"from the future"]).unwrap();
    let at = log.len() - 2 * (3 + 14); // before the last two samples
    log.splice(at..at, w.take());
    let (ok, errors, reader) = records(&log);
    assert!(errors.is_empty());
    assert_eq!(reader.stats().unknown_messages, 1);
    assert_eq!(ok.iter().filter(|t| t.contains('D')).count(), 3);
}

#[test]
fn impossible_framing_resumes_after_the_next_sync_message() {
    let mut w = Writer::new();
    w.write(&Message::Sync).unwrap();
    let sync = w.take();
    let mut log = tiny_log(1, 0, 0);
    let first_data = log.len() - 3 * 17;
    // Garbage with an impossible type, then a sync message, then one more sample.
    let mut tail = vec![0x05, 0x00, 0x01, 0xde, 0xad];
    tail.extend_from_slice(&sync);
    tail.extend_from_slice(&log[first_data..first_data + 17]);
    log.extend_from_slice(&tail);
    let (ok, errors, reader) = records(&log);
    assert!(errors.is_empty());
    assert_eq!(ok.iter().filter(|t| t.contains('D')).count(), 4);
    assert_eq!(reader.stats().resyncs, 1);
    assert_eq!(reader.stats().skipped_bytes, 5 + sync.len() as u64);
}

#[test]
fn sample_sizes_agree_with_compiled_layouts_for_every_format_of_every_log() {
    let mut checked = 0;
    for path in all_logs() {
        let mut decoder = ulog_recv::ulog::Decoder::new();
        let mut reader = Reader::new();
        reader.push(&read(&path));
        while let Some(item) = reader.next_record() {
            if let Ok(record) = item {
                let _ = decoder.handle(&record.message);
            }
        }
        for name in decoder.formats().keys() {
            let compiled = Layout::compile(name, decoder.formats()).map(|l| (l.size, l.full_size));
            let sizes = Layout::sample_sizes(name, decoder.formats());
            assert_eq!(sizes, compiled, "{name} in {}", path.display());
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} formats checked");
}

#[test]
fn for_each_value_gives_exactly_the_values_of_every_sample() {
    let mut samples = 0;
    for path in all_logs() {
        let mut decoder = ulog_recv::ulog::Decoder::new();
        let mut reader = Reader::new();
        reader.push(&read(&path));
        while let Some(item) = reader.next_record() {
            let Ok(record) = item else { continue };
            let Ok(Some(sample)) = decoder.handle(&record.message) else {
                continue;
            };
            let expected: Vec<_> = sample.values().map(|(_, v)| v).collect();
            let mut got = Vec::with_capacity(expected.len());
            sample.for_each_value(|i, v| {
                assert_eq!(i, got.len(), "indices come in order");
                got.push(v)
            });
            // Compare bit patterns: NaN != NaN.
            assert_eq!(
                format!("{got:?}"),
                format!("{expected:?}"),
                "{}",
                sample.name()
            );
            let visible: Vec<_> = sample
                .layout
                .visible_fields()
                .map(|(i, _)| (i, sample.value(i)))
                .collect();
            let mut got = Vec::new();
            sample.for_each_visible_value(|i, v| got.push((i, v)));
            assert_eq!(
                format!("{got:?}"),
                format!("{visible:?}"),
                "{}",
                sample.name()
            );
            samples += 1;
        }
    }
    assert!(samples > 10_000, "only {samples} samples");
}

#[test]
fn a_decoder_fed_records_shares_the_readers_formats_and_decodes_what_it_would_alone() {
    let (mut shared_formats, mut samples) = (0, 0);
    for path in all_logs() {
        let mut reader = Reader::new();
        let mut shared = ulog_recv::ulog::Decoder::new();
        let mut alone = ulog_recv::ulog::Decoder::new();
        reader.push(&read(&path));
        reader.finish();
        while let Some(item) = &reader.next_record() {
            let Ok(record) = item else { continue };
            match (&record.message, record.format) {
                (Message::Format(_), Some(def)) => {
                    let _ = shared.handle_record(record);
                    // Parsed once: the decoder holds the very object the reader built.
                    let held = &shared.formats()[&def.name];
                    assert!(std::sync::Arc::ptr_eq(held, def), "{}", def.name);
                    shared_formats += 1;
                }
                (Message::Format(text), None) => {
                    // Only a format that does not parse comes without one.
                    assert!(shared.handle_record(record).is_err(), "{text}");
                }
                (message, format) => {
                    assert!(format.is_none(), "{message:?}");
                    let _ = shared.handle_record(record);
                }
            }
            let by_record = shared.subscriptions().count();
            let own = alone.handle(&record.message);
            if let (Message::Data { msg_id, .. }, Ok(Some(expected))) = (&record.message, own) {
                let sample = shared
                    .handle_record(record)
                    .expect("decodes")
                    .expect("a sample");
                assert_eq!(sample.timestamp, expected.timestamp);
                assert_eq!(sample.layout, expected.layout, "message id {msg_id}");
                assert_eq!(sample.data, expected.data);
                samples += 1;
            }
            assert_eq!(by_record, alone.subscriptions().count());
        }
    }
    assert!(shared_formats > 100 && samples > 10_000);
}

#[test]
fn leaf_names_are_pyulogs_and_built_only_when_asked() {
    let formats = ulog_recv::ulog::parse_formats([
        "outer:uint64_t timestamp;inner[2] arr;char[3] label;uint8_t[5] _padding0;",
        "inner:float x;uint8_t[2] _padding0;int16_t y;",
    ])
    .unwrap();
    let layout = Layout::compile("outer", &formats).unwrap();
    // Names are not part of what makes two layouts equal, built or not.
    let untouched = layout.clone();
    assert_eq!(layout.field_index("arr[1].y"), Some(8));
    assert_eq!(layout, untouched);
    assert_eq!(layout.field_name(0), "timestamp");
    assert_eq!(layout.field_name(3), "arr[0]._padding0[1]");
    assert_eq!(layout.field_names().last().unwrap(), "label[2]");
    assert_eq!(layout.field_names().len(), layout.fields.len());
    assert_eq!(layout.named_fields().count(), layout.fields.len());
    assert_eq!(
        layout.field_index("_padding0[0]"),
        None,
        "trailing padding is not logged"
    );
}
