//! Reordering and reassembly over a simulated lossy link (no sockets, a fake clock), on every
//! log: chunks cut as PX4 cuts them, then lost, duplicated and reordered with a seeded RNG.
//! The output must hold exactly the messages an ideal receiver could rebuild from the chunks
//! that arrived: each message all of whose bytes arrived, byte for byte, in order, and nothing
//! else. The ideal set is computed here from chunk and message offsets, independently of the
//! reorder buffer and the assembler.

use crate::common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{all_logs, ideal_messages, split_messages};
use ulog_recv::link::{Assembler, Chunk, Delivery, ReorderBuffer, ReorderConfig};
use ulog_recv::sim::{LogChunk, chunk_log};

/// How the simulated link mistreats the unacked chunks (acked ones are retried until they
/// arrive, so all of them arrive, possibly several times).
#[derive(Debug, Clone, Copy)]
struct Impairment {
    loss: f64,
    duplicate: f64,
    /// Chance that a chunk is held back and delivered up to `reorder_depth` chunks later.
    reorder: f64,
    reorder_depth: usize,
    /// Chance per chunk of an outage losing the next `outage_len` chunks.
    outage: f64,
    outage_len: usize,
}

/// The chunks in arrival order, after impairment.
fn deliver(chunks: &[LogChunk], imp: Impairment, seed: u64) -> Vec<LogChunk> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out: Vec<LogChunk> = Vec::with_capacity(chunks.len() * 2);
    let mut delayed: Vec<(usize, LogChunk)> = Vec::new();
    let mut outage_left = 0;
    for (i, c) in chunks.iter().enumerate() {
        // Release held-back chunks whose time has come.
        let (due, keep): (Vec<_>, Vec<_>) = delayed.into_iter().partition(|(t, _)| *t <= i);
        delayed = keep;
        out.extend(due.into_iter().map(|(_, c)| c));
        if c.acked {
            // Stop-and-wait with retries: always arrives, sometimes more than once (lost acks).
            out.push(c.clone());
            while rng.f64() < 0.2 {
                out.push(c.clone());
            }
            continue;
        }
        if outage_left > 0 {
            outage_left -= 1;
            continue;
        }
        if rng.f64() < imp.outage {
            outage_left = imp.outage_len;
            continue;
        }
        if rng.f64() < imp.loss {
            continue;
        }
        let copies = if rng.f64() < imp.duplicate { 2 } else { 1 };
        for _ in 0..copies {
            if rng.f64() < imp.reorder {
                let later = i + 1 + rng.usize(..imp.reorder_depth.max(1));
                delayed.push((later, c.clone()));
            } else {
                out.push(c.clone());
            }
        }
    }
    out.extend(delayed.into_iter().map(|(_, c)| c));
    out
}

/// Runs the arrivals through the reorder buffer and the assembler, one chunk per
/// millisecond of fake time; returns the assembled bytes.
fn receive(arrivals: &[LogChunk], config: ReorderConfig) -> (Vec<u8>, ReorderBuffer, Assembler) {
    let t0 = Instant::now();
    let mut reorder = ReorderBuffer::new(arrivals.first().map_or(0, |c| c.seq), config);
    let mut assembler = Assembler::new();
    let mut out = Vec::new();
    let handle = |reorder: &mut ReorderBuffer, assembler: &mut Assembler, out: &mut Vec<u8>| {
        while let Some(d) = reorder.pop() {
            match d {
                Delivery::Chunk(c) => assembler.chunk(&c.data, c.first_message_offset, out),
                Delivery::Gap { .. } => {
                    assembler.gap();
                }
            }
        }
    };
    for (i, c) in arrivals.iter().enumerate() {
        let now = t0 + Duration::from_millis(i as u64);
        reorder.push(
            Chunk {
                seq: c.seq,
                first_message_offset: c.first_message_offset,
                data: c.data.clone(),
            },
            now,
        );
        handle(&mut reorder, &mut assembler, &mut out);
    }
    reorder.flush();
    handle(&mut reorder, &mut assembler, &mut out);
    (out, reorder, assembler)
}

fn check(imp: Impairment, seed: u64) {
    for path in all_logs() {
        let file = std::fs::read(&path).unwrap();
        let log = chunk_log(&file, 0).unwrap();
        let arrivals = deliver(&log.chunks, imp, seed);
        let arrived: HashSet<u16> = arrivals.iter().map(|c| c.seq).collect();
        let arrived_flags: Vec<bool> = log
            .chunks
            .iter()
            .map(|c| arrived.contains(&c.seq))
            .collect();
        let ideal = ideal_messages(
            &log.stream,
            &log.message_starts,
            &log.chunks,
            &arrived_flags,
        );
        // Wait long enough for any reordering the link does (one chunk per ms here).
        let config = ReorderConfig {
            max_chunks: 4 * imp.reorder_depth + 16,
            max_wait: Duration::from_millis(4 * imp.reorder_depth as u64 + 16),
            ..ReorderConfig::default()
        };
        let (out, reorder, assembler) = receive(&arrivals, config);
        let got = split_messages(&out);
        assert_eq!(
            got.len(),
            ideal.len(),
            "{}: {imp:?} seed {seed}: {} messages rebuilt, ideal {} (reorder {:?}, assembler {:?})",
            path.display(),
            got.len(),
            ideal.len(),
            reorder.stats(),
            assembler.stats()
        );
        assert!(
            got == ideal,
            "{}: rebuilt messages differ from the ideal",
            path.display()
        );
        // Chunks lost after the last one that arrived are invisible to any receiver.
        let last = log
            .chunks
            .iter()
            .rposition(|c| arrived.contains(&c.seq))
            .unwrap();
        let lost = log.chunks[..last]
            .iter()
            .filter(|c| !arrived.contains(&c.seq))
            .count();
        assert_eq!(reorder.stats().lost, lost as u64, "{}", path.display());
    }
}

#[test]
fn a_clean_link_rebuilds_every_log_byte_for_byte() {
    for path in all_logs() {
        let file = std::fs::read(&path).unwrap();
        let log = chunk_log(&file, 0).unwrap();
        let (out, _, assembler) = receive(&log.chunks, ReorderConfig::default());
        assert_eq!(out, log.stream, "{}", path.display());
        assert_eq!(assembler.stats().framing_errors, 0);
        // Short chunks only where a reliable section ends (the definitions, an 'A' or a run
        // of 'M' in flight): each is acked.
        let n = log.chunks.len();
        let short: Vec<_> = log.chunks[..n - 1]
            .iter()
            .filter(|c| c.data.len() < 249)
            .collect();
        assert!(!short.is_empty(), "{}", path.display());
        assert!(short.iter().all(|c| c.acked), "{}", path.display());
    }
}

#[test]
fn loss_duplication_and_reordering_lose_only_what_never_arrived() {
    let cases = [
        (0.01, 0.01, 0.02, 4, 0.0),
        (0.05, 0.05, 0.10, 8, 0.001),
        (0.20, 0.10, 0.20, 16, 0.002),
    ];
    for (i, &(loss, duplicate, reorder, depth, outage)) in cases.iter().enumerate() {
        let imp = Impairment {
            loss,
            duplicate,
            reorder,
            reorder_depth: depth,
            outage,
            outage_len: 40,
        };
        for seed in 0..3 {
            check(imp, 1000 * i as u64 + seed);
        }
    }
}

#[test]
fn sequence_numbers_wrap_cleanly() {
    // Start just before the wrap; the long logs wrap at least once.
    for path in all_logs() {
        let file = std::fs::read(&path).unwrap();
        let log = chunk_log(&file, 65_500).unwrap();
        let (out, reorder, _) = receive(&log.chunks, ReorderConfig::default());
        assert_eq!(out, log.stream, "{}", path.display());
        assert_eq!(reorder.stats().lost, 0);
    }
}
