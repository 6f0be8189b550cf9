//! The daemon's counters into its Prometheus metrics: what the session, the link and the
//! store already count is copied into the exposition once per status report (never counted
//! twice, so the metrics agree with `info` and the status line), the events add what only
//! they tell (the vehicle heard, the dropouts' log time), and each report goes to the health
//! check. Runs on the network loop: a report costs a few atomic stores, never a file.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use metrics::{Counter, Gauge, Histogram};

use crate::diagnose::{AnalyzerId, Severity};
use crate::link::Event;
use crate::monitor::catalogue::{self as m, MetricDef};
use crate::monitor::health::{Health, Report};
use crate::shell::receiver::Status;
use crate::shell::transport::LinkSpec;

/// The health check's state, shared with the metrics' listener.
pub type SharedHealth = Arc<Mutex<Health>>;

/// The kind of link in a word, for the metrics' `link` label.
pub fn link_kind(spec: &LinkSpec) -> &'static str {
    match spec {
        LinkSpec::UdpListen(_) | LinkSpec::UdpConnect(_) => "udp",
        LinkSpec::Tcp(_) => "tcp",
        LinkSpec::Serial { .. } => "serial",
    }
}

/// Reads one counter from a status report.
type ReadCounter = fn(&Status) -> u64;

/// The metrics the status reports and events feed; see the module docs.
pub struct StatusMetrics {
    health: SharedHealth,
    link_up: Gauge,
    link_open: Gauge,
    dropout_duration: Histogram,
    /// Each counter the status holds, with the field it is read from.
    counters: Vec<(Counter, ReadCounter)>,
    store_queue: Gauge,
    store_writing: Gauge,
}

impl StatusMetrics {
    /// The metrics of a daemon on a link of `kind` ([`link_kind`]).
    pub fn new(kind: &'static str, now: Instant) -> Self {
        let link = |def: MetricDef| metrics::counter!(def.name, "link" => kind);
        let refused = |reason: &'static str| metrics::counter!(m::LINK_REFUSED_FRAMES.name, "link" => kind, "reason" => reason);
        let plain = |def: MetricDef| metrics::counter!(def.name);
        let counters: Vec<(Counter, ReadCounter)> = vec![
            (link(m::LINK_RECEIVED_BYTES), |s| s.session.frames.bytes_in),
            (link(m::LINK_RECEIVED_FRAMES), |s| s.session.frames.messages),
            (link(m::LINK_FOREIGN_DATAGRAMS), |s| {
                s.link.foreign_datagrams
            }),
            (refused("unsigned"), |s| s.session.signing.unsigned_refused),
            (refused("bad_signature"), |s| {
                s.session.signing.bad_signature
            }),
            (refused("replayed"), |s| s.session.signing.replayed),
            (refused("too_old"), |s| s.session.signing.too_old),
            (plain(m::LOGS), |s| s.session.logs),
            (plain(m::LOG_RECEIVED_BYTES), |s| s.session.log_bytes),
            (plain(m::CHUNKS_RECEIVED), |s| s.session.chunks),
            (plain(m::CHUNKS_LOST), |s| s.session.lost_chunks),
            (plain(m::CHUNKS_DUPLICATED), |s| s.session.duplicates),
            (plain(m::CHUNKS_REORDERED), |s| s.session.recovered),
            (plain(m::ACKS_SENT), |s| s.session.acks_sent),
            (plain(m::DROPOUTS), |s| s.session.dropouts),
            (plain(m::STORE_FAILED_BYTES), |s| s.write_errors),
            (plain(m::STORE_DROPPED_SAMPLES), |s| s.storage.lost_samples),
        ];
        let link_up = metrics::gauge!(m::LINK_UP.name, "link" => kind);
        link_up.set(0.0);
        // Every analyzer's findings from zero (see `start_at_zero`).
        for analyzer in AnalyzerId::ALL {
            for severity in [Severity::Info, Severity::Warning, Severity::Critical] {
                metrics::counter!(
                    m::FINDINGS.name,
                    "analyzer" => analyzer.as_str(),
                    "severity" => severity.as_str()
                )
                .absolute(0);
            }
        }
        // The histograms, before their first observation.
        for def in [m::ACK_LATENCY, m::FSYNC] {
            let _ = metrics::histogram!(def.name);
        }
        Self {
            health: Arc::new(Mutex::new(Health::new(now))),
            link_up,
            link_open: metrics::gauge!(m::LINK_OPEN.name, "link" => kind),
            dropout_duration: metrics::histogram!(m::DROPOUT_DURATION.name),
            counters,
            store_queue: metrics::gauge!(m::STORE_QUEUE_BYTES.name),
            store_writing: metrics::gauge!(m::STORE_WRITING.name),
        }
    }

    /// The health check's state, for the listener.
    pub fn health(&self) -> SharedHealth {
        self.health.clone()
    }

    /// A status report, made at `now`.
    pub fn status(&mut self, s: &Status, now: Instant) {
        for (counter, read) in &self.counters {
            // Monotonic: the exporter keeps the larger of what it has and this.
            counter.absolute(read(s));
        }
        self.link_open.set(if s.link.open { 1.0 } else { 0.0 });
        self.store_queue.set(s.storage.queued_bytes as f64);
        self.store_writing
            .set(if s.storage.paused { 0.0 } else { 1.0 });
        let report = Report {
            store_busy: s.storage.stalled_ms.map(std::time::Duration::from_millis),
            store_writing: !s.storage.paused,
            failed_bytes: s.write_errors,
            link_open: s.link.open,
        };
        self.health.lock().expect("health lock").report(report, now);
    }

    /// An event of the session.
    pub fn event(&mut self, e: &Event) {
        match e {
            Event::VehicleFound { autopilot, .. } => {
                self.link_up.set(1.0);
                for name in m::AUTOPILOTS {
                    let value = if *name == autopilot.name() { 1.0 } else { 0.0 };
                    metrics::gauge!(m::VEHICLE_AUTOPILOT.name, "autopilot" => *name).set(value);
                }
            }
            Event::VehicleLost => self.link_up.set(0.0),
            Event::Dropout {
                duration_ms: Some(ms),
                ..
            } => self.dropout_duration.record(*ms as f64 / 1000.0),
            _ => {}
        }
    }
}
