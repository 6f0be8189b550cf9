//! The `ulog-recv` binary: a thin command-line shell around the library. Without a
//! subcommand it is the receiving daemon (`ulog-recv --udp 14550`, [`daemon`]); the
//! subcommands are `info`, `sim`, `demo`, `snippet`, `export`, `tail`, `topics`, `upload`,
//! `uploads`, `fetch` and `fill`.
//!
//! - [`args`]: the command line; [`config_file`]: the config file under it;
//! - [`logging`]: tracing to stderr or the journal;
//! - [`daemon`], [`demo`], [`info`], [`uploads`], [`fetch`]: what the commands do.

mod args;
mod config_file;
mod daemon;
mod demo;
mod fetch;
mod info;
mod logging;
mod uploads;

use std::ffi::OsString;
use std::io::Write;

use anyhow::{Context, bail};
use clap::{CommandFactory, Parser};
use ulog_recv::live::ndjson::client::{self, TailOptions};
use ulog_recv::sim::VehicleConfig;
use ulog_recv::store::SplitPolicy;
use ulog_recv::store::input::{InputError, LogInput, log_input};
use ulog_recv::store::output::{OutputFile, WriteAhead};

use crate::args::{Cli, Command};
use crate::config_file::{options_in_force, with_config};
use crate::daemon::{receive, shutdown_signal};
use crate::demo::{demo, sim, synthetic_flight};
use crate::info::info;
use crate::logging::init_tracing;
use ulog_recv::sim::faults::FaultFlight;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{}", user_error(&error));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error as its user reads it: `Error: ` and the message, then what caused it, without a
/// backtrace (`RUST_BACKTRACE=1` is common in developers' shells; backtraces are for bugs,
/// and a panic still prints one).
fn user_error(error: &anyhow::Error) -> String {
    let mut text = format!("Error: {error}");
    let causes: Vec<String> = error.chain().skip(1).map(|c| c.to_string()).collect();
    if !causes.is_empty() {
        text.push_str("\n\nCaused by:");
        for (k, cause) in causes.iter().enumerate() {
            if causes.len() == 1 {
                text.push_str(&format!("\n    {cause}"));
            } else {
                text.push_str(&format!("\n    {k}: {cause}"));
            }
        }
    }
    text
}

fn run() -> anyhow::Result<()> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let mut cli = Cli::parse_from(&argv);
    let mut in_force = argv.clone();
    if cli.command.is_none()
        && let Some(path) = cli.receive.config.clone()
    {
        (cli, in_force) = with_config(&argv, &path)?;
    }
    let level = cli.receive.log_level.as_deref();
    let default = match cli.command {
        // The daemon and the simulator run long: they tell what they do.
        None | Some(Command::Sim { .. }) => "info",
        Some(_) => "warn",
    };
    let levels = init_tracing(level, default)?;
    if cli.command.is_none() && cli.receive.check_config {
        print!("{}", options_in_force(&in_force));
        return Ok(());
    }
    match cli.command {
        Some(Command::Info {
            file,
            json,
            diagnostics,
            analyzers,
        }) => match diagnostics {
            true => crate::info::diagnostics(&file, analyzers, json),
            false => info(&file, json),
        },
        Some(Command::Snippet {
            session,
            from,
            to,
            output,
            column,
            reference,
        }) => snippet(&session, from, to, &output, column.as_deref(), reference),
        Some(Command::Export {
            input,
            output,
            dataset,
            from,
            to,
            topics,
            diagnostics,
            compression,
            bag_version,
            column,
            bucket,
        }) => export(
            &input,
            match (output, dataset) {
                (Some(file), _) => ExportTo::File(file),
                (None, Some(url)) if url.to_string_lossy().starts_with("s3://") => {
                    ExportTo::Bucket(bucket.s3_options(&url.to_string_lossy()))
                }
                (None, Some(dir)) => ExportTo::Dataset(dir),
                (None, None) => bail!("name an output: -o FILE or --dataset DIR"),
            },
            ExportFormat {
                from,
                to,
                topics,
                diagnostics,
                compression,
                bag_version,
                column,
            },
        ),
        Some(Command::Sim {
            file,
            synthetic,
            duration,
            fault,
            on_the_ground,
            write,
            link,
            baud,
            link_rate,
            sysid,
            signing_key,
            once,
            max_write,
            sd_log_missing,
            arm_after,
            disarm_after,
            speed,
            impairment,
        }) => {
            // An ArduPilot log (`.bin`) makes it an ArduPilot.
            let mut dataflash = false;
            let bytes = match (&file, synthetic) {
                (Some(path), _) => {
                    match log_input(path) {
                        Ok(LogInput::File(_)) => {}
                        Err(InputError::DataFlash { session: false, .. }) => dataflash = true,
                        Err(e) => return Err(e.into()),
                        Ok(_) => bail!(
                            "{} is a directory: sim streams a .ulg or .bin file",
                            path.display()
                        ),
                    }
                    std::fs::read(path)
                        .with_context(|| format!("cannot read {}", path.display()))?
                }
                (None, _) => match fault {
                    Some(fault) => ulog_recv::sim::faults::fault_flight(FaultFlight {
                        fault,
                        armed: !on_the_ground,
                        seed: 1,
                        rc_lost_as_uint8: false,
                    }),
                    None => synthetic_flight(duration),
                },
            };
            if let Some(out) = write {
                std::fs::write(&out, &bytes)
                    .with_context(|| format!("cannot write {}", out.display()))?;
                return Ok(());
            }
            let Some(spec) = link.spec(baud) else {
                bail!("say how to reach the receiver: --udp-connect, --udp, --tcp or --serial");
            };
            let signing = signing_key
                .map(|path| ulog_recv::shell::keyfile::load_key(&path))
                .transpose()?;
            if dataflash {
                if sd_log_missing || arm_after.is_some() || impairment.lost_from.is_some() {
                    bail!(
                        "--sd-log-missing, --arm-after and --lost-from are for a simulated PX4 \
                         (a .ulg): the simulated ArduPilot streams its .bin as it is"
                    );
                }
                let config = ulog_recv::sim::ardupilot::ArduPilotConfig {
                    system_id: sysid,
                    link_rate: (link_rate > 0).then_some(link_rate),
                    impairment: impairment.impairment(),
                    seed: impairment.seed,
                    speed,
                    signing: signing.map(|key| ulog_recv::link::SigningSetup {
                        key,
                        link_id: 0,
                        timestamp: ulog_recv::link::signing::timestamp_at(
                            std::time::SystemTime::now(),
                        ),
                    }),
                    ..Default::default()
                };
                return runtime()?.block_on(demo::sim_ardupilot(bytes, spec, config, once));
            }
            if speed != 1 {
                bail!(
                    "--speed is for a simulated ArduPilot (a .bin): a simulated PX4 streams as \
                     fast as its link rate lets it"
                );
            }
            let config = VehicleConfig {
                system_id: sysid,
                link_rate: (link_rate > 0).then_some(link_rate),
                signing,
                impairment: impairment.impairment(),
                seed: impairment.seed,
                sd_log: !sd_log_missing,
                armed: arm_after.map(|from| {
                    let seconds = |s: f64| {
                        std::time::Duration::try_from_secs_f64(s)
                            .unwrap_or(std::time::Duration::MAX)
                    };
                    seconds(from)..disarm_after.map_or(std::time::Duration::MAX, seconds)
                }),
                ..VehicleConfig::default()
            };
            runtime()?.block_on(sim(bytes, spec, config, once, max_write))
        }
        Some(Command::Fetch {
            log,
            list,
            output,
            vehicle,
        }) => runtime()?.block_on(fetch::fetch(log, list, output, &vehicle)),
        Some(Command::Fill {
            session,
            json,
            card,
            vehicle,
        }) => match card {
            Some(card) => runtime()?.block_on(fetch::fill_from_card(&session, &card, json)),
            None => runtime()?.block_on(fetch::fill(&session, json, &vehicle)),
        },
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
                let stop = shutdown_signal().map_err(client::ClientError::from)?;
                let conn = client::connect(endpoint.endpoint()).await?;
                let mut out = std::io::stdout().lock();
                tokio::select! {
                    r = client::run_tail(conn, &options, &mut out) => r,
                    _ = stop => Ok(()),
                }
            });
            quiet_on_closed_output(result)
        }
        Some(Command::Upload { session, upload }) => {
            runtime()?.block_on(uploads::upload(&session, &upload))
        }
        Some(Command::Uploads { log_dir, json }) => {
            uploads::uploads(&log_dir.unwrap_or_else(args::default_log_dir), json)
        }
        Some(Command::Topics { json, endpoint }) => {
            let result = runtime()?.block_on(async {
                let conn = client::connect(endpoint.endpoint()).await?;
                client::run_topics(conn, json, &mut std::io::stdout().lock()).await
            });
            quiet_on_closed_output(result)
        }
        Some(Command::Event {
            name,
            after,
            json,
            endpoint,
        }) => {
            let result = runtime()?.block_on(async {
                let conn = client::connect(endpoint.endpoint()).await?;
                let after_s = after.map(|d| d.as_secs_f64());
                client::run_event(conn, &name, after_s, json, &mut std::io::stdout().lock()).await
            });
            quiet_on_closed_output(result)
        }
        Some(Command::Completions { shell }) => {
            let mut command = Cli::command();
            clap_complete::generate(shell, &mut command, "ulog-recv", &mut std::io::stdout());
            Ok(())
        }
        Some(Command::ManPages { dir }) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(Cli::command(), &dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))?;
            Ok(())
        }
        Some(Command::ConfigKeys) => {
            print!("{}", config_file::config_keys_markdown());
            Ok(())
        }
        Some(Command::Demo {
            log_dir,
            duration,
            link_rate,
            clean,
            foxglove,
        }) => runtime()?.block_on(demo(log_dir, duration, link_rate, clean, foxglove)),
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

/// A client's result, where a closed output (`ulog-recv tail | head`) is a normal end.
pub(crate) fn quiet_on_closed_output(
    result: Result<(), client::ClientError>,
) -> anyhow::Result<()> {
    match result {
        Err(e) if e.is_closed_output() => Ok(()),
        other => Ok(other?),
    }
}

/// One thread: the daemon's work is small and latency-bound (acks), and it leaves the other
/// cores to the companion computer's own jobs.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Writes `output` through `write`, under its name only once whole and synced; what `write`
/// returned.
fn write_output<T>(
    output: &std::path::Path,
    write: impl FnOnce(&std::fs::File) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let out = OutputFile::create(output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    let done = write(out.file())?;
    out.commit()
        .with_context(|| format!("cannot write {}", output.display()))?;
    Ok(done)
}

/// `ulog-recv snippet`.
fn snippet(
    session: &std::path::Path,
    from: f64,
    to: f64,
    output: &std::path::Path,
    column: Option<&str>,
    reference: bool,
) -> anyhow::Result<()> {
    use ulog_recv::store::reference;
    let us = |s: f64| (s.max(0.0) * 1e6).round() as u64;
    let (from, to) = (us(from), us(to));
    let latched = SplitPolicy::unlimited();
    let cut = || format!("cannot cut {}", session.display());
    let input = log_input(session)?;
    if reference {
        match input {
            LogInput::Session => {}
            LogInput::Snippet => {
                bail!("a referencing snippet is cut from a session, not from another snippet")
            }
            LogInput::File(_) => bail!(
                "{} is a file: a referencing snippet is cut from a session (its splits stay \
                 where they are)",
                session.display()
            ),
        }
        let (stats, copied) =
            reference::snippet_reference(session, from, to, &latched, column, output)
                .with_context(cut)?;
        let size: u64 = std::fs::read_dir(output)
            .with_context(|| format!("cannot read {}", output.display()))?
            .filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum();
        println!(
            "{}: {} bytes referencing {} bytes of {} ({:.2} %), {} samples in the window (+{} \
             latched), from {} split(s)",
            output.display(),
            size,
            copied,
            session.display(),
            100.0 * size as f64 / copied.max(1) as f64,
            stats.samples,
            stats.latched_samples,
            stats.splits_read
        );
        return Ok(());
    }
    let (bytes, stats) = match input {
        LogInput::Snippet => {
            let stream = reference::read_reference(session, column).with_context(cut)?;
            ulog_recv::store::snippet::cut_stream(&stream, from, to, &latched).with_context(cut)?
        }
        LogInput::File(_) => {
            let stream = std::fs::read(session)
                .with_context(|| format!("cannot read {}", session.display()))?;
            ulog_recv::store::snippet::cut_stream(&stream, from, to, &latched).with_context(cut)?
        }
        LogInput::Session => {
            ulog_recv::store::snippet::snippet(session, from, to, &latched, column)
                .with_context(cut)?
        }
    };
    write_output(output, |mut f| Ok(f.write_all(&bytes)?))?;
    let from = match input {
        LogInput::Session => format!(", from {} split(s)", stats.splits_read),
        _ => String::new(),
    };
    println!(
        "{}: {} bytes, {} samples in the window (+{} latched){from}",
        output.display(),
        bytes.len(),
        stats.samples,
        stats.latched_samples,
    );
    Ok(())
}

/// `ulog-recv export --dataset`: the flight's topic tables under `root`.
fn export_dataset(
    input: &std::path::Path,
    root: &std::path::Path,
    options: &ulog_recv::export::ExportOptions,
) -> anyhow::Result<()> {
    tables_input(input)?;
    let facts = flight_facts(input);
    let tables = ulog_recv::export::dataset::export_tables(input, options, &facts, root)
        .with_context(|| format!("cannot export {} to {}", input.display(), root.display()))?;
    let rows: u64 = tables.iter().map(|t| t.rows).sum();
    for table in &tables {
        println!("{}: {} rows", root.join(&table.key).display(), table.rows);
    }
    println!("{}: {} tables, {rows} rows", root.display(), tables.len());
    Ok(())
}

/// `input` as a flight to make tables of: either autopilot's log or session; anything else
/// refused as [`log_input`] refuses it.
fn tables_input(input: &std::path::Path) -> anyhow::Result<()> {
    if ulog_recv::store::input::dataflash_files(input).is_none() {
        log_input(input)?;
    }
    Ok(())
}

/// What the `flights` table says of `input` beyond its log: its session's manifest and
/// uploads (`upload.json`), if it is a session.
fn flight_facts(input: &std::path::Path) -> ulog_recv::export::dataset::FlightFacts {
    let journal = ulog_recv::upload::journal::load_journal(input)
        .ok()
        .flatten();
    ulog_recv::upload::tables::flight_facts(input, journal.as_ref())
}

/// `ulog-recv export --dataset s3://BUCKET/PREFIX`: the flight's tables into the bucket.
fn export_dataset_to_bucket(
    input: &std::path::Path,
    s3: &ulog_recv::upload::s3::S3Options,
    options: &ulog_recv::export::ExportOptions,
) -> anyhow::Result<()> {
    tables_input(input)?;
    let bucket = ulog_recv::upload::s3::Bucket::new(s3)?;
    let staging = std::env::temp_dir().join(format!("ulog-recv-tables-{}", std::process::id()));
    let tables = runtime()?
        .block_on(ulog_recv::upload::tables::export_to_bucket(
            input,
            options,
            &flight_facts(input),
            &bucket,
            &staging,
        ))
        .with_context(|| format!("cannot export {} to {}", input.display(), s3.url))?;
    let rows: u64 = tables.iter().map(|t| t.1).sum();
    for (key, rows) in &tables {
        println!("s3://{}/{key}: {rows} rows", bucket.name());
    }
    println!("{}: {} tables, {rows} rows", s3.url, tables.len());
    Ok(())
}

/// `ulog-recv export` of an ArduPilot flight (its DataFlash `files`) to `output`: MCAP, or
/// the whole flight as one DataFlash log (what a fill recovered in place).
fn export_bin(
    input: &std::path::Path,
    files: &[std::path::PathBuf],
    output: &std::path::Path,
    options: &ulog_recv::export::ExportOptions,
) -> anyhow::Result<()> {
    let extension = output.extension().and_then(|e| e.to_str());
    if matches!(extension, Some("bin" | "BIN")) {
        let messages = write_output(output, |file| {
            let writer = std::io::BufWriter::new(WriteAhead::new(file));
            ulog_recv::export::flight::write_bin_log(files, writer)
                .with_context(|| format!("cannot export to {}", output.display()))
        })?;
        println!("{}: {messages} messages", output.display());
        return Ok(());
    }
    if extension != Some("mcap") {
        bail!(
            "{} is an ArduPilot flight: it exports to NAME.mcap or NAME.bin, or as tables \
             (--dataset)",
            input.display()
        );
    }
    let stats = write_output(output, |file| {
        let writer = std::io::BufWriter::new(WriteAhead::new(file));
        ulog_recv::export::mcap::dataflash::write_bin(files, options, writer)
            .with_context(|| format!("cannot export to {}", output.display()))
    })?;
    println!(
        "{}: {} channels, {} samples, {} logged strings, {} findings",
        output.display(),
        stats.channels,
        stats.samples,
        stats.log_messages,
        stats.findings,
    );
    Ok(())
}

/// What `export` writes beside its input and output.
struct ExportFormat {
    from: Option<f64>,
    to: Option<f64>,
    topics: Vec<String>,
    diagnostics: ulog_recv::diagnose::Selection,
    compression: Option<ulog_recv::export::tide::Compression>,
    bag_version: String,
    column: Option<String>,
}

/// Where `export` writes: one file, or a dataset's tables under a directory or in a bucket.
enum ExportTo {
    File(std::path::PathBuf),
    Dataset(std::path::PathBuf),
    Bucket(ulog_recv::upload::s3::S3Options),
}

fn export(input: &std::path::Path, to: ExportTo, format: ExportFormat) -> anyhow::Result<()> {
    let us = |s: f64| (s.max(0.0) * 1e6).round() as u64;
    let options = ulog_recv::export::ExportOptions {
        from_us: format.from.map(us),
        to_us: format.to.map(us),
        topics: format.topics,
        column: format.column,
        diagnostics: format.diagnostics,
    };
    let output = match to {
        ExportTo::File(file) => file,
        ExportTo::Dataset(root) => {
            if format.compression.is_some() {
                bail!("--compression is for a TIDE export (NAME.tide)");
            }
            return export_dataset(input, &root, &options);
        }
        ExportTo::Bucket(s3) => {
            if format.compression.is_some() {
                bail!("--compression is for a TIDE export (NAME.tide)");
            }
            return export_dataset_to_bucket(input, &s3, &options);
        }
    };
    let output = output.as_path();
    let extension = output.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !["mcap", "bag", "tide", "tid", "ulg", "bin", "BIN"].contains(&extension) {
        bail!(
            "cannot tell the format from {}: name the output NAME.mcap, NAME.bag, NAME.tide or \
             NAME.ulg (NAME.bin for an ArduPilot flight)",
            output.display()
        );
    }
    let tide = matches!(extension, "tide" | "tid");
    if format.compression.is_some() && !tide {
        bail!("--compression is for a TIDE export (NAME.tide)");
    }
    if let Some(files) = ulog_recv::store::input::dataflash_files(input) {
        return export_bin(input, &files, output, &options);
    }
    // Refused as it is, not as a file `load` cannot read.
    log_input(input)?;
    if matches!(extension, "bin" | "BIN") {
        bail!(
            "{} is a PX4 flight: NAME.bin is for an ArduPilot flight (name the output NAME.ulg \
             for the whole flight as one log)",
            input.display()
        );
    }
    let flight = ulog_recv::export::flight::open(input, &options)
        .with_context(|| format!("cannot read {}", input.display()))?;
    let flight = flight.as_ref();
    if extension == "ulg" {
        // The flight as one log: a session's splits joined, amendments merged.
        write_output(output, |mut f| {
            std::io::copy(&mut flight.open()?, &mut f)?;
            Ok(())
        })?;
        println!("{}: {} bytes", output.display(), flight.len());
        return Ok(());
    }
    let compression = format
        .compression
        .unwrap_or(ulog_recv::export::tide::Compression::Gzip);
    let bag_version = format.bag_version.as_str();
    let stats = write_output(output, |file| {
        let writer = std::io::BufWriter::new(WriteAhead::new(file));
        match (extension, bag_version) {
            ("mcap", _) => ulog_recv::export::mcap::write(flight, &options, writer),
            ("tide" | "tid", _) => {
                ulog_recv::export::tide::write::write(flight, &options, compression, writer)
            }
            (_, "1.2") => ulog_recv::export::bag::write_v12(flight, &options, writer),
            _ => ulog_recv::export::bag::write(flight, &options, writer),
        }
        .with_context(|| format!("cannot export to {}", output.display()))
    })?;
    // Only MCAP has a `/diagnostics` channel.
    let findings = match (extension, stats.findings) {
        ("mcap", 1) => ", 1 finding".to_owned(),
        ("mcap", n) => format!(", {n} findings"),
        _ => String::new(),
    };
    println!(
        "{}: {} channels, {} samples, {} logged strings{findings}",
        output.display(),
        stats.channels,
        stats.samples,
        stats.log_messages,
    );
    Ok(())
}
