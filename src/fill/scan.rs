//! What a fill needs to know of the flight as received, sans-IO: its definitions (header,
//! formats, subscriptions: the SD log of the same boot uses the same message ids) and every
//! dropout with the records around it that find it again in the SD log.
//!
//! Two sites have records on one side only. The head: a dropout before the first anchor
//! (PX4 drops ~1.5 s right after every acked header), found by the log's own start time
//! and the anchors after it. The tail: the flight's end, found by its last anchors, whether
//! or not a dropout was written there: a link gone before the end loses what came after,
//! and a clean STOP can lose PX4's last partial chunk.

use std::collections::{HashMap, HashSet};

use crate::ulog::message::{FILE_HEADER_LEN, framed, is_postflight, msg_type};
use crate::ulog::{Decoder, FileHeader, Message};

use super::pace::{LATE_US, Pace};

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
    /// after it, the dropouts included. A dropout at a split's start or end borrows its
    /// anchors from the split before or after it: only `messages[own]` are of `split`, the
    /// others stay where they are.
    pub messages: Vec<Placed>,
    pub own: std::ops::Range<usize>,
    /// Which of `messages` are anchors, before and after the dropout.
    pub before: Vec<usize>,
    pub after: Vec<usize>,
    /// Smallest timestamp of the anchors before it (where to look in the SD log), µs.
    pub before_us: u64,
    /// Largest timestamp of the anchors before it, µs.
    pub last_before_us: u64,
    /// Largest timestamp of the anchors after it, µs.
    pub after_us: Option<u64>,
    /// Where its last message ends in the split.
    pub end: u64,
    /// No anchor in the whole flight before it: with none before it, what the SD log has
    /// from the stream's start to its first anchor after is what the stream lost.
    pub starts_flight: bool,
    /// No anchor in the whole flight after it: with none after it, what the SD log has
    /// after its last anchor is what the stream lost.
    pub ends_flight: bool,
    /// An event buffer's window, `[from, to]` µs: the site is its samples in the column.
    pub window: Option<[u64; 2]>,
}

impl DropoutSite {
    /// The anchors' bytes, before and after.
    pub fn anchors(&self) -> (Vec<&[u8]>, Vec<&[u8]>) {
        let pick = |ix: &[usize]| ix.iter().map(|i| &self.messages[*i].bytes[..]).collect();
        (pick(&self.before), pick(&self.after))
    }

    /// Which side has no anchor, if one does not (a split's first or last dropout has
    /// none on one side either, but is no edge of the flight: see
    /// [`starts_flight`](Self::starts_flight)).
    pub fn edge(&self) -> Option<Edge> {
        if self.window.is_some() {
            Some(Edge::Window)
        } else if self.before.is_empty() {
            Some(Edge::Head)
        } else if self.after.is_empty() {
            Some(Edge::Tail)
        } else {
            None
        }
    }

    /// Whether the side without anchors is the flight's own start or end (not a split's).
    pub fn at_flight_edge(&self) -> bool {
        match self.edge() {
            Some(Edge::Head) => self.starts_flight,
            Some(Edge::Tail) => self.ends_flight,
            Some(Edge::Window) | None => true,
        }
    }

    /// The flight's tail with a dropout in it: the stream lost its end (the link went
    /// before the stop), whether or not the link came back for the post-flight records
    /// (they carry no time, so they are no anchors). Where the stream ended is then not
    /// known, STOP or not: the SD log's end is the tail's.
    pub fn lost_end(&self) -> bool {
        self.edge() == Some(Edge::Tail) && self.ends_flight && self.dropouts().next().is_some()
    }

    /// Every dropout offset of the site.
    pub fn dropouts(&self) -> impl Iterator<Item = u64> + '_ {
        self.messages
            .iter()
            .filter(|m| m.bytes[2] == msg_type::DROPOUT)
            .map(|m| m.offset)
    }
}

/// A site with anchors on one side only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Edge {
    /// Before the flight's first anchor: found by the log's start time.
    Head,
    /// After the flight's last anchor (or the last anchor of a split).
    Tail,
    /// An event buffer's window: its samples were held and written when the event came,
    /// after the dropouts around them, so no anchor tells a gap; the window is filled whole,
    /// from its start time to its end time ([`window_sites`]).
    Window,
}

/// The flight as received, as far as a fill needs it.
#[derive(Debug, Clone, Default)]
pub struct FlightScan {
    pub header: Vec<u8>,
    /// The header's timestamp: when the logger began this stream (log time, µs).
    pub start_us: u64,
    /// The stream ended with PX4's STOP handshake (its post-flight perf counters are in
    /// it): it stopped where its last records are, give or take the partial chunk PX4
    /// discards at a stop, unless its tail has a dropout ([`DropoutSite::lost_end`]).
    /// Without it, where the stream ended is not known.
    pub stopped: bool,
    /// The 'F' messages, whole, in order.
    pub formats: Vec<Vec<u8>>,
    /// The 'A' message of each message id, whole.
    pub subscriptions: HashMap<u16, Vec<u8>>,
    pub sites: Vec<DropoutSite>,
    /// Each topic instance's pace in the stream, by message id.
    pub paces: HashMap<u16, Pace>,
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

/// Messages kept before the flight's first anchor, for its head site; past this the head
/// has no site (a flight without timestamps).
const MAX_HEAD_MESSAGES: usize = 65_536;

/// Scans a session's splits in order: each `(file name, bytes, bytes of its preamble to
/// skip)`; the first split's header is the flight's.
pub fn scan<'a>(splits: impl IntoIterator<Item = (&'a str, &'a [u8], usize)>) -> FlightScan {
    let mut scan = FlightScan::default();
    let mut decoder = Decoder::new();
    let mut last_ts: HashMap<u16, u64> = HashMap::new();
    // The log's clock: its newest sample so far.
    let mut clock = 0u64;
    // The log's clock when it last jumped by more than [`LATE_US`].
    let mut resumed_at = 0u64;
    let mut repeats: HashSet<u16> = HashSet::new();
    // No anchor yet in the whole flight: the head's messages are kept from the first
    // record (or dropout) on.
    let mut anchored = false;
    let mut head_begun = false;
    // Where the flight's tail site starts: the messages from the last anchors of the last
    // split that ends on anchors (`None` when a dropout without anchors after it ends the
    // flight instead). A dropout at the next split's start borrows them too.
    let mut tail: Option<(String, Vec<Placed>, Vec<usize>, u64)> = None;
    // A site whose split ended before an anchor after it: it goes on taking anchors (not
    // messages of its own) from the next split.
    let mut open: Option<DropoutSite> = None;
    for (name, bytes, skip) in splits {
        let mut offset = if scan.header.is_empty() {
            if bytes.len() < FILE_HEADER_LEN {
                continue;
            }
            scan.header = bytes[..FILE_HEADER_LEN].to_vec();
            if let Some(h) = FileHeader::parse(bytes[..FILE_HEADER_LEN].try_into().expect("16")) {
                scan.start_us = h.timestamp;
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
        // Before this split's first anchor or dropout: a dropout there borrows the anchors
        // the split before ended on.
        let mut split_start = tail.is_some() && open.is_none();
        // The open site is the previous split's.
        let mut carried = open.is_some();
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
            if ty == msg_type::INFO_MULTIPLE && is_postflight(raw) {
                scan.stopped = true;
            }
            if !anchored
                && matches!(
                    ty,
                    msg_type::DATA
                        | msg_type::LOGGING
                        | msg_type::LOGGING_TAGGED
                        | msg_type::DROPOUT
                )
            {
                head_begun = true;
            }
            let keep_head =
                (!anchored && head_begun || split_start) && window.len() < MAX_HEAD_MESSAGES;
            let placed = Placed {
                bytes: raw.to_vec(),
                offset: at,
            };
            if ty == msg_type::DROPOUT {
                match &mut open {
                    // No anchor since the last dropout: the same gap.
                    Some(site) if site.after.is_empty() && !carried => {
                        site.messages.push(placed);
                        site.own.end = site.messages.len();
                    }
                    _ => {
                        scan.sites.extend(open.take());
                        carried = false;
                        // The site's messages start at its first anchor before it (at the
                        // head: at the first record; at a split's start: at the anchors the
                        // split before ended on).
                        let first = recent.first().copied().unwrap_or(if keep_head {
                            0
                        } else {
                            window.len()
                        });
                        let mut messages: Vec<Placed> = window.drain(first..).collect();
                        let mut before: Vec<usize> = recent.iter().map(|i| i - first).collect();
                        let mut own = 0..messages.len() + 1;
                        if split_start && let Some((_, borrowed, anchors, _)) = &tail {
                            let n = borrowed.len();
                            messages.splice(0..0, borrowed.iter().cloned());
                            before = anchors.clone();
                            own = n..messages.len() + 1;
                        }
                        split_start = false;
                        let (before_us, last_before_us) =
                            anchor_times(&mut decoder, &messages, &before);
                        let mut site = DropoutSite {
                            split: name.to_string(),
                            offset: at,
                            messages,
                            own,
                            before,
                            after: Vec::new(),
                            before_us,
                            last_before_us,
                            after_us: None,
                            end: at + raw.len() as u64,
                            starts_flight: !anchored,
                            ends_flight: false,
                            window: None,
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
            let msg_id = || u16::from_le_bytes([raw[3], raw[4]]);
            if let Some(t) = timestamp.filter(|t| *t > 0) {
                // The log's clock jumped (the stream's first records, or PX4's logger held
                // up a moment): its pass over its topics follows.
                if t > clock + LATE_US {
                    resumed_at = t;
                }
                clock = clock.max(t);
                let held_up = clock <= resumed_at + LATE_US;
                scan.paces
                    .entry(msg_id())
                    .and_modify(|pace| pace.logged_late(t, clock, held_up))
                    .or_insert_with(|| Pace::first(t, clock));
            }
            let anchor = timestamp.filter(|t| *t > 0).is_some_and(|ts| {
                let msg_id = msg_id();
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
            if anchor {
                anchored = true;
                split_start = false;
            }
            if let Some(site) = &mut open {
                site.messages.push(placed.clone());
                if !carried {
                    site.end = at + raw.len() as u64;
                    site.own.end = site.messages.len();
                }
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
            } else if recent.is_empty() && !keep_head {
                window.clear();
            }
        }
        // A site that ends its split without anchors after it takes them from the next.
        let open_at_end = open.as_ref().is_some_and(|site| site.after.is_empty());
        if !open_at_end || carried {
            scan.sites.extend(open.take());
        }
        if let Some(first) = recent.first().copied() {
            let before = recent.iter().map(|i| i - first).collect();
            tail = Some((
                name.to_string(),
                window.split_off(first),
                before,
                offset as u64,
            ));
        } else if open_at_end {
            tail = None;
        }
    }
    scan.sites.extend(open.take());
    // The flight's end: its last site when no anchor follows it, else a site of its own
    // after the last anchors (no dropout in it: nothing to replace, only to add).
    match scan.sites.last_mut() {
        Some(site) if site.after.is_empty() && tail.is_none() => site.ends_flight = true,
        _ => {
            if let Some((split, messages, before, end)) = tail {
                let (before_us, last_before_us) = anchor_times(&mut decoder, &messages, &before);
                scan.sites.push(DropoutSite {
                    split,
                    offset: end,
                    own: 0..messages.len(),
                    messages,
                    before,
                    after: Vec::new(),
                    before_us,
                    last_before_us,
                    after_us: None,
                    end,
                    starts_flight: false,
                    ends_flight: true,
                    window: None,
                });
            }
        }
    }
    scan
}

/// The sites of an event buffer's column (its splits as for [`scan`]): one per window of
/// `windows` (`[from, to]` µs) for which `needs` says so, each the column's messages from
/// the window's first sample to its last (the held ones, written when the event came, and
/// those written as they came until its end). A window whose samples lie in two splits, or
/// that holds none, has no site (it is returned in the second list).
pub fn window_sites<'a>(
    splits: impl IntoIterator<Item = (&'a str, &'a [u8], usize)>,
    windows: &[[u64; 2]],
    needs: impl Fn([u64; 2]) -> bool,
) -> (Vec<DropoutSite>, Vec<[u64; 2]>) {
    // Per window: the split and the indexes of its first and last sample there.
    let mut found: Vec<Option<(usize, usize, usize)>> = vec![None; windows.len()];
    let mut split_messages: Vec<(String, Vec<Placed>)> = Vec::new();
    let mut torn = vec![false; windows.len()];
    let mut decoder = Decoder::new();
    for (name, bytes, skip) in splits {
        let mut offset = if split_messages.is_empty() {
            if bytes.len() < FILE_HEADER_LEN {
                continue;
            }
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
        let k = split_messages.len();
        let mut messages = Vec::new();
        for raw in framed(&bytes[offset..]) {
            let at = offset as u64;
            offset += raw.len();
            let time = match Message::parse_framed(raw) {
                Some(m @ Message::Data { .. }) => decoder.timestamp_of(Some(&m)),
                Some(m) => {
                    let _ = decoder.handle(&m);
                    None
                }
                None => None,
            };
            let i = messages.len();
            messages.push(Placed {
                bytes: raw.to_vec(),
                offset: at,
            });
            let Some(w) =
                time.and_then(|t| windows.iter().position(|[a, b]| (*a..=*b).contains(&t)))
            else {
                continue;
            };
            match &mut found[w] {
                Some((split, _, last)) if *split == k => *last = i,
                Some(_) => torn[w] = true,
                none => *none = Some((k, i, i)),
            }
        }
        split_messages.push((name.to_string(), messages));
    }
    let mut sites = Vec::new();
    let mut left = Vec::new();
    for (w, window) in windows.iter().enumerate() {
        if !needs(*window) {
            continue;
        }
        let Some((k, first, last)) = found[w].filter(|_| !torn[w]) else {
            left.push(*window);
            continue;
        };
        let (split, messages) = &split_messages[k];
        let messages: Vec<Placed> = messages[first..=last].to_vec();
        let end = messages
            .last()
            .map_or(0, |m| m.offset + m.bytes.len() as u64);
        sites.push(DropoutSite {
            split: split.clone(),
            offset: messages[0].offset,
            own: 0..messages.len(),
            messages,
            before: Vec::new(),
            after: Vec::new(),
            before_us: window[0],
            last_before_us: window[1],
            after_us: None,
            end,
            starts_flight: false,
            ends_flight: false,
            window: Some(*window),
        });
    }
    (sites, left)
}

/// The oldest and newest time of the anchors `ix` among `messages` (0 without any).
fn anchor_times(decoder: &mut Decoder, messages: &[Placed], ix: &[usize]) -> (u64, u64) {
    let times: Vec<u64> = ix
        .iter()
        .filter_map(|i| sample_time(decoder, &messages[*i].bytes))
        .collect();
    (
        times.iter().copied().min().unwrap_or(0),
        times.iter().copied().max().unwrap_or(0),
    )
}

/// The timestamp of a data record the decoder knows (the decoder already followed it).
fn sample_time(decoder: &mut Decoder, raw: &[u8]) -> Option<u64> {
    let msg_id = u16::from_le_bytes([*raw.get(3)?, *raw.get(4)?]);
    let sub = decoder.subscription(msg_id)?;
    let t = sub.layout.timestamp?;
    Some(t.ty.read(raw.get(5 + t.offset..)?).as_u64()? * t.unit_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flights_scan_measures_each_topics_period_and_lag_from_its_second_sample() {
        let file = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/synthetic.ulg"
        ))
        .unwrap();
        let flight = scan([("split_0000.ulg", &file[..], 0)]);
        assert!(!flight.paces.is_empty());
        for pace in flight.paces.values() {
            assert!(pace.period_us.is_none_or(|p| p > 0));
            assert!(pace.lag_us < crate::fill::pace::LAG_US, "{pace:?}");
        }
    }
}
