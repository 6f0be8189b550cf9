//! The Foxglove server's sans-IO core: log bytes, session events and client requests in,
//! per-client WebSocket messages out (JSON text for control, binary for samples).
//!
//! One channel per topic instance of the open log (`/NAME` for multi id 0, `/NAME/N`
//! otherwise; ROS 2 types from [`crate::ros::ros2`], CDR encoded), advertised as its
//! subscription appears in the log, unadvertised when the log ends or the topic is removed;
//! `/log` (`rcl_interfaces/msg/Log`) for the logged strings, and `/diagnostics`
//! (`diagnostic_msgs/msg/DiagnosticArray`, [`crate::ros::diagnostics`]) for the flight
//! diagnostics' findings as the store makes them, both advertised for as long as the server
//! runs. A client that connects gets `serverInfo` and every current channel. Only
//! a channel somebody subscribed to is encoded, once per sample whatever the number of
//! subscribers. A message's log time is the sample's ULog timestamp in nanoseconds (a sample
//! without one takes the log's latest time).
//!
//! A client can only subscribe to a channel once it has seen it advertised, and a topic's
//! first samples follow its definition at once. So that a subscriber still gets a new topic
//! from its first sample, a channel holds its raw samples for [`HOLD_NEW_CHANNEL`] after its
//! advertisement (bounded in bytes per channel and in all); a subscription made in that time
//! gets them first. In the same way a subscription to `/diagnostics` gets the findings of the
//! flight so far (the latest [`KEEP_FINDINGS`]), so that a panel opened mid-flight shows them.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::diagnose::Finding;
use crate::link::Event;
use crate::live::foxglove::protocol::{self, ChannelInfo, Level, Request};
use crate::live::outbox::Keep;
use crate::ros::diagnostics::{
    DIAGNOSTICS_SCHEMA, DIAGNOSTICS_TOPIC, DIAGNOSTICS_TYPE, encode_finding,
};
use crate::ros::ros2::{LOG_SCHEMA, LOG_TYPE, Ros2Type, encode_log};
use crate::ulog::framer::{Framer, Unit};
use crate::ulog::message::Message;
use crate::ulog::{Decoder, FileHeader};

/// A connected client's number.
pub type ClientId = u64;

/// Most clients at once.
pub const MAX_CLIENTS: usize = 32;

/// Most subscriptions a client may hold (a log has a few hundred topic instances).
pub const MAX_SUBSCRIPTIONS: usize = 4096;

/// How long a new channel keeps its first samples for subscribers still to come.
pub const HOLD_NEW_CHANNEL: Duration = Duration::from_secs(2);
/// The most sample bytes one new channel holds.
pub const HOLD_CHANNEL_BYTES: usize = 64 << 10;
/// The most sample bytes all new channels hold together.
pub const HOLD_TOTAL_BYTES: usize = 4 << 20;

/// The most findings of the flight a new `/diagnostics` subscriber is sent.
pub const KEEP_FINDINGS: usize = 256;

/// A message for one client.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub client: ClientId,
    /// A JSON text message (it begins with `{`) or a binary frame (it begins with an opcode).
    pub message: Bytes,
    /// When the log data a sample was made from arrived (for the latency measurement).
    pub arrived: Option<Instant>,
    pub keep: Keep,
}

/// Whether `message` (as [`Outgoing::message`] holds it) goes as a text message.
pub fn is_text(message: &[u8]) -> bool {
    message.first() == Some(&b'{')
}

#[derive(Debug)]
enum Kind {
    Log,
    Diagnostics,
    Topic(Ros2Type),
}

#[derive(Debug)]
struct Channel {
    info: ChannelInfo,
    kind: Kind,
    /// `(client, subscription id)` of everyone subscribed.
    subscribers: Vec<(ClientId, u32)>,
    /// A new channel's first samples, while it is new.
    held: Option<Held>,
}

/// The samples a new channel holds (see the module docs).
#[derive(Debug)]
struct Held {
    until: Instant,
    bytes: usize,
    /// (ULog sample bytes, log time in µs).
    samples: Vec<(Vec<u8>, u64)>,
}

#[derive(Debug, Default)]
struct Client {
    /// Subscription id → channel id.
    subscriptions: HashMap<u32, u32>,
}

/// The open log.
#[derive(Debug)]
struct LogState {
    framer: Framer,
    decoder: Decoder,
    /// Channel id of each message id.
    channels: Vec<Option<u32>>,
}

/// See the module docs.
#[derive(Debug)]
pub struct FoxglovePublisher {
    name: String,
    session_id: String,
    clients: BTreeMap<ClientId, Client>,
    next_client: ClientId,
    channels: BTreeMap<u32, Channel>,
    next_channel: u32,
    log_channel: u32,
    diagnostics_channel: u32,
    /// The findings of the current flight (kept after it ends, until the next), the latest
    /// [`KEEP_FINDINGS`].
    findings: VecDeque<Finding>,
    log: Option<LogState>,
    out: VecDeque<Outgoing>,
    /// Sample bytes held by new channels, all together.
    held_bytes: usize,
    /// Reused for every encoding.
    cdr: Vec<u8>,
    frame: Vec<u8>,
}

impl FoxglovePublisher {
    /// A server called `name`; `session_id` changes when the server restarts (clients use it
    /// to tell that channel ids are new).
    pub fn new(name: impl Into<String>, session_id: impl Into<String>) -> Self {
        let mut p = Self {
            name: name.into(),
            session_id: session_id.into(),
            clients: BTreeMap::new(),
            next_client: 1,
            channels: BTreeMap::new(),
            next_channel: 1,
            log_channel: 0,
            diagnostics_channel: 0,
            findings: VecDeque::new(),
            log: None,
            out: VecDeque::new(),
            held_bytes: 0,
            cdr: Vec::new(),
            frame: Vec::new(),
        };
        p.log_channel = p.add_channel(
            "/log".into(),
            LOG_TYPE.into(),
            LOG_SCHEMA.into(),
            Kind::Log,
            None,
        );
        p.diagnostics_channel = p.add_channel(
            DIAGNOSTICS_TOPIC.into(),
            DIAGNOSTICS_TYPE.into(),
            DIAGNOSTICS_SCHEMA.into(),
            Kind::Diagnostics,
            None,
        );
        p
    }

    /// A new channel; one made at `new_at` holds its first samples (see the module docs).
    fn add_channel(
        &mut self,
        topic: String,
        schema_name: String,
        schema: String,
        kind: Kind,
        new_at: Option<Instant>,
    ) -> u32 {
        let id = self.next_channel;
        self.next_channel = self.next_channel.wrapping_add(1).max(1);
        self.channels.insert(
            id,
            Channel {
                info: ChannelInfo {
                    id,
                    topic,
                    schema_name,
                    schema,
                },
                kind,
                subscribers: Vec::new(),
                held: new_at.map(|at| Held {
                    until: at + HOLD_NEW_CHANNEL,
                    bytes: 0,
                    samples: Vec::new(),
                }),
            },
        );
        id
    }

    /// A new client: it gets `serverInfo` and the current channels. `None` when
    /// [`MAX_CLIENTS`] are connected.
    pub fn connect(&mut self) -> Option<ClientId> {
        if self.clients.len() >= MAX_CLIENTS {
            return None;
        }
        let id = self.next_client;
        self.next_client += 1;
        self.clients.insert(id, Client::default());
        self.send(
            id,
            protocol::server_info(&self.name, &self.session_id),
            Keep::Always,
        );
        let all = protocol::advertise(self.channels.values().map(|c| &c.info));
        self.send(id, all, Keep::Always);
        Some(id)
    }

    /// The client is gone.
    pub fn disconnect(&mut self, id: ClientId) {
        if let Some(client) = self.clients.remove(&id) {
            for channel in client.subscriptions.values() {
                if let Some(c) = self.channels.get_mut(channel) {
                    c.subscribers.retain(|(who, _)| *who != id);
                }
            }
        }
    }

    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    /// A text message from client `id`, received at `now`.
    pub fn handle_text(&mut self, id: ClientId, text: &str, now: Instant) {
        if !self.clients.contains_key(&id) {
            return;
        }
        match protocol::parse_request(text) {
            Ok(Request::Subscribe(pairs)) => {
                for (sub, channel) in pairs {
                    self.subscribe(id, sub, channel, now);
                }
            }
            Ok(Request::Unsubscribe(subs)) => {
                for sub in subs {
                    self.unsubscribe(id, sub);
                }
            }
            Ok(Request::Other(op)) => self.send(
                id,
                protocol::status(Level::Warning, &format!("\"{op}\" is not served here")),
                Keep::Droppable,
            ),
            Err(e) => self.send(
                id,
                protocol::status(Level::Error, &e.to_string()),
                Keep::Droppable,
            ),
        }
    }

    fn subscribe(&mut self, id: ClientId, sub: u32, channel: u32, now: Instant) {
        let client = self.clients.get_mut(&id).expect("checked by the caller");
        let problem = if client.subscriptions.contains_key(&sub) {
            Some(format!("subscription {sub} exists already"))
        } else if client.subscriptions.len() >= MAX_SUBSCRIPTIONS {
            Some(format!("at most {MAX_SUBSCRIPTIONS} subscriptions"))
        } else if let Some(c) = self.channels.get_mut(&channel) {
            client.subscriptions.insert(sub, channel);
            c.subscribers.push((id, sub));
            None
        } else {
            Some(format!("no channel {channel}"))
        };
        if let Some(p) = problem {
            self.send(id, protocol::status(Level::Error, &p), Keep::Droppable);
            return;
        }
        if channel == self.diagnostics_channel {
            // The flight's findings so far, to this subscriber only.
            for finding in &self.findings {
                encode_finding(finding, &mut self.cdr);
                let log_time = finding.made_at_us().saturating_mul(1000);
                protocol::message_data(sub, log_time, &self.cdr, &mut self.frame);
                self.out.push_back(Outgoing {
                    client: id,
                    message: Bytes::copy_from_slice(&self.frame),
                    arrived: None,
                    keep: Keep::Droppable,
                });
            }
            return;
        }
        // A new channel's first samples, to this subscriber only.
        let c = &self.channels[&channel];
        let (Some(held), Kind::Topic(ty)) = (&c.held, &c.kind) else {
            return;
        };
        if now >= held.until {
            return;
        }
        for (data, log_time) in &held.samples {
            if ty.encode(data, &mut self.cdr).is_ok() {
                protocol::message_data(
                    sub,
                    log_time.saturating_mul(1000),
                    &self.cdr,
                    &mut self.frame,
                );
                self.out.push_back(Outgoing {
                    client: id,
                    message: Bytes::copy_from_slice(&self.frame),
                    arrived: None,
                    keep: Keep::Droppable,
                });
            }
        }
    }

    fn unsubscribe(&mut self, id: ClientId, sub: u32) {
        let client = self.clients.get_mut(&id).expect("checked by the caller");
        match client.subscriptions.remove(&sub) {
            Some(channel) => {
                if let Some(c) = self.channels.get_mut(&channel) {
                    c.subscribers.retain(|s| *s != (id, sub));
                }
            }
            None => self.send(
                id,
                protocol::status(Level::Error, &format!("no subscription {sub}")),
                Keep::Droppable,
            ),
        }
    }

    /// One of the session's events ([`Event::LogBytes`] taken as arriving at `now`).
    pub fn handle_event(&mut self, event: &Event, now: Instant) {
        match event {
            Event::LogOpened { .. } => {
                self.end_log();
                self.findings.clear();
                self.log = Some(LogState {
                    framer: Framer::file(),
                    decoder: Decoder::new(),
                    channels: Vec::new(),
                });
            }
            Event::LogBytes(bytes) => self.handle_log_bytes(bytes, now),
            Event::LogClosed { .. } => self.end_log(),
            _ => {}
        }
    }

    /// The log ends: its channels are unadvertised.
    fn end_log(&mut self) {
        let Some(log) = self.log.take() else { return };
        let ids: Vec<u32> = log.channels.into_iter().flatten().collect();
        self.remove_channels(&ids);
    }

    fn remove_channels(&mut self, ids: &[u32]) {
        if ids.is_empty() {
            return;
        }
        for id in ids {
            if let Some(c) = self.channels.remove(id) {
                self.held_bytes -= c.held.as_ref().map_or(0, |h| h.bytes);
                for (client, sub) in c.subscribers {
                    if let Some(cl) = self.clients.get_mut(&client) {
                        cl.subscriptions.remove(&sub);
                    }
                }
            }
        }
        self.broadcast(protocol::unadvertise(ids), Keep::Always);
    }

    /// The next bytes of the open log (whole messages), which arrived at `arrived`.
    pub fn handle_log_bytes(&mut self, bytes: &[u8], arrived: Instant) {
        let Some(log) = self.log.as_mut() else { return };
        let mut framer = std::mem::take(&mut log.framer);
        let _ = framer.push(bytes, |unit| {
            match unit {
                Unit::Header(header) => {
                    if let (Some(h), Some(log)) = (FileHeader::parse(header), self.log.as_mut()) {
                        let _ = log.decoder.handle(&Message::Header(h));
                    }
                }
                Unit::Message(m) => self.message(m, arrived),
            }
            ControlFlow::Continue(())
        });
        if let Some(log) = self.log.as_mut() {
            log.framer = framer;
        }
    }

    fn message(&mut self, bytes: &[u8], arrived: Instant) {
        let Some(message) = Message::parse_framed(bytes) else {
            return;
        };
        let Some(log) = self.log.as_mut() else { return };
        match message {
            Message::Data { msg_id, .. } => {
                let Some(Some(channel_id)) = log.channels.get(msg_id as usize).copied() else {
                    let _ = log.decoder.handle(&message);
                    return;
                };
                let Some(channel) = self.channels.get_mut(&channel_id) else {
                    return;
                };
                // The latest time so far: a sample without a timestamp of its own takes it.
                let latest = log.decoder.last_timestamp();
                let Ok(Some(sample)) = log.decoder.handle(&message) else {
                    return;
                };
                let log_time = sample.timestamp.unwrap_or(latest);
                if let Some(held) = channel.held.as_mut() {
                    let len = sample.data.len();
                    if arrived < held.until
                        && held.bytes + len <= HOLD_CHANNEL_BYTES
                        && self.held_bytes + len <= HOLD_TOTAL_BYTES
                    {
                        held.samples.push((sample.data.to_vec(), log_time));
                        held.bytes += len;
                        self.held_bytes += len;
                    } else {
                        self.held_bytes -= held.bytes;
                        channel.held = None;
                    }
                }
                if channel.subscribers.is_empty() {
                    return;
                }
                let Kind::Topic(ty) = &channel.kind else {
                    return;
                };
                if ty.encode(sample.data, &mut self.cdr).is_err() {
                    return;
                }
                Self::fan_out(
                    &mut self.out,
                    &mut self.frame,
                    channel,
                    &self.cdr,
                    log_time,
                    arrived,
                );
            }
            Message::AddLogged { msg_id, .. } => {
                if log.decoder.handle(&message).is_err() {
                    return;
                }
                let Some(sub) = log.decoder.subscription(msg_id) else {
                    return;
                };
                let name = sub.name().to_owned();
                let topic = match sub.multi_id {
                    0 => format!("/{name}"),
                    n => format!("/{name}/{n}"),
                };
                let Ok(ty) = Ros2Type::compile(&name, log.decoder.formats()) else {
                    return;
                };
                let old = log.channels.get(msg_id as usize).copied().flatten();
                let id = self.add_channel(
                    topic,
                    ty.name.clone(),
                    ty.schema.clone(),
                    Kind::Topic(ty),
                    Some(arrived),
                );
                let log = self.log.as_mut().expect("open");
                let i = msg_id as usize;
                if log.channels.len() <= i {
                    log.channels.resize(i + 1, None);
                }
                log.channels[i] = Some(id);
                if let Some(old) = old {
                    self.remove_channels(&[old]);
                }
                let ad = protocol::advertise([&self.channels[&id].info]);
                self.broadcast(ad, Keep::Always);
            }
            Message::RemoveLogged { msg_id } => {
                let _ = log.decoder.handle(&message);
                if let Some(slot) = log.channels.get_mut(msg_id as usize)
                    && let Some(id) = slot.take()
                {
                    self.remove_channels(&[id]);
                }
            }
            Message::Logging {
                level,
                timestamp,
                text,
            } => self.log_string(timestamp, level, "px4", text, arrived),
            Message::LoggingTagged {
                level,
                tag,
                timestamp,
                text,
            } => self.log_string(timestamp, level, &format!("px4/{tag}"), text, arrived),
            other => {
                let _ = log.decoder.handle(&other);
            }
        }
    }

    /// A finding of the flight's diagnostics (made by the store as the log passed), published
    /// on `/diagnostics` at the log time it was made.
    pub fn handle_finding(&mut self, finding: &Finding, arrived: Instant) {
        if self.findings.len() == KEEP_FINDINGS {
            self.findings.pop_front();
        }
        self.findings.push_back(finding.clone());
        let channel = &self.channels[&self.diagnostics_channel];
        if channel.subscribers.is_empty() {
            return;
        }
        encode_finding(finding, &mut self.cdr);
        Self::fan_out(
            &mut self.out,
            &mut self.frame,
            channel,
            &self.cdr,
            finding.made_at_us(),
            arrived,
        );
    }

    fn log_string(&mut self, timestamp: u64, level: u8, name: &str, text: &[u8], arrived: Instant) {
        let channel = &self.channels[&self.log_channel];
        if channel.subscribers.is_empty() {
            return;
        }
        encode_log(timestamp, level, name, text, &mut self.cdr);
        Self::fan_out(
            &mut self.out,
            &mut self.frame,
            channel,
            &self.cdr,
            timestamp,
            arrived,
        );
    }

    /// One frame per subscriber of `channel`.
    fn fan_out(
        out: &mut VecDeque<Outgoing>,
        frame: &mut Vec<u8>,
        channel: &Channel,
        payload: &[u8],
        log_time_us: u64,
        arrived: Instant,
    ) {
        for &(client, sub) in &channel.subscribers {
            protocol::message_data(sub, log_time_us.saturating_mul(1000), payload, frame);
            out.push_back(Outgoing {
                client,
                message: Bytes::copy_from_slice(frame),
                arrived: Some(arrived),
                keep: Keep::Droppable,
            });
        }
    }

    fn send(&mut self, client: ClientId, message: Bytes, keep: Keep) {
        self.out.push_back(Outgoing {
            client,
            message,
            arrived: None,
            keep,
        });
    }

    fn broadcast(&mut self, message: Bytes, keep: Keep) {
        for &client in self.clients.keys() {
            self.out.push_back(Outgoing {
                client,
                message: message.clone(),
                arrived: None,
                keep,
            });
        }
    }

    /// The next message to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::CloseReason;
    use serde_json::Value as Json;

    fn json_of(o: &Outgoing) -> Json {
        assert!(is_text(&o.message));
        serde_json::from_slice(&o.message).unwrap()
    }

    fn drain(p: &mut FoxglovePublisher) -> Vec<Outgoing> {
        std::iter::from_fn(|| p.poll_transmit()).collect()
    }

    /// The synthetic flight through a publisher with one client subscribed to everything.
    #[test]
    fn a_subscriber_gets_every_sample_of_its_channels_and_the_log_strings() {
        let log = crate::sim::synth::generate(crate::sim::synth::SynthOptions {
            duration_s: 20,
            seed: 1,
            appended_data: false,
        });
        let now = Instant::now();
        let mut p = FoxglovePublisher::new("test", "s1");
        let c = p.connect().unwrap();
        let hello = drain(&mut p);
        assert_eq!(json_of(&hello[0])["op"], "serverInfo");
        let ads = json_of(&hello[1]);
        assert_eq!(ads["channels"][0]["topic"], "/log");
        // Subscribe to /log, then open the log and subscribe to each channel as it comes.
        p.handle_text(
            c,
            r#"{"op":"subscribe","subscriptions":[{"id":100,"channelId":1}]}"#,
            now,
        );
        p.handle_event(&Event::LogOpened { number: 1 }, now);
        let mut subs: HashMap<u32, String> = HashMap::new();
        let mut counts: HashMap<String, u64> = HashMap::new();
        let mut removed_in_flight = 0;
        let mut step = |p: &mut FoxglovePublisher, subs: &mut HashMap<u32, String>| {
            for o in drain(p) {
                assert_eq!(o.client, c);
                if is_text(&o.message) {
                    let m = json_of(&o);
                    assert_ne!(m["op"], "status", "{m}");
                    if m["op"] == "unadvertise" {
                        removed_in_flight += m["channelIds"].as_array().unwrap().len();
                    }
                    if m["op"] == "advertise" {
                        for ch in m["channels"].as_array().unwrap() {
                            let sub = subs.len() as u32;
                            subs.insert(sub, ch["topic"].as_str().unwrap().to_owned());
                            p.handle_text(
                                c,
                                &format!(
                                    r#"{{"op":"subscribe","subscriptions":[{{"id":{sub},"channelId":{}}}]}}"#,
                                    ch["id"]
                                ),
                                now,
                            );
                        }
                    }
                } else {
                    assert_eq!(o.message[0], protocol::MESSAGE_DATA);
                    let sub = u32::from_le_bytes(o.message[1..5].try_into().unwrap());
                    let topic = if sub == 100 {
                        "/log".to_owned()
                    } else {
                        subs[&sub].clone()
                    };
                    *counts.entry(topic).or_default() += 1;
                }
            }
        };
        // The subscription made on an advertise comes after the rest of the piece: the
        // channel's first samples reach it from the hold.
        for piece in log.chunks(1000) {
            p.handle_log_bytes(piece, now);
            step(&mut p, &mut subs);
        }
        let summary = crate::ulog::summary::summarize(&log).unwrap();
        for d in &summary.datasets {
            let topic = match d.multi_id {
                0 => format!("/{}", d.name),
                n => format!("/{}/{n}", d.name),
            };
            let got = counts.get(&topic).copied().unwrap_or(0);
            assert_eq!(got, d.count, "{topic}");
        }
        assert_eq!(counts["/log"], summary.logged_messages.len() as u64);
        // The log ends: its channels go, /log stays.
        p.handle_event(
            &Event::LogClosed {
                number: 1,
                reason: CloseReason::Shutdown,
                bytes: 0,
            },
            now,
        );
        let out = drain(&mut p);
        let un = json_of(&out[0]);
        assert_eq!(un["op"], "unadvertise");
        // battery_status is removed in flight, the others when the log ends.
        assert_eq!(removed_in_flight, 1);
        let at_end = un["channelIds"].as_array().unwrap().len();
        assert_eq!(at_end + removed_in_flight, summary.datasets.len());
        assert!(!un["channelIds"].as_array().unwrap().contains(&1.into()));
    }

    /// Subscribes `client` to the channel of `topic` (as the latest advertise in `out` has it)
    /// at `now`; the message-data frames that follow at once.
    fn subscribe_late(p: &mut FoxglovePublisher, c: ClientId, channel: u64, now: Instant) -> usize {
        p.handle_text(
            c,
            &format!(r#"{{"op":"subscribe","subscriptions":[{{"id":7,"channelId":{channel}}}]}}"#),
            now,
        );
        drain(p).iter().filter(|o| !is_text(&o.message)).count()
    }

    #[test]
    fn a_new_channel_holds_its_first_samples_for_a_while_and_within_bounds() {
        let log = crate::sim::synth::generate(crate::sim::synth::SynthOptions {
            duration_s: 5,
            seed: 1,
            appended_data: false,
        });
        let t0 = Instant::now();
        let run = |subscribe_at: Duration| {
            let mut p = FoxglovePublisher::new("test", "s1");
            let c = p.connect().unwrap();
            p.handle_event(&Event::LogOpened { number: 1 }, t0);
            // The whole log arrives at t0 (as a burst would).
            p.handle_log_bytes(&log, t0);
            let attitude = drain(&mut p)
                .iter()
                .filter(|o| is_text(&o.message))
                .map(json_of)
                .filter(|m| m["op"] == "advertise")
                .flat_map(|m| m["channels"].as_array().unwrap().clone())
                .find(|ch| ch["topic"] == "/vehicle_attitude")
                .expect("vehicle_attitude advertised")["id"]
                .as_u64()
                .unwrap();
            assert!(p.held_bytes <= HOLD_TOTAL_BYTES);
            subscribe_late(&mut p, c, attitude, t0 + subscribe_at)
        };
        // Within the hold: every sample so far (5 s of attitude is far below the byte bounds).
        let held = run(Duration::from_millis(10));
        let summary = crate::ulog::summary::summarize(&log).unwrap();
        let all = summary
            .datasets
            .iter()
            .find(|d| d.name == "vehicle_attitude")
            .unwrap()
            .count as usize;
        assert_eq!(held, all);
        // After it: nothing from before the subscription.
        assert_eq!(run(HOLD_NEW_CHANNEL), 0);
    }

    #[test]
    fn a_client_that_connects_mid_flight_gets_every_current_channel() {
        let log = crate::sim::synth::generate(crate::sim::synth::SynthOptions {
            duration_s: 10,
            seed: 1,
            appended_data: false,
        });
        let now = Instant::now();
        let mut p = FoxglovePublisher::new("test", "s1");
        p.handle_event(&Event::LogOpened { number: 1 }, now);
        // Past the topic added in flight (sensor_accel/1, half a second in).
        let half = log.len() / 2;
        p.handle_log_bytes(&log[..half], now);
        let c = p.connect().unwrap();
        let hello = drain(&mut p);
        assert_eq!(json_of(&hello[0])["op"], "serverInfo");
        let mut topics: Vec<String> = json_of(&hello[1])["channels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ch| ch["topic"].as_str().unwrap().to_owned())
            .collect();
        topics.sort();
        let summary = crate::ulog::summary::summarize(&log).unwrap();
        let mut want: Vec<String> = summary
            .datasets
            .iter()
            .map(|d| match d.multi_id {
                0 => format!("/{}", d.name),
                n => format!("/{}/{n}", d.name),
            })
            .chain(["/log".to_owned(), DIAGNOSTICS_TOPIC.to_owned()])
            .collect();
        want.sort();
        assert_eq!(topics, want);
        // Subscribed now, it gets the samples from here on (channels 1 and 2 are /log and
        // /diagnostics).
        let channel = json_of(&hello[1])["channels"][2]["id"].as_u64().unwrap();
        assert_eq!(
            subscribe_late(&mut p, c, channel, now + HOLD_NEW_CHANNEL),
            0
        );
        p.handle_log_bytes(&log[half..], now + HOLD_NEW_CHANNEL);
        assert!(drain(&mut p).iter().any(|o| !is_text(&o.message)));
    }

    /// A finding as the store hands it over, made at `at_us`.
    fn finding(at_us: u64) -> Finding {
        crate::diagnose::Finding {
            id: crate::diagnose::AnalyzerId::GpsInterference,
            summary: "GPS interference".into(),
            severity: crate::diagnose::Severity::Warning,
            timestamp_us: at_us,
            end_timestamp_us: None,
            evidence: crate::diagnose::Evidence::GpsInterference {
                eph_m: 9.0,
                epv_m: 12.0,
                num_satellites: 5,
                noise_level: None,
            },
        }
    }

    #[test]
    fn findings_go_to_diagnostics_subscribers_and_a_late_one_gets_the_flights_so_far() {
        let now = Instant::now();
        let mut p = FoxglovePublisher::new("test", "s1");
        let early = p.connect().unwrap();
        let hello = drain(&mut p);
        let diagnostics = &json_of(&hello[1])["channels"][1];
        assert_eq!(diagnostics["topic"], DIAGNOSTICS_TOPIC);
        assert_eq!(diagnostics["schemaName"], DIAGNOSTICS_TYPE);
        let channel = diagnostics["id"].as_u64().unwrap();
        let data = |out: Vec<Outgoing>| -> Vec<(ClientId, u64)> {
            out.into_iter()
                .filter(|o| !is_text(&o.message))
                .map(|o| {
                    (
                        o.client,
                        u64::from_le_bytes(o.message[5..13].try_into().unwrap()),
                    )
                })
                .collect()
        };
        assert_eq!(subscribe_late(&mut p, early, channel, now), 0);
        // A finding of a previous flight is not this flight's.
        p.handle_finding(&finding(1_000_000), now);
        p.handle_event(&Event::LogOpened { number: 1 }, now);
        drain(&mut p);
        p.handle_finding(&finding(20_000_000), now);
        p.handle_finding(&finding(30_000_000), now);
        assert_eq!(
            data(drain(&mut p)),
            [(early, 20_000_000_000), (early, 30_000_000_000)]
        );
        // A client that subscribes now gets both, then the next as it comes.
        let late = p.connect().unwrap();
        drain(&mut p);
        assert_eq!(subscribe_late(&mut p, late, channel, now), 2);
        p.handle_finding(&finding(40_000_000), now);
        assert_eq!(
            data(drain(&mut p)),
            [(early, 40_000_000_000), (late, 40_000_000_000)]
        );
        // Bounded: a flight with more findings keeps the latest.
        for k in 0..KEEP_FINDINGS as u64 + 10 {
            p.handle_finding(&finding(50_000_000 + k), now);
        }
        drain(&mut p);
        let third = p.connect().unwrap();
        drain(&mut p);
        assert_eq!(subscribe_late(&mut p, third, channel, now), KEEP_FINDINGS);
    }

    #[test]
    fn bad_requests_get_a_status_and_nothing_else_changes() {
        let mut p = FoxglovePublisher::new("test", "s1");
        let c = p.connect().unwrap();
        drain(&mut p);
        for bad in [
            "not json",
            r#"{"op":"subscribe","subscriptions":[{"id":1,"channelId":999}]}"#,
            r#"{"op":"unsubscribe","subscriptionIds":[5]}"#,
            r#"{"op":"subscribe"}"#,
        ] {
            p.handle_text(c, bad, Instant::now());
            let out = drain(&mut p);
            assert_eq!(out.len(), 1, "{bad}");
            assert_eq!(json_of(&out[0])["op"], "status", "{bad}");
            assert_eq!(json_of(&out[0])["level"], 2, "{bad}");
        }
        p.handle_text(
            c,
            r#"{"op":"subscribe","subscriptions":[{"id":1,"channelId":1}]}"#,
            Instant::now(),
        );
        assert!(drain(&mut p).is_empty());
        p.handle_text(
            c,
            r#"{"op":"subscribe","subscriptions":[{"id":1,"channelId":1}]}"#,
            Instant::now(),
        );
        assert_eq!(json_of(&drain(&mut p)[0])["op"], "status");
    }

    #[test]
    fn clients_are_bounded() {
        let mut p = FoxglovePublisher::new("test", "s1");
        for _ in 0..MAX_CLIENTS {
            assert!(p.connect().is_some());
        }
        assert!(p.connect().is_none());
        p.disconnect(1);
        assert!(p.connect().is_some());
    }
}
