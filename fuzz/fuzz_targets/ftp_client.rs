//! Fuzz target: the MAVLink FTP client's replies. The input is a script: start an operation
//! (list, open, read a range, checksum, close), a reply payload whose sequence number,
//! opcode, request opcode, session and offset are steered near what one of the requests in
//! flight expects (a short read has several) (so that it reaches the handlers) with fuzzed data and flags, raw payloads, time
//! steps; the first byte says whether a byte budget paces the client (no packets asked
//! ahead then). The client must never panic, never hand out more bytes than a read asked for, and
//! never stay busy with no timer armed.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use ulog_recv::link::ftp::wire::{FtpPayload, PAYLOAD_LEN, op};
use ulog_recv::link::ftp::{FtpClient, FtpConfig, FtpOp, FtpReply};

const REQUESTS: [u8; 7] = [
    op::LIST_DIRECTORY,
    op::OPEN_FILE_RO,
    op::READ_FILE,
    op::BURST_READ_FILE,
    op::CALC_FILE_CRC32,
    op::TERMINATE_SESSION,
    op::RESET_SESSIONS,
];

fuzz_target!(|input: &[u8]| {
    let t0 = Instant::now();
    let mut now = t0;
    let mut client = FtpClient::new(FtpConfig {
        rate: (input.first().is_some_and(|b| b % 2 == 0)).then_some(20_000),
        ..FtpConfig::default()
    });
    // The newest requests sent, the newest last.
    let mut sent: Vec<FtpPayload> = Vec::new();
    let mut asked: Option<u64> = None;
    let mut bytes = input;
    while let Some((&code, rest)) = bytes.split_first() {
        bytes = rest;
        let take = |bytes: &mut &[u8], n: usize| -> Vec<u8> {
            let n = n.min(bytes.len());
            let (a, b) = bytes.split_at(n);
            *bytes = b;
            a.to_vec()
        };
        match code % 8 {
            0 => {
                let arg = take(&mut bytes, 4);
                let n = u32::from_le_bytes([
                    *arg.first().unwrap_or(&0),
                    *arg.get(1).unwrap_or(&0),
                    *arg.get(2).unwrap_or(&0),
                    *arg.get(3).unwrap_or(&0),
                ]) as u64;
                let op = match code / 8 % 5 {
                    0 => FtpOp::List { path: "@MAV_LOG".into() },
                    1 => FtpOp::Open { path: "/fs/microsd/log/a.ulg".into() },
                    2 => FtpOp::Read { offset: n % 5000, len: n % 100_000 },
                    3 => FtpOp::Crc32 { path: "a".into() },
                    _ => FtpOp::Close,
                };
                if let FtpOp::Read { len, .. } = op {
                    if client.start(op, now).is_ok() {
                        asked = Some(len);
                    }
                } else {
                    let _ = client.start(op, now);
                }
            }
            1..=4 => {
                // A reply steered near the request in hand.
                let head = take(&mut bytes, 7);
                let data = take(&mut bytes, *head.first().unwrap_or(&0) as usize % 240);
                let b = |i: usize| *head.get(i).unwrap_or(&0);
                let Some(request) = sent.iter().rev().nth(b(6) as usize % 4).or(sent.last())
                else {
                    continue;
                };
                let mut reply = FtpPayload::ack(request, data);
                reply.seq = request.seq.wrapping_add(1 + (b(1) % 4) as u16);
                reply.opcode = if b(2) % 4 == 0 { op::NAK } else { op::ACK };
                if b(3) % 5 == 0 {
                    reply.req_opcode = REQUESTS[b(3) as usize / 5 % REQUESTS.len()];
                }
                reply.offset = request.offset.wrapping_add((b(4) as u32 % 4) * 239);
                reply.burst_complete = b(5) % 3 == 0;
                reply.session = if b(5) % 7 == 0 { b(5) } else { 0 };
                client.handle_reply(&reply.encode(), now);
            }
            5 => {
                let raw = take(&mut bytes, PAYLOAD_LEN);
                let mut payload = [0u8; PAYLOAD_LEN];
                payload[..raw.len()].copy_from_slice(&raw);
                client.handle_reply(&payload, now);
            }
            _ => {
                let step = take(&mut bytes, 1);
                now += Duration::from_millis(*step.first().unwrap_or(&0) as u64 * 20);
                if client.poll_timeout().is_some_and(|t| t <= now) {
                    client.handle_timeout(now);
                }
            }
        }
        while let Some(request) = client.poll_request() {
            sent.push(request);
        }
        if sent.len() > 8 {
            sent.drain(..sent.len() - 8);
        }
        while let Some(result) = client.poll_result() {
            if let Ok(FtpReply::Read { data, .. }) = &result {
                assert!(data.len() as u64 <= asked.unwrap_or(0), "a read gave more than asked");
            }
        }
        assert!(
            !client.is_busy() || client.poll_timeout().is_some(),
            "busy without a timer: it would wait forever"
        );
    }
});
