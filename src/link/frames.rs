//! MAVLink framing for the session, sans-IO, on the `mavlink` crate (common dialect): bytes in
//! any pieces → messages out; messages → bytes. Frames with a bad CRC or of messages outside the
//! dialect are skipped and counted, never an error that stops the link.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read};

use mavlink::dialects::common::MavMessage;
use mavlink::error::MessageReadError;
use mavlink::{MavHeader, MavlinkReader};

/// The bytes pushed so far, readable by the `mavlink` crate's reader. Reading it empty says
/// `WouldBlock`, which the reader passes up while keeping any partial frame.
#[derive(Default)]
struct Inbox {
    bytes: VecDeque<u8>,
}

impl Read for Inbox {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.bytes.is_empty() {
            return Err(ErrorKind::WouldBlock.into());
        }
        let n = out.len().min(self.bytes.len());
        let (a, b) = self.bytes.as_slices();
        let from_a = n.min(a.len());
        out[..from_a].copy_from_slice(&a[..from_a]);
        out[from_a..n].copy_from_slice(&b[..n - from_a]);
        self.bytes.drain(..n);
        Ok(n)
    }
}

/// Counters; all monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FrameStats {
    pub bytes_in: u64,
    pub messages: u64,
    /// Frames that could not be decoded (unknown message id, bad payload).
    pub undecodable: u64,
}

/// Incremental MAVLink decoder: [`push`](Self::push) bytes, then call
/// [`next_message`](Self::next_message) until it returns `None`.
pub struct FrameDecoder {
    reader: MavlinkReader<Inbox>,
    stats: FrameStats,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self {
            reader: MavlinkReader::new(Inbox::default()),
            stats: FrameStats::default(),
        }
    }

    pub fn stats(&self) -> FrameStats {
        self.stats
    }

    /// Appends received bytes (a datagram, or any piece of a stream).
    pub fn push(&mut self, bytes: &[u8]) {
        self.reader.get_mut().bytes.extend(bytes);
        self.stats.bytes_in += bytes.len() as u64;
    }

    /// The next complete, CRC-valid message of the common dialect (MAVLink 1 or 2), or
    /// `None` when more bytes are needed.
    pub fn next_message(&mut self) -> Option<(MavHeader, MavMessage)> {
        loop {
            match self.reader.read_any_message::<MavMessage>() {
                Ok(m) => {
                    self.stats.messages += 1;
                    return Some(m);
                }
                Err(MessageReadError::Io(_)) => return None,
                Err(MessageReadError::Parse(e)) => {
                    self.stats.undecodable += 1;
                    tracing::debug!(error = %e, "skipping an undecodable MAVLink frame");
                }
            }
        }
    }
}

/// Serialises `message` as one MAVLink 2 frame, appended to `out`.
pub fn encode(header: MavHeader, message: &MavMessage, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let _ = mavlink::write_v2_msg(out, header, message);
}

#[cfg(test)]
mod tests {
    use super::*;
    use mavlink::dialects::common::{LOGGING_ACK_DATA, LOGGING_DATA_DATA};

    fn header(sequence: u8) -> MavHeader {
        MavHeader {
            system_id: 1,
            component_id: 1,
            sequence,
        }
    }

    #[test]
    fn frames_survive_any_split_and_garbage_between_them() {
        let mut wire = Vec::new();
        let mut data = LOGGING_DATA_DATA {
            sequence: 65535,
            length: 3,
            first_message_offset: 255,
            ..Default::default()
        };
        data.data[..3].copy_from_slice(&[1, 2, 3]);
        encode(
            header(7),
            &MavMessage::LOGGING_DATA(data.clone()),
            &mut wire,
        );
        wire.extend_from_slice(&[0xfd, 0x00, 0x13]); // a torn frame start
        encode(
            header(8),
            &MavMessage::LOGGING_ACK(LOGGING_ACK_DATA {
                sequence: 9,
                ..Default::default()
            }),
            &mut wire,
        );
        for piece in 1..wire.len() {
            let mut dec = FrameDecoder::new();
            let mut got = Vec::new();
            for p in wire.chunks(piece) {
                dec.push(p);
                while let Some((_, m)) = dec.next_message() {
                    got.push(m);
                }
            }
            assert_eq!(got.len(), 2, "piece size {piece}");
            assert_eq!(got[0], MavMessage::LOGGING_DATA(data.clone()));
            assert!(matches!(got[1], MavMessage::LOGGING_ACK(ref a) if a.sequence == 9));
        }
    }
}
