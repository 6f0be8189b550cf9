//! ArduPilot's `REMOTE_LOG_DATA_BLOCK` (ardupilotmega message 184) as a MAVLink message
//! type of the `mavlink` crate's own framing ([`mavlink::MessageData`]).
//!
//! The crate's generated type cannot carry it: the dialect's XML gives `seqno` the enum
//! `MAV_REMOTE_LOG_DATA_BLOCK_COMMANDS` (START and STOP only), so the generated parser
//! refuses every real block number as an invalid enum value. [`LogBlock`] is the same message
//! with `seqno` as the `uint32_t` it is on the wire; its id and CRC extra are the dialect's,
//! and the crate frames, checks and signs it as any other message.

use mavlink::MessageData;
use mavlink::dialects::ardupilotmega::{MavMessage, REMOTE_LOG_DATA_BLOCK_DATA};
use mavlink::error::ParserError;
use mavlink::{MAVLinkV2MessageRaw, MavHeader, MavlinkVersion};

/// Log bytes in one block.
pub const BLOCK_BYTES: usize = 200;
/// `MAV_REMOTE_LOG_DATA_BLOCK_START`: the `seqno` of a REMOTE_LOG_BLOCK_STATUS that starts
/// the stream.
pub const BLOCK_START: u32 = 2_147_483_646;
/// `MAV_REMOTE_LOG_DATA_BLOCK_STOP`: the `seqno` that stops it.
pub const BLOCK_STOP: u32 = 2_147_483_645;
/// `MAV_COMP_ID_LOG`, the component ArduPilot sends its blocks from.
pub const LOG_COMPONENT: u8 = 155;

/// One block of the vehicle's DataFlash log: bytes `seqno * 200 ..` of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBlock {
    pub target_system: u8,
    pub target_component: u8,
    pub seqno: u32,
    pub data: [u8; BLOCK_BYTES],
}

impl Default for LogBlock {
    fn default() -> Self {
        Self {
            target_system: 0,
            target_component: 0,
            seqno: 0,
            data: [0; BLOCK_BYTES],
        }
    }
}

const ENCODED_LEN: usize = 4 + 1 + 1 + BLOCK_BYTES;

impl MessageData for LogBlock {
    type Message = MavMessage;
    const ID: u32 = REMOTE_LOG_DATA_BLOCK_DATA::ID;
    const NAME: &'static str = "REMOTE_LOG_DATA_BLOCK";
    const EXTRA_CRC: u8 = REMOTE_LOG_DATA_BLOCK_DATA::EXTRA_CRC;
    const ENCODED_LEN: usize = ENCODED_LEN;

    fn ser(&self, version: MavlinkVersion, payload: &mut [u8]) -> usize {
        payload[..4].copy_from_slice(&self.seqno.to_le_bytes());
        payload[4] = self.target_system;
        payload[5] = self.target_component;
        payload[6..ENCODED_LEN].copy_from_slice(&self.data);
        match version {
            MavlinkVersion::V1 => ENCODED_LEN,
            // MAVLink 2 trims the payload's trailing zeros (at least one byte stays).
            MavlinkVersion::V2 => payload[..ENCODED_LEN]
                .iter()
                .rposition(|&b| b != 0)
                .map_or(1, |i| i + 1),
        }
    }

    fn deser(_: MavlinkVersion, payload: &[u8]) -> Result<Self, ParserError> {
        if payload.len() > ENCODED_LEN {
            return Err(ParserError::InvalidPayloadSize {
                id: Self::ID,
                maximum: ENCODED_LEN,
                actual: payload.len(),
            });
        }
        // Trailing zeros trimmed by MAVLink 2 come back.
        let mut p = [0u8; ENCODED_LEN];
        p[..payload.len()].copy_from_slice(payload);
        let mut data = [0u8; BLOCK_BYTES];
        data.copy_from_slice(&p[6..]);
        Ok(Self {
            seqno: u32::from_le_bytes(p[..4].try_into().expect("4 bytes")),
            target_system: p[4],
            target_component: p[5],
            data,
        })
    }
}

/// Appends `block` as one unsigned MAVLink 2 frame.
pub fn encode_block(header: MavHeader, block: &LogBlock, out: &mut Vec<u8>) {
    let mut raw = MAVLinkV2MessageRaw::new();
    raw.serialize_message_data(header, block);
    out.extend_from_slice(raw.raw_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::frames::{FrameDecoder, Received};

    #[test]
    fn a_block_of_any_seqno_goes_through_the_crates_framing() {
        let mut block = LogBlock {
            target_system: 255,
            target_component: 190,
            seqno: 123_456,
            ..LogBlock::default()
        };
        block.data[..3].copy_from_slice(&[0xA3, 0x95, 128]);
        let header = MavHeader {
            system_id: 1,
            component_id: LOG_COMPONENT,
            sequence: 9,
        };
        let mut wire = Vec::new();
        encode_block(header, &block, &mut wire);
        // Trimmed: 6 header fields and 3 data bytes.
        assert_eq!(wire.len(), 10 + 9 + 2);
        let mut got = Vec::new();
        FrameDecoder::new().datagram(&wire, |f| got.push(f));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].header.component_id, LOG_COMPONENT);
        assert!(matches!(&got[0].message, Received::LogBlock(b) if *b == block));
        // A corrupt byte fails the CRC: nothing comes out.
        wire[12] ^= 1;
        let mut n = 0;
        FrameDecoder::new().datagram(&wire, |_| n += 1);
        assert_eq!(n, 0);
    }
}
