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
//!
//! This file holds the publisher's surface (clients, channels, what goes out); `requests`
//! takes the clients' subscriptions, `samples` turns the log's messages and the findings
//! into channels and messages; `tests` runs the synthetic flight through it.

mod bin;
mod requests;
mod samples;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::autopilot::LogFormat;
use crate::diagnose::Finding;
use crate::link::Event;
use crate::live::dataflash_json::BinShape;
use crate::live::foxglove::protocol::{self, ChannelInfo, Encoding};
use crate::live::outbox::Keep;
use crate::ros::diagnostics::{
    ARDUPILOT_HARDWARE_ID, DIAGNOSTICS_SCHEMA, DIAGNOSTICS_TOPIC, DIAGNOSTICS_TYPE, PX4_HARDWARE_ID,
};
use crate::ros::ros2::{LOG_SCHEMA, LOG_TYPE, Ros2Type};
use crate::ulog::Decoder;
use crate::ulog::framer::Framer;

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
    /// An ArduPilot message type (and instance), as JSON.
    DataFlash(BinShape),
}

impl Kind {
    /// A topic's sample (ULog sample bytes, or a whole DataFlash message) encoded into `out`;
    /// false when it cannot be.
    fn encode(&self, data: &[u8], out: &mut Vec<u8>) -> bool {
        match self {
            Kind::Topic(ty) => ty.encode(data, out).is_ok(),
            Kind::DataFlash(shape) => {
                out.clear();
                shape.write(data, out);
                true
            }
            Kind::Log | Kind::Diagnostics => false,
        }
    }
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
    /// Whose flight the findings are of: their statuses' `hardware_id`.
    hardware_id: &'static str,
    log: Option<LogState>,
    /// The open DataFlash log (at most one of it and `log` is open).
    bin: Option<bin::BinLog>,
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
            hardware_id: PX4_HARDWARE_ID,
            log: None,
            bin: None,
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
        let encoding = match kind {
            Kind::DataFlash(_) => Encoding::Json,
            _ => Encoding::Ros2,
        };
        self.channels.insert(
            id,
            Channel {
                info: ChannelInfo {
                    id,
                    topic,
                    schema_name,
                    schema,
                    encoding,
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

    /// One of the session's events ([`Event::LogBytes`] taken as arriving at `now`).
    pub fn handle_event(&mut self, event: &Event, now: Instant) {
        match event {
            Event::LogOpened { format, .. } => {
                self.end_log();
                self.findings.clear();
                self.hardware_id = match format {
                    LogFormat::ULog => PX4_HARDWARE_ID,
                    LogFormat::DataFlash => ARDUPILOT_HARDWARE_ID,
                };
                match format {
                    LogFormat::ULog => {
                        self.log = Some(LogState {
                            framer: Framer::file(),
                            decoder: Decoder::new(),
                            channels: Vec::new(),
                        })
                    }
                    LogFormat::DataFlash => self.bin = Some(bin::BinLog::new()),
                }
            }
            Event::LogBytes(bytes) => self.handle_log_bytes(bytes, now),
            Event::LogClosed { .. } => self.end_log(),
            _ => {}
        }
    }

    /// The log ends: its channels are unadvertised.
    fn end_log(&mut self) {
        let mut ids: Vec<u32> = (self.log.take().into_iter())
            .flat_map(|log| log.channels.into_iter().flatten())
            .collect();
        ids.extend(self.bin.take().into_iter().flat_map(|b| b.channel_ids()));
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
