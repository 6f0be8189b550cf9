//! MAVLink framing for the session, sans-IO, on the `mavlink` crate (the ardupilotmega
//! dialect, which holds the common one; ArduPilot's log blocks as [`LogBlock`]): bytes in
//! any pieces → frames out; messages → bytes. Frames with a bad CRC, of messages outside the
//! dialect, or with a 32-bit system id (a `mavlink` crate extension no autopilot sends) are
//! skipped and counted, never an error that stops the link.
//!
//! A [`Frame`] keeps its raw bytes beside the decoded message, so that its MAVLink 2 signature
//! can be checked ([`crate::link::signing`]).
//!
//! Byte streams (serial, TCP) go through [`FrameDecoder::push`] and
//! [`FrameDecoder::next_frame`], which carry a partial frame over to the next piece. A UDP
//! datagram holds whole frames, so [`FrameDecoder::datagram`] reads it on its own: a stray
//! datagram can neither complete nor spoil a frame of the next one.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read};

use mavlink::consts::v2::IFLAG_SIGNED;
use mavlink::dialects::ardupilotmega::MavMessage;
use mavlink::error::MessageReadError;
use mavlink::{
    MAVLinkMessageRaw, MAVLinkV2MessageRaw, MavHeader, MavlinkReader, Message, MessageData,
};

use crate::link::log_block::LogBlock;

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
    /// Frames that could not be decoded (bad payload, 32-bit system id).
    pub undecodable: u64,
}

/// What a frame carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    /// A message of the dialect, as the crate decodes it.
    Mav(MavMessage),
    /// ArduPilot's log block, which the crate's generated type cannot carry ([`LogBlock`]).
    LogBlock(LogBlock),
}

impl Received {
    /// The dialect's message, when it is one.
    pub fn mav(&self) -> Option<&MavMessage> {
        match self {
            Received::Mav(m) => Some(m),
            Received::LogBlock(_) => None,
        }
    }

    pub fn into_mav(self) -> Option<MavMessage> {
        match self {
            Received::Mav(m) => Some(m),
            Received::LogBlock(_) => None,
        }
    }
}

/// One CRC-valid frame: its header, its message, and its bytes as received.
pub struct Frame {
    pub header: MavHeader,
    pub message: Received,
    raw: MAVLinkMessageRaw,
}

impl Frame {
    /// The sender's system id (8 bits: frames with wider ids are never handed out).
    pub fn system_id(&self) -> u8 {
        self.header.system_id as u8
    }

    /// The raw MAVLink 2 frame, when the frame is MAVLink 2.
    pub fn raw_v2(&self) -> Option<&MAVLinkV2MessageRaw> {
        match &self.raw {
            MAVLinkMessageRaw::V2(raw) => Some(raw),
            MAVLinkMessageRaw::V1(_) => None,
        }
    }

    /// True for a MAVLink 2 frame that carries a signature (valid or not).
    pub fn is_signed(&self) -> bool {
        self.raw_v2()
            .is_some_and(|r| r.incompatibility_flags() & IFLAG_SIGNED != 0)
    }
}

/// Incremental MAVLink decoder; see the module docs. Cheap to create: the buffer for byte
/// streams is made on the first [`push`](Self::push).
#[derive(Default)]
pub struct FrameDecoder {
    reader: Option<MavlinkReader<Inbox>>,
    stats: FrameStats,
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn stats(&self) -> FrameStats {
        self.stats
    }

    /// Appends received bytes (any piece of a byte stream).
    pub fn push(&mut self, bytes: &[u8]) {
        self.reader
            .get_or_insert_with(|| MavlinkReader::new(Inbox::default()))
            .get_mut()
            .bytes
            .extend(bytes);
        self.stats.bytes_in += bytes.len() as u64;
    }

    /// The next complete, CRC-valid frame of the common dialect (MAVLink 1 or 2) from what
    /// was pushed, or `None` when more bytes are needed.
    pub fn next_frame(&mut self) -> Option<Frame> {
        loop {
            let reader = self.reader.as_mut()?;
            match reader.read_any_raw_message::<MavMessage>() {
                Ok(raw) => {
                    if let Some(frame) = self.decode(raw) {
                        return Some(frame);
                    }
                }
                Err(MessageReadError::Io(_)) => return None,
                Err(MessageReadError::Parse(_)) => self.stats.undecodable += 1,
            }
        }
    }

    /// Reads one UDP datagram on its own and hands each of its frames to `each`; a partial
    /// frame at its end is dropped.
    pub fn datagram(&mut self, bytes: &[u8], mut each: impl FnMut(Frame)) {
        self.stats.bytes_in += bytes.len() as u64;
        let mut reader = MavlinkReader::with_capacity(2 * mavlink::consts::MAX_FRAME_SIZE, bytes);
        loop {
            match reader.read_any_raw_message::<MavMessage>() {
                Ok(raw) => {
                    if let Some(frame) = self.decode(raw) {
                        each(frame);
                    }
                }
                Err(MessageReadError::Io(_)) => return,
                Err(MessageReadError::Parse(_)) => self.stats.undecodable += 1,
            }
        }
    }

    fn decode(&mut self, raw: MAVLinkMessageRaw) -> Option<Frame> {
        let system_id = raw.system_id();
        if system_id > u32::from(u8::MAX) {
            // Truncated to 8 bits it could pass for any system: never taken.
            self.stats.undecodable += 1;
            return None;
        }
        let message = if raw.message_id() == LogBlock::ID {
            LogBlock::deser(raw.version(), raw.payload()).map(Received::LogBlock)
        } else {
            MavMessage::parse(raw.version(), raw.message_id(), raw.payload()).map(Received::Mav)
        };
        match message {
            Ok(message) => {
                self.stats.messages += 1;
                Some(Frame {
                    header: MavHeader {
                        system_id,
                        component_id: raw.component_id(),
                        sequence: raw.sequence(),
                    },
                    message,
                    raw,
                })
            }
            Err(e) => {
                self.stats.undecodable += 1;
                tracing::debug!(error = %e, "skipping an undecodable MAVLink frame");
                None
            }
        }
    }
}

/// Serialises `message` as one unsigned MAVLink 2 frame, appended to `out`.
pub fn encode(header: MavHeader, message: &MavMessage, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let _ = mavlink::write_v2_msg(out, header, message);
}

#[cfg(test)]
mod tests {
    use super::*;
    use mavlink::dialects::ardupilotmega::{LOGGING_ACK_DATA, LOGGING_DATA_DATA};

    fn header(sequence: u8) -> MavHeader {
        MavHeader {
            system_id: 1,
            component_id: 1,
            sequence,
        }
    }

    fn two_frames_and_a_torn_start() -> (Vec<u8>, LOGGING_DATA_DATA) {
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
        (wire, data)
    }

    #[test]
    fn frames_survive_any_split_and_garbage_between_them() {
        let (wire, data) = two_frames_and_a_torn_start();
        for piece in 1..wire.len() {
            let mut dec = FrameDecoder::new();
            let mut got = Vec::new();
            for p in wire.chunks(piece) {
                dec.push(p);
                while let Some(f) = dec.next_frame() {
                    assert!(!f.is_signed());
                    let Received::Mav(m) = f.message else {
                        panic!("not a dialect message")
                    };
                    got.push(m);
                }
            }
            assert_eq!(got.len(), 2, "piece size {piece}");
            assert_eq!(got[0], MavMessage::LOGGING_DATA(data.clone()));
            assert!(matches!(got[1], MavMessage::LOGGING_ACK(ref a) if a.sequence == 9));
        }
    }

    #[test]
    fn a_datagram_is_read_on_its_own() {
        let (wire, _) = two_frames_and_a_torn_start();
        let mut dec = FrameDecoder::new();
        let mut n = 0;
        dec.datagram(&wire, |_| n += 1);
        assert_eq!(n, 2);
        // A datagram that ends inside a frame does not complete it with the next one.
        let cut = wire.len() - 5;
        let mut got = Vec::new();
        dec.datagram(&wire[..cut], |f| got.push(f.header.sequence));
        dec.datagram(&wire[cut..], |f| got.push(f.header.sequence));
        assert_eq!(got, [7]);
    }

    #[test]
    fn a_32_bit_system_id_never_passes_for_an_8_bit_one() {
        let mut wire = Vec::new();
        let h = MavHeader {
            system_id: 257, // 1 when cut to 8 bits
            component_id: 1,
            sequence: 0,
        };
        let mut raw = MAVLinkV2MessageRaw::new();
        raw.serialize_message(h, &MavMessage::LOGGING_ACK(LOGGING_ACK_DATA::default()));
        wire.extend_from_slice(raw.raw_bytes());
        let mut dec = FrameDecoder::new();
        let mut n = 0;
        dec.datagram(&wire, |_| n += 1);
        assert_eq!((n, dec.stats().undecodable), (0, 1));
    }
}
