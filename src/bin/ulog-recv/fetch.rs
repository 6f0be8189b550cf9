//! `ulog-recv fetch` and `ulog-recv fill`: the vehicle's SD-card logs over MAVLink FTP,
//! listed, downloaded, or used to fill a session's dropouts.

use std::path::{Path, PathBuf};

use anyhow::Context;
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
    ulog_recv::store::input::ulog_session_input(session, "fill")?;
    let spec = vehicle.spec()?;
    let mut files =
        VehicleFiles::connect(&spec, vehicle.ftp(), vehicle.signing()?, vehicle.wait).await?;
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
