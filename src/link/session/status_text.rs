//! Texts for the ground station: STATUSTEXT from our component, rate-limited.
//!
//! A ground station shows (and often speaks) every STATUSTEXT it gets, so a burst of them
//! drowns what the autopilot says. Texts wait in a queue of at most [`STATUS_TEXT_QUEUE`] and
//! go out one per [`STATUS_TEXT_INTERVAL`]; a text that finds the queue full is dropped and
//! counted ([`SessionStats::status_texts_dropped`](super::SessionStats)). A text longer than
//! the message's 50 bytes is cut at a character boundary. Texts wait while no vehicle is
//! known: our system id is the vehicle's.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use mavlink::dialects::ardupilotmega::{MavMessage, MavSeverity, STATUSTEXT_DATA};

use super::Session;

/// At most one STATUSTEXT per this interval.
pub const STATUS_TEXT_INTERVAL: Duration = Duration::from_secs(1);

/// At most this many texts wait; more are dropped.
pub const STATUS_TEXT_QUEUE: usize = 8;

/// Bytes a STATUSTEXT's text holds.
pub const STATUS_TEXT_BYTES: usize = 50;

/// The texts waiting, and when the next may go.
#[derive(Debug, Default)]
pub(super) struct StatusTexts {
    queue: VecDeque<(MavSeverity, String)>,
    /// When the last text went out.
    last_sent: Option<Instant>,
}

impl StatusTexts {
    /// When the next waiting text may go, if one waits behind one sent (a text that waits for
    /// the vehicle goes at the first timer after it is found: the heartbeat's, within a
    /// second).
    pub(super) fn deadline(&self) -> Option<Instant> {
        if self.queue.is_empty() {
            return None;
        }
        self.last_sent.map(|t| t + STATUS_TEXT_INTERVAL)
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl Session {
    /// Queues `text` for the ground station as a STATUSTEXT of `severity` from our component
    /// (see the module docs); false when the queue is full and the text is dropped.
    pub fn send_status_text(&mut self, severity: MavSeverity, text: &str, now: Instant) -> bool {
        if self.status_texts.queue.len() >= STATUS_TEXT_QUEUE {
            self.stats.status_texts_dropped += 1;
            return false;
        }
        let text = cut(text, STATUS_TEXT_BYTES).to_owned();
        self.status_texts.queue.push_back((severity, text));
        self.release_status_texts(now);
        true
    }

    /// Sends the next waiting text if its time has come and the vehicle is known.
    pub(super) fn release_status_texts(&mut self, now: Instant) {
        if self.vehicle.is_none() {
            return;
        }
        let due = (self.status_texts.last_sent).is_none_or(|t| now >= t + STATUS_TEXT_INTERVAL);
        if !due {
            return;
        }
        let Some((severity, text)) = self.status_texts.queue.pop_front() else {
            return;
        };
        let mut data = STATUSTEXT_DATA {
            severity,
            ..Default::default()
        };
        let mut bytes = [0u8; STATUS_TEXT_BYTES];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        data.text = bytes.into();
        self.send(MavMessage::STATUSTEXT(data), now);
        self.status_texts.last_sent = Some(now);
        self.stats.status_texts += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_is_cut_at_a_character_boundary() {
        assert_eq!(cut("short", 50), "short");
        let long = "é".repeat(30);
        let c = cut(&long, 50);
        assert_eq!(c.len(), 50);
        assert_eq!(cut("aé", 2), "a");
    }
}
