//! `ulog-recv sim` (a simulated PX4 on a link) and `ulog-recv demo` (the simulated vehicle
//! and the receiver in one process, publishing too).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use ulog_recv::link::{Event, SessionConfig};
use ulog_recv::live::clients::ServeError;
use ulog_recv::live::thread::{PublishConfig, PublishServer};
use ulog_recv::shell::receiver::{Notice, ReceiverOptions};
use ulog_recv::shell::simulator::SimOptions;
use ulog_recv::shell::transport::{Link, LinkSpec};
use ulog_recv::sim::{Impairment, VehicleConfig, chunk_log};
use ulog_recv::store::{SplitPolicy, StoreOptions};

use crate::daemon::{controls_on_sighup, print_status, shutdown_signal};
use crate::info::info;

pub(crate) fn synthetic_flight(duration_s: u32) -> Vec<u8> {
    ulog_recv::sim::synth::generate(ulog_recv::sim::synth::SynthOptions {
        duration_s,
        seed: 1,
        appended_data: false,
    })
}

pub(crate) async fn sim(
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
    let report =
        ulog_recv::shell::simulator::run(link, log, config, options, shutdown_signal()?).await?;
    // The vehicle's counters, one JSON line, for scripts and tests.
    println!("{}", serde_json::to_string(&report.stats)?);
    Ok(())
}

/// `ulog-recv sim FILE.bin`: a simulated ArduPilot streams the log.
pub(crate) async fn sim_ardupilot(
    file: Vec<u8>,
    spec: LinkSpec,
    config: ulog_recv::sim::ardupilot::ArduPilotConfig,
    once: bool,
) -> anyhow::Result<()> {
    let link = Link::open(&spec).await?;
    eprintln!(
        "ulog-recv sim: ArduPilot {} on {spec}, {} bytes of log to stream",
        config.system_id,
        file.len()
    );
    let options = SimOptions {
        once,
        ..SimOptions::default()
    };
    let stats =
        ulog_recv::shell::simulator::run_ardupilot(link, file, config, options, shutdown_signal()?)
            .await?;
    // The vehicle's counters, one JSON line, for scripts and tests.
    println!("{}", serde_json::to_string(&stats)?);
    Ok(())
}

pub(crate) async fn demo(
    log_dir: Option<PathBuf>,
    duration: u32,
    link_rate: u64,
    clean: bool,
    foxglove: SocketAddr,
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
        "demo: a simulated PX4 streams a {duration} s synthetic flight at up to {} KB/s over \
         loopback UDP ({}), the receiver on {addr} writes into {}",
        link_rate * 7 / 10_000,
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
        link_rate: Some(link_rate),
        impairment,
        seed: 7,
        ..VehicleConfig::default()
    };
    // The receiver stops once the vehicle has sent the whole flight, as a user would: its
    // STOP brings the vehicle's post-flight data, then the vehicle is done.
    let sent_all = std::sync::Arc::new(tokio::sync::Notify::new());
    let vehicle_options = SimOptions {
        once: true,
        linger: Duration::from_secs(10),
        finished: Some(sent_all.clone()),
        ..SimOptions::default()
    };
    let vehicle = async move {
        ulog_recv::shell::simulator::run(
            vehicle_link,
            log,
            config,
            vehicle_options,
            std::future::pending::<()>(),
        )
        .await
        .map(|r| r.stats)
    };
    let mut policy = SplitPolicy::unlimited();
    policy.max_duration_us = Some(20_000_000);
    // The demo publishes too: `ulog-recv tail` in another terminal follows it.
    let socket = std::env::temp_dir().join(format!("ulog-recv-demo-{}.sock", std::process::id()));
    let (event_tx, event_rx) = tokio::sync::mpsc::unbounded_channel();
    let config = |foxglove| PublishConfig {
        unix: Some(socket.clone()),
        foxglove: Some(foxglove),
        event_requests: Some(event_tx.clone()),
        ..PublishConfig::default()
    };
    let (feed, server) = match PublishServer::start(config(foxglove)) {
        Ok(started) => started,
        // Another demo has the port: any free one will do.
        Err(ServeError::Bind { .. }) => {
            PublishServer::start(config(SocketAddr::new(foxglove.ip(), 0)))?
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "  follow it live in another terminal: ulog-recv tail --socket {} 'vehicle_*'",
        socket.display()
    );
    if let Some(addr) = server.foxglove_addr() {
        println!(
            "  or in Foxglove or PlotJuggler: open a Foxglove WebSocket connection to ws://{addr}"
        );
    }
    let options = ReceiverOptions {
        store: StoreOptions {
            policy,
            ..StoreOptions::new(log_dir)
        },
        session: SessionConfig::default(),
        status_interval: Duration::from_secs(1),
        publish: Some(feed),
        signing_reservation: None,
        store_queue_bytes: 32 << 20,
        uploads: None,
        ftp: None,
        event_requests: Some(event_rx),
        diagnostics_statustext: ulog_recv::diagnose::FindingFilter::Of(
            ulog_recv::diagnose::Selection::NONE,
        ),
    };
    let stop = shutdown_signal()?;
    let receiver = ulog_recv::shell::receiver::run(
        receiver_link,
        options,
        async move {
            tokio::select! {
                _ = sent_all.notified() => {
                    // The last chunks a moment to arrive and be put in order.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                _ = stop => {},
            }
        },
        controls_on_sighup(|| None)?,
        |n| match n {
            Notice::Event(Event::LogBytes(_)) => {}
            Notice::Event(e) => println!("  {e}"),
            Notice::SessionOpened(p) => println!("  writing {}", p.display()),
            Notice::SessionClosed(p) => println!("  closed {}", p.display()),
            Notice::Recorded(_) => {}
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
