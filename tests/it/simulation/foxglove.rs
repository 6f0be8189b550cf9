//! The Foxglove server in the simulation: the receiver's own [`FoxglovePublisher`] beside
//! the session, with a client that subscribes to each log channel as soon as it is
//! advertised (as Foxglove's app does when a panel shows every topic), and what it was sent.
//! [`check`] holds that to the log: each sample once, in the log's order, on its topic, at
//! its log time.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use serde_json::json;
use ulog_recv::autopilot::LogFormat;
use ulog_recv::dataflash::Framer;
use ulog_recv::dataflash::format::time_us;
use ulog_recv::link::Event;
use ulog_recv::live::foxglove::publisher::is_text;
use ulog_recv::live::foxglove::{ClientId, FoxglovePublisher};

use crate::common::split_messages;

/// A sample as the client was sent it: its channel's topic and its log time (µs).
pub type Sent = (String, u64);

/// The server and its one client.
pub struct Foxglove {
    publisher: FoxglovePublisher,
    client: ClientId,
    /// Topic by channel id, and by subscription id.
    channels: HashMap<u32, String>,
    subscriptions: HashMap<u32, String>,
    next_subscription: u32,
}

impl Foxglove {
    /// A server that a client has just connected to.
    pub fn new(now: Instant) -> Self {
        let mut publisher = FoxglovePublisher::new("ulog-recv simulation", "sim");
        let client = publisher.connect().expect("room for one client");
        let mut f = Self {
            publisher,
            client,
            channels: HashMap::new(),
            subscriptions: HashMap::new(),
            next_subscription: 1,
        };
        f.take(now, &mut Vec::new());
        f
    }

    /// `e` to the server; what the client was sent of the log's samples goes to `sent`.
    pub fn handle_event(&mut self, e: &Event, now: Instant, sent: &mut Vec<Sent>) {
        self.publisher.handle_event(e, now);
        self.take(now, sent);
    }

    /// Everything the server has to send, to the client, which subscribes to each new log
    /// channel at once.
    fn take(&mut self, now: Instant, sent: &mut Vec<Sent>) {
        while let Some(out) = self.publisher.poll_transmit() {
            assert_eq!(out.client, self.client, "a message for a client not there");
            let m = &out.message[..];
            if is_text(m) {
                let text: serde_json::Value = serde_json::from_slice(m).expect("JSON");
                if text["op"] != "advertise" {
                    continue;
                }
                let mut subscriptions = Vec::new();
                for c in text["channels"].as_array().expect("channels") {
                    let id = c["id"].as_u64().expect("a channel id") as u32;
                    let topic = c["topic"].as_str().expect("a topic").to_string();
                    self.channels.insert(id, topic.clone());
                    if topic == "/log" || topic == "/diagnostics" {
                        continue;
                    }
                    let sub = self.next_subscription;
                    self.next_subscription += 1;
                    self.subscriptions.insert(sub, topic);
                    subscriptions.push(json!({"id": sub, "channelId": id}));
                }
                if !subscriptions.is_empty() {
                    let request = json!({"op": "subscribe", "subscriptions": subscriptions});
                    self.publisher
                        .handle_text(self.client, &request.to_string(), now);
                }
            } else {
                assert_eq!(m[0], 0x01, "a binary message that is not MessageData");
                let sub = u32::from_le_bytes(m[1..5].try_into().unwrap());
                let ns = u64::from_le_bytes(m[5..13].try_into().unwrap());
                let topic = self
                    .subscriptions
                    .get(&sub)
                    .expect("a subscription of ours");
                sent.push((topic.clone(), ns / 1000));
            }
        }
    }
}

/// The client was sent every sample of the log once, on its topic, at its log time, each
/// topic's in the log's order: PX4, each `D` message on `/NAME` (`/NAME/N` for multi id N),
/// at its timestamp; ArduPilot, each record but the formats, parameters, texts and version,
/// on `/NAME` (or `/NAME/N` for an instance), at its `TimeUS` (one without it is not held to
/// a time). Across topics the order may differ: a new channel's first samples, held for a
/// client that subscribes once it sees the channel, follow what was already on its way.
/// ArduPilot's instances of a type are held to the type's samples together, as a set.
pub fn check(format: LogFormat, bytes: &[u8], sent: &[Sent]) -> Result<(), String> {
    let mut want: BTreeMap<String, Vec<Option<u64>>> = BTreeMap::new();
    match format {
        LogFormat::ULog => {
            let mut names = HashMap::new();
            for m in &split_messages(bytes)[1..] {
                let id = |at: usize| u16::from_le_bytes([m[at], m[at + 1]]);
                match m[2] {
                    b'A' => {
                        let name = String::from_utf8_lossy(&m[6..]).into_owned();
                        let topic = match m[3] {
                            0 => format!("/{name}"),
                            n => format!("/{name}/{n}"),
                        };
                        names.insert(id(4), topic);
                    }
                    b'D' => {
                        let topic = names.get(&id(3)).ok_or("a sample before its A")?;
                        let t = u64::from_le_bytes(m[5..13].try_into().unwrap());
                        want.entry(topic.clone()).or_default().push(Some(t));
                    }
                    _ => {}
                }
            }
        }
        LogFormat::DataFlash => Framer::new().push(bytes, |m, f| match f.name.as_str() {
            "FMT" | "FMTU" | "UNIT" | "MULT" | "PARM" | "MSG" | "VER" => {}
            name => want
                .entry(format!("/{name}"))
                .or_default()
                .push(time_us(f, m)),
        }),
    }
    // An ArduPilot instance's topic, its instance left out.
    let base = |topic: &str| match topic.rsplit_once('/') {
        Some((b, n)) if format == LogFormat::DataFlash && n.parse::<u8>().is_ok() => b.to_string(),
        _ => topic.to_string(),
    };
    let mut got: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (topic, us) in sent {
        got.entry(base(topic)).or_default().push(*us);
    }
    let topics: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
    for topic in topics {
        let (mut w, mut g) = (
            want.get(topic).cloned().unwrap_or_default(),
            got.get(topic).cloned().unwrap_or_default(),
        );
        if format == LogFormat::DataFlash {
            w.sort();
            g.sort();
        }
        let same = |w: &Option<u64>, g: &u64| w.is_none_or(|t| t == *g);
        let n = w.len().max(g.len());
        if let Some(i) = (0..n).find(|&i| match (w.get(i), g.get(i)) {
            (Some(w), Some(g)) => !same(w, g),
            _ => true,
        }) {
            return Err(format!(
                "{topic}: sample {i} of {} in the log is at {:?} µs, the Foxglove client was \
                 sent {:?} ({} messages)",
                w.len(),
                w.get(i),
                g.get(i),
                g.len()
            ));
        }
    }
    Ok(())
}
