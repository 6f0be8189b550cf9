//! The live socket's wire protocol (sans-IO): newline-delimited JSON both ways.
//!
//! Clients send requests ([`Request::parse`]), one JSON object per line, at most
//! [`MAX_REQUEST_LINE`] bytes ([`LineReader`] cuts the stream into lines and flags longer
//! ones). The server's lines are built by [`crate::live::ndjson::Publisher`]; their shapes are
//! documented in the operator's guide (`docs/src/live.md`, "The protocol"), versioned by [`PROTOCOL_VERSION`].

use serde_json::Value as Json;

use crate::store::events::EventRequest;

/// Version of the protocol, sent in the `hello` line. Adding line types or keys keeps the
/// version; changing or removing one bumps it.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest request line accepted (newline excluded).
pub const MAX_REQUEST_LINE: usize = 64 * 1024;

/// Longest event name, characters.
pub const MAX_EVENT_NAME: usize = 200;

/// Most patterns in one subscription.
pub const MAX_PATTERNS: usize = 1024;

/// A client's request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `{"subscribe": [GLOB, ...], "max_rate_hz": N}`: replaces the client's subscription.
    /// An empty list subscribes to nothing.
    Subscribe {
        patterns: Vec<String>,
        /// At most this many samples per second of each topic instance (log time).
        max_rate_hz: Option<f64>,
    },
    /// `{"event": NAME, "after_s": S}`: an event now (see [`crate::store::events`]).
    Event(EventRequest),
}

/// Why a request line was refused. The connection stays open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("request is not JSON: {0}")]
    NotJson(String),
    #[error("request must be a JSON object")]
    NotObject,
    #[error("unknown key '{0}' (known: subscribe, max_rate_hz; event, after_s)")]
    UnknownKey(String),
    #[error("'event' must be a name of 1 to {MAX_EVENT_NAME} characters")]
    BadEventName,
    #[error("'after_s' must be a number of seconds from 0 to 600")]
    BadAfter,
    #[error("'subscribe' is missing")]
    NoSubscribe,
    #[error("'subscribe' must be a list of topic patterns (strings)")]
    BadPatterns,
    #[error("'subscribe' has more than {MAX_PATTERNS} patterns")]
    TooManyPatterns,
    #[error("'max_rate_hz' must be a positive number or null")]
    BadRate,
    #[error("request line longer than {MAX_REQUEST_LINE} bytes (ignored up to its newline)")]
    TooLong,
}

impl Request {
    /// Parses one request line (without its newline).
    pub fn parse(line: &[u8]) -> Result<Self, RequestError> {
        let json: Json =
            serde_json::from_slice(line).map_err(|e| RequestError::NotJson(e.to_string()))?;
        let Json::Object(map) = json else {
            return Err(RequestError::NotObject);
        };
        if map.contains_key("event") {
            return Self::event(&map);
        }
        if let Some(k) = map
            .keys()
            .find(|k| !matches!(k.as_str(), "subscribe" | "max_rate_hz"))
        {
            return Err(RequestError::UnknownKey(k.clone()));
        }
        let Json::Array(items) = map.get("subscribe").ok_or(RequestError::NoSubscribe)? else {
            return Err(RequestError::BadPatterns);
        };
        if items.len() > MAX_PATTERNS {
            return Err(RequestError::TooManyPatterns);
        }
        let patterns = items
            .iter()
            .map(|p| {
                p.as_str()
                    .map(str::to_owned)
                    .ok_or(RequestError::BadPatterns)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let max_rate_hz = match map.get("max_rate_hz") {
            None | Some(Json::Null) => None,
            Some(v) => match v.as_f64() {
                Some(r) if r > 0.0 && r.is_finite() => Some(r),
                _ => return Err(RequestError::BadRate),
            },
        };
        Ok(Request::Subscribe {
            patterns,
            max_rate_hz,
        })
    }
}

impl Request {
    fn event(map: &serde_json::Map<String, Json>) -> Result<Self, RequestError> {
        if let Some(k) = map
            .keys()
            .find(|k| !matches!(k.as_str(), "event" | "after_s"))
        {
            return Err(RequestError::UnknownKey(k.clone()));
        }
        let name = match map.get("event") {
            Some(Json::String(s))
                if !s.trim().is_empty() && s.chars().count() <= MAX_EVENT_NAME =>
            {
                s.trim().to_owned()
            }
            _ => return Err(RequestError::BadEventName),
        };
        let after_us = match map.get("after_s") {
            None | Some(Json::Null) => None,
            Some(v) => match v.as_f64() {
                Some(s) if (0.0..=600.0).contains(&s) => Some((s * 1e6).round() as u64),
                _ => return Err(RequestError::BadAfter),
            },
        };
        Ok(Request::Event(EventRequest { name, after_us }))
    }
}

/// What [`LineReader::next_line`] hands out.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A whole line, without its newline (and without a trailing `\r`).
    Text(&'a [u8]),
    /// A line longer than [`MAX_REQUEST_LINE`]; its bytes are thrown away up to its newline.
    TooLong,
}

/// Cuts a byte stream into lines, holding at most [`MAX_REQUEST_LINE`] bytes however long a
/// line grows.
#[derive(Debug, Default)]
pub struct LineReader {
    buf: Vec<u8>,
    /// Start of the unread part of `buf`.
    start: usize,
    /// Inside an over-long line: drop bytes up to the next newline.
    skipping: bool,
}

impl LineReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete line, if any. Call until `None` after each [`push`](Self::push).
    pub fn next_line(&mut self) -> Option<Line<'_>> {
        loop {
            let Some(n) = self.buf[self.start..].iter().position(|&b| b == b'\n') else {
                if self.buf.len() - self.start > MAX_REQUEST_LINE {
                    // Keep nothing of an over-long line; report it at its newline.
                    self.skipping = true;
                    self.buf.clear();
                    self.start = 0;
                }
                return None;
            };
            let line_start = self.start;
            self.start += n + 1;
            if std::mem::take(&mut self.skipping) || n > MAX_REQUEST_LINE {
                return Some(Line::TooLong);
            }
            let mut end = line_start + n;
            if end > line_start && self.buf[end - 1] == b'\r' {
                end -= 1;
            }
            if self.buf[line_start..end]
                .iter()
                .all(u8::is_ascii_whitespace)
            {
                continue;
            }
            return Some(Line::Text(&self.buf[line_start..end]));
        }
    }
}

/// The syslog name of a ULog logging level (`'0'`..`'7'` as PX4 writes them, or 0..7).
pub fn level_name(level: u8) -> &'static str {
    match level.checked_sub(b'0').filter(|l| *l <= 7).unwrap_or(level) {
        0 => "emergency",
        1 => "alert",
        2 => "critical",
        3 => "error",
        4 => "warning",
        5 => "notice",
        6 => "info",
        7 => "debug",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_requests_parse_and_bad_ones_say_why() {
        assert_eq!(
            Request::parse(br#"{"event": " landing ", "after_s": 2.5}"#),
            Ok(Request::Event(EventRequest {
                name: "landing".into(),
                after_us: Some(2_500_000)
            }))
        );
        assert_eq!(
            Request::parse(br#"{"event": "mark"}"#),
            Ok(Request::Event(EventRequest {
                name: "mark".into(),
                after_us: None
            }))
        );
        for (bad, why) in [
            (&br#"{"event": ""}"#[..], RequestError::BadEventName),
            (br#"{"event": 3}"#, RequestError::BadEventName),
            (br#"{"event": "x", "after_s": -1}"#, RequestError::BadAfter),
            (br#"{"event": "x", "after_s": 601}"#, RequestError::BadAfter),
            (
                br#"{"event": "x", "subscribe": []}"#,
                RequestError::UnknownKey("subscribe".into()),
            ),
        ] {
            assert_eq!(Request::parse(bad), Err(why));
        }
        let long = format!(r#"{{"event": "{}"}}"#, "x".repeat(MAX_EVENT_NAME + 1));
        assert_eq!(
            Request::parse(long.as_bytes()),
            Err(RequestError::BadEventName)
        );
    }

    #[test]
    fn subscribe_requests_parse_and_bad_ones_say_why() {
        assert_eq!(
            Request::parse(br#"{"subscribe": ["a", "sensor_*"], "max_rate_hz": 5}"#),
            Ok(Request::Subscribe {
                patterns: vec!["a".into(), "sensor_*".into()],
                max_rate_hz: Some(5.0)
            })
        );
        assert_eq!(
            Request::parse(br#"{"subscribe": [], "max_rate_hz": null}"#),
            Ok(Request::Subscribe {
                patterns: vec![],
                max_rate_hz: None
            })
        );
        assert!(matches!(
            Request::parse(b"{\"subscribe\": [\"a\""),
            Err(RequestError::NotJson(_))
        ));
        assert_eq!(Request::parse(b"[1]"), Err(RequestError::NotObject));
        assert_eq!(
            Request::parse(br#"{"subscribe": ["a"], "rate": 1}"#),
            Err(RequestError::UnknownKey("rate".into()))
        );
        assert_eq!(Request::parse(b"{}"), Err(RequestError::NoSubscribe));
        assert_eq!(
            Request::parse(br#"{"subscribe": "a"}"#),
            Err(RequestError::BadPatterns)
        );
        assert_eq!(
            Request::parse(br#"{"subscribe": [1]}"#),
            Err(RequestError::BadPatterns)
        );
        assert_eq!(
            Request::parse(br#"{"subscribe": [], "max_rate_hz": 0}"#),
            Err(RequestError::BadRate)
        );
        assert_eq!(
            Request::parse(br#"{"subscribe": [], "max_rate_hz": "5"}"#),
            Err(RequestError::BadRate)
        );
    }

    #[test]
    fn lines_are_cut_at_newlines_and_over_long_ones_are_flagged_without_growing() {
        let mut r = LineReader::new();
        r.push(b"{\"a\":1}\r\n\n  \n{\"b\"");
        assert_eq!(r.next_line(), Some(Line::Text(b"{\"a\":1}")));
        assert_eq!(r.next_line(), None);
        r.push(b":2}\n");
        assert_eq!(r.next_line(), Some(Line::Text(b"{\"b\":2}")));
        assert_eq!(r.next_line(), None);
        // A line of 10 × the limit, pushed in pieces: memory stays bounded.
        let piece = vec![b'x'; MAX_REQUEST_LINE / 2];
        for _ in 0..20 {
            r.push(&piece);
            assert_eq!(r.next_line(), None);
            assert!(r.buf.len() <= MAX_REQUEST_LINE + piece.len());
        }
        r.push(b"tail\n{\"c\":3}\n");
        assert_eq!(r.next_line(), Some(Line::TooLong));
        assert_eq!(r.next_line(), Some(Line::Text(b"{\"c\":3}")));
        // An over-long line that arrives whole.
        let mut long = vec![b'y'; MAX_REQUEST_LINE + 1];
        long.push(b'\n');
        r.push(&long);
        assert_eq!(r.next_line(), Some(Line::TooLong));
        assert_eq!(r.next_line(), None);
    }

    #[test]
    fn levels_have_syslog_names() {
        assert_eq!(level_name(b'6'), "info");
        assert_eq!(level_name(b'3'), "error");
        assert_eq!(level_name(4), "warning");
        assert_eq!(level_name(b'9'), "unknown");
    }
}
