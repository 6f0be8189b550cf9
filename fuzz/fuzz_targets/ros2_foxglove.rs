//! Fuzz target: ULog formats as ROS 2 types, and the Foxglove server's core.
//!
//! The input's first byte picks the mode:
//! - even: the rest is format definitions (lines, `name:type field;...`) then, after a NUL,
//!   sample bytes. Every format that parses is compiled into a ROS 2 type and, where the
//!   sample is long enough, encoded: nothing may panic, the schema must name its type's fields
//!   as ROS 2 allows, and the encoding must begin with the CDR header and be deterministic.
//! - odd: the rest is a log (after a valid file header) fed to a `FoxglovePublisher` with one
//!   client that subscribes to every channel it is offered: nothing may panic, every text
//!   message must be one JSON object with an `op`, every binary one a message-data frame of a
//!   subscription the client made.
#![no_main]

use std::collections::HashSet;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use ulog_recv::live::foxglove::publisher::{FoxglovePublisher, is_text};
use ulog_recv::link::Event;
use ulog_recv::ros::ros2::Ros2Type;
use ulog_recv::ulog::{FormatDef, Formats};

fn types_and_samples(input: &[u8]) {
    let (defs, sample) = match input.iter().position(|&b| b == 0) {
        Some(i) => (&input[..i], &input[i + 1..]),
        None => (input, &[][..]),
    };
    let text = String::from_utf8_lossy(defs);
    let formats: Formats = text
        .lines()
        .filter_map(|l| FormatDef::parse(l).ok())
        .map(|f| (f.name.clone(), std::sync::Arc::new(f)))
        .collect();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for name in formats.keys() {
        let Ok(ty) = Ros2Type::compile(name, &formats) else { continue };
        for line in ty.schema.lines().filter(|l| !l.is_empty() && !l.starts_with("MSG:")) {
            if line.starts_with('=') {
                continue;
            }
            let field = line.rsplit(' ').next().unwrap();
            assert!(
                field.starts_with(|c: char| c.is_ascii_lowercase())
                    && field.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                    && !field.contains("__")
                    && !field.ends_with('_'),
                "{field}"
            );
        }
        if ty.encode(sample, &mut a).is_ok() {
            assert_eq!(&a[..4], &[0, 1, 0, 0]);
            ty.encode(sample, &mut b).unwrap();
            assert_eq!(a, b);
        } else {
            assert!(sample.len() < ty.needed_len());
        }
    }
}

fn publisher(input: &[u8]) {
    let now = Instant::now();
    let mut p = FoxglovePublisher::new("fuzz", "1");
    let client = p.connect().unwrap();
    p.handle_event(&Event::LogOpened {
        number: 1,
        format: ulog_recv::autopilot::LogFormat::ULog,
    }, now);
    let mut header = b"ULog\x01\x12\x35\x01".to_vec();
    header.extend(0u64.to_le_bytes());
    p.handle_log_bytes(&header, now);
    let mut subscriptions = HashSet::new();
    let mut next = 0u32;
    for piece in input.chunks(97) {
        p.handle_log_bytes(piece, now);
        while let Some(out) = p.poll_transmit() {
            assert_eq!(out.client, client);
            if is_text(&out.message) {
                let m: serde_json::Value = serde_json::from_slice(&out.message).unwrap();
                assert!(m["op"].is_string());
                if m["op"] == "advertise" {
                    for ch in m["channels"].as_array().unwrap() {
                        next += 1;
                        subscriptions.insert(next);
                        let request = format!(
                            r#"{{"op":"subscribe","subscriptions":[{{"id":{next},"channelId":{}}}]}}"#,
                            ch["id"]
                        );
                        p.handle_text(client, &request, now);
                    }
                }
            } else {
                assert_eq!(out.message[0], 1);
                assert!(out.message.len() >= 13);
                let sub = u32::from_le_bytes(out.message[1..5].try_into().unwrap());
                assert!(subscriptions.contains(&sub));
            }
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else { return };
    if mode % 2 == 0 {
        types_and_samples(rest);
    } else {
        publisher(rest);
    }
});
