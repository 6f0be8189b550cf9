//! Where whole messages begin in a piece of the SD log read from anywhere: a chain of
//! messages whose sizes and types fit.

use crate::ulog::Decoder;
use crate::ulog::message::{MSG_HEADER_LEN, msg_type, plausible_header};

/// Messages in a row that must fit for a boundary to be taken.
pub(super) const CHAIN: usize = 4;

/// The first offset in `bytes` where [`CHAIN`] messages in a row fit (or fewer that end
/// exactly at its end): plausible types and sizes, data records of a known subscription
/// with its format's size.
pub(super) fn sync(decoder: &Decoder, bytes: &[u8]) -> Option<usize> {
    (0..bytes.len().saturating_sub(MSG_HEADER_LEN)).find(|&start| {
        let mut at = start;
        for n in 0..CHAIN {
            let Some(head) = bytes.get(at..at + MSG_HEADER_LEN) else {
                return n >= 2 && at == bytes.len();
            };
            let size = u16::from_le_bytes([head[0], head[1]]) as usize;
            let ty = head[2];
            if !plausible_header(ty, size, false) || ty == msg_type::FLAG_BITS {
                return false;
            }
            if ty == msg_type::DATA {
                let Some(id) = bytes.get(at + 3..at + 5) else {
                    return n >= 2;
                };
                let msg_id = u16::from_le_bytes([id[0], id[1]]);
                match decoder.subscription(msg_id) {
                    Some(sub) if sub.layout.accepts_len(size - 2) => {}
                    _ => return false,
                }
            }
            at += MSG_HEADER_LEN + size;
            if at > bytes.len() {
                return n >= 2;
            }
        }
        true
    })
}
