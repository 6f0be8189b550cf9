//! The `ulog-recv` binary: a thin command-line shell around the library. Without a
//! subcommand it is the receiving daemon (`ulog-recv --udp 14550`).

use std::ffi::OsString;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use mavlink::dialects::common::MavResult;
use ulog_recv::config::{self, OptionKind, OptionSpec};
use ulog_recv::link::{Event, Impairment, SessionConfig, VehicleConfig, chunk_log};
use ulog_recv::publish::client::{self, Endpoint, TailOptions};
use ulog_recv::publish::server::{
    PublishConfig, PublishFeed, PublishServer, ServeError, default_socket_path,
};
use ulog_recv::receiver::{Control, Notice, ReceiverOptions, Status};
use ulog_recv::service::{Notifier, StatusText};
use ulog_recv::simulator::SimOptions;
use ulog_recv::store::{SplitPolicy, StoreOptions};
use ulog_recv::summary::{OwnedValue, Summary, SummaryBuilder};
use ulog_recv::transport::{Link, LinkSpec};

#[derive(Parser)]
#[command(
    version,
    about = "Receive, store and publish PX4 ULog streams",
    args_conflicts_with_subcommands = true,
    // A later value wins: the command line's over the config file's (which come first).
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    receive: ReceiveArgs,
}

/// How to reach the other side. Exactly one.
#[derive(Args, Debug, Clone)]
#[group(required = false, multiple = false)]
struct LinkArgs {
    /// Listen for the vehicle on this UDP port (all interfaces); answer where its packets come from.
    #[arg(long, value_name = "PORT")]
    udp: Option<u16>,
    /// Talk UDP to this address (e.g. a MAVLink router's UDP server endpoint).
    #[arg(long, value_name = "HOST:PORT")]
    udp_connect: Option<String>,
    /// Connect over TCP (reconnects with back-off).
    #[arg(long, value_name = "HOST:PORT")]
    tcp: Option<String>,
    /// Use a serial port (reopened after an unplug).
    #[arg(long, value_name = "DEVICE")]
    serial: Option<PathBuf>,
}

impl LinkArgs {
    fn spec(&self, baud: u32) -> Option<LinkSpec> {
        if let Some(port) = self.udp {
            return Some(LinkSpec::UdpListen(SocketAddr::from(([0, 0, 0, 0], port))));
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

#[derive(Args, Debug, Clone)]
struct ReceiveArgs {
    #[command(flatten)]
    link: LinkArgs,
    /// Serial baud rate.
    #[arg(long, default_value_t = 921_600)]
    baud: u32,
    /// Options from this TOML file, keys named as the long options (`udp = 14550`,
    /// `log-dir = "/var/lib/ulog-recv"`); the command line wins. Re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the options in force (from the config file and the command line) and exit.
    #[arg(long)]
    check_config: bool,
    /// Where the .ulg files go (created if missing) [default: $STATE_DIRECTORY when systemd
    /// gives one, else ./logs].
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// What to log: error, warn, info, debug, trace, or a filter such as
    /// `ulog_recv::link=debug` [default: $RUST_LOG, else info].
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// For tests of the watchdog: the main loop blocks this many seconds after the start.
    #[arg(long, hide = true, value_name = "SECONDS")]
    debug_stall_after: Option<f64>,
    /// Our MAVLink system id [default: the vehicle's, as for any component on board].
    #[arg(long)]
    sysid: Option<u8>,
    /// Our MAVLink component id [default: 155, MAV_COMP_ID_LOG].
    #[arg(long, default_value_t = ulog_recv::link::session::DEFAULT_COMPONENT_ID)]
    compid: u8,
    /// Take only this system as the vehicle [default: the first autopilot heard].
    #[arg(long)]
    target_system: Option<u8>,
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    publish: PublishArgs,
}

/// Where the decoded topics are published live.
#[derive(Args, Debug, Clone)]
struct PublishArgs {
    /// The live socket (Unix) [default: ulog-recv.sock in $RUNTIME_DIRECTORY, else in
    /// $XDG_RUNTIME_DIR, else in /run/ulog-recv/].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Publish on no Unix socket.
    #[arg(long, conflicts_with = "socket")]
    no_socket: bool,
    /// Also publish on this TCP address (for containers), e.g. 127.0.0.1:14600.
    #[arg(long, value_name = "ADDR")]
    publish_tcp: Option<SocketAddr>,
    /// Bytes a client may fall behind before its oldest lines are dropped (K, M, G).
    #[arg(long, value_parser = parse_size, default_value = "4M")]
    client_queue: u64,
}

impl PublishArgs {
    /// Starts the live socket's server. A socket given on the command line must work; the
    /// default one may fail (e.g. no /run/ulog-recv for an ordinary user): the daemon then
    /// logs without it, and says so.
    fn start(&self) -> anyhow::Result<Option<(PublishFeed, PublishServer)>> {
        let unix = match (&self.socket, self.no_socket) {
            (_, true) => None,
            (Some(p), _) => Some(p.clone()),
            (None, false) => Some(default_socket_path()),
        };
        if unix.is_none() && self.publish_tcp.is_none() {
            return Ok(None);
        }
        let config = |unix| PublishConfig {
            unix,
            tcp: self.publish_tcp,
            client_queue_bytes: self.client_queue as usize,
            ..PublishConfig::default()
        };
        match PublishServer::start(config(unix.clone())) {
            Ok(started) => Ok(Some(started)),
            Err(
                e @ (ServeError::Directory { .. } | ServeError::Bind { .. } | ServeError::InUse(_)),
            ) if self.socket.is_none() && unix.is_some() => {
                tracing::warn!("no live socket: {e}; give --socket PATH to publish");
                eprintln!("ulog-recv: no live socket ({e}); give --socket PATH to publish");
                if self.publish_tcp.is_none() {
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
struct StoreArgs {
    /// Start a new split at this size (bytes; K, M, G suffixes).
    #[arg(long, value_parser = parse_size)]
    split_size: Option<u64>,
    /// Start a new split after this many seconds of log time.
    #[arg(long)]
    split_duration: Option<f64>,
    /// Topics whose last sample starts every split (comma-separated)
    /// [default: vehicle_status, vehicle_control_mode, home_position, vehicle_land_detected,
    /// battery_status, vehicle_gps_position, mission].
    #[arg(long, value_delimiter = ',')]
    latched: Option<Vec<String>>,
    /// Seconds between syncs of the open split and the manifest to disk.
    #[arg(long, default_value_t = 1.0)]
    fsync_interval: f64,
    /// Most bytes all log sessions may take (K, M, G); the oldest closed sessions are deleted.
    #[arg(long, value_parser = parse_size)]
    max_total: Option<u64>,
    /// Least free space to leave on the disk (K, M, G); the oldest closed sessions are deleted.
    #[arg(long, value_parser = parse_size)]
    min_free: Option<u64>,
}

impl StoreArgs {
    fn options(&self, dir: PathBuf) -> StoreOptions {
        let mut policy = SplitPolicy::unlimited();
        policy.max_bytes = self.split_size;
        policy.max_duration_us = self.split_duration.map(|s| (s * 1e6) as u64);
        if let Some(l) = &self.latched {
            policy.latched = l.iter().filter(|s| !s.is_empty()).cloned().collect();
        }
        StoreOptions {
            dir,
            policy,
            fsync_interval: Duration::from_secs_f64(self.fsync_interval.max(0.001)),
            max_total: self.max_total,
            min_free: self.min_free,
        }
    }
}

/// `123`, `64K`, `10M`, `2G` (powers of 1024).
fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("not a size: {s}"))?;
    if n <= 0.0 {
        return Err(format!("a size must be positive: {s}"));
    }
    Ok((n * mult as f64) as u64)
}

impl ReceiveArgs {
    fn log_dir(&self) -> PathBuf {
        self.log_dir.clone().unwrap_or_else(|| {
            std::env::var_os("STATE_DIRECTORY")
                .and_then(|d| {
                    let first = d.to_string_lossy().split(':').next()?.to_owned();
                    (!first.is_empty()).then(|| PathBuf::from(first))
                })
                .unwrap_or_else(|| PathBuf::from("logs"))
        })
    }

    fn session(&self) -> SessionConfig {
        SessionConfig {
            system_id: self.sysid,
            component_id: self.compid,
            target_system: self.target_system,
            ..SessionConfig::default()
        }
    }
}

/// The simulated link's impairment, seeded.
#[derive(Args, Debug, Clone)]
struct ImpairmentArgs {
    /// Probability that a frame from the vehicle is lost.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Probability that a frame from the vehicle arrives twice.
    #[arg(long, default_value_t = 0.0)]
    duplicate: f64,
    /// Probability that a frame from the vehicle is held back behind later ones.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Up to how many later frames overtake a held-back one.
    #[arg(long, default_value_t = 8)]
    reorder_depth: usize,
    /// Probability that a frame to the vehicle (an ack, a command) is lost.
    #[arg(long, default_value_t = 0.0)]
    uplink_loss: f64,
    /// Every this many ms, an outage of --outage-ms.
    #[arg(long)]
    outage_every_ms: Option<u64>,
    #[arg(long, default_value_t = 200)]
    outage_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl ImpairmentArgs {
    fn impairment(&self) -> Impairment {
        Impairment {
            loss: self.loss,
            duplicate: self.duplicate,
            reorder: self.reorder,
            reorder_depth: self.reorder_depth,
            uplink_loss: self.uplink_loss,
            outage_every: self.outage_every_ms.map(Duration::from_millis),
            outage_len: Duration::from_millis(self.outage_ms),
        }
    }
}

/// Which daemon a client follows.
#[derive(Args, Debug, Clone)]
struct EndpointArgs {
    /// The daemon's socket [default: $ULOG_RECV_SOCKET, else the first of the daemon's
    /// default places that exists].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Connect over TCP instead (a daemon run with --publish-tcp).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "socket")]
    tcp: Option<String>,
}

impl EndpointArgs {
    fn endpoint(&self) -> Option<Endpoint> {
        match (&self.socket, &self.tcp) {
            (Some(p), _) => Some(Endpoint::Unix(p.clone())),
            (None, Some(a)) => Some(Endpoint::Tcp(a.clone())),
            (None, None) => None,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Summarise a .ulg file: header, info, parameters, topics, dropouts, logged messages.
    Info {
        file: PathBuf,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Be a PX4 vehicle that streams FILE (or a synthetic flight) when a receiver asks.
    Sim {
        /// The .ulg file to stream.
        #[arg(required_unless_present = "synthetic")]
        file: Option<PathBuf>,
        /// Stream a generated flight instead of a file.
        #[arg(long, conflicts_with = "file")]
        synthetic: bool,
        /// Length of the generated flight, seconds.
        #[arg(long, default_value_t = 60)]
        duration: u32,
        #[command(flatten)]
        link: LinkArgs,
        #[arg(long, default_value_t = 921_600)]
        baud: u32,
        /// Bytes per second of the unacked phase on the wire; 0: as fast as possible.
        #[arg(long, default_value_t = 100_000)]
        rate: u64,
        /// The vehicle's system id.
        #[arg(long, default_value_t = 1)]
        sysid: u8,
        /// Answer LOGGING_START with DENIED (as PX4 on a link slower than 5000 B/s).
        #[arg(long)]
        deny: bool,
        /// Exit once the whole log was sent (and a second has passed).
        #[arg(long)]
        once: bool,
        /// Pack frames into writes (UDP datagrams) of up to this many bytes, as PX4 does;
        /// 0: one frame per write.
        #[arg(long, default_value_t = 0)]
        max_write: usize,
        #[command(flatten)]
        impairment: ImpairmentArgs,
    },
    /// Cut a window of log time from a log session into one standalone .ulg.
    Snippet {
        /// The session directory (holding manifest.json).
        session: PathBuf,
        /// Start of the window, seconds of log time (as `info` prints them).
        #[arg(long)]
        from: f64,
        /// End of the window, seconds of log time.
        #[arg(long)]
        to: f64,
        #[arg(short, long)]
        output: PathBuf,
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
    /// A simulated vehicle and the receiver in one process, over loopback UDP: see logs
    /// arrive without a drone.
    Demo {
        /// Where the .ulg files go [default: a new temporary directory].
        #[arg(long)]
        log_dir: Option<PathBuf>,
        /// Seconds of synthetic flight.
        #[arg(long, default_value_t = 60)]
        duration: u32,
        /// Bytes per second on the wire (PX4's default profile streams 35-50 KB/s).
        #[arg(long, default_value_t = 60_000)]
        rate: u64,
        /// A perfect link instead of the default lossy one.
        #[arg(long)]
        clean: bool,
    },
}

fn main() -> anyhow::Result<()> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let mut cli = Cli::parse_from(&argv);
    let mut in_force = argv.clone();
    if cli.command.is_none()
        && let Some(path) = cli.receive.config.clone()
    {
        (cli, in_force) = with_config(&argv, &path)?;
    }
    let (level, default) = match cli.command {
        None => (cli.receive.log_level.as_deref(), "info"),
        Some(_) => (None, "warn"),
    };
    let levels = init_tracing(level, default)?;
    if cli.command.is_none() && cli.receive.check_config {
        print!("{}", options_in_force(&in_force));
        return Ok(());
    }
    match cli.command {
        Some(Command::Info { file, json }) => info(&file, json),
        Some(Command::Snippet {
            session,
            from,
            to,
            output,
        }) => {
            let us = |s: f64| (s.max(0.0) * 1e6).round() as u64;
            let (bytes, stats) = ulog_recv::store::snippet::snippet(
                &session,
                us(from),
                us(to),
                &SplitPolicy::unlimited(),
            )
            .with_context(|| format!("cannot cut {}", session.display()))?;
            std::fs::write(&output, &bytes)
                .with_context(|| format!("cannot write {}", output.display()))?;
            println!(
                "{}: {} bytes, {} samples in the window (+{} latched), from {} split(s)",
                output.display(),
                bytes.len(),
                stats.samples,
                stats.latched_samples,
                stats.splits_read
            );
            Ok(())
        }
        Some(Command::Sim {
            file,
            synthetic,
            duration,
            link,
            baud,
            rate,
            sysid,
            deny,
            once,
            max_write,
            impairment,
        }) => {
            let bytes = match (&file, synthetic) {
                (Some(path), _) => std::fs::read(path)
                    .with_context(|| format!("cannot read {}", path.display()))?,
                (None, _) => synthetic_flight(duration),
            };
            let Some(spec) = link.spec(baud) else {
                bail!("say how to reach the receiver: --udp-connect, --udp, --tcp or --serial");
            };
            let config = VehicleConfig {
                system_id: sysid,
                rate_limit: (rate > 0).then_some(rate),
                refuse_start: deny.then_some(MavResult::MAV_RESULT_DENIED),
                impairment: impairment.impairment(),
                seed: impairment.seed,
                ..VehicleConfig::default()
            };
            runtime()?.block_on(sim(bytes, spec, config, once, max_write))
        }
        Some(Command::Tail {
            patterns,
            fields,
            json,
            rate,
            count,
            endpoint,
        }) => {
            let options = TailOptions {
                patterns,
                fields,
                json,
                max_rate_hz: rate,
                count,
            };
            let result = runtime()?.block_on(async {
                let conn = client::connect(endpoint.endpoint()).await?;
                let mut out = std::io::stdout().lock();
                tokio::select! {
                    r = client::run_tail(conn, &options, &mut out) => r,
                    _ = shutdown_signal() => Ok(()),
                }
            });
            quiet_on_closed_output(result)
        }
        Some(Command::Topics { json, endpoint }) => {
            let result = runtime()?.block_on(async {
                let conn = client::connect(endpoint.endpoint()).await?;
                client::run_topics(conn, json, &mut std::io::stdout().lock()).await
            });
            quiet_on_closed_output(result)
        }
        Some(Command::Demo {
            log_dir,
            duration,
            rate,
            clean,
        }) => runtime()?.block_on(demo(log_dir, duration, rate, clean)),
        None => {
            let args = cli.receive;
            let Some(spec) = args.link.spec(args.baud) else {
                bail!(
                    "say where the vehicle is: --udp PORT, --udp-connect HOST:PORT, --tcp \
                     HOST:PORT or --serial DEVICE (or try `ulog-recv demo`)"
                );
            };
            runtime()?.block_on(receive(spec, args, argv, levels))
        }
    }
}

/// Changes the log filter while running (a config reload).
type LogLevels =
    tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>;

/// The filter for `level` (from the command line or the config), else `$RUST_LOG`, else
/// `default`.
fn log_filter(level: Option<&str>, default: &str) -> anyhow::Result<tracing_subscriber::EnvFilter> {
    use tracing_subscriber::EnvFilter;
    match level {
        Some(l) => {
            EnvFilter::try_new(l).with_context(|| format!("bad value '{l}' for 'log-level'"))
        }
        None => Ok(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))),
    }
}

/// Logs to stderr: with colour only on a terminal; without timestamps under journald (which
/// adds its own).
fn init_tracing(level: Option<&str>, default: &str) -> anyhow::Result<LogLevels> {
    use tracing_subscriber::prelude::*;
    let (filter, handle) = tracing_subscriber::reload::Layer::new(log_filter(level, default)?);
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && !journald;
    let journal = journald.then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .without_time()
    });
    let terminal = (!journald).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(journal)
        .with(terminal)
        .init();
    Ok(handle)
}

/// The options a config file may set: every long option of the daemon but `--config` (and
/// hidden ones), with its clap id.
fn config_options() -> Vec<(OptionSpec, String)> {
    use clap::CommandFactory;
    Cli::command()
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| {
            !matches!(
                a.get_id().as_str(),
                "config" | "check_config" | "help" | "version"
            )
        })
        .filter_map(|a| {
            let kind = match a.get_action() {
                clap::ArgAction::SetTrue => OptionKind::Flag,
                _ if a.get_value_delimiter().is_some() => OptionKind::List,
                _ => OptionKind::Value,
            };
            let spec = OptionSpec {
                name: a.get_long()?.to_owned(),
                kind,
            };
            Some((spec, a.get_id().as_str().to_owned()))
        })
        .collect()
}

/// Every option a config file may set, as `key = value` in TOML (the values as given, from
/// the file or the command line), or `# key: default` when not set.
fn options_in_force(args: &[OsString]) -> String {
    use clap::CommandFactory;
    let matches = Cli::command().get_matches_from(args);
    let mut out = String::new();
    for (spec, id) in config_options() {
        let given = matches.value_source(&id) == Some(clap::parser::ValueSource::CommandLine);
        if !given {
            out.push_str(&format!("# {}: default\n", spec.name));
            continue;
        }
        let value = match spec.kind {
            OptionKind::Flag => matches.get_flag(&id).to_string(),
            _ => {
                let raw: Vec<String> = matches
                    .get_raw(&id)
                    .into_iter()
                    .flatten()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                let toml_string = |v: &String| toml::Value::String(v.clone()).to_string();
                match spec.kind {
                    OptionKind::List => {
                        let items: Vec<String> = raw.iter().map(toml_string).collect();
                        format!("[{}]", items.join(", "))
                    }
                    _ => raw.first().map(toml_string).unwrap_or_default(),
                }
            }
        };
        out.push_str(&format!("{} = {value}\n", spec.name));
    }
    out
}

/// The command line with the config file's options before it (so that it wins), parsed, and
/// the arguments that made it. A file key in a group of exclusive options (the link;
/// `socket` / `no-socket`) is left out when the command line sets a member of that group.
fn with_config(argv: &[OsString], path: &Path) -> anyhow::Result<(Cli, Vec<OsString>)> {
    use clap::CommandFactory;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    let options = config_options();
    let specs: Vec<OptionSpec> = options.iter().map(|(s, _)| s.clone()).collect();
    let entries =
        config::parse(&text, &specs).with_context(|| format!("config file {}", path.display()))?;
    let matches = Cli::command().get_matches_from(argv);
    let on_command_line =
        |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    const EXCLUSIVE: [&[&str]; 2] = [
        &["udp", "udp_connect", "tcp", "serial"],
        &["socket", "no_socket"],
    ];
    let program = argv.first().cloned().unwrap_or_else(|| "ulog-recv".into());
    let mut args = vec![program.clone()];
    for entry in entries {
        let id = options
            .iter()
            .find(|(s, _)| s.name == entry.key)
            .map(|(_, id)| id.as_str())
            .unwrap_or_default();
        if EXCLUSIVE
            .iter()
            .any(|group| group.contains(&id) && group.iter().any(|m| on_command_line(m)))
        {
            continue;
        }
        // The value alone, so that an error names the key.
        let alone: Vec<OsString> = std::iter::once(program.clone())
            .chain(entry.args.iter().cloned())
            .collect();
        if let Err(e) = Cli::try_parse_from(&alone) {
            let message = e.to_string();
            let first = message.lines().next().unwrap_or_default();
            bail!(
                "config file {}: key '{}': {}",
                path.display(),
                entry.key,
                first.trim_start_matches("error: ")
            );
        }
        args.extend(entry.args);
    }
    args.extend(argv.iter().skip(1).cloned());
    let cli = Cli::try_parse_from(&args).map_err(|e| {
        anyhow::anyhow!(
            "config file {} with the command line: {}",
            path.display(),
            e.to_string().lines().next().unwrap_or_default()
        )
    })?;
    Ok((cli, args))
}

/// A client's result, where a closed output (`ulog-recv tail | head`) is a normal end.
fn quiet_on_closed_output(result: Result<(), client::ClientError>) -> anyhow::Result<()> {
    match result {
        Err(e) if e.is_closed_output() => Ok(()),
        other => Ok(other?),
    }
}

/// One thread: the daemon's work is small and latency-bound (acks), and it leaves the other
/// cores to the companion computer's own jobs.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Sends [`Control::Roll`] on every SIGHUP; with `reload`, also what it returns (the config
/// file read again).
fn controls_on_sighup(
    mut reload: impl FnMut() -> Option<Control> + Send + 'static,
) -> tokio::sync::mpsc::UnboundedReceiver<Control> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            return;
        };
        while hup.recv().await.is_some() {
            if let Some(c) = reload() {
                let _ = tx.send(c);
            }
            if tx.send(Control::Roll).is_err() {
                break;
            }
        }
    });
    rx
}

/// Completes on Ctrl-C or SIGTERM (systemd's stop).
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

async fn receive(
    spec: LinkSpec,
    args: ReceiveArgs,
    argv: Vec<OsString>,
    levels: LogLevels,
) -> anyhow::Result<()> {
    let link = Link::open(&spec).await?;
    let (feed, server) = args.publish.start()?.unzip();
    let log_dir = args.log_dir();
    tracing::info!(
        "ulog-recv {}: {spec}, logs into {}{}",
        env!("CARGO_PKG_VERSION"),
        log_dir.display(),
        publishing_note(server.as_ref())
    );
    let systemd = Notifier::from_env();
    tracing::debug!(
        watchdog = ?systemd.watchdog(),
        config = ?args.config,
        "running as a service: {}",
        std::env::var_os("NOTIFY_SOCKET").is_some()
    );
    let options = ReceiverOptions {
        store: args.store.options(log_dir.clone()),
        session: args.session(),
        status_interval: systemd.report_interval(),
        publish: feed,
    };
    let controls = controls_on_sighup(reloader(args.clone(), argv, levels));
    let clients = server.as_ref().map(|s| s.clients_counter());
    let mut text = StatusText::default();
    let waiting_on = spec.to_string();
    systemd.ready(&text.line(&Default::default(), None, &waiting_on, Instant::now()));
    let started = Instant::now();
    let stall_after = args.debug_stall_after.map(Duration::from_secs_f64);
    let mut reports = 0u64;
    let stopping = systemd.clone();
    let shutdown = async move {
        shutdown_signal().await;
        stopping.stopping();
    };
    let status = ulog_recv::receiver::run(link, options, shutdown, controls, |n| match n {
        Notice::Event(e) => text.event(e),
        Notice::Status(s) => {
            let clients = clients
                .as_ref()
                .map(|c| c.load(std::sync::atomic::Ordering::Relaxed));
            let line = text.line(&s.session, clients, &waiting_on, Instant::now());
            systemd.alive(&line);
            reports += 1;
            if reports.is_multiple_of(10) {
                tracing::info!("{line}");
            }
            if stall_after.is_some_and(|after| started.elapsed() >= after) {
                tracing::warn!("stalling the main loop, as asked (--debug-stall-after)");
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        _ => {}
    })
    .await
    .with_context(|| format!("link {spec} failed"));
    if let Some(server) = server {
        server.join();
    }
    let status = status?;
    tracing::info!("stopped");
    print_status(&status);
    Ok(())
}

/// What SIGHUP re-reads: the config file (if any) with the same command line. Storage options
/// and the log level apply at once; other changes need a restart, and the log says so.
fn reloader(
    running: ReceiveArgs,
    argv: Vec<OsString>,
    levels: LogLevels,
) -> impl FnMut() -> Option<Control> + Send + 'static {
    move || {
        let path = running.config.clone()?;
        let cli = match with_config(&argv, &path) {
            Ok((cli, _)) => cli,
            Err(e) => {
                tracing::error!("config not reloaded: {e:#}");
                return None;
            }
        };
        let new = cli.receive;
        match log_filter(new.log_level.as_deref(), "info") {
            Ok(filter) => {
                let _ = levels.reload(filter);
            }
            Err(e) => tracing::error!("log level not changed: {e:#}"),
        }
        let needs_restart = [
            (
                "the link",
                format!("{:?}{}", new.link, new.baud)
                    != format!("{:?}{}", running.link, running.baud),
            ),
            ("log-dir", new.log_dir() != running.log_dir()),
            (
                "the MAVLink ids",
                (new.sysid, new.compid, new.target_system)
                    != (running.sysid, running.compid, running.target_system),
            ),
            (
                "publishing",
                format!("{:?}", new.publish) != format!("{:?}", running.publish),
            ),
        ];
        for (what, changed) in needs_restart {
            if changed {
                tracing::warn!("config reloaded: {what} changed, which takes a restart");
            }
        }
        tracing::info!("config reloaded from {}", path.display());
        Some(Control::Reconfigure(new.store.options(running.log_dir())))
    }
}

/// ", live topics on PATH" for the start-up line.
fn publishing_note(server: Option<&PublishServer>) -> String {
    let Some(server) = server else {
        return String::new();
    };
    let mut places = Vec::new();
    if let Some(p) = server.unix_path() {
        places.push(p.display().to_string());
    }
    if let Some(a) = server.tcp_addr() {
        places.push(format!("tcp:{a}"));
    }
    format!(", live topics on {}", places.join(" and "))
}

fn synthetic_flight(duration_s: u32) -> Vec<u8> {
    ulog_recv::synth::generate(ulog_recv::synth::SynthOptions {
        duration_s,
        seed: 1,
        appended_data: false,
    })
}

async fn sim(
    file: Vec<u8>,
    spec: LinkSpec,
    config: VehicleConfig,
    once: bool,
    max_write: usize,
) -> anyhow::Result<()> {
    let log = chunk_log(&file, 0).context("the log cannot be streamed")?;
    let link = Link::open(&spec).await?;
    eprintln!(
        "ulog-recv sim: vehicle {} on {spec}, {} chunks to stream",
        config.system_id,
        log.chunks.len()
    );
    let options = SimOptions {
        once,
        max_write,
        ..SimOptions::default()
    };
    let report = ulog_recv::simulator::run(link, log, config, options, shutdown_signal()).await?;
    eprintln!("ulog-recv sim: {:?}", report.stats);
    Ok(())
}

async fn demo(
    log_dir: Option<PathBuf>,
    duration: u32,
    rate: u64,
    clean: bool,
) -> anyhow::Result<()> {
    let log_dir = log_dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("ulog-recv-demo-{}", std::process::id()))
    });
    let receiver_link =
        Link::open(&LinkSpec::UdpListen(SocketAddr::from(([127, 0, 0, 1], 0)))).await?;
    let addr = receiver_link.local_addr().context("no local address")?;
    let vehicle_link = Link::open(&LinkSpec::UdpConnect(addr.to_string())).await?;
    let impairment = if clean {
        Impairment::NONE
    } else {
        Impairment {
            loss: 0.02,
            duplicate: 0.01,
            reorder: 0.03,
            reorder_depth: 4,
            uplink_loss: 0.05,
            ..Impairment::NONE
        }
    };
    println!(
        "demo: a simulated PX4 streams a {duration} s synthetic flight at {} KB/s over loopback UDP \
         ({}), the receiver on {addr} writes into {}",
        rate / 1000,
        if clean {
            "a clean link".to_owned()
        } else {
            format!(
                "{:.0} % loss, {:.0} % duplicates, {:.0} % reordered, {:.0} % of acks lost",
                impairment.loss * 100.0,
                impairment.duplicate * 100.0,
                impairment.reorder * 100.0,
                impairment.uplink_loss * 100.0
            )
        },
        log_dir.display()
    );
    let log = chunk_log(&synthetic_flight(duration), 0)?;
    let config = VehicleConfig {
        rate_limit: Some(rate),
        impairment,
        seed: 7,
        ..VehicleConfig::default()
    };
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let vehicle = async move {
        let options = SimOptions {
            once: true,
            ..SimOptions::default()
        };
        let r = ulog_recv::simulator::run(
            vehicle_link,
            log,
            config,
            options,
            std::future::pending::<()>(),
        )
        .await
        .map(|r| r.stats);
        let _ = done_tx.send(());
        r
    };
    let mut policy = SplitPolicy::unlimited();
    policy.max_duration_us = Some(20_000_000);
    // The demo publishes too: `ulog-recv tail` in another terminal follows it.
    let socket = std::env::temp_dir().join(format!("ulog-recv-demo-{}.sock", std::process::id()));
    let (feed, server) = PublishServer::start(PublishConfig {
        unix: Some(socket.clone()),
        ..PublishConfig::default()
    })?;
    println!(
        "  follow it live in another terminal: ulog-recv tail --socket {} 'vehicle_*'",
        socket.display()
    );
    let options = ReceiverOptions {
        store: StoreOptions {
            policy,
            ..StoreOptions::new(log_dir)
        },
        session: SessionConfig::default(),
        status_interval: Duration::from_secs(1),
        publish: Some(feed),
    };
    let receiver = ulog_recv::receiver::run(
        receiver_link,
        options,
        async {
            tokio::select! {
                _ = done_rx => {},
                _ = shutdown_signal() => {},
            }
        },
        controls_on_sighup(|| None),
        |n| match n {
            Notice::Event(Event::LogBytes(_)) => {}
            Notice::Event(e) => println!("  {e}"),
            Notice::SessionOpened(p) => println!("  writing {}", p.display()),
            Notice::SessionClosed(p) => println!("  closed {}", p.display()),
            Notice::Status(s) => println!(
                "  {:>8} bytes logged, {:>5} chunks, {} lost, {} duplicates, {} late ones put back, {} acks",
                s.session.log_bytes,
                s.session.chunks,
                s.session.lost_chunks,
                s.session.duplicates,
                s.session.recovered,
                s.session.acks_sent
            ),
        },
    );
    let (vehicle, status) = tokio::join!(vehicle, receiver);
    server.join();
    let vehicle = vehicle?;
    let status = status?;
    print_status(&status);
    println!(
        "vehicle: {} chunks sent, {} resent after a lost ack, {} frames lost on the link",
        vehicle.chunks_sent, vehicle.resends, vehicle.frames_dropped
    );
    for dir in &status.sessions {
        let manifest = ulog_recv::store::files::read_manifest(dir)?;
        println!(
            "\n{}: {} splits (20 s of log each), manifest.json beside them",
            dir.display(),
            manifest.splits.len()
        );
        for split in &manifest.splits {
            println!(
                "  {}: {} bytes, {} samples, {} dropouts, sha256 {}",
                split.file,
                split.summary.bytes,
                split.summary.samples,
                split.summary.dropouts,
                split.sha256.as_deref().unwrap_or("-")
            );
        }
        if let Some(last) = manifest.splits.last() {
            let path = dir.join(&last.file);
            println!("\n$ ulog-recv info {}", path.display());
            info(&path, false)?;
        }
    }
    Ok(())
}

fn print_status(s: &Status) {
    let st = &s.session;
    let q = |x| {
        s.ack_latency
            .quantile_us(x)
            .map_or("-".to_owned(), |v| format!("{v} µs"))
    };
    println!(
        "received {} logs, {} bytes: {} chunks ({} acked), {} duplicates, {} late ones put back, \
         {} lost in {} gaps, {} dropouts written; ack latency p50 {} p99 {}",
        st.logs,
        st.log_bytes,
        st.chunks,
        st.acked_chunks,
        st.duplicates,
        st.recovered,
        st.lost_chunks,
        st.gaps,
        st.dropouts,
        q(0.5),
        q(0.99)
    );
}

fn info(path: &Path, json: bool) -> anyhow::Result<()> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut builder = SummaryBuilder::default();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if n == 0 {
            break;
        }
        builder
            .push(&buf[..n])
            .with_context(|| format!("{} cannot be read", path.display()))?;
    }
    let summary = builder.finish();
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_text(&summary);
    }
    Ok(())
}

fn show(v: &OwnedValue) -> String {
    match v {
        OwnedValue::Str(s) => s.clone(),
        OwnedValue::Int(i) => i.to_string(),
        OwnedValue::UInt(u) => u.to_string(),
        OwnedValue::Float(f) => f.to_string(),
        OwnedValue::Bytes(b) => format!("<{} bytes>", b.len()),
    }
}

fn print_text(s: &Summary) {
    let secs = |t: u64| t as f64 * 1e-6;
    println!(
        "ULog version {}, log start {:.3} s after boot, last sample at {:.3} s ({:.1} s of data)",
        s.version,
        secs(s.start_timestamp),
        secs(s.last_timestamp),
        secs(s.last_timestamp.saturating_sub(s.start_timestamp))
    );
    println!("\nInfo:");
    for (k, v) in &s.info {
        println!("  {k}: {}", show(v));
    }
    let defaults: usize = s.default_parameters.values().map(|m| m.len()).sum();
    println!(
        "\nParameters: {} initial, {} changes, {} defaults",
        s.initial_parameters.len(),
        s.changed_parameters.len(),
        defaults
    );
    println!(
        "\n{:<40} {:>5} {:>9} {:>10}",
        "Topic", "multi", "samples", "rate (Hz)"
    );
    for d in &s.datasets {
        let rate = d.rate_hz().map_or("-".to_owned(), |r| format!("{r:.1}"));
        println!(
            "{:<40} {:>5} {:>9} {:>10}",
            d.name, d.multi_id, d.count, rate
        );
    }
    println!("\nDropouts: {}", s.dropouts.len());
    for d in &s.dropouts {
        println!("  at {:.3} s: {} ms", secs(d.timestamp), d.duration_ms);
    }
    println!("\nLogged messages: {}", s.logged_messages.len());
    for m in &s.logged_messages {
        println!(
            "  {:.3} [{}] {}",
            secs(m.timestamp),
            m.level as char,
            m.text
        );
    }
    let r = &s.reader;
    if r.resyncs + r.malformed_messages + r.unknown_messages + s.truncated_bytes > 0
        || !s.errors.is_empty()
    {
        println!(
            "\nReader: {} unknown messages, {} malformed, {} resyncs ({} bytes skipped), {} bytes truncated",
            r.unknown_messages, r.malformed_messages, r.resyncs, r.skipped_bytes, s.truncated_bytes
        );
        for e in &s.errors {
            println!("  {e}");
        }
    }
}
