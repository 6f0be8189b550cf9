//! The command line: the daemon's options (also the config file's keys, see
//! [`crate::config_file`]), grouped under the help's headings (link, identity and signing,
//! storage, columns and event buffers, live topics, uploads, fill); the subcommands are in
//! `commands`.

mod commands;

pub(crate) use self::commands::Command;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser};
use ulog_recv::diagnose::{FindingFilter, Selection};
use ulog_recv::link::{SessionConfig, SigningSetup};
use ulog_recv::live::clients::ServeError;
use ulog_recv::live::ndjson::server::default_socket_path;
use ulog_recv::live::thread::{PublishConfig, PublishFeed, PublishServer};
use ulog_recv::shell::transport::LinkSpec;
use ulog_recv::shell::values::{self, ValueError};
use ulog_recv::store::columns::{ColumnError, ColumnSpec};
use ulog_recv::store::events::{
    EventBufferSpec, EventError, EventRequest, FieldCondition, Trigger,
};
use ulog_recv::store::{SplitPolicy, StoreOptions};
use ulog_recv::sys::secret::read_secret_file;
use ulog_recv::upload::flight_review::FlightReviewOptions;
use ulog_recv::upload::s3::S3Options;
use ulog_recv::upload::{UploadConfig, UploadWhen};

/// The daemon's help headings that are not a struct's own.
const IDENTITY: &str = "Identity and signing";
const EVENTS: &str = "Columns and event buffers";

#[derive(Parser)]
#[command(
    version,
    about = "Receive, store and publish PX4 ULog streams",
    args_conflicts_with_subcommands = true,
    // A later value wins: the command line's over the config file's (which come first).
    args_override_self = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    #[command(flatten)]
    pub(crate) receive: ReceiveArgs,
}

/// How to reach the other side. Exactly one.
#[derive(Args, Debug, Clone)]
#[group(required = false, multiple = false)]
#[command(next_help_heading = "Link")]
pub(crate) struct LinkArgs {
    /// Listen for the vehicle on this UDP port, on every interface or on ADDR only; answer
    /// the vehicle where its authentic frames come from.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = parse_udp_listen)]
    pub(crate) udp: Option<SocketAddr>,
    /// Talk UDP to this address only (e.g. a MAVLink router's UDP server endpoint).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) udp_connect: Option<String>,
    /// Connect over TCP (reconnects with back-off).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) tcp: Option<String>,
    /// Use a serial port (reopened after an unplug).
    #[arg(long, value_name = "DEVICE")]
    pub(crate) serial: Option<PathBuf>,
}

impl LinkArgs {
    pub(crate) fn spec(&self, baud: u32) -> Option<LinkSpec> {
        if let Some(addr) = self.udp {
            return Some(LinkSpec::UdpListen(addr));
        }
        if let Some(a) = &self.udp_connect {
            return Some(LinkSpec::UdpConnect(a.clone()));
        }
        if let Some(a) = &self.tcp {
            return Some(LinkSpec::Tcp(a.clone()));
        }
        self.serial.as_ref().map(|path| LinkSpec::Serial {
            path: path.clone(),
            baud,
        })
    }
}

/// How a command that reads the vehicle's files reaches it.
#[derive(Args, Debug, Clone)]
pub(crate) struct VehicleLinkArgs {
    #[command(flatten)]
    pub(crate) link: LinkArgs,
    /// Serial baud rate.
    #[arg(long, default_value_t = 921_600, help_heading = "Link")]
    pub(crate) baud: u32,
    /// Read at most this many bytes per second on average (the link is shared with
    /// telemetry); default: as fast as the vehicle sends.
    #[arg(long, value_name = "BYTES", value_parser = ftp_rate, help_heading = "Link")]
    pub(crate) ftp_rate: Option<u64>,
    /// Sign with this key and take only frames signed with it (the daemon's --signing-key
    /// file format); our frames go out on signing link 1 (the daemon's is 0).
    #[arg(long, value_name = "FILE", help_heading = "Link")]
    pub(crate) signing_key: Option<PathBuf>,
    /// Wait this many seconds for the vehicle's heartbeat.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = vehicle_wait,
          help_heading = "Link")]
    pub(crate) wait: Duration,
}

impl VehicleLinkArgs {
    pub(crate) fn spec(&self) -> anyhow::Result<LinkSpec> {
        self.link.spec(self.baud).ok_or_else(|| {
            anyhow::anyhow!(
                "say where the vehicle is: --udp PORT, --udp-connect HOST:PORT, --tcp \
                 HOST:PORT or --serial DEVICE"
            )
        })
    }

    /// The signing setup, with a key: our clock from the time of day.
    pub(crate) fn signing(&self) -> anyhow::Result<Option<ulog_recv::link::SigningSetup>> {
        let Some(path) = &self.signing_key else {
            return Ok(None);
        };
        Ok(Some(ulog_recv::link::SigningSetup {
            key: ulog_recv::shell::keyfile::load_key(path)?,
            link_id: 1,
            timestamp: ulog_recv::link::signing::timestamp_at(std::time::SystemTime::now()),
        }))
    }

    pub(crate) fn ftp(&self) -> ulog_recv::link::ftp::FtpConfig {
        ulog_recv::link::ftp::FtpConfig {
            rate: self.ftp_rate,
            ..Default::default()
        }
    }
}

#[derive(Args, Debug, Clone)]
pub(crate) struct ReceiveArgs {
    // Declared in the order of `--help`'s sections: clap lists a heading where its first
    // option comes.
    /// Options from this TOML file, keys named as the long options (`udp = 14550`,
    /// `log-dir = "/var/lib/ulog-recv"`); the command line wins. Re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Print the options in force (from the config file and the command line) and exit.
    #[arg(long)]
    pub(crate) check_config: bool,
    /// What to log, for every command: error, warn, info, debug, trace, or a filter such as
    /// `ulog_recv::link=debug` [default: $RUST_LOG, else info for the daemon and the
    /// simulator, warn for the other commands].
    #[arg(long, value_name = "LEVEL", global = true)]
    pub(crate) log_level: Option<String>,
    /// For tests of the watchdog: the main loop blocks this many seconds after the start.
    #[arg(long, hide = true, value_name = "SECONDS")]
    pub(crate) debug_stall_after: Option<f64>,
    #[command(flatten)]
    pub(crate) link: LinkArgs,
    /// Serial baud rate.
    #[arg(long, default_value_t = 921_600, help_heading = "Link")]
    pub(crate) baud: u32,
    /// Our MAVLink system id [default: the vehicle's, as for any component on board].
    #[arg(long, value_name = "ID", help_heading = IDENTITY)]
    pub(crate) sysid: Option<u8>,
    /// Our MAVLink component id (155 is MAV_COMP_ID_LOG).
    #[arg(long, default_value_t = ulog_recv::link::session::DEFAULT_COMPONENT_ID,
          value_name = "ID", help_heading = IDENTITY)]
    pub(crate) compid: u8,
    /// Take only this system as the vehicle [default: the first autopilot heard].
    #[arg(long, value_name = "ID", help_heading = IDENTITY)]
    pub(crate) target_system: Option<u8>,
    /// Whose log stream to ask for: PX4's ULog streaming or ArduPilot's DataFlash remote
    /// logging; auto tells them by the vehicle's HEARTBEAT.
    #[arg(long, value_enum, default_value_t = AutopilotArg::Auto, value_name = "AUTOPILOT",
          help_heading = IDENTITY)]
    pub(crate) autopilot: AutopilotArg,
    /// MAVLink 2 signing with the vehicle's key: FILE holds 64 hex digits or a passphrase
    /// (whose SHA-256 is the key, as QGroundControl derives it) and must not be readable by
    /// others [default: $CREDENTIALS_DIRECTORY/signing-key when systemd gives one].
    #[arg(long, value_name = "FILE", help_heading = IDENTITY)]
    pub(crate) signing_key: Option<PathBuf>,
    /// Where the .ulg files go (created if missing) [default: $STATE_DIRECTORY when systemd
    /// gives one, else ./logs].
    #[arg(long, value_name = "DIR", help_heading = "Storage")]
    pub(crate) log_dir: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) publish: PublishArgs,
    #[command(flatten)]
    pub(crate) upload: UploadArgs,
    /// Fill each closed session's dropouts from the vehicle's SD log over MAVLink FTP, on
    /// the same link, once the vehicle is disarmed (`auto`; PX4 needs `mavlink start -x`),
    /// or not (`off`; `ulog-recv fill` does it by hand).
    #[arg(
        long,
        value_enum,
        default_value = "off",
        value_name = "WHEN",
        help_heading = "Fill"
    )]
    pub(crate) fill: FillArg,
    /// The fill reads at most this many bytes per second on average over MAVLink FTP (the
    /// link is shared with telemetry) [default: as fast as the vehicle sends].
    #[arg(long, value_name = "BYTES", value_parser = ftp_rate, help_heading = "Fill")]
    pub(crate) ftp_rate: Option<u64>,
    /// Serve Prometheus metrics (GET /metrics) and a health check (GET /healthz) over HTTP
    /// on this port, on 127.0.0.1 unless ADDR is given (e.g. 0.0.0.0:9477 for the fleet's
    /// Prometheus): counters and states only, no flight data.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = parse_tcp_listen,
          help_heading = "Monitoring")]
    pub(crate) metrics: Option<SocketAddr>,
    /// Serve the web page (every flight, how whole it is, its uploads and findings, live)
    /// and its JSON API over HTTP on this port, on 127.0.0.1 unless ADDR is given; beyond
    /// loopback it asks for the password of --http-password-file.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = parse_tcp_listen,
          help_heading = "Web page")]
    pub(crate) http: Option<SocketAddr>,
    /// The web page's password: FILE holds it on its first line and must not be readable by
    /// others; required when --http names an address beyond loopback.
    #[arg(long, value_name = "FILE", help_heading = "Web page")]
    pub(crate) http_password_file: Option<PathBuf>,
}

/// How to reach a bucket: the daemon's uploads, and `export --dataset s3://…`.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Uploads")]
pub(crate) struct BucketArgs {
    /// The S3 service, when not AWS: e.g. http://127.0.0.1:3900 (Garage), https://...r2.cloudflarestorage.com.
    #[arg(long, value_name = "URL")]
    pub(crate) upload_endpoint: Option<String>,
    /// The bucket's region [default: $AWS_REGION, else us-east-1; Garage: garage].
    #[arg(long, value_name = "REGION")]
    pub(crate) upload_region: Option<String>,
    /// Path-style addressing (ENDPOINT/BUCKET/KEY), which Garage, MinIO and Ceph need
    /// [default: on with --upload-endpoint, as boto3 and rclone choose].
    #[arg(long, conflicts_with = "upload_virtual_hosted")]
    pub(crate) upload_path_style: bool,
    /// Virtual-hosted addressing (BUCKET.ENDPOINT/KEY) with --upload-endpoint, for a
    /// service that gives each bucket a host name [default: AWS without --upload-endpoint].
    #[arg(long)]
    pub(crate) upload_virtual_hosted: bool,
    /// AWS-format credentials file (aws_access_key_id, aws_secret_access_key), readable by
    /// its owner only [default: $CREDENTIALS_DIRECTORY/upload-credentials when systemd gives
    /// one, else $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY].
    #[arg(long, value_name = "FILE")]
    pub(crate) upload_credentials: Option<PathBuf>,
    /// Files over this size go up in parts of this size (5M to 5G); a restart resumes a
    /// file at its next part.
    #[arg(long, value_parser = part_size, default_value = "8M", value_name = "SIZE")]
    pub(crate) upload_part_size: u64,
    /// Parts of a file on the wire at once (1 to 64): a link with a long round trip stays
    /// busy; the upload holds this many parts in memory (4 x 8M: 32 MB).
    #[arg(long, default_value = "4", value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) upload_parts_in_flight: u16,
    /// Seconds a request of an upload (to the bucket, or Flight Review) may go without moving
    /// (the server takes none of it and sends no answer) before it is given up and tried
    /// again (1 to 3600); a request that keeps moving, however slowly, is never cut.
    #[arg(long, value_parser = upload_stall, default_value = "300", value_name = "SECONDS")]
    pub(crate) upload_stall_timeout: Duration,
}

impl BucketArgs {
    /// The bucket at `url` (`s3://BUCKET/PREFIX`), reached as these options say.
    pub(crate) fn s3_options(&self, url: &str) -> S3Options {
        S3Options {
            url: url.to_owned(),
            endpoint: self.upload_endpoint.clone(),
            region: self.upload_region.clone(),
            path_style: self.upload_path_style
                || (!self.upload_virtual_hosted
                    && S3Options::path_style_by_default(self.upload_endpoint.as_deref())),
            credentials: self.upload_credentials.clone().or_else(|| {
                let cred = PathBuf::from(std::env::var_os("CREDENTIALS_DIRECTORY")?)
                    .join("upload-credentials");
                cred.is_file().then_some(cred)
            }),
            part_size: self.upload_part_size,
            parts_in_flight: usize::from(self.upload_parts_in_flight),
            stall: self.upload_stall_timeout,
        }
    }
}

/// Where the flights go once recorded.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Uploads")]
pub(crate) struct UploadArgs {
    /// Upload each closed split and the session's manifest to this bucket (any S3-compatible
    /// service), under PREFIX/VEHICLE/SESSION/.
    #[arg(long, value_name = "s3://BUCKET/PREFIX")]
    pub(crate) upload_to: Option<String>,
    #[command(flatten)]
    pub(crate) bucket: BucketArgs,
    /// Upload at most this many bytes per second (e.g. 1M), to leave a shared modem room
    /// for telemetry [default: no cap].
    #[arg(long, value_parser = upload_rate, value_name = "BYTES")]
    pub(crate) upload_rate: Option<u64>,
    /// When uploads run: while the vehicle is disarmed (or not heard), or always.
    #[arg(long, value_enum, default_value = "disarmed", value_name = "WHEN")]
    pub(crate) upload_when: UploadWhenArg,
    /// With --upload-to, also export each closed (and filled) session as Parquet tables and
    /// upload them, after everything else, to the fleet's dataset:
    /// PREFIX/parquet/v1/TOPIC/date=…/vehicle=…/ (read in place by DuckDB, Spark, Athena,
    /// pyarrow).
    #[arg(long)]
    pub(crate) upload_tables: bool,
    /// Upload each closed session's flight (its splits joined) to this Flight Review server,
    /// e.g. https://logs.px4.io.
    #[arg(long, value_name = "URL")]
    pub(crate) flight_review: Option<String>,
    /// List the flights publicly on Flight Review [default: private].
    #[arg(long)]
    pub(crate) flight_review_public: bool,
    /// The e-mail address Flight Review sends the log's link to.
    #[arg(long, value_name = "ADDRESS", default_value = "")]
    pub(crate) flight_review_email: String,
    /// A file holding the API key of a Flight Review server that needs one (sent as
    /// `Authorization: Bearer`), readable by its owner only.
    #[arg(long, value_name = "FILE")]
    pub(crate) flight_review_key: Option<PathBuf>,
}

/// `--autopilot`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum AutopilotArg {
    #[default]
    Auto,
    Px4,
    Ardupilot,
}

impl AutopilotArg {
    pub(crate) fn autopilot(self) -> Option<ulog_recv::autopilot::Autopilot> {
        match self {
            AutopilotArg::Auto => None,
            AutopilotArg::Px4 => Some(ulog_recv::autopilot::Autopilot::Px4),
            AutopilotArg::Ardupilot => Some(ulog_recv::autopilot::Autopilot::ArduPilot),
        }
    }
}

/// `--fill`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum FillArg {
    Auto,
    #[default]
    Off,
}

/// `--upload-when`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum UploadWhenArg {
    #[default]
    Disarmed,
    Always,
}

impl UploadArgs {
    /// The uploader's configuration; credentials and keys are read here (an error names the
    /// option).
    pub(crate) fn config(&self) -> anyhow::Result<UploadConfig> {
        let s3 = (self.upload_to.as_ref()).map(|url| self.bucket.s3_options(url));
        if self.upload_tables && s3.is_none() {
            tracing::warn!("--upload-tables does nothing without --upload-to s3://BUCKET/PREFIX");
        }
        let key = match &self.flight_review_key {
            Some(path) => {
                let bytes = read_secret_file(path, "the Flight Review key file")
                    .map_err(|e| anyhow::anyhow!("--flight-review-key: {e}"))?;
                Some(String::from_utf8_lossy(&bytes).trim().to_string())
            }
            None => None,
        };
        let flight_review = self.flight_review.as_ref().map(|url| FlightReviewOptions {
            url: url.clone(),
            public: self.flight_review_public,
            email: self.flight_review_email.clone(),
            key,
            stall: self.bucket.upload_stall_timeout,
        });
        Ok(UploadConfig {
            s3,
            flight_review,
            rate: self.upload_rate,
            when: match self.upload_when {
                UploadWhenArg::Disarmed => UploadWhen::Disarmed,
                UploadWhenArg::Always => UploadWhen::Always,
            },
            wait_for_fill: false,
            tables: self.upload_tables,
        })
    }
}

/// Where the decoded topics are published live.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Live topics")]
pub(crate) struct PublishArgs {
    /// The live socket (Unix) [default: ulog-recv.sock in $RUNTIME_DIRECTORY, else in
    /// $XDG_RUNTIME_DIR, else in /run/ulog-recv/].
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
    /// Publish on no Unix socket.
    #[arg(long, conflicts_with = "socket")]
    pub(crate) no_socket: bool,
    /// Also publish on this TCP address (for containers), e.g. 127.0.0.1:14600.
    #[arg(long, value_name = "ADDR")]
    pub(crate) publish_tcp: Option<SocketAddr>,
    /// Serve Foxglove, Lichtblick and PlotJuggler live on this WebSocket port (ws://), on
    /// 127.0.0.1 unless ADDR is given (e.g. 0.0.0.0:8765 for the whole network): every topic
    /// as ROS 2 messages (ros2msg, CDR).
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = parse_tcp_listen)]
    pub(crate) foxglove: Option<SocketAddr>,
    /// Bytes a client may fall behind before its oldest lines are dropped (64K to 4G).
    #[arg(long, value_parser = queue_size, default_value = "4M", value_name = "SIZE")]
    pub(crate) client_queue: u64,
}

impl PublishArgs {
    /// Starts the live socket's server. A socket given on the command line must work; the
    /// default one may fail (e.g. no /run/ulog-recv for an ordinary user): the daemon then
    /// logs without it, and says so.
    pub(crate) fn start(
        &self,
        event_requests: tokio::sync::mpsc::UnboundedSender<EventRequest>,
    ) -> anyhow::Result<Option<(PublishFeed, PublishServer)>> {
        let unix = match (&self.socket, self.no_socket) {
            (_, true) => None,
            (Some(p), _) => Some(p.clone()),
            (None, false) => Some(default_socket_path()),
        };
        if unix.is_none() && self.publish_tcp.is_none() && self.foxglove.is_none() {
            return Ok(None);
        }
        let config = |unix| PublishConfig {
            unix,
            tcp: self.publish_tcp,
            foxglove: self.foxglove,
            client_queue_bytes: self.client_queue as usize,
            event_requests: Some(event_requests.clone()),
            ..PublishConfig::default()
        };
        match PublishServer::start(config(unix.clone())) {
            Ok(started) => Ok(Some(started)),
            Err(
                e @ (ServeError::Directory { .. }
                | ServeError::Bind { .. }
                | ServeError::InUse(_)
                | ServeError::NotASocket(_)),
            ) if self.socket.is_none() && unix.is_some() => {
                tracing::warn!("no live socket: {e}; give --socket PATH to publish");
                eprintln!("ulog-recv: no live socket ({e}); give --socket PATH to publish");
                if self.publish_tcp.is_none() && self.foxglove.is_none() {
                    return Ok(None);
                }
                Ok(Some(PublishServer::start(config(None))?))
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// How logs are stored.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Storage")]
pub(crate) struct StoreArgs {
    /// Start a new split at this size (1M to 1T; the unit is required: K, M, G, T).
    #[arg(long, value_parser = split_size, default_value = "64M", value_name = "SIZE")]
    pub(crate) split_size: u64,
    /// Start a new split after this many seconds of log time (1 to 604800).
    #[arg(long, value_parser = split_duration, value_name = "SECONDS")]
    pub(crate) split_duration: Option<Duration>,
    /// Topics whose last sample starts every split (comma-separated)
    /// [default: vehicle_status, vehicle_control_mode, home_position, vehicle_land_detected,
    /// battery_status, vehicle_gps_position, mission].
    #[arg(long, value_delimiter = ',', value_name = "TOPIC")]
    pub(crate) latched: Option<Vec<String>>,
    /// Seconds between syncs of the open split to disk (0.01 to 3600): what a power cut may
    /// cost at most.
    #[arg(long, value_parser = fsync_interval, default_value = "1", value_name = "SECONDS")]
    pub(crate) fsync_interval: Duration,
    /// Most bytes all log sessions may take (M, G, T); the oldest closed sessions are deleted.
    #[arg(long, value_parser = budget_size, value_name = "SIZE")]
    pub(crate) max_total: Option<u64>,
    /// Least free space to leave on the disk (M, G, T); the oldest closed sessions are deleted.
    #[arg(long, value_parser = budget_size, value_name = "SIZE")]
    pub(crate) min_free: Option<u64>,
    /// Log bytes that may wait for a slow disk (64K to 4G); beyond, samples are dropped and
    /// the log says so with a dropout, and receiving goes on.
    #[arg(long, value_parser = queue_size, default_value = "32M", value_name = "SIZE")]
    pub(crate) store_queue: u64,
    /// Topics stored in a column of their own, NAME=PATTERN[,PATTERN…] (repeatable; in the
    /// config file a table, `[column]` then `imu = ["sensor_*", "vehicle_imu*"]`): their
    /// splits go to SESSION/NAME/, every other topic to the session's own splits. A topic
    /// belongs to the first column that matches it. Readers (export, snippet, info, uploads)
    /// join the columns back; uploads send the main column first.
    #[arg(long = "column", value_parser = column_spec, value_name = "NAME=PATTERNS",
          action = clap::ArgAction::Append, help_heading = EVENTS)]
    pub(crate) columns: Vec<ColumnSpec>,
    /// Topics written only around events, NAME=PATTERN[,PATTERN…] (repeatable; in the config
    /// file a table, `[event-buffer]` then `imu = ["sensor_accel"]`): a column
    /// (SESSION/NAME/) whose samples are held in memory and written from --event-before
    /// ahead of each event to --event-after past it. Events: `ulog-recv event NAME`,
    /// --event-on-log, --event-when.
    #[arg(long = "event-buffer", value_parser = column_spec, value_name = "NAME=PATTERNS",
          action = clap::ArgAction::Append, help_heading = EVENTS)]
    pub(crate) event_buffers: Vec<ColumnSpec>,
    /// Seconds of log time an event buffer keeps before an event (0 to 600).
    #[arg(long, alias = "before", value_parser = event_window, default_value = "10",
          value_name = "SECONDS", help_heading = EVENTS)]
    pub(crate) event_before: Duration,
    /// Seconds of log time an event buffer writes after an event (0 to 600; an event may ask
    /// for another).
    #[arg(long, alias = "after", value_parser = event_window, default_value = "5",
          value_name = "SECONDS", help_heading = EVENTS)]
    pub(crate) event_after: Duration,
    /// Most bytes of samples an event buffer holds (64K to 4G); beyond, its oldest go first.
    #[arg(long, value_parser = queue_size, default_value = "32M", value_name = "SIZE",
          help_heading = EVENTS)]
    pub(crate) event_buffer_size: u64,
    /// A logged string that matches this regular expression is an event (repeatable), e.g.
    /// '(?i)failsafe|crash'.
    #[arg(long, value_parser = log_trigger, value_name = "REGEX",
          action = clap::ArgAction::Append, help_heading = EVENTS)]
    pub(crate) event_on_log: Vec<Trigger>,
    /// A field condition that turns true is an event (repeatable): TOPIC.FIELD OP NUMBER,
    /// e.g. 'vehicle_status.failsafe == 1' (OP one of == != < <= > >=).
    #[arg(long, value_parser = field_trigger, value_name = "CONDITION",
          action = clap::ArgAction::Append, help_heading = EVENTS)]
    pub(crate) event_when: Vec<Trigger>,
    /// The flight diagnostics run on the live stream, each finding an event (in the
    /// manifest, on the live socket, in `info`): all, none, or a comma-separated list of
    /// motor_failure, gps_interference, battery_brownout, ekf_failure, rc_loss.
    #[arg(long, default_value = "all", value_name = "ANALYZERS", help_heading = EVENTS)]
    pub(crate) diagnostics: Selection,
    /// The findings that open the event buffers' windows: a severity and those worse
    /// (warning, critical), or analyzers (motor_failure,rc_loss), or none.
    #[arg(long, default_value = "warning", value_name = "SEVERITY|ANALYZERS",
          help_heading = EVENTS)]
    pub(crate) event_on_diagnostic: FindingFilter,
    /// The findings told to the ground station, as a MAVLink STATUSTEXT from our component (at
    /// most one a second): a severity and those worse (warning, critical), or analyzers, or
    /// none. PX4 warns for itself; this is for what it does not say.
    #[arg(long, default_value = "none", value_name = "SEVERITY|ANALYZERS",
          help_heading = EVENTS)]
    pub(crate) diagnostics_statustext: FindingFilter,
}

impl StoreArgs {
    pub(crate) fn options(&self, dir: PathBuf) -> StoreOptions {
        let mut policy = SplitPolicy::unlimited();
        policy.max_bytes = Some(self.split_size);
        policy.max_duration_us = self.split_duration.map(|d| d.as_micros() as u64);
        if let Some(l) = &self.latched {
            policy.latched = l.iter().filter(|s| !s.is_empty()).cloned().collect();
        }
        StoreOptions {
            dir,
            policy,
            fsync_interval: self.fsync_interval,
            max_total: self.max_total,
            min_free: self.min_free,
            uploads: false,
            columns: last_of_each(&self.columns),
            event_buffers: last_of_each(&self.event_buffers)
                .into_iter()
                .map(|column| EventBufferSpec {
                    column,
                    before_us: self.event_before.as_micros() as u64,
                    after_us: self.event_after.as_micros() as u64,
                    max_bytes: self.event_buffer_size,
                })
                .collect(),
            triggers: self
                .event_on_log
                .iter()
                .chain(&self.event_when)
                .cloned()
                .collect(),
            diagnostics: self.diagnostics,
            event_on_diagnostic: self.event_on_diagnostic,
            boot_id: ulog_recv::store::files::this_boot(),
        }
    }
}

/// `14550` (every interface), `192.168.1.5:14550`, `[::1]:14550`.
pub(crate) fn parse_udp_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    s.parse()
        .map_err(|_| format!("not a UDP port or ADDR:PORT: {s}"))
}

/// `--foxglove`, `--metrics`, `--http`: a port alone binds loopback only (nothing is offered to the
/// network unless the user names an address).
pub(crate) fn parse_tcp_listen(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse()
        .map_err(|_| format!("not a TCP port or ADDR:PORT: {s}"))
}

/// Option values, checked by [`ulog_recv::shell::values`] (clap names the option in its error).
fn split_size(s: &str) -> Result<u64, ValueError> {
    values::parse_size(s, values::SPLIT_SIZE)
}

fn column_spec(s: &str) -> Result<ColumnSpec, ColumnError> {
    ColumnSpec::parse(s)
}

/// Columns as given, one given again (the command line after the config file) replacing
/// the earlier.
fn last_of_each(columns: &[ColumnSpec]) -> Vec<ColumnSpec> {
    columns
        .iter()
        .enumerate()
        .filter(|(i, c)| !columns[i + 1..].iter().any(|d| d.name == c.name))
        .map(|(_, c)| c.clone())
        .collect()
}

fn event_window(s: &str) -> Result<Duration, ValueError> {
    values::parse_seconds(s, values::EVENT_WINDOW)
}

fn log_trigger(s: &str) -> Result<Trigger, EventError> {
    Trigger::logged_text(s)
}

fn field_trigger(s: &str) -> Result<Trigger, EventError> {
    FieldCondition::parse(s).map(Trigger::Field)
}

fn budget_size(s: &str) -> Result<u64, ValueError> {
    values::parse_size(s, values::BUDGET)
}

fn queue_size(s: &str) -> Result<u64, ValueError> {
    values::parse_size(s, values::QUEUE)
}

fn part_size(s: &str) -> Result<u64, ValueError> {
    values::parse_size(s, values::PART_SIZE)
}

fn upload_rate(s: &str) -> Result<u64, ValueError> {
    values::parse_size(s, values::UPLOAD_RATE)
}

fn ftp_rate(s: &str) -> Result<u64, ValueError> {
    values::parse_size(s, values::FTP_RATE)
}

fn vehicle_wait(s: &str) -> Result<Duration, ValueError> {
    values::parse_seconds(s, values::VEHICLE_WAIT)
}

fn split_duration(s: &str) -> Result<Duration, ValueError> {
    values::parse_seconds(s, values::SPLIT_DURATION)
}

fn upload_stall(s: &str) -> Result<Duration, ValueError> {
    values::parse_seconds(s, values::UPLOAD_STALL)
}

fn fsync_interval(s: &str) -> Result<Duration, ValueError> {
    values::parse_seconds(s, values::FSYNC_INTERVAL)
}

/// The daemon's log directory when none is named: systemd's `$STATE_DIRECTORY` (its first
/// entry), else `./logs`.
pub(crate) fn default_log_dir() -> PathBuf {
    std::env::var_os("STATE_DIRECTORY")
        .and_then(|d| {
            let first = d.to_string_lossy().split(':').next()?.to_owned();
            (!first.is_empty()).then(|| PathBuf::from(first))
        })
        .unwrap_or_else(|| PathBuf::from("logs"))
}

impl ReceiveArgs {
    pub(crate) fn log_dir(&self) -> PathBuf {
        self.log_dir.clone().unwrap_or_else(default_log_dir)
    }

    /// The signing key file in force: the option's, else systemd's credential if present.
    pub(crate) fn signing_key_file(&self) -> Option<PathBuf> {
        self.signing_key.clone().or_else(|| {
            let cred =
                PathBuf::from(std::env::var_os("CREDENTIALS_DIRECTORY")?).join("signing-key");
            cred.is_file().then_some(cred)
        })
    }

    pub(crate) fn session(&self, signing: Option<SigningSetup>) -> SessionConfig {
        SessionConfig {
            system_id: self.sysid,
            component_id: self.compid,
            target_system: self.target_system,
            autopilot: self.autopilot.autopilot(),
            signing,
            ftp: ulog_recv::link::ftp::FtpConfig {
                rate: self.ftp_rate,
                ..Default::default()
            },
            ..SessionConfig::default()
        }
    }
}
