//! Cost of the live socket's core, in memory (no sockets): the [`Publisher`] fed a whole log
//! as the session hands it out, its lines drained, with 0, 1 and 4 clients subscribed to every
//! topic, against decoding the same log with the reader and decoder alone (every visible
//! field read), in the same run.
//!
//! Prints a table: MB/s of log, samples/s, JSON bytes written per byte of log, and the time
//! relative to decoding alone. Best of 5 runs per row.
//! Run: `cargo bench --bench publish`.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ulog_recv::link::Event;
use ulog_recv::publish::Publisher;
use ulog_recv::publish::protocol::Line;
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
    p.handle_event(&Event::LogOpened { number: 0 }, now);
    let mut out = 0u64;
    for piece in bytes.chunks(1024) {
        p.handle_log_bytes(piece, now);
        while let Some(line) = p.poll_transmit() {
            out += line.line.len() as u64;
        }
    }
    out
}

fn main() {
    println!(
        "| log | what | MB/s of log | samples/s | JSON bytes per log byte | time vs decoding |"
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
    }
}
