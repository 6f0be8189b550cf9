//! Throughput of the ULog engine on real logs, against the `px4-ulog` and `yule_log` crates in
//! the same run.
//!
//! Six measurements per log, each over the whole file held in memory and fed to the parser
//! in 64 KiB pieces, as a program reading a file or a socket would:
//! - `frame/ours`: [`Reader`] only (every message framed and validated, no decoding);
//! - `frame/px4-ulog`: `LogParser::consume_bytes` with no callbacks;
//! - `decode/ours`: reader + [`Decoder`], every field of every sample read and summed as f64
//!   (padding left out, as px4-ulog leaves it out);
//! - `decode/px4-ulog`: the same with px4-ulog's data callback and its flattened fields;
//! - `frame/yule_log`: its message iterator with an empty subscription allow list (data
//!   messages framed and handed out undecoded);
//! - `decode/yule_log`: its iterator decoding every subscription, each leaf value summed (the
//!   timestamp included, padding left out, as ours).
//!
//! Before measuring, each log's values decoded by the three are printed, beside pyulog's count
//! from the log's `.expected.json` (the reference): the comparison means something only where
//! the counts agree. (On the synthetic log px4-ulog and yule_log decode one sample more: the
//! last one, cut by the log's appended data, whose offsets neither honours; pyulog and ours
//! drop it.)
//!
//! Logs: `../shared/testdata/ulog/*.ulg` when present, and the project's synthetic log.
//! Run: `cargo bench --bench ulog`, then `python3 benches/table.py` for a table of MB/s
//! (10^6 bytes per second) and the ratios ours / px4-ulog and ours / yule_log.

#[path = "../tests/it/common/python_json.rs"]
mod python_json;

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use px4_ulog::stream_parser::file_reader::LogParser;
use px4_ulog::stream_parser::model::{DataMessage, FlattenedFieldType};
use ulog_recv::ulog::{Decoder, Reader};
use yule_log::builder::ULogParserBuilder;
use yule_log::model::inst::{FieldValue, Format};
use yule_log::model::msg::UlogMessage;

fn logs() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = root.join("../shared/testdata/ulog");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&shared)
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "ulg"))
                .collect()
        })
        .unwrap_or_else(|_| {
            eprintln!(
                "WARNING: {} is missing: benchmarking the synthetic log only",
                shared.display()
            );
            Vec::new()
        });
    logs.sort();
    logs.push(root.join("testdata/synthetic.ulg"));
    logs
}

/// Size of the pieces each parser is fed.
const PIECE: usize = 64 * 1024;

fn frame_ours(bytes: &[u8]) -> u64 {
    let mut reader = Reader::new();
    let mut n = 0;
    let pieces = bytes.chunks(PIECE).map(Some).chain([None]);
    for piece in pieces {
        match piece {
            Some(piece) => reader.push(piece),
            None => reader.finish(),
        }
        while let Some(item) = reader.next_record() {
            n += item.map_or(0, |r| r.raw.len() as u64);
        }
    }
    n
}

/// Decodes every field of every sample; returns (sum of the values, number of values).
fn decode_ours(bytes: &[u8]) -> (f64, u64) {
    let mut reader = Reader::new();
    let mut decoder = Decoder::new();
    let (mut sum, mut n) = (0.0, 0);
    let pieces = bytes.chunks(PIECE).map(Some).chain([None]);
    for piece in pieces {
        match piece {
            Some(piece) => reader.push(piece),
            None => reader.finish(),
        }
        while let Some(item) = &reader.next_record() {
            // By reference: moving the record out costs a copy per message.
            let Ok(record) = item else { continue };
            if let Ok(Some(sample)) = decoder.handle_record(record) {
                sample.for_each_visible_value(|_, v| {
                    sum += v.as_f64();
                    n += 1;
                });
            }
        }
    }
    (sum, n)
}

fn frame_px4_ulog(bytes: &[u8]) -> bool {
    let mut parser = LogParser::default();
    bytes
        .chunks(PIECE)
        .all(|piece| parser.consume_bytes(piece).is_ok())
}

/// Decodes every field of every sample; returns (sum of the values, number of values).
fn decode_px4_ulog(bytes: &[u8]) -> (f64, u64) {
    let (mut sum, mut n) = (0.0, 0);
    let mut on_data = |m: &DataMessage| {
        n += m.flattened_format.fields.len() as u64;
        for field in &m.flattened_format.fields {
            let at = &m.data[field.offset as usize..];
            sum += match field.field_type {
                FlattenedFieldType::Int8 => at[0] as i8 as f64,
                FlattenedFieldType::UInt8 | FlattenedFieldType::Bool | FlattenedFieldType::Char => {
                    at[0] as f64
                }
                FlattenedFieldType::Int16 => i16::from_le_bytes([at[0], at[1]]) as f64,
                FlattenedFieldType::UInt16 => u16::from_le_bytes([at[0], at[1]]) as f64,
                FlattenedFieldType::Int32 => i32::from_le_bytes(at[..4].try_into().unwrap()) as f64,
                FlattenedFieldType::UInt32 => {
                    u32::from_le_bytes(at[..4].try_into().unwrap()) as f64
                }
                FlattenedFieldType::Int64 => i64::from_le_bytes(at[..8].try_into().unwrap()) as f64,
                FlattenedFieldType::UInt64 => {
                    u64::from_le_bytes(at[..8].try_into().unwrap()) as f64
                }
                FlattenedFieldType::Float => f32::from_le_bytes(at[..4].try_into().unwrap()) as f64,
                FlattenedFieldType::Double => f64::from_le_bytes(at[..8].try_into().unwrap()),
            };
        }
    };
    let mut parser = LogParser::default();
    parser.set_data_message_callback(&mut on_data);
    for piece in bytes.chunks(PIECE) {
        let _ = parser.consume_bytes(piece);
    }
    drop(parser);
    (sum, n)
}

/// Fed through `std::io::Read` in [`PIECE`]-sized reads, as the others are fed pieces.
struct Pieces<'a>(&'a [u8]);

impl std::io::Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(PIECE).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

fn yule_log_parser(
    bytes: &[u8],
    decode: bool,
) -> yule_log::parser::ULogParser<std::io::BufReader<Pieces<'_>>> {
    let builder = ULogParserBuilder::new(std::io::BufReader::with_capacity(PIECE, Pieces(bytes)))
        .include_timestamp(true)
        .include_padding(false);
    let builder = if decode {
        builder
    } else {
        builder.set_subscription_allow_list(Vec::<String>::new())
    };
    builder.build().expect("a ULog header")
}

/// Messages framed (its iterator ends at the first error, as it stops there).
fn frame_yule_log(bytes: &[u8]) -> u64 {
    let mut n = 0;
    for message in yule_log_parser(bytes, false) {
        let Ok(message) = message else { break };
        n += matches!(message, UlogMessage::Ignored { .. }) as u64;
    }
    n
}

/// Decodes every field of every sample; returns (sum of the values, number of values).
fn decode_yule_log(bytes: &[u8]) -> (f64, u64) {
    fn add(format: &Format, sum: &mut f64, n: &mut u64) {
        for field in &format.fields {
            add_value(&field.value, sum, n);
        }
    }
    fn add_all<T: Copy>(v: &[T], as_f64: impl Fn(T) -> f64, sum: &mut f64, n: &mut u64) {
        for &x in v {
            *sum += as_f64(x);
        }
        *n += v.len() as u64;
    }
    fn add_value(value: &FieldValue, sum: &mut f64, n: &mut u64) {
        let scalar = match value {
            FieldValue::ScalarU8(x) => *x as f64,
            FieldValue::ScalarU16(x) => *x as f64,
            FieldValue::ScalarU32(x) => *x as f64,
            FieldValue::ScalarU64(x) => *x as f64,
            FieldValue::ScalarI8(x) => *x as f64,
            FieldValue::ScalarI16(x) => *x as f64,
            FieldValue::ScalarI32(x) => *x as f64,
            FieldValue::ScalarI64(x) => *x as f64,
            FieldValue::ScalarF32(x) => *x as f64,
            FieldValue::ScalarF64(x) => *x,
            FieldValue::ScalarBool(x) => *x as u8 as f64,
            FieldValue::ScalarChar(x) => x.as_u8() as f64,
            FieldValue::ScalarOther(format) => return add(format, sum, n),
            FieldValue::ArrayU8(v) => return add_all(v, |x| x as f64, sum, n),
            FieldValue::ArrayU16(v) => return add_all(v, |x| x as f64, sum, n),
            FieldValue::ArrayU32(v) => return add_all(v, |x| x as f64, sum, n),
            FieldValue::ArrayU64(v) => return add_all(v, |x| x as f64, sum, n),
            FieldValue::ArrayI8(v) => return add_all(v, |x| x as f64, sum, n),
            FieldValue::ArrayI16(v) => return add_all(v, |x| x as f64, sum, n),
            FieldValue::ArrayI32(v) => return add_all(v, |x| x as f64, sum, n),
            FieldValue::ArrayI64(v) => return add_all(v, |x| x as f64, sum, n),
            FieldValue::ArrayF32(v) => return add_all(v, |x| x as f64, sum, n),
            FieldValue::ArrayF64(v) => return add_all(v, |x| x, sum, n),
            FieldValue::ArrayBool(v) => return add_all(v, |x| x as u8 as f64, sum, n),
            FieldValue::ArrayChar(v) => return add_all(v, |x| x.as_u8() as f64, sum, n),
            FieldValue::ArrayOther(v) => {
                return v.iter().for_each(|format| add(format, sum, n));
            }
        };
        *sum += scalar;
        *n += 1;
    }
    let (mut sum, mut n) = (0.0, 0);
    for message in yule_log_parser(bytes, true) {
        let Ok(message) = message else { break };
        if let UlogMessage::LoggedData(data) = message {
            add(&data.data, &mut sum, &mut n);
        }
    }
    (sum, n)
}

/// The number of values pyulog decodes from the log (padding left out), from the
/// `.expected.json` beside it: each dataset's sample count times its fields.
fn pyulog_values(log: &std::path::Path) -> Option<u64> {
    let text = std::fs::read_to_string(log.with_extension("expected.json")).ok()?;
    let expected: serde_json::Value = serde_json::from_str(&python_json::to_json(&text)).ok()?;
    let datasets = expected["datasets"].as_array()?;
    let values = datasets.iter().map(|d| {
        let fields = d["fields"].as_array().map_or(0, |fields| {
            let field_name = |f: &serde_json::Value| f[0].as_str().unwrap_or("").to_owned();
            fields
                .iter()
                .filter(|f| !field_name(f).contains("_padding"))
                .count() as u64
        });
        d["count"].as_u64().unwrap_or(0) * fields
    });
    Some(values.sum())
}

fn bench(c: &mut Criterion) {
    for path in logs() {
        let bytes = std::fs::read(&path).expect("log readable");
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        // Both must do the same work for the comparison to mean anything: say when not.
        let (ours, px4, yule) = (
            decode_ours(&bytes).1,
            decode_px4_ulog(&bytes).1,
            decode_yule_log(&bytes).1,
        );
        let pyulog = pyulog_values(&path).map_or("no .expected.json".into(), |n| n.to_string());
        eprintln!(
            "{name}: values decoded: pyulog {pyulog}, ours {ours}, px4-ulog {px4}, yule_log {yule}"
        );
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function("frame/ours", |b| b.iter(|| frame_ours(black_box(&bytes))));
        group.bench_function("frame/px4-ulog", |b| {
            b.iter(|| frame_px4_ulog(black_box(&bytes)))
        });
        group.bench_function("decode/ours", |b| b.iter(|| decode_ours(black_box(&bytes))));
        group.bench_function("decode/px4-ulog", |b| {
            b.iter(|| decode_px4_ulog(black_box(&bytes)))
        });
        group.bench_function("frame/yule_log", |b| {
            b.iter(|| frame_yule_log(black_box(&bytes)))
        });
        group.bench_function("decode/yule_log", |b| {
            b.iter(|| decode_yule_log(black_box(&bytes)))
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
