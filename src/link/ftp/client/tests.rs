//! The client against replies as PX4's server sends them: stale, lost, out of turn, past
//! the end of the file.

use super::*;
use crate::link::ftp::wire::MAX_DATA;

/// The file the server holds: byte `i` is `i as u8`.
fn bytes(at: u64, n: u64) -> Vec<u8> {
    (at..at + n).map(|i| i as u8).collect()
}

/// A client with `path` open (session 0), and the time.
fn opened() -> (FtpClient, Instant) {
    let now = Instant::now();
    let mut client = FtpClient::new(FtpConfig::default());
    client
        .start(
            FtpOp::Open {
                path: "/log/a.ulg".into(),
            },
            now,
        )
        .unwrap();
    let open = client.poll_request().unwrap();
    let reply = FtpPayload::ack(&open, 1_000_000u32.to_le_bytes().to_vec());
    client.handle_reply(&reply.encode(), now);
    assert!(matches!(
        client.poll_result(),
        Some(Ok(FtpReply::Opened { .. }))
    ));
    (client, now)
}

/// The server's answer to a single read `request`.
fn answer(request: &FtpPayload) -> FtpPayload {
    FtpPayload::ack(request, bytes(request.offset as u64, MAX_DATA as u64))
}

/// Packet `k` of a burst asked for by `request`.
fn burst_packet(request: &FtpPayload, k: u16, complete: bool) -> FtpPayload {
    let offset = request.offset + k as u32 * MAX_DATA as u32;
    let mut p = FtpPayload::ack(request, bytes(offset as u64, MAX_DATA as u64));
    p.seq = request.seq.wrapping_add(1 + k);
    p.offset = offset;
    p.burst_complete = complete;
    p
}

#[test]
fn a_single_read_whose_reply_a_burst_made_stale_asks_for_the_rest() {
    let (mut client, now) = opened();
    // A burst of an earlier read is still streaming: its packets cover the start of
    // this read before our own reply comes.
    let earlier = FtpPayload::request(40, 0, op::BURST_READ_FILE, 0, &[]);
    client
        .start(
            FtpOp::Read {
                offset: 0,
                len: 478,
            },
            now,
        )
        .unwrap();
    let first = client.poll_request().unwrap();
    assert_eq!((first.opcode, first.offset), (op::READ_FILE, 0));
    client.handle_reply(&burst_packet(&earlier, 0, false).encode(), now);
    // Our reply, for bytes the read holds already.
    client.handle_reply(&answer(&first).encode(), now);
    let rest = client
        .poll_request()
        .expect("the rest asked for at once, not the stale request resent");
    assert_eq!((rest.opcode, rest.offset), (op::READ_FILE, 239));
    client.handle_reply(&answer(&rest).encode(), now);
    let Some(Ok(FtpReply::Read { offset: 0, data })) = client.poll_result() else {
        panic!("the read ends")
    };
    assert_eq!(data, bytes(0, 478));
}

#[test]
fn a_short_read_asks_for_its_packets_at_once_and_asks_again_only_for_a_lost_one() {
    let (mut client, now) = opened();
    let len = 3 * MAX_DATA as u64 + 10;
    client.start(FtpOp::Read { offset: 100, len }, now).unwrap();
    let sent: Vec<FtpPayload> = std::iter::from_fn(|| client.poll_request()).collect();
    let offsets: Vec<u32> = sent.iter().map(|r| r.offset).collect();
    assert_eq!(
        offsets,
        [100, 339, 578, 817],
        "the read's packets asked for at once"
    );
    assert_eq!(
        sent[3].size, 10,
        "the last one asks for what the read needs"
    );
    let seqs: std::collections::HashSet<u16> = sent.iter().map(|r| r.seq).collect();
    assert_eq!(seqs.len(), 4, "each request its own sequence number");
    // The first answer lost; the others come, out of order.
    for r in [&sent[2], &sent[3], &sent[1]] {
        client.handle_reply(&answer(r).encode(), now);
    }
    assert!(client.poll_result().is_none());
    assert!(
        client.poll_request().is_none(),
        "nothing asked twice before its wait ends"
    );
    client.handle_timeout(client.poll_timeout().expect("a reply waited for"));
    let again = client.poll_request().expect("the lost one asked again");
    assert_eq!((again.seq, again.offset), (sent[0].seq, 100));
    client.handle_reply(&answer(&again).encode(), now);
    let Some(Ok(FtpReply::Read { offset: 100, data })) = client.poll_result() else {
        panic!("the read ends")
    };
    assert_eq!(data, bytes(100, len));
    assert!(client.poll_request().is_none());
}

#[test]
fn a_request_whose_later_one_is_answered_first_is_asked_again_after_a_round_trip() {
    let (mut client, t0) = opened();
    let rtt = Duration::from_millis(10);
    // One read measures the round trip.
    client
        .start(FtpOp::Read { offset: 0, len: 10 }, t0)
        .unwrap();
    let first = client.poll_request().unwrap();
    client.handle_reply(&answer(&first).encode(), t0 + rtt);
    assert!(matches!(
        client.poll_result(),
        Some(Ok(FtpReply::Read { .. }))
    ));
    let t1 = t0 + 2 * rtt;
    client
        .start(
            FtpOp::Read {
                offset: 0,
                len: 478,
            },
            t1,
        )
        .unwrap();
    let sent: Vec<FtpPayload> = std::iter::from_fn(|| client.poll_request()).collect();
    assert_eq!(sent.len(), 2);
    // The second answered within the round trip: the first may still come.
    client.handle_reply(&answer(&sent[1]).encode(), t1 + rtt / 4);
    assert!(client.poll_request().is_none());
    let wait = client.poll_timeout().expect("a wait") - t1;
    assert!(
        wait < 2 * rtt,
        "the first taken for lost about a round trip after it went, not after {wait:?}"
    );
    client.handle_timeout(t1 + wait);
    let again = client.poll_request().expect("the first asked again");
    assert_eq!((again.seq, again.offset), (sent[0].seq, 0));
    client.handle_reply(&answer(&again).encode(), t1 + wait + rtt);
    let Some(Ok(FtpReply::Read { data, .. })) = client.poll_result() else {
        panic!("the read ends")
    };
    assert_eq!(data, bytes(0, 478));
}

#[test]
fn a_request_sent_ahead_past_the_end_of_the_file_ends_the_read_there() {
    let (mut client, now) = opened();
    client
        .start(
            FtpOp::Read {
                offset: 0,
                len: 600,
            },
            now,
        )
        .unwrap();
    let sent: Vec<FtpPayload> = std::iter::from_fn(|| client.poll_request()).collect();
    assert_eq!(sent.len(), 3);
    // The file is 300 bytes long.
    client.handle_reply(&FtpPayload::nak_of(&sent[2], Nak::Eof).encode(), now);
    let mut second = FtpPayload::ack(&sent[1], bytes(239, 61));
    second.offset = 239;
    client.handle_reply(&second.encode(), now);
    client.handle_reply(&answer(&sent[0]).encode(), now);
    let Some(Ok(FtpReply::Read { offset: 0, data })) = client.poll_result() else {
        panic!("the read ends at the end of the file, with no wait")
    };
    assert_eq!(data, bytes(0, 300));
}

#[test]
fn a_packet_a_burst_lost_is_read_alone_not_in_a_new_burst() {
    let (mut client, now) = opened();
    let len = 10 * MAX_DATA as u64;
    client
        .start(
            FtpOp::Read {
                offset: 0,
                len: BURST_MIN + len,
            },
            now,
        )
        .unwrap();
    let burst = client.poll_request().unwrap();
    assert_eq!(burst.opcode, op::BURST_READ_FILE);
    // Packet 1 of the burst lost; the burst ends after packet 9.
    for k in (0..10).filter(|k| *k != 1) {
        client.handle_reply(&burst_packet(&burst, k, k == 9).encode(), now);
    }
    let hole = client.poll_request().expect("the hole asked for");
    assert_eq!((hole.opcode, hole.offset), (op::READ_FILE, 239));
    client.handle_reply(&answer(&hole).encode(), now);
    // Then the rest (BURST_MIN bytes and more) as a burst from after what came.
    let next = client.poll_request().expect("the rest asked for");
    assert_eq!(
        (next.opcode, next.offset),
        (op::BURST_READ_FILE, len as u32)
    );
}
