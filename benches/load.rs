//! Load benchmark: the simulated vehicle (in this process) streams a synthetic flight at a
//! fixed chunk rate over loopback UDP to the real daemon (`ulog-recv --udp`, a child process),
//! on a clean link. For each rate it prints whether the daemon lost anything (its file against
//! the stream), its CPU time per MB and peak RSS (from `wait4`), and the ack round trip the
//! vehicle measured (acked phase: send → ack received, loopback included).
//!
//! Rows with live-socket clients connect them (threads of this process) to the daemon's Unix
//! socket, subscribed to every topic and reading as fast as they can, and report what they
//! received, what they missed (`lagged`: the client's queue overflowed; `server_busy`: the
//! daemon skipped samples to keep up) and the daemon's own publishing latency (a datagram's
//! arrival to its samples' lines written to the socket, p50 / p99, from its `stats` line).
//! Rows with Foxglove clients connect them (threads, `tungstenite`) to the daemon's Foxglove
//! server, subscribed to every channel as it is advertised, reading as fast as they can; they
//! report the messages they received and the ones the server told them it dropped. A live
//! socket client subscribed to nothing reads the daemon's publishing latency (Foxglove
//! messages, arrival to the write into the socket) from its `stats` lines.
//!
//! The upload row receives while a 500 MB session waiting in the log directory goes to a local
//! Garage at full speed; then `ulog-recv upload` (several parts in flight, and one at a time)
//! and `rclone copy` send the same session to the same server, three rounds interleaved, for
//! MB/s and CPU per MB side by side; the same with TLS in front of Garage (`socat`, a private
//! CA's certificate), as AWS and most services are reached; and once each through a 20 Mbit/s
//! link (a veth pair into a network namespace, `tbf`; needs root), for the share of the link's
//! rate each used.
//!
//! Run: `cargo bench --bench load` (optionally `-- SECONDS` per rate, default 3).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "../tests/it/common/garage.rs"]
#[allow(dead_code)]
mod garage;
#[path = "../tests/it/common/slow_link.rs"]
mod slow_link;
#[path = "../tests/it/common/tls.rs"]
mod tls;

use ulog_recv::shell::simulator::SimOptions;
use ulog_recv::shell::transport::{Link, LinkSpec};
use ulog_recv::sim::{Impairment, VehicleConfig, chunk_log};

/// Wire bytes of a full LOGGING_DATA frame (MAVLink 2, unsigned).
const FRAME_BYTES: u64 = 267;

/// One row of the plan.
#[derive(Clone, Copy)]
struct Row {
    /// Chunks per second; `None`: as fast as the simulator can.
    rate: Option<u64>,
    /// Frames packed per datagram up to this many bytes; 0: one frame per datagram.
    max_write: usize,
    /// Every chunk acked (stop-and-wait).
    all_acked: bool,
    store_args: &'static [&'static str],
    /// Live-socket clients subscribed to everything.
    clients: usize,
    /// Foxglove clients subscribed to everything.
    foxglove: usize,
    /// Seconds of stream at least (else the command line's).
    min_seconds: f64,
    /// MAVLink 2 signing on both sides.
    signed: bool,
    /// A closed session of this many MB waits in the log directory, and the daemon uploads
    /// it to a Garage server (at full speed) while it receives.
    upload_mb: u64,
    /// The daemon serves `--metrics` and a scraper reads `/metrics` every second, as
    /// Prometheus would at its most eager.
    scraped: bool,
}

impl Row {
    const fn new(rate: Option<u64>, max_write: usize) -> Self {
        Self {
            rate,
            max_write,
            all_acked: false,
            store_args: &[],
            clients: 0,
            foxglove: 0,
            min_seconds: 0.0,
            signed: false,
            upload_mb: 0,
            scraped: false,
        }
    }
}

/// What the live-socket clients of a row saw.
#[derive(Default)]
struct ClientsSeen {
    clients: usize,
    /// Data lines per client (the smallest).
    data_lines: u64,
    /// Lines dropped from the clients' queues (their `lagged` lines), all clients.
    lagged: u64,
    /// Samples the daemon skipped to keep up (its `server_busy` notices), per client.
    skipped: u64,
    /// The daemon's publishing latency, "p50 / p99 µs".
    latency: String,
    /// Foxglove clients, the messages the one that got fewest received, and the messages the
    /// server dropped for them (all clients).
    foxglove: usize,
    foxglove_messages: u64,
    foxglove_dropped: u64,
}

struct Run {
    clients: ClientsSeen,
    /// Frames the simulator's OS refused to send (loss at the source, not the daemon's).
    sender_drops: u64,
    /// The daemon's storage flags.
    store: String,
    all_acked: bool,
    signed: bool,
    /// "p50 X µs p99 Y µs", as the daemon prints it.
    daemon_ack: String,
    rate: Option<u64>,
    max_write: usize,
    chunks: usize,
    seconds: f64,
    lost_bytes: i64,
    dropouts: usize,
    cpu_s: f64,
    max_rss_kb: i64,
    mb: f64,
    ack_p50_us: u64,
    ack_p99_us: u64,
    ack_max_us: u64,
    /// MB of the waiting session uploaded while the row ran.
    uploaded_mb: f64,
    /// Scrapes of `/metrics` while the row ran (none: not scraped).
    scrapes: u64,
}

fn main() {
    let seconds: f64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(3.0);
    // One MAVLink frame per datagram (the receiver's worst case), then PX4's packing of
    // frames into datagrams of up to an Ethernet MTU.
    // The last row acks every chunk (stop-and-wait), to measure the ack latency on
    // thousands of acks rather than the few dozen of a log's definitions.
    // The last rows write with the store working hard: 4 MB splits (each with its
    // preamble, hash, fsync and manifest) and an fsync of the open split every 100 ms.
    const HARD: &[&str] = &["--split-size", "4M", "--fsync-interval", "0.1"];
    // The live socket: 100 KB/s of log (~400 chunks/s, a busy PX4) to one client for the
    // publishing latency; then everything to 4 clients at the rates above.
    let live = |rate, max_write, clients, min_seconds| Row {
        clients,
        min_seconds,
        ..Row::new(rate, max_write)
    };
    let plan = [
        Row::new(Some(50_000), 0),
        Row::new(Some(100_000), 0),
        Row::new(Some(150_000), 0),
        Row::new(Some(200_000), 0),
        Row::new(None, 0),
        Row::new(Some(200_000), 1472),
        Row::new(Some(300_000), 1472),
        Row::new(None, 1472),
        Row {
            all_acked: true,
            ..Row::new(None, 0)
        },
        Row {
            store_args: HARD,
            ..Row::new(Some(200_000), 0)
        },
        Row {
            store_args: HARD,
            ..Row::new(Some(200_000), 1472)
        },
        live(Some(402), 0, 1, 10.0),
        live(Some(100_000), 0, 4, 0.0),
        live(Some(200_000), 0, 4, 0.0),
        live(Some(200_000), 1472, 4, 0.0),
        // Foxglove: 100 KB/s of log to one client for the latency; then 4 clients at
        // 200,000 chunks/s.
        Row {
            foxglove: 1,
            min_seconds: 10.0,
            ..Row::new(Some(402), 0)
        },
        Row {
            foxglove: 4,
            ..Row::new(Some(200_000), 0)
        },
        Row {
            foxglove: 4,
            ..Row::new(Some(200_000), 1472)
        },
        // MAVLink 2 signing on both sides: every frame signed and checked.
        Row {
            signed: true,
            ..Row::new(Some(100_000), 0)
        },
        Row {
            signed: true,
            ..Row::new(Some(200_000), 1472)
        },
        // Every chunk acked, every ack signed: the signing cost on the ack path.
        Row {
            signed: true,
            all_acked: true,
            ..Row::new(None, 0)
        },
        // The flight diagnostics off (they are on in every other row): what they cost the
        // daemon, against the same rate above.
        Row {
            store_args: &["--diagnostics", "none"],
            ..Row::new(Some(200_000), 1472)
        },
        // Receiving while a 500 MB session uploads to Garage at full speed.
        Row {
            upload_mb: 500,
            min_seconds: 10.0,
            ..Row::new(Some(100_000), 0)
        },
        // The same with one part at a time: what the parts in flight cost the receiver and
        // its memory.
        Row {
            upload_mb: 500,
            min_seconds: 10.0,
            store_args: &["--upload-parts-in-flight", "1"],
            ..Row::new(Some(100_000), 0)
        },
    ];
    // Prometheus scraping every second, against the same row unscraped, taking turns (three
    // rounds): at a busy PX4's rate (100 KB/s of log, where a scrape's fixed cost weighs
    // most) and at full speed.
    let metrics_pairs = [(Some(402), 0, 20.0), (Some(200_000), 1472, 10.0)];
    let plan: Vec<Row> = plan
        .into_iter()
        .chain(
            metrics_pairs
                .iter()
                .flat_map(|&(rate, max_write, min_seconds)| {
                    (0..3).flat_map(move |_| {
                        [false, true].map(|scraped| Row {
                            scraped,
                            min_seconds,
                            ..Row::new(rate, max_write)
                        })
                    })
                }),
        )
        .collect();
    let rows: Vec<usize> = match std::env::var("LOAD_ROWS") {
        // e.g. LOAD_ROWS=11,12 runs only those rows (0-based), to look at one thing.
        Ok(list) => list
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect(),
        Err(_) => (0..plan.len()).collect(),
    };
    println!("load benchmark: {seconds} s per rate, loopback UDP, clean link, one daemon per rate");
    let mut runs = Vec::new();
    let mut upload_mb = 0;
    for i in &rows {
        runs.push(run(plan[*i], seconds.max(plan[*i].min_seconds)));
        upload_mb = upload_mb.max(plan[*i].upload_mb);
    }
    let metrics_cost = metrics_table(&runs);
    println!(
        "\n| target chunks/s | frames per datagram | achieved chunks/s | chunks | sender drops | lost bytes | dropouts | CPU ms per MB | peak RSS MB | ack RTT p50 µs | p99 µs | max µs | daemon: arrival → ack sent | storage | live clients | data lines per client | lagged lines | skipped (busy) | Foxglove clients | Foxglove messages per client | Foxglove dropped | publish latency p50 / p99 µs | signed | uploaded MB meanwhile |"
    );
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|"
    );
    for r in &runs {
        let c = &r.clients;
        println!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |",
            if r.all_acked {
                "all acked".to_owned()
            } else {
                r.rate.map_or("unlimited".to_owned(), |r| r.to_string())
            },
            if r.max_write == 0 {
                "1".to_owned()
            } else {
                format!("≤{} B", r.max_write)
            },
            r.chunks as f64 / r.seconds,
            r.chunks,
            r.sender_drops,
            r.lost_bytes,
            r.dropouts,
            r.cpu_s * 1000.0 / r.mb,
            r.max_rss_kb as f64 / 1024.0,
            r.ack_p50_us,
            r.ack_p99_us,
            r.ack_max_us,
            r.daemon_ack,
            if r.store.is_empty() {
                "defaults"
            } else {
                &r.store
            },
            c.clients,
            c.data_lines,
            c.lagged,
            c.skipped,
            c.foxglove,
            c.foxglove_messages,
            c.foxglove_dropped,
            if c.latency.is_empty() {
                "-"
            } else {
                &c.latency
            },
            if r.signed { "yes" } else { "no" },
            r.uploaded_mb
        );
    }
    println!("{metrics_cost}");
    if upload_mb > 0 {
        compare_uploads(upload_mb);
    }
}

/// GETs `/metrics` on `port` every second while `on`; the scrapes that answered 200.
fn scrape_every_second(port: u16, on: &std::sync::atomic::AtomicBool) -> u64 {
    use std::io::{Read, Write};
    let mut scrapes = 0;
    while on.load(std::sync::atomic::Ordering::Relaxed) {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = write!(s, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
            let mut answer = Vec::new();
            if s.read_to_end(&mut answer).is_ok()
                && answer.starts_with(b"HTTP/1.")
                && answer.get(9..12) == Some(b"200".as_slice())
            {
                scrapes += 1;
            }
        }
        for _ in 0..10 {
            if !on.load(std::sync::atomic::Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    scrapes
}

/// The scraped rows against the unscraped ones at the same rate: the daemon's CPU per MB,
/// median of the rounds, and the ratio.
fn metrics_table(runs: &[Run]) -> String {
    let plain = |r: &&Run| r.store.is_empty() && r.clients.clients == 0 && r.clients.foxglove == 0;
    let mut out = String::from(
        "\n| target chunks/s | frames per datagram | CPU ms per MB, not scraped (median) | scraped every second | ratio | scrapes | peak RSS MB not scraped / scraped |\n|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let mut keys: Vec<(Option<u64>, usize)> = (runs.iter().filter(|r| r.scrapes > 0))
        .map(|r| (r.rate, r.max_write))
        .collect();
    keys.dedup();
    for (rate, max_write) in keys {
        let median = |scraped: bool| {
            let mut v: Vec<(f64, f64, u64)> = (runs.iter().filter(plain))
                .filter(|r| {
                    (r.rate, r.max_write) == (rate, max_write) && (r.scrapes > 0) == scraped
                })
                .map(|r| {
                    (
                        r.cpu_s * 1000.0 / r.mb,
                        r.max_rss_kb as f64 / 1024.0,
                        r.scrapes,
                    )
                })
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v.get(v.len() / 2).copied().unwrap_or_default()
        };
        let (off, on) = (median(false), median(true));
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.3} | {} | {:.1} / {:.1} |\n",
            rate.map_or("unlimited".to_owned(), |r| r.to_string()),
            if max_write == 0 {
                "1".to_owned()
            } else {
                format!("≤{max_write} B")
            },
            off.0,
            on.0,
            on.0 / off.0,
            on.2,
            off.1,
            on.1
        ));
    }
    out
}

/// A closed session of about `mb` MB (a synthetic flight, 64 MB splits) in `log_dir`, started
/// a day ago (so that it is the oldest).
fn waiting_session(log_dir: &std::path::Path, mb: u64) -> PathBuf {
    use ulog_recv::store::{LogStore, SplitPolicy, StoreOptions};
    let file = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s: (mb as f64 * 1e6 / 7_600.0) as u32,
        seed: 2,
        appended_data: false,
    });
    let stream = chunk_log(&file, 0).unwrap().stream;
    let mut options = StoreOptions::new(log_dir.to_path_buf());
    options.policy = SplitPolicy::unlimited();
    options.policy.max_bytes = Some(64 << 20);
    let mut store = LogStore::open(options).unwrap();
    let started = std::time::SystemTime::now() - Duration::from_secs(86_400);
    store
        .begin_log((1, 1), started, ulog_recv::autopilot::LogFormat::ULog)
        .unwrap();
    for piece in stream.chunks(1 << 20) {
        store.write(piece).unwrap();
    }
    store.end_log().unwrap().expect("a session")
}

/// Runs `cmd` to its end; (wall seconds, CPU seconds of the child). Its stderr goes to a
/// file, shown if it fails.
fn measured(cmd: &mut Command) -> (f64, f64) {
    let said = std::env::temp_dir().join(format!("ulog-recv-bench-stderr-{}", std::process::id()));
    let t0 = std::time::Instant::now();
    // Reaped with wait4 below (for its resource use), which clippy cannot see.
    #[allow(clippy::zombie_processes)]
    let child = cmd
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&said).unwrap())
        .spawn()
        .unwrap();
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe {
        libc::wait4(child.id() as i32, &mut status, 0, &mut usage);
    }
    let stderr = std::fs::read_to_string(&said).unwrap_or_default();
    let _ = std::fs::remove_file(&said);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{cmd:?}: {status}: {stderr}"
    );
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (
        t0.elapsed().as_secs_f64(),
        tv(usage.ru_utime) + tv(usage.ru_stime),
    )
}

/// Our uploader alone (`ulog-recv upload`: with its default parts in flight, and with one
/// part at a time as it was before) and `rclone copy` (its defaults: 4 transfers, 5 MiB
/// parts) sending the same session to the same Garage, interleaved, [`UPLOAD_ROUNDS`] times
/// each; the fastest round of each, with its CPU time. rclone is `$RCLONE`, else the
/// project's `.venv/bin/rclone`, else the one on the `PATH`. Then the same through a link of [`SLOW_LINK_MBIT`] (a veth pair into a network
/// namespace, shaped by `tbf`), once each with a smaller session: the share of the link's
/// rate each used.
fn compare_uploads(mb: u64) {
    let dir = std::env::temp_dir().join(format!("ulog-recv-upload-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let garage = garage::Garage::start(dir.join("garage")).expect("Garage for the upload rows");
    let creds = garage::credentials(&dir, garage::SECRET_KEY);
    let session = waiting_session(&dir.join("logs"), mb);
    let plain = garage.endpoint();
    print_upload_table(
        "to Garage (loopback, plain HTTP)",
        &upload_rounds(
            &garage,
            &plain,
            None,
            &creds,
            &session,
            UPLOAD_ROUNDS,
            &|p: &std::ffi::OsStr| Command::new(p),
        ),
        session_bytes(&session) as f64 / 1e6,
    );
    let ca = tls::PrivateCa::make(&dir);
    let terminator = tls::Terminator::start(&ca, garage.s3_addr().port());
    print_upload_table(
        "to Garage behind TLS (loopback, socat)",
        &upload_rounds(
            &garage,
            &terminator.endpoint(),
            Some(&ca.ca),
            &creds,
            &session,
            UPLOAD_ROUNDS,
            &|p: &std::ffi::OsStr| Command::new(p),
        ),
        session_bytes(&session) as f64 / 1e6,
    );
    drop(terminator);
    drop(garage);
    let _ = std::fs::remove_dir_all(&dir);

    let link = match slow_link::SlowLink::new(SLOW_LINK_MBIT) {
        Ok(link) => link,
        Err(why) => {
            println!("\nNo slow link ({why}): its rows are left out.");
            return;
        }
    };
    let garage = garage::Garage::start_at(dir.join("garage"), link.host_ip())
        .expect("Garage for the slow link");
    let creds = garage::credentials(&dir, garage::SECRET_KEY);
    let session = waiting_session(&dir.join("slow-logs"), SLOW_LINK_MB);
    let mbytes = session_bytes(&session) as f64 / 1e6;
    let endpoint = garage.endpoint();
    let rows = upload_rounds(&garage, &endpoint, None, &creds, &session, 1, &|p| {
        link.command(p)
    });
    println!(
        "\nUploading one {mbytes:.0} MB session through a {SLOW_LINK_MBIT} Mbit/s link (veth, tbf), same run:\n"
    );
    println!("| client | seconds | MB/s | share of the link's rate |");
    println!("|---|---:|---:|---:|");
    for (who, s, _, _) in &rows {
        println!(
            "| {who} | {s:.2} | {:.2} | {:.2} |",
            mbytes / s,
            mbytes * 1e6 / s / link.bytes_per_second()
        );
    }
    drop(garage);
    drop(link);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The loopback comparison's table: the fastest round of each client uploading `mbytes`,
/// rclone last.
fn print_upload_table(what: &str, best: &[Upload], mbytes: f64) {
    let (_, theirs_s, theirs_cpu, _) = *best.last().expect("rclone measured");
    println!(
        "\nUploading one {mbytes:.0} MB session {what}, same run, best of {UPLOAD_ROUNDS} rounds:\n"
    );
    println!(
        "| client | seconds | MB/s | CPU ms per MB | MB/s / rclone's | CPU per MB / rclone's | Garage's CPU ms per MB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (who, s, cpu, server_cpu) in best {
        println!(
            "| {who} | {s:.2} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} |",
            mbytes / s,
            cpu * 1000.0 / mbytes,
            theirs_s / s,
            cpu / theirs_cpu,
            server_cpu * 1000.0 / mbytes
        );
    }
}

/// The bytes of a session's files.
fn session_bytes(session: &std::path::Path) -> u64 {
    std::fs::read_dir(session)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Each client uploads `session` to `garage`, reached at `endpoint` (whose certificate `ca`
/// signed, if TLS), `rounds` times, interleaved, each program run as `command` makes it; the
/// fastest round of each, rclone last.
fn upload_rounds<'a>(
    garage: &garage::Garage,
    endpoint: &str,
    ca: Option<&std::path::Path>,
    creds: &std::path::Path,
    session: &std::path::Path,
    rounds: usize,
    command: &dyn Fn(&std::ffi::OsStr) -> Command,
) -> Vec<Upload<'a>> {
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/rclone");
    let rclone =
        std::env::var_os("RCLONE").unwrap_or_else(|| match std::path::Path::new(venv).exists() {
            true => venv.into(),
            false => "rclone".into(),
        });
    let mut best: Vec<Upload> = Vec::new();
    for round in 0..rounds {
        for (who, in_flight) in [
            ("ulog-recv upload (4 parts in flight)", Some("4")),
            ("ulog-recv upload (1 part at a time)", Some("1")),
            ("rclone copy (4 transfers)", None),
        ] {
            // A prefix of its own for each round, client and endpoint: rclone skips what
            // the bucket already holds.
            let scheme = endpoint.split(':').next().unwrap_or("");
            let prefix = format!("{scheme}-r{round}-{}", in_flight.unwrap_or("rclone"));
            let server_before = garage.cpu_seconds();
            let (s, cpu) = match in_flight {
                Some(n) => {
                    // Each round uploads the whole session again: no journal yet.
                    let _ = std::fs::remove_file(session.join("upload.json"));
                    let mut ours = command(env!("CARGO_BIN_EXE_ulog-recv").as_ref());
                    ours.arg("upload")
                        .arg(session)
                        .args(garage.upload_args_at(endpoint, &prefix, creds))
                        .args(["--upload-parts-in-flight", n]);
                    if let Some(ca) = ca {
                        ours.env("SSL_CERT_FILE", ca);
                    }
                    measured(&mut ours)
                }
                None => {
                    let mut theirs = command(&rclone);
                    if let Some(ca) = ca {
                        theirs.arg("--ca-cert").arg(ca);
                    }
                    measured(
                        theirs
                            // rclone cannot use AWS's CA bundle variable with its own HTTP
                            // transport; `--ca-cert` names the CA instead.
                            .env_remove("AWS_CA_BUNDLE")
                            .arg("copy")
                            .arg(session)
                            .arg(format!(":s3:{}/{prefix}", garage::BUCKET))
                            .args([
                                "--s3-provider",
                                "Other",
                                "--s3-region",
                                "garage",
                                "--s3-force-path-style",
                                // The bucket exists; Garage refuses to make it again.
                                "--s3-no-check-bucket",
                            ])
                            .args(["--s3-endpoint", endpoint])
                            .args(["--s3-access-key-id", garage::ACCESS_KEY])
                            .args(["--s3-secret-access-key", garage::SECRET_KEY]),
                    )
                }
            };
            let server_cpu = garage.cpu_seconds() - server_before;
            match best.iter_mut().find(|b| b.0 == who) {
                Some(b) if b.1 <= s => {}
                Some(b) => *b = (who, s, cpu, server_cpu),
                None => best.push((who, s, cpu, server_cpu)),
            }
        }
    }
    best
}

/// One client's upload: who, wall seconds, its CPU seconds, the server's CPU seconds meanwhile.
type Upload<'a> = (&'a str, f64, f64, f64);

/// Rounds of the upload comparison on loopback.
const UPLOAD_ROUNDS: usize = 3;
/// The slow link's rate, and the session sent through it.
const SLOW_LINK_MBIT: u32 = 20;
const SLOW_LINK_MB: u64 = 40;

/// A Foxglove client that subscribes to every channel as it is advertised and reads as fast
/// as it can; returns the message-data frames it got and the drops the server reported.
fn foxglove_client(port: u16) -> std::thread::JoinHandle<(u64, u64)> {
    use tungstenite::Message;
    use tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://127.0.0.1:{port}")
        .into_client_request()
        .unwrap();
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "foxglove.websocket.v1".parse().unwrap(),
    );
    let t0 = std::time::Instant::now();
    let mut ws = loop {
        match tungstenite::connect(request.clone()) {
            Ok((ws, _)) => break ws,
            Err(_) if t0.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("cannot connect to the daemon's Foxglove server: {e}"),
        }
    };
    std::thread::spawn(move || {
        let (mut messages, mut dropped, mut next) = (0u64, 0u64, 0u32);
        loop {
            match ws.read() {
                Ok(Message::Binary(b)) if b.first() == Some(&1) => messages += 1,
                Ok(Message::Text(t)) => {
                    let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                    match v["op"].as_str() {
                        Some("advertise") => {
                            let subs: Vec<serde_json::Value> = v["channels"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|ch| {
                                    next += 1;
                                    serde_json::json!({"id": next, "channelId": ch["id"]})
                                })
                                .collect();
                            let request =
                                serde_json::json!({"op": "subscribe", "subscriptions": subs});
                            let _ = ws.send(Message::text(request.to_string()));
                        }
                        Some("status") => {
                            dropped += v["message"]
                                .as_str()
                                .and_then(|m| m.split(' ').next()?.parse::<u64>().ok())
                                .unwrap_or(0)
                        }
                        _ => {}
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        (messages, dropped)
    })
}

/// A live-socket client that subscribes to everything (or, `all` false, to nothing: it only
/// reads the `stats` lines) and reads as fast as it can, counting lines by a cheap look at
/// their start (no JSON parsing of data lines).
fn live_client(
    socket: &std::path::Path,
    all: bool,
) -> std::thread::JoinHandle<(u64, u64, u64, String)> {
    use std::io::{BufRead, Write};
    let t0 = std::time::Instant::now();
    let mut s = loop {
        match std::os::unix::net::UnixStream::connect(socket) {
            Ok(s) => break s,
            Err(_) if t0.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("cannot connect to the daemon's socket: {e}"),
        }
    };
    let request: &[u8] = if all {
        b"{\"subscribe\":[\"*\"]}\n"
    } else {
        b"{\"subscribe\":[]}\n"
    };
    s.write_all(request).unwrap();
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::with_capacity(1 << 20, s);
        let (mut data, mut lagged, mut skipped) = (0u64, 0u64, 0u64);
        let mut last_stats = String::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if line.starts_with(b"{\"type\":\"data\"") {
                data += 1;
            } else if line.starts_with(b"{\"type\":\"lagged\"")
                || line.starts_with(b"{\"type\":\"stats\"")
            {
                let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
                match (v["type"].as_str(), v["cause"].as_str()) {
                    (Some("lagged"), Some("server_busy")) => {
                        skipped += v["dropped"].as_u64().unwrap()
                    }
                    (Some("lagged"), _) => lagged += v["dropped"].as_u64().unwrap(),
                    _ => {
                        last_stats =
                            format!("{} / {}", v["latency_us"]["p50"], v["latency_us"]["p99"])
                    }
                }
            }
        }
        (data, lagged, skipped, last_stats)
    })
}

fn run(row: Row, seconds: f64) -> Run {
    let Row {
        rate,
        max_write,
        all_acked,
        store_args,
        clients,
        foxglove,
        signed,
        upload_mb,
        scraped,
        ..
    } = row;
    // A flight long enough for `seconds` at this rate (the synthetic log is ~7.6 KB/s).
    let chunks_wanted = rate.unwrap_or(300_000) as f64 * seconds;
    let duration_s = (chunks_wanted * 249.0 / 7_600.0).ceil() as u32;
    let file = ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s,
        seed: 1,
        appended_data: false,
    });
    let mut log = chunk_log(&file, 0).unwrap();
    // The rows measure the daemon's capacity: the log's reliable chunks in flight (an 'A', a
    // perf 'M') go unacked, as the data around them. (PX4 pauses its stream for each one's ack
    // round trip, which at these rates measures the socket's queue, not the daemon.)
    let first_unacked = log.chunks.iter().position(|c| !c.acked).unwrap_or(0);
    log.chunks[first_unacked..]
        .iter_mut()
        .for_each(|c| c.acked = false);
    if all_acked {
        // Stop-and-wait for every chunk: one ack round trip per chunk, thousands of samples.
        log.chunks.truncate(20_000);
        log.chunks.iter_mut().for_each(|c| c.acked = true);
        let end = log
            .chunks
            .last()
            .map_or(0, |c| c.stream_offset as usize + c.data.len());
        let cut = log.message_starts.partition_point(|&m| m as usize <= end) - 1;
        log.stream.truncate(log.message_starts[cut] as usize);
        // The stream ends inside a message: no post-flight data after it.
        log.postflight.clear();
    }
    // What the file must hold: the stream, then the post-flight data of the STOP handshake.
    let stream = [log.stream.clone(), log.postflight.clone()].concat();
    let chunks = log.chunks.len();

    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let foxglove_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("ulog-recv-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A session waiting to be uploaded, and the server it goes to.
    let uploading = (upload_mb > 0).then(|| {
        let garage = garage::Garage::start(dir.with_extension("garage")).expect("Garage");
        let creds = garage::credentials(&dir.with_extension("creds"), garage::SECRET_KEY);
        let session = waiting_session(&dir, upload_mb);
        let mut args = garage.upload_args("load", &creds);
        args.extend(["--upload-when".into(), "always".into()]);
        (garage, session, args)
    });
    let socket = std::env::temp_dir().join(format!("ulog-recv-load-{}.sock", std::process::id()));
    let key_file = std::env::temp_dir().join(format!("ulog-recv-load-{}.key", std::process::id()));
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key_file)
            .unwrap();
        std::io::Write::write_all(&mut f, b"load benchmark passphrase\n").unwrap();
    }
    // Reaped with wait4 below (for its resource use), which clippy cannot see.
    #[allow(clippy::zombie_processes)]
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_ulog-recv"))
        .args(["--udp", &port.to_string(), "--log-dir"])
        .arg(&dir)
        .arg("--socket")
        .arg(&socket)
        .args(store_args)
        .args(
            (foxglove > 0)
                .then(|| ["--foxglove".to_owned(), foxglove_port.to_string()])
                .into_iter()
                .flatten(),
        )
        .args(
            signed
                .then(|| ["--signing-key".to_owned(), key_file.display().to_string()])
                .into_iter()
                .flatten(),
        )
        .args(uploading.iter().flat_map(|(_, _, args)| args.iter()))
        .args(
            scraped
                .then(|| ["--metrics".to_owned(), metrics_port.to_string()])
                .into_iter()
                .flatten(),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the daemon");
    std::thread::sleep(Duration::from_millis(200));
    let mut followers: Vec<_> = (0..clients).map(|_| live_client(&socket, true)).collect();
    if foxglove > 0 {
        // For the latency in its stats lines.
        followers.push(live_client(&socket, false));
    }
    let foxgloves: Vec<_> = (0..foxglove)
        .map(|_| foxglove_client(foxglove_port))
        .collect();
    let scraping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(scraped));
    let scraper = {
        let scraping = scraping.clone();
        std::thread::spawn(move || scrape_every_second(metrics_port, &scraping))
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = VehicleConfig {
        // PX4 streams at 70 % of the link's configured rate.
        link_rate: rate.map(|r| (r * FRAME_BYTES * 10).div_ceil(7)),
        impairment: Impairment::NONE,
        signing: signed.then(|| ulog_recv::shell::keyfile::load_key(&key_file).unwrap()),
        ..VehicleConfig::default()
    };
    let sent_all = std::sync::Arc::new(tokio::sync::Notify::new());
    let options = SimOptions {
        once: true,
        linger: Duration::from_secs(10),
        max_write,
        finished: Some(sent_all.clone()),
    };
    let pid = daemon.id() as i32;
    let (report, max_rss_kb) = rt.block_on(async {
        let link = Link::open(&LinkSpec::UdpConnect(format!("127.0.0.1:{port}")))
            .await
            .unwrap();
        // Once the whole log was sent, and the daemon has read what is still queued in its
        // socket (what is left unread at SIGTERM would count as loss), stop it as systemd
        // would, while the vehicle still streams: its STOP handshake ends the run.
        let stopper = tokio::spawn(async move {
            sent_all.notified().await;
            let t0 = std::time::Instant::now();
            while udp_rx_queue(port) > 0 && t0.elapsed() < Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            // Peak RSS of the daemon since its exec (wait4's ru_maxrss would count the fork
            // from this process, which holds the whole log).
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            unsafe { libc::kill(pid, libc::SIGTERM) };
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
                .unwrap()
        });
        let report = ulog_recv::shell::simulator::run(
            link,
            log,
            config,
            options,
            std::future::pending::<()>(),
        )
        .await
        .unwrap();
        (report, stopper.await.unwrap())
    });

    scraping.store(false, std::sync::atomic::Ordering::Relaxed);
    let scrapes = scraper.join().unwrap();
    let elapsed = report.streamed_in.expect("streamed").as_secs_f64();
    let trips = report.ack_round_trips;
    assert_eq!(report.stats.ack_timeouts, 0);
    // The daemon was stopped above; collect its resource use.
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe {
        libc::wait4(pid, &mut status, 0, &mut usage);
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "daemon exit {status}"
    );
    let mut seen = ClientsSeen {
        clients,
        data_lines: u64::MAX,
        ..ClientsSeen::default()
    };
    for f in followers {
        let (data, lagged, skipped, latency) = f.join().unwrap();
        seen.data_lines = seen.data_lines.min(data);
        seen.lagged += lagged;
        seen.skipped = seen.skipped.max(skipped);
        seen.latency = latency;
    }
    if clients == 0 {
        seen.data_lines = 0;
    }
    seen.foxglove = foxglove;
    seen.foxglove_messages = if foxglove == 0 { 0 } else { u64::MAX };
    for f in foxgloves {
        let (messages, dropped) = f.join().unwrap();
        seen.foxglove_messages = seen.foxglove_messages.min(messages);
        seen.foxglove_dropped += dropped;
    }
    // The daemon's own measure: datagram arrival → ack sent.
    let mut out = String::new();
    std::io::Read::read_to_string(&mut daemon.stdout.take().unwrap(), &mut out).unwrap();
    let daemon_ack = out
        .split("ack latency ")
        .nth(1)
        .map_or("-".to_owned(), |s| s.trim().to_owned());
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    let cpu_s = tv(usage.ru_utime) + tv(usage.ru_stime);

    // What of the waiting session went up meanwhile (done objects and parts of the one under
    // way), from its journal.
    let uploaded_mb = uploading.as_ref().map_or(0.0, |(_, waiting, _)| {
        let journal: serde_json::Value = std::fs::read(waiting.join("upload.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let bytes: u64 = journal["objects"]
            .as_object()
            .into_iter()
            .flat_map(|o| o.values())
            .map(|o| match o["state"].as_str() {
                Some("done") => o["size"].as_u64().unwrap_or(0),
                _ => {
                    o["parts"].as_array().map_or(0, |p| p.len() as u64)
                        * o["part_size"].as_u64().unwrap_or(0)
                }
            })
            .sum();
        bytes as f64 / 1e6
    });
    // One session directory (beside the one waiting to be uploaded); its splits without
    // their preambles are the log.
    let sessions: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && uploading.as_ref().is_none_or(|(_, w, _)| w != p))
        .collect();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let manifest = ulog_recv::store::files::read_manifest(&sessions[0]).unwrap();
    let mut got = Vec::new();
    for split in &manifest.splits {
        let bytes = std::fs::read(sessions[0].join(&split.file)).unwrap();
        got.extend_from_slice(&bytes[split.summary.preamble_bytes as usize..]);
    }
    let dropouts = count_dropouts(&got);
    let _ = std::fs::remove_dir_all(&dir);
    let mut sorted = trips.clone();
    sorted.sort();
    let q = |x: f64| {
        sorted
            .get(((sorted.len() as f64 * x).ceil() as usize).saturating_sub(1))
            .map_or(0, |d| d.as_micros() as u64)
    };
    let r = Run {
        clients: seen,
        store: store_args.join(" "),
        signed,
        all_acked,
        daemon_ack,
        rate,
        max_write,
        chunks,
        seconds: elapsed,
        lost_bytes: stream.len() as i64 - got.len() as i64 + 5 * dropouts as i64,
        sender_drops: report.send_failures,
        dropouts,
        cpu_s,
        max_rss_kb,
        mb: stream.len() as f64 / 1e6,
        ack_p50_us: q(0.5),
        ack_p99_us: q(0.99),
        ack_max_us: sorted.last().map_or(0, |d| d.as_micros() as u64),
        uploaded_mb,
        scrapes,
    };
    println!(
        "rate {:>9}: {} chunks in {:.2} s, file {} of {} bytes, {} dropouts, {} acks",
        rate.map_or("unlimited".to_owned(), |r| r.to_string()),
        chunks,
        elapsed,
        got.len(),
        stream.len(),
        dropouts,
        trips.len()
    );
    r
}

/// Bytes queued in the receive buffer of the UDP socket bound to `port` (/proc/net/udp).
fn udp_rx_queue(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    let needle = format!(":{port:04X} ");
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1)?.ends_with(needle.trim_end())).then_some(f.get(4)?.to_string())
        })
        .filter_map(|q| u64::from_str_radix(q.split(':').nth(1)?, 16).ok())
        .sum()
}

/// Dropout messages (5 bytes, type 'O') in a log written by the daemon (the synthetic log has
/// one of its own, counted too, so subtract the stream's).
fn count_dropouts(bytes: &[u8]) -> usize {
    let mut at = 16;
    let mut n = 0usize;
    while at + 3 <= bytes.len() {
        let size = u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
        if bytes[at + 2] == b'O' {
            n += 1;
        }
        at += 3 + size;
    }
    n.saturating_sub(1)
}
