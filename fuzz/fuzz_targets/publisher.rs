//! Fuzz target: the live socket's publisher driven by a script of client connections, request
//! bytes (cut into lines as the server cuts them), log bytes, session events and stats. It must
//! never panic, and every line it hands out must be one JSON object and a newline.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use ulog_recv::link::{CloseReason, Event, SessionStats};
use ulog_recv::live::ndjson::protocol::LineReader;
use ulog_recv::live::ndjson::{Publisher, ServerStats};

fuzz_target!(|input: &[u8]| {
    let mut p = Publisher::new("fuzz");
    let mut clients: Vec<(u64, LineReader)> = Vec::new();
    let mut now = Instant::now();
    let mut rest = input;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        // A length and that many bytes, for the ops that carry bytes.
        let take = |rest: &mut &[u8]| -> Vec<u8> {
            let Some((&n, tail)) = rest.split_first() else {
                return Vec::new();
            };
            let n = (n as usize * 4).min(tail.len());
            let (bytes, tail) = tail.split_at(n);
            *rest = tail;
            bytes.to_vec()
        };
        match op % 8 {
            0 => {
                if let Some(id) = p.connect() {
                    clients.push((id, LineReader::new()));
                }
            }
            1 if !clients.is_empty() => {
                let (id, _) = clients.remove(op as usize / 8 % clients.len());
                p.disconnect(id);
            }
            2 if !clients.is_empty() => {
                let bytes = take(&mut rest);
                let i = op as usize / 8 % clients.len();
                let (id, lines) = &mut clients[i];
                lines.push(&bytes);
                while let Some(line) = lines.next_line() {
                    p.handle_request(*id, line);
                }
            }
            3 | 4 => p.handle_log_bytes(&take(&mut rest), now),
            5 => p.handle_event(&Event::LogOpened {
        number: op as u32,
        format: ulog_recv::autopilot::LogFormat::ULog,
    }, now),
            6 => p.handle_event(
                &Event::LogClosed {
                    number: 0,
                    reason: CloseReason::Stalled,
                    bytes: 0,
                },
                now,
            ),
            _ => {
                now += Duration::from_millis(op as u64 * 10);
                p.handle_stats(&SessionStats::default(), &Default::default(), ServerStats::default(), now);
            }
        }
        while let Some(out) = p.poll_transmit() {
            assert_eq!(out.line.last(), Some(&b'\n'));
            let json: serde_json::Value =
                serde_json::from_slice(&out.line).expect("every line is JSON");
            assert!(json["type"].is_string());
        }
    }
});
