//! The open log's messages and the flight's findings onto the channels: a subscription's
//! definition advertises its channel, a sample is encoded once for its subscribers (or held
//! while its channel is new), a logged string goes on `/log`, a finding on `/diagnostics`.

use std::ops::ControlFlow;
use std::time::Instant;

use super::{
    Channel, FoxglovePublisher, HOLD_CHANNEL_BYTES, HOLD_TOTAL_BYTES, KEEP_FINDINGS, Kind,
};
use crate::diagnose::Finding;
use crate::live::foxglove::protocol;
use crate::live::outbox::Keep;
use crate::ros::diagnostics::encode_finding;
use crate::ros::ros2::{Ros2Type, encode_log};
use crate::ulog::FileHeader;
use crate::ulog::framer::Unit;
use crate::ulog::message::Message;

impl FoxglovePublisher {
    /// The next bytes of the open log (whole messages), which arrived at `arrived`.
    pub fn handle_log_bytes(&mut self, bytes: &[u8], arrived: Instant) {
        if self.bin.is_some() {
            return self.handle_bin_bytes(bytes, arrived);
        }
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
                Self::hold(
                    &mut self.held_bytes,
                    channel,
                    sample.data,
                    log_time,
                    arrived,
                );
                if channel.subscribers.is_empty() {
                    return;
                }
                if !matches!(channel.kind, Kind::Topic(_))
                    || !channel.kind.encode(sample.data, &mut self.cdr)
                {
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

    /// Keeps a sample of a channel that is still new (see the module docs), within its
    /// bounds; past them, or once the channel is no longer new, the channel holds nothing.
    pub(super) fn hold(
        held_bytes: &mut usize,
        channel: &mut Channel,
        data: &[u8],
        log_time: u64,
        arrived: Instant,
    ) {
        let Some(held) = channel.held.as_mut() else {
            return;
        };
        let len = data.len();
        if arrived < held.until
            && held.bytes + len <= HOLD_CHANNEL_BYTES
            && *held_bytes + len <= HOLD_TOTAL_BYTES
        {
            held.samples.push((data.to_vec(), log_time));
            held.bytes += len;
            *held_bytes += len;
        } else {
            *held_bytes -= held.bytes;
            channel.held = None;
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
        encode_finding(finding, self.hardware_id, &mut self.cdr);
        Self::fan_out(
            &mut self.out,
            &mut self.frame,
            channel,
            &self.cdr,
            finding.made_at_us(),
            arrived,
        );
    }

    pub(super) fn log_string(
        &mut self,
        timestamp: u64,
        level: u8,
        name: &str,
        text: &[u8],
        arrived: Instant,
    ) {
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
}
