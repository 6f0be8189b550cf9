//! A long flight for the benches: a log's data section repeated, its definitions once.

/// `log` with its data section (from its first data message on) `times` times over.
pub fn repeat_data(log: &[u8], times: usize) -> Vec<u8> {
    let mut at = ulog_recv::ulog::message::FILE_HEADER_LEN;
    while at + 3 <= log.len() && log[at + 2] != ulog_recv::ulog::message::msg_type::DATA {
        at += 3 + u16::from_le_bytes([log[at], log[at + 1]]) as usize;
    }
    let mut out = log[..at].to_vec();
    for _ in 0..times {
        out.extend_from_slice(&log[at..]);
    }
    out
}
