//! `ulog-recv fetch` and `ulog-recv fill`: the vehicle's SD-card logs over MAVLink FTP,
//! listed, downloaded, or used to fill a session's dropouts.

use std::path::{Path, PathBuf};

use anyhow::Context;
use ulog_recv::shell::fill_bin::{Card, fill_bin_session};
use ulog_recv::shell::vehicle_files::VehicleFiles;

use crate::args::VehicleLinkArgs;

pub(crate) async fn fetch(
    log: Option<String>,
    list: bool,
    output: Option<PathBuf>,
    vehicle: &VehicleLinkArgs,
) -> anyhow::Result<()> {
    let spec = vehicle.spec()?;
    let mut files =
        VehicleFiles::connect(&spec, vehicle.ftp(), vehicle.signing()?, vehicle.wait).await?;
    if list {
        for log in files.list_logs().await? {
            println!("{}\t{}", log.path, log.size);
        }
        return Ok(());
    }
    let log = log.context("name the log to fetch (see --list)")?;
    let name = log.rsplit('/').next().unwrap_or(&log).to_string();
    let output = output.unwrap_or_else(|| PathBuf::from(name));
    let started = std::time::Instant::now();
    let fetched = files
        .download(&log, &output, |have, size| {
            tracing::info!(have, size, "fetching");
        })
        .await
        .with_context(|| format!("cannot fetch {log}"))?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{}: {fetched} bytes fetched in {seconds:.1} s ({:.0} B/s), CRC32 checked",
        output.display(),
        fetched as f64 / seconds.max(1e-3)
    );
    Ok(())
}

pub(crate) async fn fill(
    session: &Path,
    json: bool,
    vehicle: &VehicleLinkArgs,
) -> anyhow::Result<()> {
    let ardupilot = session.is_dir() && ulog_recv::store::input::dataflash_files(session).is_some();
    if !ardupilot {
        ulog_recv::store::input::ulog_session_input(session, "fill")?;
    }
    let spec = vehicle.spec()?;
    let mut files =
        VehicleFiles::connect(&spec, vehicle.ftp(), vehicle.signing()?, vehicle.wait).await?;
    if ardupilot {
        return fill_bin(session, Card::Vehicle(&mut files), json).await;
    }
    let report = ulog_recv::shell::fill::fill_session(session, &mut files)
        .await
        .with_context(|| format!("cannot fill {}", session.display()))?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    println!(
        "{}: {} dropout(s): {} filled now ({} partly: the SD log lost records there too), {} \
         filled before, {} not filled; {} records ({} bytes) recovered from {} (the head, \
         before the stream's first record: {} for {} bytes fetched; the tail, after its last: \
         {} for {} bytes fetched); {} bytes fetched; {} dropout(s) read where the gap before \
         put them, the others searched for",
        session.display(),
        report.dropouts,
        report.filled,
        report.partial,
        report.already_filled,
        report.unfilled.len(),
        report.records,
        report.record_bytes,
        report.sd_log.as_deref().unwrap_or("-"),
        report.head_records,
        report.head_fetched_bytes,
        report.tail_records,
        report.tail_fetched_bytes,
        report.fetched_bytes,
        report.walked,
    );
    for (split, offset, why) in &report.unfilled {
        println!("  not filled: {split} at byte {offset}: {why}");
    }
    Ok(())
}

/// `ulog-recv fill SESSION --card FILE`: an ArduPilot session filled from a copy of the
/// flight's card log.
pub(crate) async fn fill_from_card(session: &Path, card: &Path, json: bool) -> anyhow::Result<()> {
    if !session.is_dir() || ulog_recv::store::input::dataflash_files(session).is_none() {
        anyhow::bail!(
            "{}: --card is for an ArduPilot session (a PX4 session is filled over MAVLink FTP)",
            session.display()
        );
    }
    let file =
        std::fs::File::open(card).with_context(|| format!("cannot open {}", card.display()))?;
    let name = card.file_name().map_or_else(
        || card.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    fill_bin(session, Card::File { name, file }, json).await
}

/// An ArduPilot session filled from `card`, and what it came to printed.
async fn fill_bin(session: &Path, card: Card<'_>, json: bool) -> anyhow::Result<()> {
    let report = fill_bin_session(session, card)
        .await
        .with_context(|| format!("cannot fill {}", session.display()))?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    if report.filled_before {
        println!("{}: filled before; nothing done", session.display());
        return Ok(());
    }
    println!(
        "{}: {} gap(s) filled ({} marked dropouts, the others the vehicle's drops at the \
         source), {} not filled; {} records ({} bytes) recovered from {}; {} bytes of the \
         card read in {} reads{}",
        session.display(),
        report.filled,
        report.marked,
        report.unfilled.len(),
        report.records,
        report.record_bytes,
        report.card_log.as_deref().unwrap_or("-"),
        report.fetched_bytes,
        report.reads,
        report
            .amendment
            .as_deref()
            .map_or(String::new(), |a| format!(", into {a}")),
    );
    for why in &report.unfilled {
        println!("  not filled: {why}");
    }
    Ok(())
}
