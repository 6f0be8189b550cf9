//! The live socket's clients: `ulog-recv tail` (samples as aligned text for a person, or
//! JSON lines for scripts), `ulog-recv topics` (what is available now) and `ulog-recv event`
//! (an event for the daemon's event buffers).
//!
//! The formatting is plain functions over the protocol's JSON ([`TailView`]), tested without a
//! socket; [`connect`] and [`run_tail`] / [`run_topics`] are the thin async part.

use std::io::{self, Write};
use std::path::PathBuf;

use serde_json::{Map, Value as Json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

use crate::live::ndjson::sample_json::segments;
use crate::live::ndjson::server::socket_candidates;

/// Where the daemon publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Tcp(String),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "{}", p.display()),
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

impl ClientError {
    /// True when the reader of our output went away (`ulog-recv tail | head`): not a failure.
    pub fn is_closed_output(&self) -> bool {
        matches!(self, ClientError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// Why a client cannot follow the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no ulog-recv socket found (looked at {0}); is the daemon running? Give --socket PATH")]
    NotFound(String),
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: Endpoint,
        source: io::Error,
    },
    #[error("connection to the daemon failed: {0}")]
    Io(#[from] io::Error),
    /// Writing our own output failed; a closed pipe (`tail | head`) is the normal way to stop.
    #[error("cannot write the output: {0}")]
    Output(io::Error),
    #[error("the daemon sent a line that is not JSON: {0}")]
    BadLine(String),
    #[error("the daemon refused the request: {0}")]
    Refused(String),
    #[error("the daemon closed the connection before sending the topic catalogue")]
    NoCatalogue,
    #[error("the daemon did not answer within {0:?} (an older daemon, or a busy one)")]
    NoAnswer(std::time::Duration),
}

type Reader = Box<dyn AsyncRead + Unpin + Send>;
type Writer = Box<dyn AsyncWrite + Unpin + Send>;

/// Connects to `endpoint`, or to the first socket of [`socket_candidates`] that exists.
pub async fn connect(endpoint: Option<Endpoint>) -> Result<(Reader, Writer), ClientError> {
    let endpoint = match endpoint {
        Some(e) => e,
        None => {
            let candidates = socket_candidates();
            match candidates.iter().find(|p| p.exists()) {
                Some(p) => Endpoint::Unix(p.clone()),
                None => {
                    let list: Vec<String> =
                        candidates.iter().map(|p| p.display().to_string()).collect();
                    return Err(ClientError::NotFound(list.join(", ")));
                }
            }
        }
    };
    let fail = |source| ClientError::Connect {
        endpoint: endpoint.clone(),
        source,
    };
    match &endpoint {
        Endpoint::Unix(p) => {
            let s = tokio::net::UnixStream::connect(p).await.map_err(fail)?;
            let (r, w) = s.into_split();
            Ok((Box::new(r), Box::new(w)))
        }
        Endpoint::Tcp(a) => {
            let s = tokio::net::TcpStream::connect(a).await.map_err(fail)?;
            let (r, w) = s.into_split();
            Ok((Box::new(r), Box::new(w)))
        }
    }
}

/// What `tail` shows.
#[derive(Debug, Clone, Default)]
pub struct TailOptions {
    /// Topic patterns (`*` when empty).
    pub patterns: Vec<String>,
    /// Only these fields (`q`, `q[0]`, `esc[1].esc_rpm`); all when empty.
    pub fields: Vec<String>,
    /// JSON lines (the server's, fields filtered) instead of text.
    pub json: bool,
    pub max_rate_hz: Option<f64>,
    /// Stop after this many samples.
    pub count: Option<u64>,
}

/// Follows the daemon until it closes the connection or `count` samples have been shown.
/// Samples go to `out`; the status line and notices to stderr.
pub async fn run_tail(
    (reader, mut writer): (Reader, Writer),
    options: &TailOptions,
    out: &mut impl Write,
) -> Result<(), ClientError> {
    let patterns = if options.patterns.is_empty() {
        vec!["*".to_owned()]
    } else {
        options.patterns.clone()
    };
    let mut request = serde_json::json!({"subscribe": patterns});
    if let Some(r) = options.max_rate_hz {
        request["max_rate_hz"] = r.into();
    }
    let mut request = serde_json::to_vec(&request).expect("a JSON value serialises");
    request.push(b'\n');
    writer.write_all(&request).await?;
    let mut view = TailView::new(options.clone());
    let mut status = StatusLine::new();
    let mut lines = BufReader::new(reader).lines();
    let mut shown = 0u64;
    while let Some(text) = lines.next_line().await? {
        let line: Json =
            serde_json::from_str(&text).map_err(|_| ClientError::BadLine(text.clone()))?;
        match view.render(&line, &text) {
            Shown::Out(s) => {
                status.clear();
                writeln!(out, "{s}")
                    .and_then(|_| out.flush())
                    .map_err(ClientError::Output)?;
                if line["type"] == "data" {
                    shown += 1;
                    if options.count.is_some_and(|c| shown >= c) {
                        break;
                    }
                }
                status.redraw();
            }
            Shown::Note(s) => {
                status.clear();
                eprintln!("{s}");
                status.redraw();
            }
            Shown::Status(s) => status.set(s),
            Shown::Error(s) => return Err(ClientError::Refused(s)),
            Shown::Nothing => {}
        }
    }
    status.clear();
    if options.count.is_none_or(|c| shown < c) {
        eprintln!("ulog-recv tail: the daemon closed the connection");
    }
    Ok(())
}

/// Prints the topics the daemon has now (or the `topics` line as JSON) and returns.
pub async fn run_topics(
    (reader, _writer): (Reader, Writer),
    json: bool,
    out: &mut impl Write,
) -> Result<(), ClientError> {
    let mut lines = BufReader::new(reader).lines();
    let mut hello = Json::Null;
    while let Some(text) = lines.next_line().await? {
        let line: Json =
            serde_json::from_str(&text).map_err(|_| ClientError::BadLine(text.clone()))?;
        match line["type"].as_str() {
            Some("hello") => hello = line,
            Some("topics") => {
                let written = if json {
                    writeln!(out, "{text}")
                } else {
                    write!(out, "{}", topics_table(&hello, &line))
                };
                return written
                    .and_then(|_| out.flush())
                    .map_err(ClientError::Output);
            }
            _ => {}
        }
    }
    Err(ClientError::NoCatalogue)
}

/// How long `ulog-recv event` waits for the daemon's answer.
pub const EVENT_ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks the daemon for an event named `name` (its windows `after_s` past it instead of each
/// buffer's own when given) and waits for the answer: the `event` line (printed, as text or
/// as the daemon's JSON) or `event_refused` (an error).
pub async fn run_event(
    (reader, mut writer): (Reader, Writer),
    name: &str,
    after_s: Option<f64>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), ClientError> {
    let mut request = serde_json::json!({"event": name});
    if let Some(s) = after_s {
        request["after_s"] = s.into();
    }
    let mut request = serde_json::to_vec(&request).expect("a JSON value serialises");
    request.push(b'\n');
    writer.write_all(&request).await?;
    let mut lines = BufReader::new(reader).lines();
    let answer = async {
        while let Some(text) = lines.next_line().await? {
            let line: Json =
                serde_json::from_str(&text).map_err(|_| ClientError::BadLine(text.clone()))?;
            let ours = line["name"] == name;
            match line["type"].as_str() {
                Some("event") if ours && line["source"] == "request" => return Ok((line, text)),
                Some("event_refused") if ours => {
                    let reason = line["reason"].as_str().unwrap_or("no reason given");
                    return Err(ClientError::Refused(reason.to_owned()));
                }
                Some("error") => {
                    let message = line["message"].as_str().unwrap_or("no reason given");
                    return Err(ClientError::Refused(message.to_owned()));
                }
                _ => {}
            }
        }
        Err(ClientError::Io(io::ErrorKind::UnexpectedEof.into()))
    };
    let (line, text) = tokio::time::timeout(EVENT_ANSWER_TIMEOUT, answer)
        .await
        .map_err(|_| ClientError::NoAnswer(EVENT_ANSWER_TIMEOUT))??;
    let shown = if json { text } else { event_text(&line) };
    writeln!(out, "{shown}")
        .and_then(|_| out.flush())
        .map_err(ClientError::Output)
}

/// An `event` line for a person: `event NAME at 123.456 s: imu 118.456–125.456 s`.
pub fn event_text(line: &Json) -> String {
    let seconds = |v: &Json| v.as_u64().unwrap_or(0) as f64 / 1e6;
    let mut text = format!(
        "event {} at {:.3} s",
        line["name"].as_str().unwrap_or("?"),
        seconds(&line["at_us"])
    );
    if let Some(severity) = line["finding"]["severity"].as_str() {
        text = format!(
            "{severity}: {} (event {} at {:.3} s)",
            line["detail"].as_str().unwrap_or("?"),
            line["name"].as_str().unwrap_or("?"),
            seconds(&line["at_us"])
        );
    }
    let windows = line["windows"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if windows.is_empty() && line["finding"].is_object() {
        return text;
    }
    if windows.is_empty() {
        text.push_str(": no event buffer (entered in the manifest only)");
    }
    for (k, w) in windows.iter().enumerate() {
        text.push_str(if k == 0 { ": " } else { ", " });
        text.push_str(&format!(
            "{} {:.3}-{:.3} s",
            w["buffer"].as_str().unwrap_or("?"),
            seconds(&w["from_us"]),
            seconds(&w["to_us"])
        ));
    }
    text
}

/// The `topics` line as a table for a person.
pub fn topics_table(hello: &Json, topics: &Json) -> String {
    let mut s = String::new();
    let vehicle = match hello["vehicle"]["sysid"].as_u64() {
        Some(id) => format!("vehicle sysid {id}"),
        None => "no vehicle heard yet".to_owned(),
    };
    let list = topics["topics"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    match topics["log"].as_u64() {
        None => s.push_str(&format!("{vehicle}; no log streaming now\n")),
        Some(n) => s.push_str(&format!(
            "{vehicle}, log {n}: {} topic instances\n",
            list.len()
        )),
    }
    let width = list
        .iter()
        .filter_map(|t| t["name"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(5)
        .max(5);
    if !list.is_empty() {
        s.push_str(&format!("{:<width$}  multi  fields\n", "topic"));
    }
    for t in list {
        let fields: Vec<String> = t["fields"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .map(|f| {
                format!(
                    "{} {}",
                    f["type"].as_str().unwrap_or("?"),
                    f["name"].as_str().unwrap_or("?")
                )
            })
            .collect();
        s.push_str(&format!(
            "{:<width$}  {:>5}  {}\n",
            t["name"].as_str().unwrap_or("?"),
            t["multi_id"].as_u64().unwrap_or(0),
            fields.join(", ")
        ));
    }
    s
}

/// What one server line becomes in `tail`.
#[derive(Debug, PartialEq)]
pub enum Shown {
    /// A line for stdout.
    Out(String),
    /// A notice for stderr.
    Note(String),
    /// The new status line.
    Status(String),
    /// The daemon refused the request: stop.
    Error(String),
    Nothing,
}

/// Turns server lines into `tail` output; keeps the topic column's width.
#[derive(Debug)]
pub struct TailView {
    options: TailOptions,
    topic_width: usize,
}

impl TailView {
    pub fn new(options: TailOptions) -> Self {
        Self {
            options,
            topic_width: 24,
        }
    }

    /// `line` is the parsed form of `text`.
    pub fn render(&mut self, line: &Json, text: &str) -> Shown {
        let kind = line["type"].as_str().unwrap_or("");
        if kind == "error" {
            return Shown::Error(line["message"].as_str().unwrap_or(text).to_owned());
        }
        if self.options.json {
            // Every line goes to stdout, as the daemon sent it (stats included, once a second,
            // which also lets `tail --json | head` notice the closed pipe while no data flows).
            return match kind {
                "data" if !self.options.fields.is_empty() => {
                    let mut line = line.clone();
                    line["fields"] = Json::Object(select(&line["fields"], &self.options.fields));
                    Shown::Out(line.to_string())
                }
                _ => Shown::Out(text.to_owned()),
            };
        }
        let secs = |v: &Json| {
            v.as_u64()
                .map_or("-".to_owned(), |t| format!("{:.6}", t as f64 * 1e-6))
        };
        match kind {
            "data" => {
                let name = format!(
                    "{}[{}]",
                    line["topic"].as_str().unwrap_or("?"),
                    line["multi_id"]
                );
                self.topic_width = self.topic_width.max(name.len());
                let fields = if self.options.fields.is_empty() {
                    let mut all = line["fields"].as_object().cloned().unwrap_or_default();
                    // The time column shows it (a ULog `timestamp`, a DataFlash `TimeUS`).
                    all.shift_remove("timestamp");
                    all.shift_remove("TimeUS");
                    all
                } else {
                    select(&line["fields"], &self.options.fields)
                };
                let values: Vec<String> = fields
                    .iter()
                    .map(|(k, v)| format!("{k}={}", show(v)))
                    .collect();
                Shown::Out(format!(
                    "{name:<w$} {:>14}  {}",
                    secs(&line["timestamp"]),
                    values.join(" "),
                    w = self.topic_width
                ))
            }
            "log" => Shown::Out(format!(
                "{:<w$} {:>14}  [{}] {}",
                "(log)",
                secs(&line["timestamp"]),
                line["level"].as_str().unwrap_or("?"),
                line["text"].as_str().unwrap_or(""),
                w = self.topic_width
            )),
            "param" => Shown::Out(format!(
                "{:<w$} {:>14}  {} = {}",
                "(param)",
                secs(&line["timestamp"]),
                line["name"].as_str().unwrap_or("?"),
                show(&line["value"]),
                w = self.topic_width
            )),
            "dropout" => Shown::Out(format!(
                "{:<w$} {:>14}  {} ms of log lost",
                "(dropout)",
                secs(&line["timestamp"]),
                line["duration_ms"],
                w = self.topic_width
            )),
            "lagged" => Shown::Note(match line["cause"].as_str() {
                Some("server_busy") => format!(
                    "(the daemon was too busy to publish {} samples; the log file has them)",
                    line["dropped"]
                ),
                _ => format!(
                    "(missed {} lines: this terminal reads more slowly than the vehicle logs; \
                     try fewer topics or --rate)",
                    line["dropped"]
                ),
            }),
            "session" => Shown::Note(format!(
                "({}{})",
                line["event"].as_str().unwrap_or("?").replace('_', " "),
                match (line["log"].as_u64(), line["reason"].as_str()) {
                    (Some(n), Some(r)) => format!(" of log {n}: {}", r.replace('_', " ")),
                    (Some(n), None) => format!(" of log {n}"),
                    (None, Some(r)) => format!(": {r}"),
                    (None, None) => String::new(),
                }
            )),
            "subscribed" => {
                let topics = line["topics"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                // Wide enough for every topic known now ("name[i]"), so columns do not move.
                let widest = topics.iter().filter_map(Json::as_str).map(str::len).max();
                self.topic_width = self.topic_width.max(widest.unwrap_or(0) + 3);
                if topics.is_empty() {
                    Shown::Note(format!(
                        "(no topic matches {} yet; waiting)",
                        line["patterns"]
                    ))
                } else {
                    Shown::Nothing
                }
            }
            "stats" => Shown::Status(status_text(line)),
            "event" => Shown::Note(format!("({})", event_text(line))),
            _ => Shown::Nothing,
        }
    }
}

/// The status line from a `stats` line: "sysid 1 · 96.3 KB/s · 0.20 % lost · 2 clients".
pub fn status_text(stats: &Json) -> String {
    let vehicle = match stats["vehicle"]["sysid"].as_u64() {
        Some(id) => format!("sysid {id}"),
        None => "no vehicle".to_owned(),
    };
    let streaming = if stats["log"].is_null() {
        "not streaming".to_owned()
    } else {
        format!(
            "{:.1} KB/s · {} chunks/s",
            stats["log_bytes_per_s"].as_f64().unwrap_or(0.0) / 1000.0,
            stats["chunks_per_s"]
        )
    };
    format!(
        "{vehicle} · {streaming} · {:.2} % lost · {} lost in all · {} clients",
        stats["loss_percent"].as_f64().unwrap_or(0.0),
        stats["lost"],
        stats["clients"]
    )
}

/// The fields of `fields` that `wanted` names, labelled as asked (missing ones left out).
pub fn select(fields: &Json, wanted: &[String]) -> Map<String, Json> {
    let mut out = Map::new();
    for name in wanted {
        let mut v = fields;
        for (key, index) in segments(name) {
            v = &v[key];
            if let Some(i) = index {
                v = &v[i];
            }
        }
        if !v.is_null() || fields.get(name).is_some() {
            out.insert(name.clone(), v.clone());
        }
    }
    out
}

/// A value for a person: floats to 4 decimals (or in exponent form), arrays and nested
/// objects inline.
pub fn show(v: &Json) -> String {
    match v {
        Json::Null => "nan".to_owned(),
        Json::Bool(b) => b.to_string(),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (_, Some(u)) => u.to_string(),
            _ => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if f == 0.0 || (1e-3..1e7).contains(&f.abs()) {
                    format!("{f:.4}")
                } else {
                    format!("{f:.3e}")
                }
            }
        },
        Json::String(s) => format!("{s:?}"),
        Json::Array(items) => {
            let parts: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", parts.join(","))
        }
        Json::Object(m) => {
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", show(v))).collect();
            format!("{{{}}}", parts.join(","))
        }
    }
}

/// The status line on stderr: redrawn in place on a terminal, printed every tenth update
/// otherwise.
struct StatusLine {
    tty: bool,
    text: Option<String>,
    updates: u64,
}

impl StatusLine {
    fn new() -> Self {
        Self {
            tty: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            text: None,
            updates: 0,
        }
    }

    fn set(&mut self, text: String) {
        self.updates += 1;
        if self.tty {
            self.text = Some(text);
            self.redraw();
        } else if self.updates % 10 == 1 {
            eprintln!("{text}");
        }
    }

    fn clear(&self) {
        if self.tty && self.text.is_some() {
            eprint!("\r\x1b[K");
        }
    }

    fn redraw(&self) {
        if let (true, Some(t)) = (self.tty, &self.text) {
            eprint!("\r\x1b[K{t}");
            let _ = std::io::stderr().flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn data() -> Json {
        json!({"type":"data","topic":"vehicle_attitude","multi_id":0,"timestamp":1500000,
               "fields":{"timestamp":1500000,"q":[1.0,0.0,0.0,0.5],"reset_counter":3,
                         "esc":[{"rpm":10},{"rpm":20}],"name":"abc","armed":true,"nan":null}})
    }

    #[test]
    fn text_view_aligns_topics_and_shows_values_for_a_person() {
        let mut view = TailView::new(TailOptions::default());
        let line = data();
        let Shown::Out(s) = view.render(&line, &line.to_string()) else {
            panic!("a data line is shown");
        };
        assert_eq!(
            s,
            "vehicle_attitude[0]            1.500000  q=[1.0000,0.0000,0.0000,0.5000] \
             reset_counter=3 esc=[{rpm=10},{rpm=20}] name=\"abc\" armed=true nan=nan"
        );
        // The subscription's topics set the column's width.
        let subscribed = json!({"type":"subscribed","patterns":["*"],
                                "topics":["a_rather_long_topic_name_here"]});
        assert_eq!(view.render(&subscribed, ""), Shown::Nothing);
        let Shown::Out(s) = view.render(&line, "") else {
            panic!()
        };
        // "a_rather_long_topic_name_here[i]" is 32 characters.
        let expect = format!("{:<32} {:>14}  q=", "vehicle_attitude[0]", "1.500000");
        assert!(s.starts_with(&expect), "{s}");
        let mut view = TailView::new(TailOptions {
            fields: vec!["q[3]".into(), "esc[1].rpm".into(), "missing".into()],
            ..TailOptions::default()
        });
        let Shown::Out(s) = view.render(&line, "") else {
            panic!()
        };
        assert!(s.ends_with("  q[3]=0.5000 esc[1].rpm=20"), "{s}");
        // An ArduPilot message: its instance in the name, its TimeUS in the time column.
        let bat = json!({"type":"data","topic":"BAT","multi_id":1,"timestamp":1500000,
                         "fields":{"TimeUS":1500000,"Inst":1,"Volt":12.5}});
        let Shown::Out(s) = TailView::new(TailOptions::default()).render(&bat, "") else {
            panic!()
        };
        assert!(s.starts_with("BAT[1] "), "{s}");
        assert!(s.ends_with("1.500000  Inst=1 Volt=12.5000"), "{s}");
    }

    #[test]
    fn json_view_passes_lines_through_with_fields_filtered() {
        let mut view = TailView::new(TailOptions {
            json: true,
            fields: vec!["reset_counter".into()],
            ..TailOptions::default()
        });
        let line = data();
        let Shown::Out(s) = view.render(&line, "") else {
            panic!()
        };
        let back: Json = serde_json::from_str(&s).unwrap();
        assert_eq!(back["fields"], json!({"reset_counter": 3}));
        assert_eq!(back["topic"], "vehicle_attitude");
        let log = json!({"type":"log","level":"info","timestamp":1,"text":"hi"});
        assert_eq!(view.render(&log, "RAW"), Shown::Out("RAW".into()));
        let stats = json!({"type":"stats","clients":1});
        assert_eq!(view.render(&stats, "STATS"), Shown::Out("STATS".into()));
    }

    #[test]
    fn other_lines_become_notes_status_or_errors() {
        let mut view = TailView::new(TailOptions::default());
        let stats = json!({"type":"stats","vehicle":{"sysid":1,"compid":1},"log":0,
            "log_bytes_per_s":96300.0,"chunks_per_s":400.0,"loss_percent":0.2,"lost":7,"clients":2});
        assert_eq!(
            view.render(&stats, ""),
            Shown::Status(
                "sysid 1 · 96.3 KB/s · 400.0 chunks/s · 0.20 % lost · 7 lost in all · 2 clients"
                    .into()
            )
        );
        let lagged = json!({"type":"lagged","dropped":12});
        assert!(
            matches!(view.render(&lagged, ""), Shown::Note(s) if s.contains("missed 12 lines"))
        );
        let end = json!({"type":"session","event":"end","log":0,"reason":"vehicle_lost"});
        assert_eq!(
            view.render(&end, ""),
            Shown::Note("(end of log 0: vehicle lost)".into())
        );
        let err = json!({"type":"error","message":"unknown key 'x'"});
        assert_eq!(
            view.render(&err, ""),
            Shown::Error("unknown key 'x'".into())
        );
        let none = json!({"type":"subscribed","patterns":["nope*"],"topics":[]});
        assert!(matches!(view.render(&none, ""), Shown::Note(s) if s.contains("no topic matches")));
        let event = json!({"type":"event","name":"(?i)failsafe","source":"logged_text",
            "at_us":45_000_000u64,"windows":[{"buffer":"imu","from_us":40_000_000u64,"to_us":47_000_000u64}]});
        assert_eq!(
            view.render(&event, ""),
            Shown::Note("(event (?i)failsafe at 45.000 s: imu 40.000-47.000 s)".into())
        );
        let bare = json!({"type":"event","name":"mark","source":"request","at_us":1_500_000u64,"windows":[]});
        assert_eq!(
            event_text(&bare),
            "event mark at 1.500 s: no event buffer (entered in the manifest only)"
        );
    }

    #[test]
    fn topics_table_lists_instances_and_fields() {
        let hello = json!({"type":"hello","vehicle":{"sysid":1,"compid":1}});
        let topics = json!({"type":"topics","log":2,"topics":[
            {"name":"sensor_accel","multi_id":1,"msg_id":4,
             "fields":[{"name":"timestamp","type":"uint64_t"},{"name":"x","type":"float"}]}]});
        let t = topics_table(&hello, &topics);
        assert_eq!(
            t,
            "vehicle sysid 1, log 2: 1 topic instances\n\
             topic         multi  fields\n\
             sensor_accel      1  uint64_t timestamp, float x\n"
        );
        let empty = json!({"type":"topics","log":null,"topics":[]});
        assert_eq!(
            topics_table(&json!({}), &empty),
            "no vehicle heard yet; no log streaming now\n"
        );
    }
}
