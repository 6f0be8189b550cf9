//! The clients' requests: subscribe (a new channel's held samples, the findings so far, sent
//! first) and unsubscribe, each refused with a status where it cannot be.

use std::time::Instant;

use bytes::Bytes;

use super::{ClientId, FoxglovePublisher, MAX_SUBSCRIPTIONS, Outgoing};
use crate::live::foxglove::protocol::{self, Level, Request};
use crate::live::outbox::Keep;
use crate::ros::diagnostics::encode_finding;

impl FoxglovePublisher {
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

    pub(super) fn subscribe(&mut self, id: ClientId, sub: u32, channel: u32, now: Instant) {
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
                encode_finding(finding, self.hardware_id, &mut self.cdr);
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
        let Some(held) = &c.held else {
            return;
        };
        if now >= held.until {
            return;
        }
        for (data, log_time) in &held.samples {
            if c.kind.encode(data, &mut self.cdr) {
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

    pub(super) fn unsubscribe(&mut self, id: ClientId, sub: u32) {
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
}
