//! The publisher's DataFlash side: an ArduPilot log's messages as the same lines a ULog's
//! become. Each message type is a topic named as ArduPilot names it (`ATT`); a type with an
//! instance field (FMTU's `#`) is one topic instance per value of it, so `BAT[1]` is the
//! second battery. Fields keep their FMT labels and are scaled as ArduPilot's tools show them
//! ([`crate::dataflash::values`]); `TimeUS` is the line's timestamp. `MSG` records become
//! `log` lines (the receiver's own dropout marks `dropout` lines), a `PARM` that changes a
//! parameter's value a `param` line; FMT, FMTU, UNIT and MULT only teach the publisher.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Value as Json, json};

use super::{Client, ClientId, Outgoing, Publisher, Topic, TopicShape, line};
use crate::dataflash::format::{Format, time_us};
use crate::dataflash::gaps::dropout_ms;
use crate::dataflash::values::{Value, fields, fmtu_instance, instance_of};
use crate::dataflash::{FMT_TYPE, Framer};
use crate::live::dataflash_json::{BinShape, type_name};
use crate::live::outbox::Keep;

/// The open DataFlash log.
#[derive(Debug)]
pub(super) struct BinLog {
    pub(super) number: u32,
    /// The first `TimeUS` seen.
    pub(super) start_us: Option<u64>,
    /// The latest `TimeUS` seen.
    pub(super) last_us: Option<u64>,
    framer: Framer,
    /// By type: the index of its instance field, from its FMTU.
    instance_field: Vec<Option<usize>>,
    /// Topic ids (indexes of `topics`, the ids clients' choices are kept by) by type and
    /// instance.
    ids: HashMap<(u8, u8), u16>,
    pub(super) topics: Vec<Topic>,
    /// Each parameter's latest value: the log's startup lists them all (again at each start
    /// of the stream); a `PARM` that changes one is a change.
    params: HashMap<Vec<u8>, u32>,
}

impl BinLog {
    pub(super) fn new(number: u32) -> Self {
        Self {
            number,
            start_us: None,
            last_us: None,
            framer: Framer::new(),
            instance_field: vec![None; 256],
            ids: HashMap::new(),
            topics: Vec::new(),
            params: HashMap::new(),
        }
    }

    /// The topic id of this message's type and instance, defining the topic the first time.
    fn topic_id(&mut self, format: &Format, message: &[u8]) -> Option<u16> {
        let index = self.instance_field[format.type_id as usize];
        let instance = instance_of(format, message, index);
        let key = (format.type_id, instance);
        if let Some(&id) = self.ids.get(&key) {
            return Some(id);
        }
        let id = u16::try_from(self.topics.len()).ok()?;
        let mut prefix = br#"{"type":"data","topic":"#.to_vec();
        serde_json::to_writer(&mut prefix, &format.name).expect("writing to a Vec");
        prefix.extend_from_slice(format!(",\"multi_id\":{instance},\"timestamp\":").as_bytes());
        let field_list: Vec<Json> = format
            .format
            .bytes()
            .zip(&format.labels)
            .map(|(c, l)| json!({"name": l, "type": type_name(c)}))
            .collect();
        let mut entry = json!({
            "name": format.name,
            "multi_id": instance,
            "msg_id": format.type_id,
            "fields": field_list,
        });
        if let Some(i) = index {
            entry["instance_field"] = json!(format.labels.get(i));
        }
        self.topics.push(Topic {
            name: format.name.clone(),
            multi_id: instance,
            prefix,
            shape: TopicShape::DataFlash(BinShape::new(format)),
            entry,
        });
        self.ids.insert(key, id);
        Some(id)
    }
}

impl Publisher {
    /// The next bytes of the open DataFlash log, which arrived at `arrived`.
    pub(super) fn handle_bin_bytes(&mut self, bytes: &[u8], arrived: Instant) {
        let Some(mut bin) = self.bin.take() else {
            return;
        };
        let mut framer = std::mem::take(&mut bin.framer);
        framer.push(bytes, |m, format| {
            if let Some(l) = self.bin_message(&mut bin, m, format, arrived) {
                self.broadcast(line(&l), Keep::Droppable);
            }
        });
        bin.framer = framer;
        self.bin = Some(bin);
    }

    /// One whole DataFlash message; a control line to broadcast, if it makes one.
    fn bin_message(
        &mut self,
        bin: &mut BinLog,
        m: &[u8],
        format: &Format,
        arrived: Instant,
    ) -> Option<Json> {
        let t = time_us(format, m);
        if let Some(t) = t {
            bin.start_us.get_or_insert(t);
            bin.last_us = Some(t);
        }
        match format.name.as_str() {
            _ if format.type_id == FMT_TYPE => None,
            "FMTU" => {
                if let Some((ty, index)) = fmtu_instance(format, m) {
                    bin.instance_field[ty as usize] = index;
                }
                None
            }
            "UNIT" | "MULT" => None,
            "PARM" => {
                let mut name = None;
                let mut value = None;
                for (l, _, v) in fields(format, m) {
                    match (l, v) {
                        ("Name", Value::Text(n)) => name = Some(n),
                        ("Value", v) => value = v.as_f64(),
                        _ => {}
                    }
                }
                let (name, value) = (name?, value?);
                let bits = (value as f32).to_bits();
                let before = bin.params.insert(name.to_vec(), bits);
                let changed = before.is_some_and(|b| b != bits);
                (changed && !self.clients.is_empty()).then(|| {
                    json!({"type": "param", "name": String::from_utf8_lossy(name),
                           "value": value, "timestamp": t})
                })
            }
            _ if self.clients.is_empty() => None,
            "MSG" => {
                let text = fields(format, m).find_map(|(l, _, v)| match (l, v) {
                    ("Message", Value::Text(t)) => Some(t),
                    _ => None,
                });
                Some(match dropout_ms(m, format) {
                    Some(duration_ms) => json!({"type": "dropout", "duration_ms": duration_ms,
                                                "timestamp": bin.last_us}),
                    None => json!({"type": "log", "level": "info", "timestamp": t,
                                   "text": String::from_utf8_lossy(text.unwrap_or_default())}),
                })
            }
            "VER" => None,
            _ => {
                let before = bin.topics.len();
                let id = bin.topic_id(format, m)?;
                if bin.topics.len() > before {
                    self.catalogue_dirty = true;
                }
                let topic = &bin.topics[id as usize];
                bin_sample(&mut self.clients, &mut self.out, topic, id, m, t, arrived);
                None
            }
        }
    }
}

/// A data message: rendered once if any client wants it, queued for each that does.
fn bin_sample(
    clients: &mut BTreeMap<ClientId, Client>,
    out: &mut VecDeque<Outgoing>,
    topic: &Topic,
    id: u16,
    message: &[u8],
    t: Option<u64>,
    arrived: Instant,
) {
    let TopicShape::DataFlash(shape) = &topic.shape else {
        return;
    };
    let mut rendered: Option<Bytes> = None;
    for (&client_id, client) in clients.iter_mut() {
        if !client.wants(id, &topic.name) || !client.due(id, t.unwrap_or(0)) {
            continue;
        }
        let line = rendered.get_or_insert_with(|| {
            let mut buf = Vec::with_capacity(topic.prefix.len() + 16 + message.len() * 8);
            buf.extend_from_slice(&topic.prefix);
            match t {
                Some(t) => buf.extend_from_slice(itoa::Buffer::new().format(t).as_bytes()),
                None => buf.extend_from_slice(b"null"),
            }
            buf.extend_from_slice(b",\"fields\":");
            shape.write(message, &mut buf);
            buf.extend_from_slice(b"}\n");
            Bytes::from(buf)
        });
        out.push_back(Outgoing {
            client: client_id,
            line: line.clone(),
            arrived: Some(arrived),
            keep: Keep::Droppable,
        });
    }
}
