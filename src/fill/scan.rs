//! What a fill needs to know of the flight as received, sans-IO: its definitions (header,
//! formats, subscriptions: the SD log of the same boot uses the same message ids) and every
//! dropout with the records around it that find it again in the SD log.

use std::collections::{HashMap, HashSet};

use crate::ulog::message::{FILE_HEADER_LEN, framed, msg_type};
use crate::ulog::{Decoder, FileHeader, Message};

/// Anchors kept on each side of a dropout to find it again in the SD log: data records with
/// a timestamp, of topics whose timestamps always advance (so their bytes are unique), in
/// the dropout's split, not past the dropouts before and after it.
pub const ANCHORS: usize = 32;

/// One message of the flight as received and where it starts in its split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub bytes: Vec<u8>,
    pub offset: u64,
}

/// One dropout of the flight as received (with those right after it that no anchor tells
/// apart: one gap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropoutSite {
    /// The split file it is in and the byte offset of its (first) 'O' message there.
    pub split: String,
    pub offset: u64,
    /// Every message of the split from the first anchor before the dropout to the last one
    /// after it, the dropouts included.
    pub messages: Vec<Placed>,
    /// Which of `messages` are anchors, before and after the dropout.
    pub before: Vec<usize>,
    pub after: Vec<usize>,
    /// Smallest timestamp of the anchors before it (where to look in the SD log), µs.
    pub before_us: u64,
    /// Largest timestamp of the anchors after it, µs.
    pub after_us: Option<u64>,
}

impl DropoutSite {
    /// The anchors' bytes, before and after.
    pub fn anchors(&self) -> (Vec<&[u8]>, Vec<&[u8]>) {
        let pick = |ix: &[usize]| ix.iter().map(|i| &self.messages[*i].bytes[..]).collect();
        (pick(&self.before), pick(&self.after))
    }

    /// Every dropout offset of the site.
    pub fn dropouts(&self) -> impl Iterator<Item = u64> + '_ {
        self.messages
            .iter()
            .filter(|m| m.bytes[2] == msg_type::DROPOUT)
            .map(|m| m.offset)
    }
}

/// The flight as received, as far as a fill needs it.
#[derive(Debug, Clone, Default)]
pub struct FlightScan {
    pub header: Vec<u8>,
    /// The 'F' messages, whole, in order.
    pub formats: Vec<Vec<u8>>,
    /// The 'A' message of each message id, whole.
    pub subscriptions: HashMap<u16, Vec<u8>>,
    pub sites: Vec<DropoutSite>,
}

impl FlightScan {
    /// A decoder that knows the flight's formats and subscriptions (to read the SD log's
    /// records of the same boot).
    pub fn decoder(&self) -> Decoder {
        let mut decoder = Decoder::new();
        for raw in self.formats.iter().chain(self.subscriptions.values()) {
            if let Some(m) = Message::parse_framed(raw) {
                let _ = decoder.handle(&m);
            }
        }
        decoder
    }
}

/// Scans a session's splits in order: each `(file name, bytes, bytes of its preamble to
/// skip)`; the first split's header is the flight's.
pub fn scan<'a>(splits: impl IntoIterator<Item = (&'a str, &'a [u8], usize)>) -> FlightScan {
    let mut scan = FlightScan::default();
    let mut decoder = Decoder::new();
    let mut last_ts: HashMap<u16, u64> = HashMap::new();
    let mut repeats: HashSet<u16> = HashSet::new();
    for (name, bytes, skip) in splits {
        let mut offset = if scan.header.is_empty() {
            if bytes.len() < FILE_HEADER_LEN {
                continue;
            }
            scan.header = bytes[..FILE_HEADER_LEN].to_vec();
            if let Some(h) = FileHeader::parse(bytes[..FILE_HEADER_LEN].try_into().expect("16")) {
                let _ = decoder.handle(&Message::Header(h));
            }
            FILE_HEADER_LEN.max(skip)
        } else {
            skip
        };
        if offset > bytes.len() {
            continue;
        }
        // The messages since the last anchor-free stretch began: the window a site takes
        // its messages from.
        let mut window: Vec<Placed> = Vec::new();
        // Anchors (indexes into `window`) since the last dropout.
        let mut recent: Vec<usize> = Vec::new();
        let mut open: Option<DropoutSite> = None;
        for raw in framed(&bytes[offset..]) {
            let at = offset as u64;
            offset += raw.len();
            let ty = raw[2];
            let parsed = Message::parse_framed(raw);
            match (ty, &parsed) {
                (msg_type::FORMAT, _) if !scan.formats.iter().any(|f| f == raw) => {
                    scan.formats.push(raw.to_vec());
                }
                (msg_type::ADD_LOGGED, Some(Message::AddLogged { msg_id, .. })) => {
                    scan.subscriptions.insert(*msg_id, raw.to_vec());
                }
                _ => {}
            }
            let placed = Placed {
                bytes: raw.to_vec(),
                offset: at,
            };
            if ty == msg_type::DROPOUT {
                match &mut open {
                    // No anchor since the last dropout: the same gap.
                    Some(site) if site.after.is_empty() => site.messages.push(placed),
                    _ => {
                        scan.sites.extend(open.take());
                        // The site's messages start at its first anchor before it.
                        let first = recent.first().copied().unwrap_or(window.len());
                        let messages: Vec<Placed> = window.drain(first..).collect();
                        let before: Vec<usize> = recent.iter().map(|i| i - first).collect();
                        let before_us = before
                            .iter()
                            .filter_map(|i| sample_time(&mut decoder, &messages[*i].bytes))
                            .min()
                            .unwrap_or(0);
                        let mut site = DropoutSite {
                            split: name.to_string(),
                            offset: at,
                            messages,
                            before,
                            after: Vec::new(),
                            before_us,
                            after_us: None,
                        };
                        site.messages.push(placed);
                        open = Some(site);
                        window.clear();
                        recent.clear();
                    }
                }
                continue;
            }
            let timestamp = match &parsed {
                Some(m @ Message::Data { .. }) => decoder.timestamp_of(Some(m)),
                Some(m) => {
                    let _ = decoder.handle(m);
                    None
                }
                None => None,
            };
            let anchor = timestamp.filter(|t| *t > 0).is_some_and(|ts| {
                let msg_id = u16::from_le_bytes([raw[3], raw[4]]);
                // A topic that logs the same timestamp again (a stale sample logged anew)
                // has records that are not unique: never an anchor again.
                if repeats.contains(&msg_id) {
                    return false;
                }
                if last_ts.insert(msg_id, ts).is_some_and(|prev| prev >= ts) {
                    repeats.insert(msg_id);
                    return false;
                }
                true
            });
            if let Some(site) = &mut open {
                site.messages.push(placed.clone());
                if anchor {
                    site.after.push(site.messages.len() - 1);
                    let ts = timestamp.expect("an anchor has a time");
                    site.after_us = Some(site.after_us.map_or(ts, |t| t.max(ts)));
                    if site.after.len() >= ANCHORS {
                        scan.sites.extend(open.take());
                    }
                }
            }
            window.push(placed);
            if anchor {
                recent.push(window.len() - 1);
                if recent.len() > ANCHORS {
                    // Keep the window from the oldest anchor kept on.
                    recent.remove(0);
                    let first = recent[0];
                    window.drain(..first);
                    for i in &mut recent {
                        *i -= first;
                    }
                }
            } else if recent.is_empty() {
                window.clear();
            }
        }
        // A split ends its sites: anchors are taken within one split.
        scan.sites.extend(open.take());
    }
    scan
}

/// The timestamp of a data record the decoder knows (the decoder already followed it).
fn sample_time(decoder: &mut Decoder, raw: &[u8]) -> Option<u64> {
    let msg_id = u16::from_le_bytes([*raw.get(3)?, *raw.get(4)?]);
    let sub = decoder.subscription(msg_id)?;
    let t = sub.layout.timestamp?;
    Some(t.ty.read(raw.get(5 + t.offset..)?).as_u64()? * t.unit_us)
}
