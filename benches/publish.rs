//! Cost of the live publishing cores, in memory (no sockets): the NDJSON [`Publisher`] and the
//! [`FoxglovePublisher`] fed a whole log as the session hands it out, their output drained,
//! with 0, 1 and 4 clients subscribed to every topic, against decoding the same log with the
//! reader and decoder alone (every visible field read), in the same run. Then, per sample:
//! encoding it as CDR (the Foxglove channels, the export) against rendering it as the NDJSON
//! socket's JSON fields.
//!
//! Then the flight diagnostics on the store's path: the store's watch over the log as event
//! buffers need it (framer, decoder, every sample) with the detectors and without, and as
//! the diagnostics alone need it (the samples they do not read left undecoded), against
//! decoding every field.
//!
//! Prints three tables: MB/s of log, samples/s, bytes written per byte of log, and the time
//! relative to decoding alone; ns per sample for CDR and JSON; the diagnostics' ms per MB.
//! Best of 5 runs per row (7 taking turns for the last).
//! Run: `cargo bench --bench publish`.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ulog_recv::diagnose::Selection;
use ulog_recv::link::Event;
use ulog_recv::live::foxglove::FoxglovePublisher;
use ulog_recv::live::ndjson::Publisher;
use ulog_recv::live::ndjson::protocol::Line;
use ulog_recv::live::ndjson::sample_json::JsonShape;
use ulog_recv::ros::ros2::Ros2Type;
use ulog_recv::store::events::TriggerWatch;
use ulog_recv::ulog::{Decoder, Reader};

fn logs() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut logs: Vec<PathBuf> = ["sample.ulg", "sample_logging_tagged_and_default_params.ulg"]
        .iter()
        .map(|n| root.join("../shared/testdata/ulog").join(n))
        .filter(|p| {
            let there = p.exists();
            if !there {
                eprintln!("WARNING: {} is missing: not benchmarked", p.display());
            }
            there
        })
        .collect();
    logs.push(root.join("testdata/synthetic.ulg"));
    logs
}

/// Best of `runs` timings of `f`.
fn best(runs: usize, mut f: impl FnMut() -> u64) -> (Duration, u64) {
    let mut best = Duration::MAX;
    let mut out = 0;
    for _ in 0..runs {
        let t0 = Instant::now();
        out = black_box(f());
        best = best.min(t0.elapsed());
    }
    (best, out)
}

/// Reader + decoder, every visible field read; returns the samples.
fn decode(bytes: &[u8]) -> u64 {
    let mut reader = Reader::new();
    let mut decoder = Decoder::new();
    let mut samples = 0;
    for piece in bytes.chunks(64 * 1024) {
        reader.push(piece);
        while let Some(item) = reader.next_record() {
            let Ok(record) = item else { continue };
            if let Ok(Some(sample)) = decoder.handle(&record.message) {
                let mut acc = 0.0;
                sample.for_each_visible_value(|_, v| acc += v.as_f64());
                black_box(acc);
                samples += 1;
            }
        }
    }
    samples
}

/// The publisher with `clients` subscribed to everything, fed in 1 KB pieces (a datagram's
/// worth, as the network loop hands them over); returns the bytes of lines produced.
fn publish(bytes: &[u8], clients: usize) -> u64 {
    let now = Instant::now();
    let mut p = Publisher::new("bench");
    for _ in 0..clients {
        let id = p.connect().unwrap();
        p.handle_request(id, Line::Text(br#"{"subscribe":["*"]}"#));
    }
    p.handle_event(
        &Event::LogOpened {
            number: 0,
            format: ulog_recv::autopilot::LogFormat::ULog,
        },
        now,
    );
    let mut out = 0u64;
    for piece in bytes.chunks(1024) {
        p.handle_log_bytes(piece, now);
        while let Some(line) = p.poll_transmit() {
            out += line.line.len() as u64;
        }
    }
    out
}

/// The Foxglove core with `clients` subscribed to every channel as it is advertised, fed in
/// 1 KB pieces; returns the bytes of messages produced.
fn foxglove(bytes: &[u8], clients: usize) -> u64 {
    let now = Instant::now();
    let mut p = FoxglovePublisher::new("bench", "1");
    let ids: Vec<u64> = (0..clients).map(|_| p.connect().unwrap()).collect();
    p.handle_event(
        &Event::LogOpened {
            number: 0,
            format: ulog_recv::autopilot::LogFormat::ULog,
        },
        now,
    );
    let mut out = 0u64;
    let mut next_sub = 0u32;
    let mut requests = Vec::new();
    for piece in bytes.chunks(1024) {
        p.handle_log_bytes(piece, now);
        while let Some(o) = p.poll_transmit() {
            out += o.message.len() as u64;
            if o.message.starts_with(br#"{"op":"advertise""#) {
                let m: serde_json::Value = serde_json::from_slice(&o.message).unwrap();
                for ch in m["channels"].as_array().unwrap() {
                    next_sub += 1;
                    requests.push((
                        o.client,
                        format!(
                            r#"{{"op":"subscribe","subscriptions":[{{"id":{next_sub},"channelId":{}}}]}}"#,
                            ch["id"]
                        ),
                    ));
                }
            }
        }
        for (client, request) in requests.drain(..) {
            p.handle_text(client, &request, now);
        }
    }
    black_box(ids);
    out
}

/// Writes one sample's rendering into the buffer.
type Render<'a> = dyn FnMut(&ulog_recv::ulog::Sample<'_>, &mut Vec<u8>) + 'a;

/// ns per sample to encode every sample of the log as CDR, and to render it as the NDJSON
/// socket's fields object; both from the decoder's view of the sample (the parse and decode
/// included in both), types and shapes compiled beforehand, buffers reused.
fn per_sample(bytes: &[u8]) -> (f64, f64, u64) {
    let mut reader = Reader::new();
    let mut decoder = Decoder::new();
    reader.push(bytes);
    let mut messages = Vec::new();
    let mut cdr_types = std::collections::HashMap::new();
    let mut shapes = std::collections::HashMap::new();
    let mut names = std::collections::HashMap::new();
    let mut n = 0u64;
    while let Some(item) = reader.next_record() {
        let Ok(record) = item else { continue };
        messages.push(record.raw.to_vec());
        if let Ok(Some(sample)) = decoder.handle(&record.message) {
            n += 1;
            names.insert(sample.msg_id, sample.name().to_owned());
            shapes
                .entry(sample.msg_id)
                .or_insert_with(|| JsonShape::new(sample.layout));
        }
    }
    for (id, name) in names {
        cdr_types.insert(id, Ros2Type::compile(&name, decoder.formats()).unwrap());
    }
    let run = |mut render: Box<Render>| {
        best(5, || {
            let mut decoder = Decoder::new();
            let mut out = Vec::new();
            let mut total = 0u64;
            for raw in &messages {
                let Some(message) = ulog_recv::ulog::Message::parse_framed(raw) else {
                    // The file header.
                    if let Some(h) = raw
                        .get(..16)
                        .and_then(|b| ulog_recv::ulog::FileHeader::parse(b.try_into().ok()?))
                    {
                        let _ = decoder.handle(&ulog_recv::ulog::Message::Header(h));
                    }
                    continue;
                };
                if let Ok(Some(sample)) = decoder.handle(&message) {
                    out.clear();
                    render(&sample, &mut out);
                    total += out.len() as u64;
                }
            }
            total
        })
    };
    let (cdr, cdr_bytes) = run(Box::new(|sample, out| {
        cdr_types[&sample.msg_id].encode(sample.data, out).unwrap()
    }));
    let (json, _) = run(Box::new(|sample, out| {
        shapes[&sample.msg_id].write(sample, out)
    }));
    (
        cdr.as_nanos() as f64 / n as f64,
        json.as_nanos() as f64 / n as f64,
        cdr_bytes,
    )
}

/// The store's watch over the whole log, fed in 1 KB pieces, running `diagnostics`, decoding
/// `every_sample` (as for event buffers) or skimming (the diagnostics alone); returns the
/// events.
fn watch(bytes: &[u8], diagnostics: Selection, every_sample: bool) -> u64 {
    let mut watch = TriggerWatch::new(Vec::new(), diagnostics, every_sample);
    let mut events = Vec::new();
    for piece in bytes.chunks(1024) {
        watch.push(piece, &mut events);
    }
    events.len() as u64
}

/// The third table: the flight diagnostics on the store's path, against the same walk
/// without them and against decoding every field.
fn diagnostics_cost() {
    println!();
    println!(
        "| log | MB | decode only ms/MB | event buffers' walk ms/MB | the same with diagnostics ms/MB | diagnostics' share of that walk | diagnostics alone (skimming) ms/MB | findings |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let motor = ulog_recv::sim::faults::fault_flight(ulog_recv::sim::faults::FaultFlight {
        fault: ulog_recv::sim::faults::Fault::MotorDrop,
        armed: true,
        seed: 1,
        rc_lost_as_uint8: false,
    });
    let mut logs: Vec<(String, Vec<u8>)> = logs()
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(p).unwrap())
        })
        .collect();
    logs.push(("fault flight (motor)".into(), motor));
    for (name, bytes) in logs {
        let mb = bytes.len() as f64 / 1e6;
        let per_mb = |t: Duration| t.as_secs_f64() * 1e3 / mb;
        // Taking turns, best of 7 each (the machine's load drifts).
        let [mut base, mut without, mut with, mut alone] = [Duration::MAX; 4];
        let mut found = 0;
        for _ in 0..7 {
            base = base.min(best(1, || decode(&bytes)).0);
            without = without.min(best(1, || watch(&bytes, Selection::NONE, true)).0);
            with = with.min(best(1, || watch(&bytes, Selection::ALL, true)).0);
            let (t, n) = best(1, || watch(&bytes, Selection::ALL, false));
            (alone, found) = (alone.min(t), n);
        }
        let extra = per_mb(with).max(per_mb(without)) - per_mb(without);
        println!(
            "| {name} | {mb:.2} | {:.2} | {:.2} | {:.2} | {:.1} % | {:.2} | {found} |",
            per_mb(base),
            per_mb(without),
            per_mb(with),
            extra / per_mb(without) * 100.0,
            per_mb(alone),
        );
    }
}

fn main() {
    println!(
        "| log | what | MB/s of log | samples/s | bytes out per log byte | time vs decoding |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for path in logs() {
        let bytes = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mb = bytes.len() as f64 / 1e6;
        let (base, samples) = best(5, || decode(&bytes));
        println!(
            "| {name} | decode only | {:.0} | {:.0} | - | 1.00 |",
            mb / base.as_secs_f64(),
            samples as f64 / base.as_secs_f64()
        );
        for clients in [0, 1, 4] {
            let (t, out) = best(5, || publish(&bytes, clients));
            println!(
                "| {name} | publish to {clients} clients | {:.0} | {:.0} | {:.2} | {:.2} |",
                mb / t.as_secs_f64(),
                samples as f64 / t.as_secs_f64(),
                out as f64 / bytes.len() as f64 / clients.max(1) as f64,
                t.as_secs_f64() / base.as_secs_f64()
            );
        }
        for clients in [0, 1, 4] {
            let (t, out) = best(5, || foxglove(&bytes, clients));
            println!(
                "| {name} | Foxglove to {clients} clients | {:.0} | {:.0} | {:.2} | {:.2} |",
                mb / t.as_secs_f64(),
                samples as f64 / t.as_secs_f64(),
                out as f64 / bytes.len() as f64 / clients.max(1) as f64,
                t.as_secs_f64() / base.as_secs_f64()
            );
        }
    }
    println!();
    println!(
        "| log | CDR ns per sample | JSON fields ns per sample | JSON / CDR | CDR bytes per log byte |"
    );
    println!("|---|---:|---:|---:|---:|");
    for path in logs() {
        let bytes = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let (cdr, json, cdr_bytes) = per_sample(&bytes);
        println!(
            "| {name} | {cdr:.0} | {json:.0} | {:.1} | {:.2} |",
            json / cdr,
            cdr_bytes as f64 / bytes.len() as f64
        );
    }
    diagnostics_cost();
}
