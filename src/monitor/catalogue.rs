//! Every metric the daemon exports: its name (Prometheus's conventions: `ulog_recv_`, base
//! units, `_total` on counters), kind, labels (each of a small fixed set of values) and help
//! text. The operator's guide lists them from here (a test holds the two together).

/// What kind of metric it is, in Prometheus's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up; starts again at zero only with the process.
    Counter,
    /// A value now.
    Gauge,
    /// Observations counted in buckets (`_bucket`, `_sum`, `_count`).
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    pub name: &'static str,
    pub kind: Kind,
    /// The names of its labels; each takes values from a small fixed set (the guide lists them).
    pub labels: &'static [&'static str],
    pub help: &'static str,
    /// A histogram's bucket bounds, in its unit.
    pub buckets: Option<&'static [f64]>,
}

const fn counter(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        kind: Kind::Counter,
        labels,
        help,
        buckets: None,
    }
}

const fn gauge(
    name: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> MetricDef {
    MetricDef {
        name,
        kind: Kind::Gauge,
        labels,
        help,
        buckets: None,
    }
}

const fn histogram(name: &'static str, buckets: &'static [f64], help: &'static str) -> MetricDef {
    MetricDef {
        name,
        kind: Kind::Histogram,
        labels: &[],
        help,
        buckets: Some(buckets),
    }
}

/// The kind of link: `udp`, `tcp` or `serial`.
const LINK: &[&str] = &["link"];

// The link.
pub const LINK_UP: MetricDef = gauge(
    "ulog_recv_link_up",
    LINK,
    "1 while the vehicle is heard on the link (its heartbeat within the vehicle timeout), else 0.",
);
pub const VEHICLE_AUTOPILOT: MetricDef = gauge(
    "ulog_recv_vehicle_autopilot",
    &["autopilot"],
    "1 for the autopilot the vehicle found speaks (px4, ardupilot: whose log stream is asked for), 0 for the other.",
);
pub const LINK_OPEN: MetricDef = gauge(
    "ulog_recv_link_open",
    LINK,
    "1 while the link is open (a UDP socket bound; a TCP connection or a serial port open), else 0.",
);
pub const LINK_RECEIVED_BYTES: MetricDef = counter(
    "ulog_recv_link_received_bytes_total",
    LINK,
    "MAVLink bytes received on the link.",
);
pub const LINK_RECEIVED_FRAMES: MetricDef = counter(
    "ulog_recv_link_received_frames_total",
    LINK,
    "MAVLink frames received on the link that passed their checksum.",
);
pub const LINK_REFUSED_FRAMES: MetricDef = counter(
    "ulog_recv_link_refused_frames_total",
    &["link", "reason"],
    "Frames refused by MAVLink signing, by reason: unsigned, bad_signature, replayed, too_old.",
);
pub const LINK_FOREIGN_DATAGRAMS: MetricDef = counter(
    "ulog_recv_link_foreign_datagrams_total",
    LINK,
    "Datagrams from anywhere but the vehicle that held no authentic frame of it.",
);

// The stream.
pub const LOGS: MetricDef = counter(
    "ulog_recv_logs_total",
    &[],
    "Logs the vehicle began streaming.",
);
pub const LOG_RECEIVED_BYTES: MetricDef = counter(
    "ulog_recv_log_received_bytes_total",
    &[],
    "Log bytes reassembled from the stream (dropout messages included).",
);
pub const CHUNKS_RECEIVED: MetricDef = counter(
    "ulog_recv_chunks_received_total",
    &[],
    "LOGGING_DATA and LOGGING_DATA_ACKED chunks received (duplicates included).",
);
pub const CHUNKS_LOST: MetricDef = counter(
    "ulog_recv_chunks_lost_total",
    &[],
    "Chunks lost for good (their gap declared).",
);
pub const CHUNKS_DUPLICATED: MetricDef = counter(
    "ulog_recv_chunks_duplicated_total",
    &[],
    "Chunks received again (dropped).",
);
pub const CHUNKS_REORDERED: MetricDef = counter(
    "ulog_recv_chunks_reordered_total",
    &[],
    "Late chunks put back in their place.",
);
pub const ACKS_SENT: MetricDef = counter("ulog_recv_acks_sent_total", &[], "LOGGING_ACKs sent.");
pub const DROPOUTS: MetricDef = counter(
    "ulog_recv_dropouts_total",
    &[],
    "Dropouts the link's losses wrote into the logs.",
);
pub const DROPOUT_DURATION: MetricDef = histogram(
    "ulog_recv_dropout_duration_seconds",
    &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0],
    "The log time each dropout covers (its sum: all the dropouts'); one with no sample after \
     it is not observed.",
);
pub const ACK_LATENCY: MetricDef = histogram(
    "ulog_recv_ack_latency_seconds",
    &[
        0.000_05, 0.000_1, 0.000_2, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1,
    ],
    "From a datagram's arrival to the send of the ack it asked for.",
);

// The store.
pub const STORE_WRITTEN_BYTES: MetricDef = counter(
    "ulog_recv_store_written_bytes_total",
    &[],
    "Bytes written into the splits (the columns' and event buffers' included).",
);
pub const STORE_FAILED_BYTES: MetricDef = counter(
    "ulog_recv_store_write_failed_bytes_total",
    &[],
    "Log bytes that could not be written (disk full, I/O error).",
);
pub const SPLITS_CLOSED: MetricDef = counter(
    "ulog_recv_splits_closed_total",
    &[],
    "Splits closed, each a whole .ulg (the columns' and event buffers' included).",
);
pub const FSYNC: MetricDef = histogram(
    "ulog_recv_store_fsync_seconds",
    &[
        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ],
    "How long each of the store's syncs took (a split's data, a manifest, a directory).",
);
pub const STORE_QUEUE_BYTES: MetricDef = gauge(
    "ulog_recv_store_queue_bytes",
    &[],
    "Log bytes waiting for the store's thread.",
);
pub const STORE_DROPPED_SAMPLES: MetricDef = counter(
    "ulog_recv_store_dropped_samples_total",
    &[],
    "Samples dropped because the disk could not keep up (each run a dropout in the log).",
);
pub const STORE_WRITING: MetricDef = gauge(
    "ulog_recv_store_writing",
    &[],
    "1 while the store writes; 0 while writing is paused (the disk is full).",
);
pub const SESSIONS_REPAIRED: MetricDef = counter(
    "ulog_recv_sessions_repaired_total",
    &[],
    "Sessions a crash or a power cut left open, repaired at the start.",
);
pub const LOGS_DISK_BYTES: MetricDef = gauge(
    "ulog_recv_logs_disk_bytes",
    &[],
    "Bytes the log directory holds.",
);
pub const LOGS_BUDGET_BYTES: MetricDef = gauge(
    "ulog_recv_logs_budget_bytes",
    &[],
    "The log directory's budget (max-total); absent without one.",
);
pub const LOGS_FREE_BYTES: MetricDef = gauge(
    "ulog_recv_logs_filesystem_free_bytes",
    &[],
    "Free bytes on the log directory's file system.",
);

// The fill.
pub const FILL_RUNS: MetricDef = counter(
    "ulog_recv_fill_runs_total",
    &["outcome"],
    "Fills run, by outcome: done (each dropout filled or said why not), failed.",
);
pub const FILL_FETCHED_BYTES: MetricDef = counter(
    "ulog_recv_fill_fetched_bytes_total",
    &[],
    "Bytes of the vehicle's SD logs received over MAVLink FTP by fills.",
);
pub const FILL_RECOVERED_BYTES: MetricDef = counter(
    "ulog_recv_fill_recovered_bytes_total",
    &[],
    "Bytes of records fills recovered into the flights.",
);
pub const FILL_MISSING_DROPOUTS: MetricDef = gauge(
    "ulog_recv_fill_missing_dropouts",
    &[],
    "Dropouts the last fill left unfilled.",
);

// The uploads.
pub const UPLOAD_OBJECTS: MetricDef = counter(
    "ulog_recv_upload_objects_total",
    &[],
    "Objects uploaded to the bucket.",
);
pub const UPLOAD_BYTES: MetricDef = counter(
    "ulog_recv_upload_bytes_total",
    &[],
    "Bytes uploaded to the bucket.",
);
pub const FLIGHT_REVIEW_UPLOADS: MetricDef = counter(
    "ulog_recv_flight_review_uploads_total",
    &[],
    "Flights uploaded to Flight Review.",
);
pub const UPLOAD_PENDING_SESSIONS: MetricDef = gauge(
    "ulog_recv_upload_pending_sessions",
    &[],
    "Sessions with something left to upload.",
);
pub const UPLOAD_FAILURES: MetricDef = counter(
    "ulog_recv_upload_failures_total",
    &["reason"],
    "Failed upload steps, by reason: credentials, no_bucket, unreachable, untrusted, stalled, \
     server, changed, local, flight_review, tables.",
);
pub const UPLOAD_LAST_COMPLETE: MetricDef = gauge(
    "ulog_recv_upload_last_complete_timestamp_seconds",
    &[],
    "When (Unix time) a session was last wholly uploaded; absent until one is.",
);

// The flight diagnostics, the live clients, the build.
pub const FINDINGS: MetricDef = counter(
    "ulog_recv_findings_total",
    &["analyzer", "severity"],
    "Findings of the flight diagnostics, by analyzer and severity (info, warning, critical).",
);
pub const LIVE_CLIENTS: MetricDef = gauge(
    "ulog_recv_live_clients",
    &["protocol"],
    "Clients following the flight live, by protocol: ndjson (the live socket), foxglove.",
);
pub const HTTP_PASSWORDS: MetricDef = counter(
    "ulog_recv_http_passwords_total",
    &["outcome"],
    "Passwords for the web page that did not get in, by outcome: wrong (checked), refused (not checked: too many wrong ones from the address or in all).",
);
pub const BUILD_INFO: MetricDef = gauge(
    "ulog_recv_build_info",
    &["version"],
    "The daemon's version, as a label; the value is 1.",
);

/// The values of [`VEHICLE_AUTOPILOT`]'s `autopilot`.
pub const AUTOPILOTS: &[&str] = &["px4", "ardupilot"];
/// The values of [`FILL_RUNS`]'s `outcome`.
pub const FILL_OUTCOMES: &[&str] = &["done", "failed"];
/// The values of [`UPLOAD_FAILURES`]'s `reason`.
pub const UPLOAD_FAILURE_REASONS: &[&str] = &[
    "credentials",
    "no_bucket",
    "unreachable",
    "untrusted",
    "stalled",
    "server",
    "changed",
    "local",
    "flight_review",
    "tables",
];

/// Every metric of the daemon's own (the process collector's `process_*` beside them).
pub const ALL: &[MetricDef] = &[
    LINK_UP,
    VEHICLE_AUTOPILOT,
    LINK_OPEN,
    LINK_RECEIVED_BYTES,
    LINK_RECEIVED_FRAMES,
    LINK_REFUSED_FRAMES,
    LINK_FOREIGN_DATAGRAMS,
    LOGS,
    LOG_RECEIVED_BYTES,
    CHUNKS_RECEIVED,
    CHUNKS_LOST,
    CHUNKS_DUPLICATED,
    CHUNKS_REORDERED,
    ACKS_SENT,
    DROPOUTS,
    DROPOUT_DURATION,
    ACK_LATENCY,
    STORE_WRITTEN_BYTES,
    STORE_FAILED_BYTES,
    SPLITS_CLOSED,
    FSYNC,
    STORE_QUEUE_BYTES,
    STORE_DROPPED_SAMPLES,
    STORE_WRITING,
    SESSIONS_REPAIRED,
    LOGS_DISK_BYTES,
    LOGS_BUDGET_BYTES,
    LOGS_FREE_BYTES,
    FILL_RUNS,
    FILL_FETCHED_BYTES,
    FILL_RECOVERED_BYTES,
    FILL_MISSING_DROPOUTS,
    UPLOAD_OBJECTS,
    UPLOAD_BYTES,
    FLIGHT_REVIEW_UPLOADS,
    UPLOAD_PENDING_SESSIONS,
    UPLOAD_FAILURES,
    UPLOAD_LAST_COMPLETE,
    FINDINGS,
    LIVE_CLIENTS,
    HTTP_PASSWORDS,
    BUILD_INFO,
];

/// Sets every counter of a fixed set of series at zero, and the store's state at writing:
/// a series that exists from the start (rather than from its first event) lets `rate()` and
/// `increase()` see its first event, and an alert its absence of one. The series whose labels
/// the shell knows (the link's, the findings') it sets itself.
pub fn start_at_zero() {
    for def in ALL {
        if def.kind == Kind::Counter && def.labels.is_empty() {
            metrics::counter!(def.name).absolute(0);
        }
    }
    for outcome in FILL_OUTCOMES {
        metrics::counter!(FILL_RUNS.name, "outcome" => *outcome).absolute(0);
    }
    for reason in UPLOAD_FAILURE_REASONS {
        metrics::counter!(UPLOAD_FAILURES.name, "reason" => *reason).absolute(0);
    }
    for protocol in ["ndjson", "foxglove"] {
        metrics::gauge!(LIVE_CLIENTS.name, "protocol" => protocol).set(0.0);
    }
    for outcome in ["wrong", "refused"] {
        metrics::counter!(HTTP_PASSWORDS.name, "outcome" => outcome).absolute(0);
    }
    metrics::gauge!(STORE_WRITING.name).set(1.0);
    metrics::gauge!(FILL_MISSING_DROPOUTS.name).set(0.0);
}

/// Gives the installed recorder every metric's help text.
pub fn describe() {
    for def in ALL {
        match def.kind {
            Kind::Counter => metrics::describe_counter!(def.name, def.help),
            Kind::Gauge => metrics::describe_gauge!(def.name, def.help),
            Kind::Histogram => metrics::describe_histogram!(def.name, def.help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions_and_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for def in ALL {
            assert!(seen.insert(def.name), "{} twice", def.name);
            assert!(def.name.starts_with("ulog_recv_"), "{}", def.name);
            assert_eq!(
                def.name.ends_with("_total"),
                def.kind == Kind::Counter,
                "{}: counters, and only they, end in _total",
                def.name
            );
            assert!(
                !def.name.contains("_ms") && !def.name.contains("_us"),
                "{}: base units",
                def.name
            );
            assert!(def.help.ends_with('.'), "{}: help is a sentence", def.name);
            if let Some(b) = def.buckets {
                assert!(
                    b.windows(2).all(|w| w[0] < w[1]),
                    "{}: buckets ascend",
                    def.name
                );
            }
        }
    }
}
