//! Splits: every log's stream cut into many standalone splits. Without their preambles the
//! splits put back together are the stream byte for byte; every split reads on its own (our
//! reader, and pyulog when the virtualenv is there) with the complete definitions and the
//! parameters in force where it starts.

use crate::common;

use std::collections::BTreeMap;

use common::{all_logs, split_messages};
use ulog_recv::sim::chunk_log;
use ulog_recv::store::{SplitPolicy, SplitSink, SplitSummary, Splitter};

#[derive(Default)]
struct Splits {
    files: Vec<Vec<u8>>,
    summaries: Vec<SplitSummary>,
}

impl SplitSink for Splits {
    fn begin(&mut self, index: u32) {
        assert_eq!(index as usize, self.files.len());
        self.files.push(Vec::new());
    }
    fn write(&mut self, bytes: &[u8]) {
        self.files.last_mut().unwrap().extend_from_slice(bytes);
    }
    fn end(&mut self, summary: &SplitSummary) {
        assert_eq!(summary.bytes, self.files.last().unwrap().len() as u64);
        self.summaries.push(summary.clone());
    }
}

fn split(stream: &[u8], policy: SplitPolicy, piece: usize) -> Splits {
    let mut splitter = Splitter::new(policy);
    let mut out = Splits::default();
    for p in stream.chunks(piece) {
        splitter.push(p, &mut out);
    }
    splitter.finish(&mut out);
    assert_eq!(out.files.len(), out.summaries.len());
    out
}

/// Parameter messages (type 'P') of a split's definitions, by key.
fn params_of(messages: &[Vec<u8>]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    messages
        .iter()
        .skip(1)
        .take_while(|m| m[2] != b'A' && m[2] != b'D' && m[2] != b'L')
        .filter(|m| m[2] == b'P')
        .map(|m| {
            let len = m[3] as usize;
            (m[4..4 + len].to_vec(), m.clone())
        })
        .collect()
}

fn policies() -> Vec<(&'static str, SplitPolicy)> {
    let mut by_size = SplitPolicy::unlimited();
    by_size.max_bytes = Some(256 << 10);
    let mut by_time = SplitPolicy::unlimited();
    by_time.max_duration_us = Some(5_000_000);
    // Latch every topic the logs have in common use, so that replays are exercised.
    for p in [&mut by_size, &mut by_time] {
        p.latched.extend(
            [
                "vehicle_attitude",
                "battery_status",
                "sensor_accel",
                "esc_status",
            ]
            .map(String::from),
        );
    }
    vec![("256 KB", by_size), ("5 s", by_time)]
}

#[test]
fn splits_without_preambles_are_the_stream_and_each_stands_alone() {
    for path in all_logs() {
        let stream = chunk_log(&std::fs::read(&path).unwrap(), 0).unwrap().stream;
        let original = split_messages(&stream);
        let formats = original
            .iter()
            .filter(|m| m.len() > 2 && m[2] == b'F')
            .count();
        for (name, policy) in policies() {
            let ctx = format!("{} at {name}", path.display());
            let out = split(&stream, policy.clone(), 4096);
            assert!(
                out.files.len() > 1 || stream.len() < 256 << 10,
                "{ctx}: one split"
            );
            // Put back together without the preambles: the stream, byte for byte.
            let mut joined = Vec::new();
            for (file, s) in out.files.iter().zip(&out.summaries) {
                joined.extend_from_slice(&file[s.preamble_bytes as usize..]);
            }
            assert!(
                joined == stream,
                "{ctx}: joined splits differ from the stream"
            );
            // Each split on its own.
            let mut params = BTreeMap::new();
            let mut at = 1; // index in `original` of the next message
            for (k, (file, s)) in out.files.iter().zip(&out.summaries).enumerate() {
                let messages = split_messages(file);
                let split_formats = messages.iter().filter(|m| m[2] == b'F').count();
                assert_eq!(split_formats, formats, "{ctx}: split {k} lacks formats");
                if k > 0 {
                    assert_eq!(
                        params_of(&messages),
                        params,
                        "{ctx}: split {k} does not carry the parameters in force"
                    );
                }
                // Follow the original up to the end of this split.
                let own = split_messages(
                    &[&file[..16], &file[s.preamble_bytes.max(16) as usize..]].concat(),
                );
                for m in own.iter().skip(1) {
                    assert_eq!(&original[at], m, "{ctx}: split {k}");
                    if m[2] == b'P' {
                        let len = m[3] as usize;
                        params.insert(m[4..4 + len].to_vec(), m.clone());
                    }
                    at += 1;
                }
                let samples = messages.iter().filter(|m| m[2] == b'D').count() as u64;
                assert_eq!(samples, s.samples, "{ctx}: split {k} sample count");
                assert!(s.first_timestamp <= s.last_timestamp);
                // The time index points at data messages in time order.
                for e in &s.time_index {
                    assert_eq!(file[e.offset as usize + 2], b'D', "{ctx}: index entry");
                }
                assert!(
                    s.time_index
                        .windows(2)
                        .all(|w| w[0].timestamp < w[1].timestamp)
                );
            }
            assert_eq!(at, original.len(), "{ctx}: messages left over");
        }
    }
}

#[test]
fn split_sizes_and_durations_stay_near_their_limits() {
    let stream = chunk_log(&std::fs::read(&common::synthetic_logs()[0]).unwrap(), 0)
        .unwrap()
        .stream;
    let mut policy = SplitPolicy::unlimited();
    policy.max_bytes = Some(16 << 10);
    let out = split(&stream, policy, 1 << 20);
    for s in &out.summaries[..out.summaries.len() - 1] {
        // Full at the limit (with half of it data at least), then one message more at most.
        let data = s.bytes - s.preamble_bytes;
        assert!(s.bytes >= 16 << 10 && data >= 8 << 10, "{s:?}");
        assert!(
            s.bytes < (16 << 10) + 65_535 + 3 || data < (8 << 10) + 65_535 + 3,
            "{s:?}"
        );
    }
    let mut policy = SplitPolicy::unlimited();
    policy.max_duration_us = Some(2_000_000);
    let out = split(&stream, policy, 1 << 20);
    assert!(out.files.len() >= 4, "10 s of log in 2 s splits");
    for s in &out.summaries {
        let span = s.last_timestamp.unwrap() - s.first_timestamp.unwrap();
        assert!(span < 2_000_000, "{s:?}");
    }
}

#[test]
fn a_roll_on_request_ends_the_split_before_the_next_sample() {
    let stream = chunk_log(&std::fs::read(&common::synthetic_logs()[0]).unwrap(), 0)
        .unwrap()
        .stream;
    let mut splitter = Splitter::new(SplitPolicy::unlimited());
    let mut out = Splits::default();
    let half = stream.len() / 2;
    splitter.push(&stream[..half], &mut out);
    splitter.request_roll();
    splitter.push(&stream[half..], &mut out);
    splitter.finish(&mut out);
    assert_eq!(out.files.len(), 2);
}

#[test]
fn pyulog_reads_every_split_as_we_do() {
    let mut logs = common::synthetic_logs();
    logs.extend(
        common::shared_logs()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n == "sample_logging_tagged_and_default_params.ulg")
            }),
    );
    let dir = std::env::temp_dir().join(format!("ulog-recv-splits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for path in logs {
        let stream = chunk_log(&std::fs::read(&path).unwrap(), 0).unwrap().stream;
        let mut policy = SplitPolicy::unlimited();
        policy.max_bytes = Some(512 << 10);
        policy.max_duration_us = Some(4_000_000);
        let out = split(&stream, policy, 1 << 16);
        assert!(out.files.len() > 1);
        for (k, file) in out.files.iter().enumerate() {
            let f = dir.join(format!("split_{k}.ulg"));
            std::fs::write(&f, file).unwrap();
            common::check_with_pyulog(&f);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_forced_roll_ends_the_split_before_the_next_message_however_little_it_holds() {
    use ulog_recv::ulog::message::{is_definition, msg_type};
    let log = chunk_log(&std::fs::read(&common::synthetic_logs()[0]).unwrap(), 0).unwrap();
    let (stream, starts) = (&log.stream, &log.message_starts);
    // Cut right after the definitions: the split holds no sample of its own yet.
    let defs_end = (1..starts.len())
        .find(|&i| {
            let ty = stream[starts[i] as usize + 2];
            !(is_definition(ty) || ty == msg_type::ADD_LOGGED)
        })
        .unwrap();
    let cut = starts[defs_end] as usize;
    for force in [false, true] {
        let mut splitter = Splitter::new(SplitPolicy::unlimited());
        let mut out = Splits::default();
        splitter.push(&stream[..cut], &mut out);
        match force {
            true => splitter.force_roll(),
            false => splitter.request_roll(),
        }
        splitter.push(&stream[cut..], &mut out);
        splitter.finish(&mut out);
        if !force {
            assert!(
                out.files[0].len() > cut,
                "a requested roll waits for a sample"
            );
            continue;
        }
        assert_eq!(out.files.len(), 2);
        assert_eq!(out.files[0], stream[..cut]);
        // The next split: its preamble, then the log from the cut on.
        let preamble = out.summaries[1].preamble_bytes as usize;
        assert!(preamble >= 16);
        assert_eq!(out.files[1][preamble..], stream[cut..]);
    }
}
