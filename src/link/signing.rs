//! MAVLink 2 message signing, sans-IO: the key (from a key file's text), our signing
//! timestamps, signing what we send and checking what we receive.
//!
//! The signature itself (SHA-256 over the key, the frame and its timestamp, cut to 48 bits) is
//! computed by the `mavlink` crate (`mav2-message-signing`); this module owns the key, the
//! clock and the acceptance policy, so that time comes in as `now` as everywhere in the core.
//!
//! Timestamps count 10 µs since 2015-01-01 00:00 UTC, in 48 bits. Ours never go backwards:
//! every frame gets one above the last, and the caller starts a [`Signer`] at or above the
//! last one used before a restart ([`Signer::timestamp`] says where it is; the daemon keeps a
//! reservation ahead of it on disk). A received signed frame is accepted when its signature
//! verifies and its timestamp is new on its stream (link id, system, component); a stream not
//! seen before may not be more than a minute behind our clock, the MAVLink rule against
//! replayed captures.
//!
//! New on its stream: above the newest timestamp taken on it, or, for a frame the network
//! delivered late (behind later ones), among the last [`LATE_TAKEN`] timestamps taken and not
//! one of them (a window, as IPsec's and DTLS's anti-replay windows keep), and not below the
//! stream's first. MAVLink's own rule refuses every frame below the newest, so a network
//! that reorders would cost every late log chunk: the vehicle would send it again, or, once
//! out of tries, lose it. No frame is ever taken twice either way. The window counts frames,
//! not time: a sender's clock jumps ahead to follow ours (MAVLink's rule for a clock behind),
//! so a frame a few milliseconds late can carry a timestamp seconds behind the next.

use std::collections::{BTreeSet, HashMap};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use mavlink::consts::v2::IFLAG_SIGNED;
use mavlink::dialects::ardupilotmega::MavMessage;
use mavlink::{MAVLinkV2MessageRaw, MavHeader, MessageData};
use sha2::{Digest, Sha256};

/// 2015-01-01 00:00:00 UTC in Unix seconds: where signing timestamps count from.
pub const SIGNING_EPOCH_UNIX_S: u64 = 1_420_070_400;

/// Signing timestamp units per second (one unit is 10 µs).
pub const TIMESTAMP_UNITS_PER_S: u64 = 100_000;

/// A new stream may be this far behind our clock (one minute), as MAVLink specifies.
const NEW_STREAM_MAX_AGE: u64 = 60 * TIMESTAMP_UNITS_PER_S;

/// Streams (link id, system, component) remembered for replay protection.
const MAX_STREAMS: usize = 64;

/// Timestamps a stream remembers; a frame at or below the newest one forgotten (or below the
/// stream's first) is refused.
pub const LATE_TAKEN: usize = 128;

/// The 32-byte secret key. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey([u8; 32]);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

/// Why a key file's text gives no key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the key file is empty (it must hold 64 hex digits or a passphrase)")]
    Empty,
}

impl SigningKey {
    pub fn from_bytes(key: [u8; 32]) -> Self {
        Self(key)
    }

    /// The key a key file's text stands for: exactly 64 hex digits are the key itself;
    /// anything else is a passphrase whose SHA-256 is the key, as QGroundControl derives it.
    /// Whitespace around the text (a trailing newline) belongs to neither.
    pub fn from_file_text(text: &[u8]) -> Result<Self, KeyError> {
        let text = text.trim_ascii();
        if text.is_empty() {
            return Err(KeyError::Empty);
        }
        if text.len() == 64 && text.iter().all(u8::is_ascii_hexdigit) {
            let mut key = [0u8; 32];
            for (k, pair) in key.iter_mut().zip(text.chunks(2)) {
                let digits = std::str::from_utf8(pair).expect("ASCII hex digits");
                *k = u8::from_str_radix(digits, 16).expect("hex digits");
            }
            return Ok(Self(key));
        }
        Ok(Self(Sha256::digest(text).into()))
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

/// The signing timestamp of a wall-clock time (0 before 2015).
pub fn timestamp_at(t: SystemTime) -> u64 {
    let us = t
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
        .saturating_sub(u128::from(SIGNING_EPOCH_UNIX_S) * 1_000_000);
    (us / 10) as u64
}

/// What [`Signer::check`] made of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Signed with our key, and new on its stream.
    Valid,
    /// Not signed (MAVLink 1, or MAVLink 2 without a signature): the caller decides.
    Unsigned,
    /// Signed, but not with our key (or altered).
    BadSignature,
    /// Signed with our key, with a timestamp taken on its stream before, or too far behind
    /// its newest (see the module docs).
    Replayed,
    /// Signed with our key, the first of its stream, and over a minute behind our clock.
    TooOld,
}

/// Counters of received frames a [`Signer`] refused; all monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SigningStats {
    /// Signed frames that verified.
    pub valid: u64,
    /// Unsigned frames refused (the caller counts them here).
    pub unsigned_refused: u64,
    pub bad_signature: u64,
    pub replayed: u64,
    pub too_old: u64,
}

/// Signs and checks frames with one key; see the module docs.
pub struct Signer {
    key: SigningKey,
    link_id: u8,
    /// Our clock: `base` at `base_at`, advancing with `now`.
    base: u64,
    base_at: Instant,
    /// The timestamp of the last frame we signed.
    last_sent: u64,
    /// The newest timestamp of a valid received frame (our clock keeps up with it).
    newest_seen: u64,
    /// The timestamps taken per (link id, system, component).
    streams: HashMap<(u8, u8, u8), Taken>,
    stats: SigningStats,
}

impl Signer {
    /// A signer whose clock reads `timestamp` at `now`. `link_id` goes into our signatures.
    pub fn new(key: SigningKey, link_id: u8, timestamp: u64, now: Instant) -> Self {
        Self {
            key,
            link_id,
            base: timestamp,
            base_at: now,
            last_sent: 0,
            newest_seen: 0,
            streams: HashMap::new(),
            stats: SigningStats::default(),
        }
    }

    pub fn stats(&self) -> SigningStats {
        self.stats
    }

    /// Counts an unsigned frame the caller refused.
    pub fn count_unsigned_refused(&mut self) {
        self.stats.unsigned_refused += 1;
    }

    /// Our clock at `now`: never below a timestamp we used or accepted.
    pub fn timestamp(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.base_at);
        let ticks = elapsed.as_micros() as u64 / 10;
        (self.base + ticks)
            .max(self.last_sent)
            .max(self.newest_seen)
    }

    /// Appends `message` as one signed MAVLink 2 frame to `out`, with a timestamp above
    /// every one used before.
    pub fn sign(
        &mut self,
        header: MavHeader,
        message: &MavMessage,
        now: Instant,
        out: &mut Vec<u8>,
    ) {
        let mut raw = MAVLinkV2MessageRaw::new();
        raw.serialize_message_for_signing(header, message);
        self.sign_raw(raw, now, out);
    }

    /// As [`sign`](Self::sign), for a message type of our own ([`mavlink::MessageData`]:
    /// ArduPilot's [`crate::link::log_block::LogBlock`]).
    pub fn sign_data<D: MessageData>(
        &mut self,
        header: MavHeader,
        data: &D,
        now: Instant,
        out: &mut Vec<u8>,
    ) {
        let mut raw = MAVLinkV2MessageRaw::new();
        // The flag first: the header and its checksum are written with it.
        *raw.incompatibility_flags_mut() = IFLAG_SIGNED;
        raw.serialize_message_data(header, data);
        self.sign_raw(raw, now, out);
    }

    /// Stamps and signs `raw` (serialized with [`IFLAG_SIGNED`]) and appends it to `out`.
    fn sign_raw(&mut self, mut raw: MAVLinkV2MessageRaw, now: Instant, out: &mut Vec<u8>) {
        let timestamp = self.timestamp(now).max(self.last_sent + 1);
        self.last_sent = timestamp;
        *raw.signature_link_id_mut() = self.link_id;
        raw.signature_timestamp_bytes_mut()
            .copy_from_slice(&timestamp.to_le_bytes()[..6]);
        let mut signature = [0u8; 6];
        raw.calculate_signature(&self.key.0, &mut signature);
        raw.signature_value_mut().copy_from_slice(&signature);
        out.extend_from_slice(raw.raw_bytes());
    }

    /// What a reboot does to a signer's memory: every stream heard is forgotten and the
    /// clock reads `timestamp` at `now` (the one kept on disk); the counters stay.
    pub fn restart(&mut self, timestamp: u64, now: Instant) {
        self.streams.clear();
        self.base = timestamp;
        self.base_at = now;
        self.last_sent = 0;
        self.newest_seen = 0;
    }

    /// Checks a received MAVLink 2 frame at `now`; a valid one moves its stream on.
    pub fn check(&mut self, raw: &MAVLinkV2MessageRaw, now: Instant) -> Check {
        if raw.incompatibility_flags() & IFLAG_SIGNED == 0 {
            return Check::Unsigned;
        }
        let mut signature = [0u8; 6];
        raw.calculate_signature(&self.key.0, &mut signature);
        if signature != raw.signature_value() {
            self.stats.bad_signature += 1;
            return Check::BadSignature;
        }
        let stream = (
            raw.signature_link_id(),
            raw.system_id() as u8,
            raw.component_id(),
        );
        let timestamp = raw.signature_timestamp();
        match self.streams.get(&stream) {
            Some(taken)
                if !taken.is_new(timestamp)
                    && !crate::planted::is(crate::planted::Bug::ReplayAccepted) =>
            {
                self.stats.replayed += 1;
                return Check::Replayed;
            }
            None if timestamp + NEW_STREAM_MAX_AGE < self.timestamp(now) => {
                self.stats.too_old += 1;
                return Check::TooOld;
            }
            None if self.streams.len() >= MAX_STREAMS => {
                // Only frames signed with our key get here: forget the stalest stream.
                if let Some(stalest) = self
                    .streams
                    .iter()
                    .min_by_key(|(_, t)| t.newest())
                    .map(|(k, _)| *k)
                {
                    self.streams.remove(&stalest);
                }
            }
            _ => {}
        }
        (self.streams.entry(stream))
            .or_insert_with(|| Taken::from(timestamp))
            .take(timestamp);
        self.newest_seen = self.newest_seen.max(timestamp);
        self.stats.valid += 1;
        Check::Valid
    }
}

/// The timestamps a stream's frames were taken with, as far back as a late frame may be:
/// the last [`LATE_TAKEN`], and the floor at or below which every timestamp is refused.
#[derive(Debug)]
struct Taken {
    recent: BTreeSet<u64>,
    /// Below the stream's first timestamp, then the greatest one forgotten.
    floor: u64,
}

impl Taken {
    /// A stream whose first frame is stamped `first`.
    fn from(first: u64) -> Self {
        Self {
            recent: BTreeSet::new(),
            floor: first.saturating_sub(1),
        }
    }

    fn newest(&self) -> u64 {
        self.recent.last().copied().unwrap_or(self.floor)
    }

    /// Whether a frame stamped `timestamp` was not taken before and is not too late.
    fn is_new(&self, timestamp: u64) -> bool {
        timestamp > self.floor && !self.recent.contains(&timestamp)
    }

    fn take(&mut self, timestamp: u64) {
        self.recent.insert(timestamp);
        if self.recent.len() > LATE_TAKEN
            && let Some(oldest) = self.recent.pop_first()
        {
            self.floor = oldest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::frames::FrameDecoder;
    use mavlink::dialects::ardupilotmega::{HEARTBEAT_DATA, LOGGING_ACK_DATA};
    use std::time::Duration;

    fn header() -> MavHeader {
        MavHeader {
            system_id: 1,
            component_id: 1,
            sequence: 3,
        }
    }

    fn key(b: u8) -> SigningKey {
        SigningKey::from_bytes([b; 32])
    }

    /// The frames in `wire`, each checked by `signer`.
    fn checks(signer: &mut Signer, wire: &[u8], now: Instant) -> Vec<Check> {
        let mut out = Vec::new();
        let mut dec = FrameDecoder::new();
        dec.datagram(wire, |f| out.push(signer.check(f.raw_v2().unwrap(), now)));
        out
    }

    #[test]
    fn key_files_hold_hex_or_a_passphrase() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF\n";
        let k = SigningKey::from_file_text(hex.as_bytes()).unwrap();
        assert_eq!(k.as_bytes()[..3], [0x00, 0x11, 0x22]);
        assert_eq!(k.as_bytes()[31], 0xff);
        // A passphrase: its SHA-256 (here of "secret", a known digest).
        let p = SigningKey::from_file_text(b"  secret\n").unwrap();
        assert_eq!(
            p.as_bytes()[..4],
            [0x2b, 0xb8, 0x0d, 0x53],
            "sha256(\"secret\") = 2bb80d53..."
        );
        // 63 hex digits are a passphrase, not a key.
        let short = SigningKey::from_file_text(&hex.as_bytes()[..63]).unwrap();
        assert_ne!(short.as_bytes()[..3], [0x00, 0x11, 0x22]);
        assert_eq!(SigningKey::from_file_text(b" \n"), Err(KeyError::Empty));
        assert_eq!(format!("{p:?}"), "SigningKey(..)");
    }

    #[test]
    fn what_we_sign_verifies_once_and_a_replay_or_another_key_does_not() {
        let t = Instant::now();
        let ts = timestamp_at(SystemTime::now());
        let mut ours = Signer::new(key(7), 2, ts, t);
        let mut wire = Vec::new();
        let hb = MavMessage::HEARTBEAT(HEARTBEAT_DATA::default());
        ours.sign(header(), &hb, t, &mut wire);
        ours.sign(header(), &hb, t, &mut wire);
        let mut theirs = Signer::new(key(7), 0, ts, t);
        assert_eq!(checks(&mut theirs, &wire, t), [Check::Valid, Check::Valid]);
        // The same frames again: replays.
        assert_eq!(
            checks(&mut theirs, &wire, t),
            [Check::Replayed, Check::Replayed]
        );
        let mut other = Signer::new(key(8), 0, ts, t);
        assert_eq!(
            checks(&mut other, &wire, t),
            [Check::BadSignature, Check::BadSignature]
        );
        // An unsigned frame is left to the caller.
        let mut unsigned = Vec::new();
        crate::link::frames::encode(
            header(),
            &MavMessage::LOGGING_ACK(LOGGING_ACK_DATA::default()),
            &mut unsigned,
        );
        assert_eq!(checks(&mut theirs, &unsigned, t), [Check::Unsigned]);
        assert_eq!(theirs.stats().valid, 2);
        assert_eq!(theirs.stats().replayed, 2);
        assert_eq!(other.stats().bad_signature, 2);
    }

    /// `n` heartbeats signed by a vehicle `gap` apart, each its own frame.
    fn signed_frames(n: usize, gap: Duration, t: Instant) -> Vec<Vec<u8>> {
        let mut vehicle = Signer::new(key(7), 0, 9_000_000, t);
        let hb = MavMessage::HEARTBEAT(HEARTBEAT_DATA::default());
        (0..n)
            .map(|i| {
                let mut frame = Vec::new();
                vehicle.sign(header(), &hb, t + gap * i as u32, &mut frame);
                frame
            })
            .collect()
    }

    #[test]
    fn a_frame_the_network_delivered_late_is_taken_once_and_an_old_one_never() {
        let t = Instant::now();
        let frames = signed_frames(400, Duration::from_millis(1), t);
        let mut ours = Signer::new(key(7), 0, 9_000_000, t);
        let mut check = |i: usize| checks(&mut ours, &frames[i], t)[0];
        // Frame 1 behind 2 and 3: taken late, then never again.
        assert_eq!(check(0), Check::Valid);
        assert_eq!(check(2), Check::Valid);
        assert_eq!(check(3), Check::Valid);
        assert_eq!(check(1), Check::Valid, "late, within the span, new");
        for i in 0..4 {
            assert_eq!(check(i), Check::Replayed, "frame {i} again");
        }
        // Past LATE_TAKEN later frames the oldest are forgotten, and refused.
        for i in 4..(4 + LATE_TAKEN + 10) {
            assert_eq!(check(i), Check::Valid);
        }
        assert!(frames.len() > 4 + LATE_TAKEN + 20);
        assert_eq!(check(4 + LATE_TAKEN + 15), Check::Valid, "skipped ahead");
        assert_eq!(check(4 + LATE_TAKEN + 12), Check::Valid, "late, kept");
        assert_eq!(check(5), Check::Replayed, "taken before, forgotten");
        assert_eq!(ours.stats().replayed, 5);
        // Late by seconds of timestamps (a clock that jumped) but within the window: taken;
        // below a new stream's first frame: refused, though never taken.
        let slow = signed_frames(4, Duration::from_secs(3), t);
        let mut fresh = Signer::new(key(7), 0, 9_000_000, t);
        assert_eq!(checks(&mut fresh, &slow[1], t), [Check::Valid]);
        assert_eq!(checks(&mut fresh, &slow[3], t), [Check::Valid]);
        assert_eq!(
            checks(&mut fresh, &slow[2], t),
            [Check::Valid],
            "3 s of timestamps late"
        );
        assert_eq!(
            checks(&mut fresh, &slow[0], t),
            [Check::Replayed],
            "before the first"
        );
    }

    #[test]
    fn a_signed_log_block_verifies_and_reads_back_whole() {
        use crate::link::frames::Received;
        use crate::link::log_block::{LOG_COMPONENT, LogBlock};
        let t = Instant::now();
        let mut block = LogBlock {
            target_system: 255,
            target_component: 190,
            seqno: 70_000,
            ..LogBlock::default()
        };
        block.data[..4].copy_from_slice(&[0xA3, 0x95, 128, 7]);
        let header = MavHeader {
            system_id: 1,
            component_id: LOG_COMPONENT,
            sequence: 4,
        };
        let mut vehicle = Signer::new(key(3), 1, 5_000_000, t);
        let mut wire = Vec::new();
        vehicle.sign_data(header, &block, t, &mut wire);
        let mut ours = Signer::new(key(3), 0, 5_000_000, t);
        let mut other = Signer::new(key(4), 0, 5_000_000, t);
        let mut got = Vec::new();
        FrameDecoder::new().datagram(&wire, |f| {
            let raw = f.raw_v2().unwrap();
            got.push((ours.check(raw, t), other.check(raw, t), f.message.clone()));
        });
        assert_eq!(got.len(), 1, "one frame");
        let (check, other_check, message) = got.pop().unwrap();
        assert_eq!((check, other_check), (Check::Valid, Check::BadSignature));
        let Received::LogBlock(read) = message else {
            panic!("not read as a log block: {message:?}");
        };
        assert_eq!(read, block);
    }

    #[test]
    fn our_timestamps_only_go_up_and_old_new_streams_are_refused() {
        let t = Instant::now();
        let mut s = Signer::new(key(1), 0, 1_000_000, t);
        assert_eq!(s.timestamp(t), 1_000_000);
        assert_eq!(s.timestamp(t + Duration::from_secs(1)), 1_100_000);
        let mut wire = Vec::new();
        let hb = MavMessage::HEARTBEAT(HEARTBEAT_DATA::default());
        for _ in 0..3 {
            s.sign(header(), &hb, t, &mut wire);
        }
        // Three frames at the same instant: three increasing timestamps.
        let mut stamps = Vec::new();
        FrameDecoder::new().datagram(&wire, |f| {
            stamps.push(f.raw_v2().unwrap().signature_timestamp())
        });
        assert_eq!(stamps, [1_000_000, 1_000_001, 1_000_002]);
        assert_eq!(s.timestamp(t), 1_000_002);
        // A receiver whose clock is two minutes ahead refuses them as a new stream.
        let mut late = Signer::new(key(1), 0, 1_000_000 + 120 * TIMESTAMP_UNITS_PER_S, t);
        assert_eq!(checks(&mut late, &wire, t)[0], Check::TooOld);
        // One a minute behind at most is taken, and pulls nothing backwards.
        let mut near = Signer::new(key(1), 0, 1_000_000 + 50 * TIMESTAMP_UNITS_PER_S, t);
        assert_eq!(checks(&mut near, &wire, t)[0], Check::Valid);
    }

    #[test]
    fn wall_clock_to_signing_time() {
        let at = UNIX_EPOCH + Duration::from_secs(SIGNING_EPOCH_UNIX_S + 1);
        assert_eq!(timestamp_at(at), TIMESTAMP_UNITS_PER_S);
        assert_eq!(timestamp_at(UNIX_EPOCH), 0);
    }
}
