//! MCAP records as bytes: the header, schema and channel records, a record's opcode and
//! length, and the little-endian fields, strings and maps inside.

use super::{PROFILE, op};

pub(super) fn header_record(out: &mut Vec<u8>) {
    let at = begin(out, op::HEADER);
    put_str(out, PROFILE);
    put_str(out, concat!("ulog-recv ", env!("CARGO_PKG_VERSION")));
    end(out, at);
}

pub(super) fn schema_record(out: &mut Vec<u8>, id: u16, name: &str, text: &str) {
    let at = begin(out, op::SCHEMA);
    put_u16(out, id);
    put_str(out, name);
    put_str(out, "ros2msg");
    put_str(out, text);
    end(out, at);
}

pub(super) fn channel_record(out: &mut Vec<u8>, id: u16, schema: u16, topic: &str) {
    let at = begin(out, op::CHANNEL);
    put_u16(out, id);
    put_u16(out, schema);
    put_str(out, topic);
    put_str(out, "cdr");
    put_map(out, std::iter::empty());
    end(out, at);
}

/// Starts a record: its opcode and a length to be filled in by [`end`] (returned: where).
pub(super) fn begin(out: &mut Vec<u8>, opcode: u8) -> usize {
    out.push(opcode);
    out.extend_from_slice(&[0; 8]);
    out.len() - 8
}

/// Fills in the length of the record [`begin`] started at `at`.
pub(super) fn end(out: &mut [u8], at: usize) {
    let length = (out.len() - at - 8) as u64;
    out[at..at + 8].copy_from_slice(&length.to_le_bytes());
}

pub(super) fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(super) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(super) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// An MCAP string (and a schema's data): u32 length, then the bytes.
pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s.as_bytes());
}

/// An MCAP map of strings: u32 length in bytes, then key, value, key, value...
pub(super) fn put_map<'a>(out: &mut Vec<u8>, entries: impl Iterator<Item = (&'a str, &'a str)>) {
    let at = out.len();
    put_u32(out, 0);
    for (k, v) in entries {
        put_str(out, k);
        put_str(out, v);
    }
    let length = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&length.to_le_bytes());
}
