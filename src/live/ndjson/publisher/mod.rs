//! The publisher (sans-IO): turns the received log and the session's events into the lines
//! each live-socket client gets.
//!
//! In: the log's bytes as the session hands them out (whole messages, the file header first),
//! the session's events, its counters once a second, and the clients' requests. Out:
//! [`Outgoing`] lines from [`Publisher::poll_transmit`]. It never touches a socket; the
//! shell ([`crate::live::thread`]) moves the lines into each client's
//! [`Outbox`](crate::live::Outbox).
//!
//! A sample is rendered once, and only if some client wants it; every client that wants it
//! gets the same bytes.

use std::collections::{BTreeMap, VecDeque};
use std::ops::ControlFlow;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Value as Json, json};

use crate::autopilot::{Autopilot, LogFormat};
use crate::link::{CloseReason, Event, SessionStats};
use crate::live::ndjson::JsonShape;
use crate::live::ndjson::protocol::{Line, PROTOCOL_VERSION, Request, RequestError, level_name};
use crate::live::outbox::Keep;
use crate::store::events::{EventOutcome, EventRequest};
use crate::store::thread::StorageStats;
use crate::ulog::framer::{Framer, Unit};
use crate::ulog::glob;
use crate::ulog::message::Message;
use crate::ulog::{Decoder, FileHeader, InfoValue};
use crate::upload::UploadStatus;

/// A connected client, as the publisher knows it.
pub type ClientId = u64;

/// A line for one client.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub client: ClientId,
    /// One JSON object and a newline.
    pub line: Bytes,
    /// For data lines: when the datagram that completed the sample arrived.
    pub arrived: Option<Instant>,
    /// Whether the client's queue may drop it.
    pub keep: Keep,
}

/// Most clients at once; more are turned away with an error line.
pub const MAX_CLIENTS: usize = 64;

/// What the shell measured, reported in the `stats` line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Arrival of a datagram to its data lines written to a client's socket, p50 and p99 in
    /// microseconds, over the whole run.
    pub latency_p50_us: Option<u64>,
    pub latency_p99_us: Option<u64>,
    /// Lines dropped from slow clients' queues, all clients together, over the whole run.
    pub lagged_lines: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct Publisher {
    server: String,
    clients: BTreeMap<ClientId, Client>,
    next_client: ClientId,
    vehicle: Option<(u8, u8)>,
    autopilot: Option<Autopilot>,
    /// The open ULog log; at most one of it and `bin` is open.
    log: Option<LogState>,
    /// The open DataFlash log.
    bin: Option<BinLog>,
    out: VecDeque<Outgoing>,
    /// The catalogue changed since it was last sent.
    catalogue_dirty: bool,
    /// Counters at the previous `stats` line.
    last_stats: Option<(Instant, SessionStats)>,
    /// Samples the shell could not hand over (it was overloaded), in all.
    skipped_samples: u64,
    /// The uploader's state, when uploads are on.
    uploads: Option<UploadStatus>,
    /// Events clients asked for, for the shell to hand to the store.
    requests: VecDeque<EventRequest>,
}

/// The open log.
#[derive(Debug)]
struct LogState {
    number: u32,
    start_us: Option<u64>,
    /// Cuts the log's bytes (the session hands out whole messages, but in any pieces).
    framer: Framer,
    decoder: Decoder,
    /// By message id.
    topics: Vec<Option<Topic>>,
    /// Past the definitions: 'P' messages are changes from here on.
    in_data: bool,
}

/// A topic instance of the open log, with what its lines need.
#[derive(Debug)]
struct Topic {
    name: String,
    multi_id: u8,
    /// `{"type":"data","topic":"NAME","multi_id":N,"timestamp":`
    prefix: Vec<u8>,
    shape: TopicShape,
    /// Its catalogue entry.
    entry: Json,
}

/// How a topic's samples become JSON, by the log's format.
#[derive(Debug)]
enum TopicShape {
    ULog(JsonShape),
    DataFlash(BinShape),
}

#[derive(Debug, Default)]
struct Client {
    patterns: Vec<String>,
    /// Decimation period in microseconds of log time.
    period_us: Option<u64>,
    /// By message id: 0 not decided yet, 1 wanted, 2 not wanted.
    wants: Vec<u8>,
    /// By message id: the log time from which the next sample may go (with a period); `None`
    /// before the first.
    next_due: Vec<Option<u64>>,
}

impl Client {
    fn wants(&mut self, msg_id: u16, name: &str) -> bool {
        let i = msg_id as usize;
        if self.wants.len() <= i {
            self.wants.resize(i + 1, 0);
        }
        if self.wants[i] == 0 {
            let yes = self.patterns.iter().any(|p| glob::matches(p, name));
            self.wants[i] = if yes { 1 } else { 2 };
        }
        self.wants[i] == 1
    }

    /// True when a sample at log time `t` passes the decimation.
    fn due(&mut self, msg_id: u16, t: u64) -> bool {
        let Some(period) = self.period_us else {
            return true;
        };
        let i = msg_id as usize;
        if self.next_due.len() <= i {
            self.next_due.resize(i + 1, None);
        }
        self.next_due[i] = match self.next_due[i] {
            Some(due) if t < due => return false,
            // Keep to the grid while samples come on time, so jitter does not lower the rate.
            Some(due) if t - due < period => Some(due + period),
            _ => Some(t + period),
        };
        true
    }

    fn forget_topics(&mut self) {
        self.wants.clear();
        self.next_due.clear();
    }
}

fn close_reason(reason: CloseReason) -> &'static str {
    match reason {
        CloseReason::Stalled => "stalled",
        CloseReason::VehicleLost => "vehicle_lost",
        CloseReason::NewLog => "new_log",
        CloseReason::Shutdown => "shutdown",
    }
}

fn info_json(v: InfoValue<'_>) -> Json {
    match v {
        InfoValue::Str(s) => json!(s),
        InfoValue::Int(i) => json!(i),
        InfoValue::UInt(u) => json!(u),
        InfoValue::Float(f) => serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number),
        InfoValue::Bytes(b) => json!(b),
    }
}

fn line(value: &Json) -> Bytes {
    let mut v = serde_json::to_vec(value).expect("a JSON value serialises");
    v.push(b'\n');
    Bytes::from(v)
}

impl Publisher {
    /// `server` names the server in the `hello` line (e.g. `ulog-recv 0.1.0`).
    pub fn new(server: impl Into<String>) -> Self {
        Self {
            server: server.into(),
            clients: BTreeMap::new(),
            next_client: 1,
            vehicle: None,
            autopilot: None,
            log: None,
            bin: None,
            out: VecDeque::new(),
            catalogue_dirty: false,
            last_stats: None,
            skipped_samples: 0,
            uploads: None,
            requests: VecDeque::new(),
        }
    }

    /// A client connected: it gets `hello` and the catalogue. `None` when
    /// [`MAX_CLIENTS`] are connected already (the shell says so and closes).
    pub fn connect(&mut self) -> Option<ClientId> {
        if self.clients.len() >= MAX_CLIENTS {
            return None;
        }
        let id = self.next_client;
        self.next_client += 1;
        self.clients.insert(id, Client::default());
        let log = match (&self.log, &self.bin) {
            (Some(l), _) => Some(json!({
                "number": l.number,
                "format": LogFormat::ULog.extension(),
                "start_us": l.start_us,
                "time_us": l.decoder.last_timestamp(),
            })),
            (None, Some(b)) => Some(json!({
                "number": b.number,
                "format": LogFormat::DataFlash.extension(),
                "start_us": b.start_us,
                "time_us": b.last_us,
            })),
            (None, None) => None,
        };
        let hello = json!({
            "type": "hello",
            "protocol": PROTOCOL_VERSION,
            "server": self.server,
            "vehicle": self.vehicle_json(),
            "log": log,
        });
        self.send(id, line(&hello), Keep::Always);
        let catalogue = self.catalogue();
        self.send(id, catalogue, Keep::Latest);
        Some(id)
    }

    /// The client is gone; its state is freed.
    pub fn disconnect(&mut self, id: ClientId) {
        self.clients.remove(&id);
    }

    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    /// A line from client `id` (see [`crate::live::ndjson::protocol::LineReader`]).
    pub fn handle_request(&mut self, id: ClientId, request: Line<'_>) {
        let parsed = match request {
            Line::Text(text) => Request::parse(text),
            Line::TooLong => Err(RequestError::TooLong),
        };
        let reply = match parsed {
            Ok(Request::Subscribe {
                patterns,
                max_rate_hz,
            }) => {
                let matching = self.matching(&patterns);
                let Some(client) = self.clients.get_mut(&id) else {
                    return;
                };
                client.period_us = max_rate_hz.map(|hz| ((1e6 / hz).round() as u64).max(1));
                client.patterns = patterns;
                client.forget_topics();
                json!({
                    "type": "subscribed",
                    "patterns": client.patterns,
                    "max_rate_hz": max_rate_hz,
                    "topics": matching,
                })
            }
            Ok(Request::Event(request)) => {
                // Its outcome comes back from the store, to every client.
                self.requests.push_back(request);
                return;
            }
            Err(e) => json!({"type": "error", "message": e.to_string()}),
        };
        if self.clients.contains_key(&id) {
            self.send(id, line(&reply), Keep::Droppable);
        }
    }

    /// The next event a client asked for, for the store.
    pub fn poll_request(&mut self) -> Option<EventRequest> {
        self.requests.pop_front()
    }

    /// What became of an event (a trigger's, or one a client asked for): an `event` line, or
    /// `event_refused`, to every client.
    pub fn handle_event_outcome(&mut self, outcome: &EventOutcome) {
        let (message, keep) = match outcome {
            EventOutcome::Recorded(e) => {
                let mut v = json!({
                    "type": "event",
                    "name": e.name,
                    "source": e.source,
                    "at_us": e.at_us,
                    "windows": e.windows,
                });
                if !e.detail.is_empty() {
                    v["detail"] = json!(e.detail);
                }
                if let Some(after) = e.after_us {
                    v["after_us"] = json!(after);
                }
                if let Some(f) = &e.finding {
                    v["finding"] = json!(f);
                }
                // At most a log's listed events: never dropped.
                (v, Keep::Always)
            }
            // A reply, as droppable as the others (a client asking in a loop must not fill
            // the queues of the rest).
            EventOutcome::Refused { name, reason } => (
                json!({"type": "event_refused", "name": name, "reason": reason}),
                Keep::Droppable,
            ),
        };
        self.broadcast(line(&message), keep);
    }

    /// Names of the current topics that `patterns` match, sorted, each once.
    fn matching(&self, patterns: &[String]) -> Vec<String> {
        let mut names: Vec<String> = self
            .topics()
            .filter(|t| patterns.iter().any(|p| glob::matches(p, &t.name)))
            .map(|t| t.name.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn topics(&self) -> impl Iterator<Item = &Topic> {
        let ulog = self.log.iter().flat_map(|l| l.topics.iter().flatten());
        ulog.chain(self.bin.iter().flat_map(|b| b.topics.iter()))
    }

    /// The open log's number.
    fn log_number(&self) -> Option<u32> {
        (self.log.as_ref().map(|l| l.number)).or(self.bin.as_ref().map(|b| b.number))
    }

    fn vehicle_json(&self) -> Json {
        match self.vehicle {
            Some((sysid, compid)) => json!({"sysid": sysid, "compid": compid,
                                            "autopilot": self.autopilot.map(Autopilot::name)}),
            None => Json::Null,
        }
    }

    /// The `topics` line: every topic instance of the open log, sorted by name and instance.
    fn catalogue(&self) -> Bytes {
        let mut topics: Vec<&Topic> = self.topics().collect();
        topics.sort_by(|a, b| (&a.name, a.multi_id).cmp(&(&b.name, b.multi_id)));
        let entries: Vec<&Json> = topics.iter().map(|t| &t.entry).collect();
        line(&json!({
            "type": "topics",
            "log": self.log_number(),
            "topics": entries,
        }))
    }

    fn send(&mut self, client: ClientId, line: Bytes, keep: Keep) {
        self.out.push_back(Outgoing {
            client,
            line,
            arrived: None,
            keep,
        });
    }

    fn broadcast(&mut self, line: Bytes, keep: Keep) {
        for &client in self.clients.keys() {
            self.out.push_back(Outgoing {
                client,
                line: line.clone(),
                arrived: None,
                keep,
            });
        }
    }

    /// One of the session's events. [`Event::LogBytes`] is taken as arriving at `now`.
    pub fn handle_event(&mut self, event: &Event, now: Instant) {
        let message = match event {
            Event::VehicleFound {
                system_id,
                component_id,
                autopilot,
            } => {
                self.vehicle = Some((*system_id, *component_id));
                self.autopilot = Some(*autopilot);
                json!({"type": "session", "event": "vehicle_found", "vehicle": self.vehicle_json()})
            }
            Event::VehicleLost => {
                let vehicle = self.vehicle_json();
                self.vehicle = None;
                json!({"type": "session", "event": "vehicle_lost", "vehicle": vehicle})
            }
            Event::Armed(armed) => {
                json!({"type": "session", "event": if *armed { "armed" } else { "disarmed" },
                       "vehicle": self.vehicle_json()})
            }
            Event::StartRefused { hint, .. } => {
                json!({"type": "session", "event": "start_refused", "reason": hint})
            }
            Event::LinkProblem(problem) => {
                json!({"type": "session", "event": "link_problem", "problem": problem,
                       "reason": problem.to_string()})
            }
            Event::LogOpened { number, format } => {
                (self.log, self.bin) = match format {
                    LogFormat::ULog => (
                        Some(LogState {
                            number: *number,
                            start_us: None,
                            framer: Framer::file(),
                            decoder: Decoder::new(),
                            topics: Vec::new(),
                            in_data: false,
                        }),
                        None,
                    ),
                    LogFormat::DataFlash => (None, Some(BinLog::new(*number))),
                };
                for c in self.clients.values_mut() {
                    c.forget_topics();
                }
                self.catalogue_dirty = true;
                json!({"type": "session", "event": "start", "log": number,
                       "format": format.extension(), "vehicle": self.vehicle_json()})
            }
            Event::LogBytes(bytes) => return self.handle_log_bytes(bytes, now),
            Event::LogClosed {
                number,
                reason,
                bytes,
            } => {
                self.log = None;
                self.bin = None;
                self.catalogue_dirty = true;
                json!({"type": "session", "event": "end", "log": number,
                       "reason": close_reason(*reason), "bytes": bytes})
            }
            Event::StreamStarted
            | Event::StartRejected { .. }
            | Event::Dropout { .. }
            | Event::Ftp(_) => return,
        };
        self.broadcast(line(&message), Keep::Always);
    }

    /// The next bytes of the open log (whole messages), which arrived at `arrived`.
    pub fn handle_log_bytes(&mut self, bytes: &[u8], arrived: Instant) {
        if self.bin.is_some() {
            return self.handle_bin_bytes(bytes, arrived);
        }
        let Some(log) = self.log.as_mut() else {
            return;
        };
        let mut framer = std::mem::take(&mut log.framer);
        let _ = framer.push(bytes, |unit| {
            match unit {
                Unit::Header(header) => {
                    if let (Some(h), Some(log)) = (FileHeader::parse(header), self.log.as_mut()) {
                        log.start_us = Some(h.timestamp);
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

    /// The shell could not hand over `samples` data messages (it was overloaded); every
    /// client is told.
    pub fn handle_skipped(&mut self, samples: u64) {
        self.skipped_samples += samples;
        self.broadcast(
            line(&json!({"type": "lagged", "dropped": samples, "cause": "server_busy"})),
            Keep::Droppable,
        );
    }

    /// The session's counters, once a second: a `stats` line to every client (after the
    /// catalogue, if it changed).
    /// The uploader's state, told in the next `stats` lines.
    pub fn handle_uploads(&mut self, status: UploadStatus) {
        self.uploads = Some(status);
    }

    pub fn handle_stats(
        &mut self,
        stats: &SessionStats,
        storage: &StorageStats,
        server: ServerStats,
        now: Instant,
    ) {
        if std::mem::take(&mut self.catalogue_dirty) {
            let catalogue = self.catalogue();
            self.broadcast(catalogue, Keep::Latest);
        }
        let rates = self
            .last_stats
            .as_ref()
            .map(|(then, prev)| stats.rates_since(prev, now.duration_since(*then).as_secs_f64()))
            .unwrap_or_default();
        self.last_stats = Some((now, *stats));
        let message = json!({
            "type": "stats",
            "vehicle": self.vehicle_json(),
            "log": self.log_number(),
            "log_bytes_per_s": rates.log_bytes_per_s.round(),
            "chunks_per_s": rates.chunks_per_s.round(),
            "loss_percent": (rates.loss_percent * 100.0).round() / 100.0,
            "log_bytes": stats.log_bytes,
            "chunks": stats.chunks,
            "lost": stats.lost_chunks,
            "duplicates": stats.duplicates,
            "reordered": stats.reordered,
            "acks": stats.acks_sent,
            "dropouts": stats.dropouts,
            "refused_frames": stats.refused_frames(),
            "implausible_chunks": stats.implausible,
            "problem": stats.problem.map(|p| p.to_string()),
            "storage": {
                "queued_bytes": storage.queued_bytes,
                "lost_samples": storage.lost_samples,
                "stalled_ms": storage.stalled_ms,
            },
            "uploads": self.uploads.as_ref().map(|u| json!({
                "pending_sessions": u.pending_sessions,
                "bytes": u.bytes,
                "waiting_for_disarm": u.waiting_for_disarm,
                "failing": u.failing,
            })),
            "clients": self.clients.len(),
            "lagged_lines": server.lagged_lines,
            "skipped_samples": self.skipped_samples,
            "latency_us": {"p50": server.latency_p50_us, "p99": server.latency_p99_us},
        });
        self.broadcast(line(&message), Keep::Droppable);
    }

    /// The next line to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// One whole message of the open log.
    fn message(&mut self, bytes: &[u8], arrived: Instant) {
        let Some(log) = self.log.as_mut() else {
            return;
        };
        let Some(message) = Message::parse_framed(bytes) else {
            return;
        };
        let control = match message {
            Message::Data { msg_id, .. } => {
                log.in_data = true;
                Self::sample(
                    log,
                    &mut self.clients,
                    &mut self.out,
                    &message,
                    msg_id,
                    arrived,
                );
                return;
            }
            Message::AddLogged { msg_id, .. } => {
                log.in_data = true;
                if log.decoder.handle(&message).is_ok() {
                    log.define_topic(msg_id);
                    for c in self.clients.values_mut() {
                        if let Some(w) = c.wants.get_mut(msg_id as usize) {
                            *w = 0;
                        }
                    }
                    self.catalogue_dirty = true;
                }
                return;
            }
            Message::RemoveLogged { msg_id } => {
                let _ = log.decoder.handle(&message);
                if let Some(slot) = log.topics.get_mut(msg_id as usize) {
                    *slot = None;
                    self.catalogue_dirty = true;
                }
                return;
            }
            // Nobody to tell: no line to build.
            Message::Logging { .. } | Message::LoggingTagged { .. } if self.clients.is_empty() => {
                log.in_data = true;
                return;
            }
            Message::Parameter(_) | Message::Dropout { .. } if self.clients.is_empty() => return,
            Message::Logging {
                level,
                timestamp,
                text,
            } => {
                log.in_data = true;
                json!({"type": "log", "level": level_name(level), "timestamp": timestamp,
                       "text": String::from_utf8_lossy(text)})
            }
            Message::LoggingTagged {
                level,
                tag,
                timestamp,
                text,
            } => {
                log.in_data = true;
                json!({"type": "log", "level": level_name(level), "tag": tag,
                       "timestamp": timestamp, "text": String::from_utf8_lossy(text)})
            }
            Message::Parameter(kv) if log.in_data => {
                json!({"type": "param", "name": kv.name, "value": info_json(kv.value()),
                       "timestamp": log.decoder.last_timestamp()})
            }
            Message::Dropout { duration_ms } => {
                json!({"type": "dropout", "duration_ms": duration_ms,
                       "timestamp": log.decoder.last_timestamp()})
            }
            other => {
                // Formats and the rest: the decoder keeps what it needs.
                let _ = log.decoder.handle(&other);
                return;
            }
        };

        self.broadcast(line(&control), Keep::Droppable);
    }

    /// A data message: rendered once if any client wants it, queued for each that does.
    fn sample(
        log: &mut LogState,
        clients: &mut BTreeMap<ClientId, Client>,
        out: &mut VecDeque<Outgoing>,
        message: &Message<'_>,
        msg_id: u16,
        arrived: Instant,
    ) {
        let LogState {
            decoder, topics, ..
        } = log;
        let Ok(Some(sample)) = decoder.handle(message) else {
            return;
        };
        let Some(Some(topic)) = topics.get(msg_id as usize) else {
            return;
        };
        let TopicShape::ULog(shape) = &topic.shape else {
            return;
        };
        let log_time = sample.timestamp.unwrap_or(0);
        let mut rendered: Option<Bytes> = None;
        for (&id, client) in clients.iter_mut() {
            if !client.wants(msg_id, &topic.name) || !client.due(msg_id, log_time) {
                continue;
            }
            let line = rendered.get_or_insert_with(|| {
                let mut buf = Vec::with_capacity(topic.prefix.len() + 16 + sample.data.len() * 8);
                buf.extend_from_slice(&topic.prefix);
                match sample.timestamp {
                    Some(t) => buf.extend_from_slice(itoa::Buffer::new().format(t).as_bytes()),
                    None => buf.extend_from_slice(b"null"),
                }
                buf.extend_from_slice(b",\"fields\":");
                shape.write(&sample, &mut buf);
                buf.extend_from_slice(b"}\n");
                Bytes::from(buf)
            });
            out.push_back(Outgoing {
                client: id,
                line: line.clone(),
                arrived: Some(arrived),
                keep: Keep::Droppable,
            });
        }
    }
}

impl LogState {
    /// Builds the topic of `msg_id` from its (just added) subscription.
    fn define_topic(&mut self, msg_id: u16) {
        let Some(sub) = self.decoder.subscription(msg_id) else {
            return;
        };
        let name = sub.name().to_owned();
        let mut prefix = br#"{"type":"data","topic":"#.to_vec();
        serde_json::to_writer(&mut prefix, &name).expect("writing to a Vec");
        prefix
            .extend_from_slice(format!(",\"multi_id\":{},\"timestamp\":", sub.multi_id).as_bytes());
        let fields: Vec<Json> = self
            .decoder
            .formats()
            .get(&name)
            .map(|f| {
                f.fields
                    .iter()
                    .filter(|f| !f.is_padding())
                    .map(|f| {
                        let ty = match f.array_len {
                            Some(n) => format!("{}[{n}]", f.type_name()),
                            None => f.type_name().to_owned(),
                        };
                        json!({"name": f.name, "type": ty})
                    })
                    .collect()
            })
            .unwrap_or_default();
        let entry = json!({
            "name": name,
            "multi_id": sub.multi_id,
            "msg_id": msg_id,
            "fields": fields,
        });
        let topic = Topic {
            name,
            multi_id: sub.multi_id,
            prefix,
            shape: TopicShape::ULog(JsonShape::new(&sub.layout)),
            entry,
        };
        let i = msg_id as usize;
        if self.topics.len() <= i {
            self.topics.resize_with(i + 1, || None);
        }
        self.topics[i] = Some(topic);
    }
}

mod bin;
#[cfg(test)]
mod tests;

use crate::live::dataflash_json::BinShape;
use bin::BinLog;
