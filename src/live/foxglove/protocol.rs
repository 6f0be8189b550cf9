//! The Foxglove WebSocket protocol (v1 of its spec, `foxglove/ws-protocol`), as far as a
//! server that only publishes needs it: the JSON messages it sends (`serverInfo`,
//! `advertise`, `unadvertise`, `status`), the binary message-data frame, and the client's
//! `subscribe` / `unsubscribe` requests.
//!
//! Both subprotocols in use carry these messages the same way: `foxglove.sdk.v1` (today's
//! Foxglove app, PlotJuggler's Foxglove client) and `foxglove.websocket.v1` (Lichtblick,
//! older Foxglove, foxglove_bridge-era clients).

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value as Json, json};

/// The subprotocols a client may ask for, in our order of preference.
pub const SUBPROTOCOLS: [&str; 2] = ["foxglove.sdk.v1", "foxglove.websocket.v1"];

/// The first subprotocol of ours among the comma-separated list a client offers
/// (`Sec-WebSocket-Protocol`), if any.
pub fn choose_subprotocol<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    let offered: Vec<&str> = offered
        .into_iter()
        .flat_map(|h| h.split(','))
        .map(str::trim)
        .collect();
    SUBPROTOCOLS.into_iter().find(|p| offered.contains(p))
}

/// Opcode of a message-data frame (server to client, binary).
pub const MESSAGE_DATA: u8 = 0x01;

/// Bytes before the payload in a message-data frame: opcode, subscription id, log time.
pub const MESSAGE_DATA_HEADER: usize = 1 + 4 + 8;

/// Writes a message-data frame into `out` (cleared first): subscription `subscription`, log
/// time `log_time_ns`, then `payload`.
pub fn message_data(subscription: u32, log_time_ns: u64, payload: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(MESSAGE_DATA_HEADER + payload.len());
    out.push(MESSAGE_DATA);
    out.extend_from_slice(&subscription.to_le_bytes());
    out.extend_from_slice(&log_time_ns.to_le_bytes());
    out.extend_from_slice(payload);
}

/// One advertised channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelInfo {
    pub id: u32,
    pub topic: String,
    pub schema_name: String,
    pub schema: String,
    /// How its messages and its schema are written.
    pub encoding: Encoding,
}

/// A channel's message encoding and its schema's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// CDR messages, a ROS 2 `.msg` schema (a PX4 log's topics, `/log`, `/diagnostics`).
    Ros2,
    /// JSON messages, a JSON Schema (an ArduPilot log's message types).
    Json,
}

impl ChannelInfo {
    fn json(&self) -> Json {
        json!({
            "id": self.id,
            "topic": self.topic,
            "encoding": match self.encoding {
                Encoding::Ros2 => "cdr",
                Encoding::Json => "json",
            },
            "schemaName": self.schema_name,
            "schema": self.schema,
            "schemaEncoding": match self.encoding {
                Encoding::Ros2 => "ros2msg",
                Encoding::Json => "jsonschema",
            },
        })
    }
}

fn text(message: &Json) -> Bytes {
    Bytes::from(serde_json::to_vec(message).expect("JSON values serialise"))
}

/// `serverInfo`, the first message a client gets.
pub fn server_info(name: &str, session_id: &str) -> Bytes {
    text(&json!({
        "op": "serverInfo",
        "name": name,
        "capabilities": [],
        "supportedEncodings": [],
        "metadata": {},
        "sessionId": session_id,
    }))
}

/// `advertise` of `channels`.
pub fn advertise<'a>(channels: impl IntoIterator<Item = &'a ChannelInfo>) -> Bytes {
    let channels: Vec<Json> = channels.into_iter().map(ChannelInfo::json).collect();
    text(&json!({"op": "advertise", "channels": channels}))
}

/// `unadvertise` of the channels `ids`.
pub fn unadvertise(ids: &[u32]) -> Bytes {
    text(&json!({"op": "unadvertise", "channelIds": ids}))
}

/// How serious a `status` message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info = 0,
    Warning = 1,
    Error = 2,
}

/// `status` with `message`.
pub fn status(level: Level, message: &str) -> Bytes {
    text(&json!({"op": "status", "level": level as u8, "message": message}))
}

/// A client's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `(subscription id, channel id)` pairs.
    Subscribe(Vec<(u32, u32)>),
    /// Subscription ids.
    Unsubscribe(Vec<u32>),
    /// A request a publishing server does not serve (parameters, services, ...): ignored.
    Other(String),
}

/// Why a client's text message is not a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("not a JSON object with an \"op\": {0}")]
    NotJson(String),
    #[error("bad \"{op}\" request: {reason}")]
    Bad { op: String, reason: String },
}

#[derive(Deserialize)]
struct Op {
    op: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubscribeMsg {
    subscriptions: Vec<SubscriptionMsg>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubscriptionMsg {
    id: u32,
    channel_id: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UnsubscribeMsg {
    subscription_ids: Vec<u32>,
}

/// Parses a client's text message.
pub fn parse_request(text: &str) -> Result<Request, RequestError> {
    let op: Op = serde_json::from_str(text).map_err(|e| RequestError::NotJson(e.to_string()))?;
    let bad = |e: serde_json::Error| RequestError::Bad {
        op: op.op.clone(),
        reason: e.to_string(),
    };
    match op.op.as_str() {
        "subscribe" => {
            let m: SubscribeMsg = serde_json::from_str(text).map_err(bad)?;
            Ok(Request::Subscribe(
                m.subscriptions
                    .into_iter()
                    .map(|s| (s.id, s.channel_id))
                    .collect(),
            ))
        }
        "unsubscribe" => {
            let m: UnsubscribeMsg = serde_json::from_str(text).map_err(bad)?;
            Ok(Request::Unsubscribe(m.subscription_ids))
        }
        _ => Ok(Request::Other(op.op)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_subprotocol_is_chosen_the_sdk_first() {
        assert_eq!(
            choose_subprotocol(["foxglove.websocket.v1"]),
            Some("foxglove.websocket.v1")
        );
        assert_eq!(
            choose_subprotocol(["foxglove.websocket.v1, foxglove.sdk.v1"]),
            Some("foxglove.sdk.v1")
        );
        assert_eq!(choose_subprotocol(["chat"]), None);
        assert_eq!(choose_subprotocol([]), None);
    }

    #[test]
    fn requests_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_request(r#"{"op":"subscribe","subscriptions":[{"id":1,"channelId":7}]}"#),
            Ok(Request::Subscribe(vec![(1, 7)]))
        );
        assert_eq!(
            parse_request(r#"{"op":"unsubscribe","subscriptionIds":[1,2]}"#),
            Ok(Request::Unsubscribe(vec![1, 2]))
        );
        assert_eq!(
            parse_request(r#"{"op":"getParameters","parameterNames":[]}"#),
            Ok(Request::Other("getParameters".into()))
        );
        assert!(matches!(
            parse_request(r#"{"op":"subscribe","subscriptions":[{"id":-1,"channelId":7}]}"#),
            Err(RequestError::Bad { .. })
        ));
        assert!(matches!(
            parse_request("[1,2]"),
            Err(RequestError::NotJson(_))
        ));
    }

    #[test]
    fn a_message_data_frame_is_opcode_subscription_time_payload() {
        let mut out = vec![9; 3];
        message_data(0x0102_0304, 5_000, b"cdr", &mut out);
        let mut want = vec![1, 4, 3, 2, 1];
        want.extend(5_000u64.to_le_bytes());
        want.extend(b"cdr");
        assert_eq!(out, want);
    }
}
