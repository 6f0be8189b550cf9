//! The subcommands (`info`, `sim`, `fill`, `fetch`, `snippet`, `export`, `upload`, `uploads`,
//! `tail`, `topics`, `event`, `completions`, `demo`) and the options they share: the
//! simulated link's impairment, the daemon a client follows.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use ulog_recv::live::ndjson::client::Endpoint;
use ulog_recv::sim::Impairment;

use super::{BucketArgs, LinkArgs, UploadArgs, VehicleLinkArgs, event_window, parse_tcp_listen};

/// The simulated link's impairment, seeded.
#[derive(Args, Debug, Clone)]
pub(crate) struct ImpairmentArgs {
    /// Probability that a frame from the vehicle is lost.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) loss: f64,
    /// Probability that a frame from the vehicle arrives twice.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) duplicate: f64,
    /// Probability that a frame from the vehicle is held back behind later ones.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) reorder: f64,
    /// Up to how many later frames overtake a held-back one.
    #[arg(long, default_value_t = 8)]
    pub(crate) reorder_depth: usize,
    /// Probability that a frame to the vehicle (an ack, a command) is lost.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) uplink_loss: f64,
    /// Every this many ms, an outage of --outage-ms.
    #[arg(long)]
    pub(crate) outage_every_ms: Option<u64>,
    #[arg(long, default_value_t = 200)]
    pub(crate) outage_ms: u64,
    /// Once this share of the log has gone out, the link is down both ways until all of it
    /// has (a radio out of range until the landing, back for the STOP).
    #[arg(long, value_name = "SHARE")]
    pub(crate) lost_from: Option<f64>,
    /// With --lost-from: the link never comes back.
    #[arg(long, requires = "lost_from")]
    pub(crate) lost_for_good: bool,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
}

impl ImpairmentArgs {
    pub(crate) fn impairment(&self) -> Impairment {
        Impairment {
            loss: self.loss,
            duplicate: self.duplicate,
            reorder: self.reorder,
            reorder_depth: self.reorder_depth,
            uplink_loss: self.uplink_loss,
            outage_every: self.outage_every_ms.map(Duration::from_millis),
            outage_len: Duration::from_millis(self.outage_ms),
            lost_from: self.lost_from,
            lost_for_good: self.lost_for_good,
            ..Impairment::NONE
        }
    }
}

/// Which daemon a client follows.
#[derive(Args, Debug, Clone)]
pub(crate) struct EndpointArgs {
    /// The daemon's socket [default: $ULOG_RECV_SOCKET, else the first of the daemon's
    /// default places that exists].
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
    /// Connect over TCP instead (a daemon run with --publish-tcp).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "socket")]
    pub(crate) tcp: Option<String>,
}

impl EndpointArgs {
    pub(crate) fn endpoint(&self) -> Option<Endpoint> {
        match (&self.socket, &self.tcp) {
            (Some(p), _) => Some(Endpoint::Unix(p.clone())),
            (None, Some(a)) => Some(Endpoint::Tcp(a.clone())),
            (None, None) => None,
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Summarise a .ulg file or a log session: header, info, parameters, topics, dropouts,
    /// logged messages (for a session also what fills recovered and what is still missing).
    Info {
        /// A .ulg file, or a session directory (what fills recovered and what is still
        /// missing, then the flight with its amendments merged), or a .tide export.
        file: PathBuf,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Only the flight's diagnostics: what the detectors find in it.
        #[arg(long)]
        diagnostics: bool,
        /// With --diagnostics: which analyzers run (all, or a comma-separated list:
        /// motor_failure, gps_interference, battery_brownout, ekf_failure, rc_loss).
        #[arg(
            long,
            value_name = "ANALYZERS",
            default_value = "all",
            requires = "diagnostics"
        )]
        analyzers: ulog_recv::diagnose::Selection,
    },
    /// Be a PX4 vehicle that streams FILE (or a synthetic flight) when a receiver asks; an
    /// ArduPilot one for a .bin FILE.
    Sim {
        /// The .ulg file to stream (a PX4's), or the .bin (an ArduPilot's: its blocks acked,
        /// resent and NACKed as AP_Logger's MAVLink backend does).
        #[arg(required_unless_present = "synthetic")]
        file: Option<PathBuf>,
        /// Stream a generated flight instead of a file.
        #[arg(long, conflicts_with = "file")]
        synthetic: bool,
        /// Length of the generated flight, seconds.
        #[arg(long, default_value_t = 60)]
        duration: u32,
        /// Generate instead a 40 s flight with something going wrong 15 s in, for the flight
        /// diagnostics: battery (the pack sags), ekf:MS (an innovation test fails for MS
        /// ms), gps (interference), motor (an output drops to 0), saturated (an output stays
        /// at the top for 3 s), rc:MS (RC lost for MS ms), none.
        #[arg(long, value_name = "FAULT", requires = "synthetic")]
        fault: Option<ulog_recv::sim::faults::Fault>,
        /// With --fault: the vehicle never arms (the fault happens on the ground).
        #[arg(long, requires = "fault")]
        on_the_ground: bool,
        /// Write the flight to FILE and exit, instead of streaming it.
        #[arg(long, value_name = "FILE")]
        write: Option<PathBuf>,
        #[command(flatten)]
        link: LinkArgs,
        /// Serial baud rate.
        #[arg(long, default_value_t = 921_600, help_heading = "Link")]
        baud: u32,
        /// The link's configured rate in bytes per second (PX4's MAV_x_RATE): the log streams
        /// at 70 % of it, and below 5000 the vehicle refuses to stream (57600 baud: 5760);
        /// 0: as fast as possible.
        #[arg(long, default_value_t = 140_000)]
        link_rate: u64,
        /// The vehicle's system id.
        #[arg(long, default_value_t = 1)]
        sysid: u8,
        /// Sign with this key and take only signed frames, as a PX4 with a key on its SD card
        /// or an ArduPilot set up for signing (the same file format as the daemon's
        /// --signing-key).
        #[arg(long, value_name = "FILE")]
        signing_key: Option<PathBuf>,
        /// Exit once the stream is over: stopped by the receiver (after the post-flight
        /// data), or the whole log sent and a second passed without a STOP.
        #[arg(long)]
        once: bool,
        /// Pack frames into writes (UDP datagrams) of up to this many bytes, as PX4 does;
        /// 0: one frame per write.
        #[arg(long, default_value_t = 0)]
        max_write: usize,
        /// A vehicle without an SD card: its FTP server has no log to serve (by default it
        /// serves the file it streams, as PX4 serves its SD log).
        #[arg(long)]
        sd_log_missing: bool,
        /// The heartbeat says armed from SECONDS after the start (as a vehicle that takes off:
        /// the receiver then leaves its link to the stream).
        #[arg(long, value_name = "SECONDS")]
        arm_after: Option<f64>,
        /// ... and disarmed again SECONDS after the start.
        #[arg(long, value_name = "SECONDS", requires = "arm_after")]
        disarm_after: Option<f64>,
        /// Play a .bin this many times faster than its own log time (the simulated
        /// ArduPilot writes each message when its time comes: 1 is as the vehicle flew).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
        speed: u32,
        #[command(flatten)]
        impairment: ImpairmentArgs,
    },
    /// Fill a closed session's dropouts from the vehicle's SD log over MAVLink FTP: only the
    /// byte ranges around each dropout are fetched; the recovered records go beside the
    /// splits as amendments (amend_NNNN.ulg, in the manifest), which export, snippet, info
    /// and uploads merge. The splits are never rewritten. Run again, it goes on with what is
    /// not filled yet. An ArduPilot session is filled from its card's log (/APM/LOGS) the
    /// same way, once, into amend_NNNN.bin; or from a copy of that log (--card).
    Fill {
        /// The session directory (holding manifest.json).
        session: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// An ArduPilot session: a copy of the card's log of the flight
        /// (`/APM/LOGS/NNNNNNNN.BIN`, taken off the card or downloaded by a ground station),
        /// read where the stream lost records, instead of the vehicle's own.
        #[arg(long, value_name = "FILE")]
        card: Option<PathBuf>,
        #[command(flatten)]
        vehicle: VehicleLinkArgs,
    },
    /// List the vehicle's SD-card logs, or download one whole, over MAVLink FTP (a download
    /// cut short resumes from its `.part` file; the result is checked against the vehicle's
    /// CRC32).
    Fetch {
        /// The log to download, as `--list` prints it.
        #[arg(required_unless_present = "list")]
        log: Option<String>,
        /// List the logs (path and size) instead.
        #[arg(long, conflicts_with = "log")]
        list: bool,
        /// Where to write the log; default: its name, in the current directory.
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        vehicle: VehicleLinkArgs,
    },
    /// Cut a window of log time from a log session into one standalone .ulg.
    Snippet {
        /// The session directory (holding manifest.json), or a referencing snippet.
        session: PathBuf,
        /// Start of the window, seconds of log time (as `info` prints them).
        #[arg(long)]
        from: f64,
        /// End of the window, seconds of log time.
        #[arg(long)]
        to: f64,
        #[arg(short, long)]
        output: PathBuf,
        /// Cut only this column of a session stored in columns (`main`: the topics no
        /// other column takes) [default: every column, joined].
        #[arg(long, value_name = "NAME")]
        column: Option<String>,
        /// Copy nothing: OUTPUT becomes a directory holding the snippet's preamble (a few
        /// KB) and the byte spans of the session's splits it references; export, snippet
        /// and info read it as a file. Before the disk budget deletes the session, the
        /// snippet is made its own copy.
        #[arg(long)]
        reference: bool,
    },
    /// Export a flight (a .ulg, or a session directory: its splits and columns joined) to MCAP (ROS 2
    /// types, CDR; for Foxglove, PlotJuggler, ros2 bag), a ROS 1 bag (format 2.0; for ROS 1
    /// tools, Foxglove, PlotJuggler) or TIDE 2.0 (ROS 2 types, CDR), the format following
    /// OUTPUT's extension; or as Parquet tables in the fleet's layout.
    Export {
        /// A .ulg file or a session directory (holding manifest.json).
        input: PathBuf,
        /// The file to write: NAME.mcap, NAME.bag, NAME.tide, or NAME.ulg (the flight as one
        /// log: splits joined, amendments merged).
        #[arg(
            short,
            long,
            required_unless_present = "dataset",
            conflicts_with = "dataset"
        )]
        output: Option<PathBuf>,
        /// Write the flight as Parquet tables, one per topic, under DIR (or into a bucket,
        /// s3://BUCKET/PREFIX, reached with the --upload-* options):
        /// DIR/parquet/v1/TOPIC/date=YYYY-MM-DD/vehicle=UID/FLIGHT.parquet (written again,
        /// the same files are replaced).
        #[arg(long, value_name = "DIR|s3://BUCKET/PREFIX")]
        dataset: Option<PathBuf>,
        /// Start of the window, seconds of log time (as `info` prints them).
        #[arg(long)]
        from: Option<f64>,
        /// End of the window, seconds of log time.
        #[arg(long)]
        to: Option<f64>,
        /// Only topics matching these patterns (`*`, `?`; `log` for the logged strings,
        /// `diagnostics` for the findings) [default: all].
        #[arg(long, num_args = 1..)]
        topics: Vec<String>,
        /// Which analyzers of the flight diagnostics run, for an MCAP's /diagnostics channel
        /// and the tables' diagnostics: all, none, or a comma-separated list (motor_failure,
        /// gps_interference, battery_brownout, ekf_failure, rc_loss).
        #[arg(long, value_name = "ANALYZERS", default_value = "all")]
        diagnostics: ulog_recv::diagnose::Selection,
        /// How a .tide's chunks are compressed: none, gzip or bzip2 [default: gzip].
        #[arg(long, value_name = "none|gzip|bzip2")]
        compression: Option<ulog_recv::export::tide::Compression>,
        /// The ROS bag format of a .bag: 2.0 (ROS 1 since 1.1) or 1.2 (ROS 0.5 to 1.0).
        #[arg(long, value_name = "VERSION", default_value = "2.0", value_parser = ["2.0", "1.2"])]
        bag_version: String,
        /// Read only this column of a session stored in columns (`main`: the topics no other
        /// column takes); only its files are opened [default: every column, joined].
        #[arg(long, value_name = "NAME")]
        column: Option<String>,
        #[command(flatten)]
        bucket: BucketArgs,
    },
    /// Upload one session by hand, as the daemon does: the same journal, so that nothing
    /// uploaded already goes again and a multipart upload resumes.
    Upload {
        /// The session directory (holding manifest.json).
        session: PathBuf,
        #[command(flatten)]
        upload: UploadArgs,
    },
    /// Per session under the log directory: what is uploaded, what is pending, what fails and
    /// why, and the flight's Flight Review page.
    Uploads {
        /// The log directory [default: as the daemon's].
        #[arg(long)]
        log_dir: Option<PathBuf>,
        /// One JSON object per session instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Follow the vehicle's topics live from a running daemon: one sample per line, aligned,
    /// with a status line (rate, loss) on stderr.
    Tail {
        /// Topic patterns (`*` any run of characters, `?` one) [default: all topics].
        patterns: Vec<String>,
        /// Only these fields (comma-separated; `q`, `q[0]`, `esc[1].esc_rpm`).
        #[arg(long, value_delimiter = ',')]
        fields: Vec<String>,
        /// The daemon's JSON lines instead of text (for scripts).
        #[arg(long)]
        json: bool,
        /// At most this many samples per second of each topic.
        #[arg(long, value_name = "HZ")]
        rate: Option<f64>,
        /// Exit after this many samples.
        #[arg(short = 'n', long)]
        count: Option<u64>,
        #[command(flatten)]
        endpoint: EndpointArgs,
    },
    /// List the topics a running daemon has now.
    Topics {
        /// The daemon's `topics` line (JSON) instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoint: EndpointArgs,
    },
    /// Mark an event in a running daemon's log: every event buffer writes its samples from
    /// --event-before ahead of now to --event-after past it; the event goes into the
    /// session's manifest. Prints the windows written.
    Event {
        /// The event's name (1 to 200 characters), e.g. `payload_drop`.
        name: String,
        /// Seconds after the event to write instead of each buffer's --event-after (0 to 600).
        #[arg(long, value_parser = event_window)]
        after: Option<Duration>,
        /// The daemon's `event` line (JSON) instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoint: EndpointArgs,
    },
    /// Print the shell completion script for SHELL (packages install it for bash, zsh and
    /// fish), e.g. `ulog-recv completions bash > ~/.local/share/bash-completion/completions/ulog-recv`.
    Completions {
        /// The shell to complete in.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (ulog-recv.1, and ulog-recv-COMMAND.1 per command) into DIR.
    #[command(hide = true)]
    ManPages {
        /// Where to write them (created if missing).
        dir: PathBuf,
    },
    /// Print the guide's reference of the config file's keys (Markdown), made from the
    /// command line's definitions.
    #[command(hide = true)]
    ConfigKeys,
    /// A simulated vehicle and the receiver in one process, over loopback UDP: see logs
    /// arrive without a drone.
    Demo {
        /// Where the .ulg files go [default: a new temporary directory].
        #[arg(long)]
        log_dir: Option<PathBuf>,
        /// Seconds of synthetic flight.
        #[arg(long, default_value_t = 60)]
        duration: u32,
        /// The simulated link's configured rate in bytes per second; the log streams at 70 %
        /// of it (PX4's default profile streams 35-50 KB/s).
        #[arg(long, default_value_t = 86_000)]
        link_rate: u64,
        /// A perfect link instead of the default lossy one.
        #[arg(long)]
        clean: bool,
        /// The Foxglove WebSocket server's port (127.0.0.1 unless ADDR is given; another
        /// free port if this one is taken).
        #[arg(long, value_name = "[ADDR:]PORT", value_parser = parse_tcp_listen, default_value = "8765")]
        foxglove: SocketAddr,
    },
}
