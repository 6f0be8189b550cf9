//! An ArduPilot (DataFlash) log onto the Foxglove server's channels: one channel per message
//! type and instance (`/ATT`, `/BAT/1` for the second battery, by the instance field FMTU
//! marks), JSON messages with a JSON Schema made from the type's FMT
//! ([`crate::live::dataflash_json`]), each message at its `TimeUS`; `MSG` records on `/log`
//! (as `ardupilot`, level info). A channel is advertised at its type's first message and held
//! new as a PX4 topic's is.

use std::collections::HashMap;
use std::time::Instant;

use super::{FoxglovePublisher, Kind};
use crate::dataflash::format::{Format, is_sample, time_us};
use crate::dataflash::values::{Value, fields, fmtu_instance, instance_of};
use crate::dataflash::{FMT_TYPE, Framer};
use crate::live::dataflash_json::{BinShape, json_schema};
use crate::live::foxglove::protocol;
use crate::live::outbox::Keep;

/// The syslog level of ArduPilot's texts, which carry none: info.
const TEXT_LEVEL: u8 = b'6';

/// The open DataFlash log.
#[derive(Debug)]
pub(super) struct BinLog {
    framer: Framer,
    /// By type: the index of its instance field, from its FMTU.
    instance_field: Vec<Option<usize>>,
    /// Channel id by type and instance.
    channels: HashMap<(u8, u8), u32>,
    /// The latest `TimeUS` seen.
    last_us: u64,
}

impl BinLog {
    pub(super) fn new() -> Self {
        Self {
            framer: Framer::new(),
            instance_field: vec![None; 256],
            channels: HashMap::new(),
            last_us: 0,
        }
    }

    pub(super) fn channel_ids(self) -> impl Iterator<Item = u32> {
        self.channels.into_values()
    }
}

impl FoxglovePublisher {
    /// The next bytes of the open DataFlash log (whole messages), which arrived at `arrived`.
    pub(super) fn handle_bin_bytes(&mut self, bytes: &[u8], arrived: Instant) {
        let Some(mut bin) = self.bin.take() else {
            return;
        };
        let mut framer = std::mem::take(&mut bin.framer);
        framer.push(bytes, |m, format| {
            self.bin_message(&mut bin, m, format, arrived)
        });
        bin.framer = framer;
        self.bin = Some(bin);
    }

    fn bin_message(&mut self, bin: &mut BinLog, m: &[u8], format: &Format, arrived: Instant) {
        if let Some(t) = time_us(format, m) {
            bin.last_us = t;
        }
        let log_time = bin.last_us;
        if format.type_id == FMT_TYPE {
            return;
        }
        if let Some((ty, index)) = fmtu_instance(format, m) {
            bin.instance_field[ty as usize] = index;
            return;
        }
        if format.name == "MSG" {
            let text = fields(format, m).find_map(|(l, _, v)| match (l, v) {
                ("Message", Value::Text(t)) => Some(t),
                _ => None,
            });
            let text = text.unwrap_or_default();
            return self.log_string(log_time, TEXT_LEVEL, "ardupilot", text, arrived);
        }
        if !is_sample(format) && format.name != "MODE" {
            return;
        }
        let instance = instance_of(format, m, bin.instance_field[format.type_id as usize]);
        let id = match bin.channels.get(&(format.type_id, instance)) {
            Some(&id) => id,
            None => {
                let topic = match instance {
                    0 => format!("/{}", format.name),
                    n => format!("/{}/{n}", format.name),
                };
                let id = self.add_channel(
                    topic,
                    format!("ardupilot/{}", format.name),
                    json_schema(format),
                    Kind::DataFlash(BinShape::new(format)),
                    Some(arrived),
                );
                bin.channels.insert((format.type_id, instance), id);
                let ad = protocol::advertise([&self.channels[&id].info]);
                self.broadcast(ad, Keep::Always);
                id
            }
        };
        let Some(channel) = self.channels.get_mut(&id) else {
            return;
        };
        Self::hold(&mut self.held_bytes, channel, m, log_time, arrived);
        if channel.subscribers.is_empty() || !channel.kind.encode(m, &mut self.cdr) {
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
}
