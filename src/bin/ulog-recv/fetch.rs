//! `ulog-recv fetch`: the vehicle's SD-card logs over MAVLink FTP, listed or downloaded.

use std::path::PathBuf;

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
    let mut files = VehicleFiles::connect(&spec, vehicle.ftp(), vehicle.wait).await?;
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
