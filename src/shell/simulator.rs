//! The simulated vehicle's shell (tokio): runs a sans-IO simulated autopilot ([`SimVehicle`],
//! a PX4; [`SimArduPilot`], an ArduPilot) on a [`Link`], in real time. What `ulog-recv sim`,
//! the demo and the load benchmark run.

use std::time::{Duration, Instant};

use crate::shell::transport::{Link, Received};
use crate::sim::ardupilot::{ArduPilotConfig, ArduPilotStats, SimArduPilot};
use crate::sim::{ChunkedLog, SimVehicle, Simulated, VehicleConfig, VehicleStats};

/// How the simulator runs.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Stop once the stream is over: the receiver stopped it (its post-flight data acked), or
    /// the whole file was sent and `linger` passed without a STOP; otherwise run until
    /// shutdown.
    pub once: bool,
    pub linger: Duration,
    /// Pack frames into writes of up to this many bytes, as PX4 packs its UDP datagrams;
    /// 0: one frame per write.
    pub max_write: usize,
    /// Told once the whole file was sent (the stream still on, as PX4's would be): when a
    /// receiver in the same process may stop it.
    pub finished: Option<std::sync::Arc<tokio::sync::Notify>>,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            once: false,
            linger: Duration::from_secs(1),
            max_write: 0,
            finished: None,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct SimReport {
    pub stats: VehicleStats,
    /// Per acked chunk: first send → its ack (see [`SimVehicle::ack_round_trips`]).
    pub ack_round_trips: Vec<Duration>,
    /// When the last chunk went out, from the start.
    pub streamed_in: Option<Duration>,
    /// Frames the OS refused to send (the sender's own loss, not the link's or the
    /// receiver's).
    pub send_failures: u64,
}

/// Runs a simulated PX4 on `link` until `shutdown` completes (or, with `once`, the log is
/// out).
pub async fn run(
    link: Link,
    log: ChunkedLog,
    config: VehicleConfig,
    options: SimOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<SimReport> {
    let start = Instant::now();
    let mut vehicle = SimVehicle::new(log, config, start, std::time::SystemTime::now());
    let (finished_at, send_failures) = drive(link, &mut vehicle, options, shutdown).await?;
    Ok(SimReport {
        stats: vehicle.stats(),
        ack_round_trips: vehicle.ack_round_trips().to_vec(),
        streamed_in: finished_at.map(|t| t - start),
        send_failures,
    })
}

/// Runs a simulated ArduPilot with `log` (a `.bin` file's bytes) on `link`, as [`run`] runs
/// a PX4; its counters at the end.
pub async fn run_ardupilot(
    link: Link,
    log: Vec<u8>,
    config: ArduPilotConfig,
    options: SimOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<ArduPilotStats> {
    let mut vehicle = SimArduPilot::new(log, config, Instant::now());
    drive(link, &mut vehicle, options, shutdown).await?;
    Ok(vehicle.stats())
}

/// Drives `vehicle` on `link` in real time; when the whole log went out, and the frames the
/// OS refused to send.
async fn drive(
    mut link: Link,
    vehicle: &mut impl Simulated,
    options: SimOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<(Option<Instant>, u64)> {
    let mut buf = Vec::with_capacity(crate::shell::transport::MAX_READ);
    let mut write = Vec::with_capacity(options.max_write.max(300));
    let mut finished_at: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let now = Instant::now();
        let due = vehicle.poll_timeout().is_some_and(|t| t <= now);
        if due {
            // Work is due already (a fast stream): no trip through the timer wheel, whose
            // resolution is a millisecond; only a look at what arrived.
            while let Some(r) = link.try_recv(&mut buf) {
                receive(vehicle, &mut link, &buf, r);
            }
            vehicle.handle_timeout(now);
            tokio::task::yield_now().await;
        } else {
            let wake = vehicle
                .poll_timeout()
                .map(tokio::time::Instant::from_std)
                .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(1));
            tokio::select! {
                biased;
                _ = &mut shutdown => break,
                r = link.recv(&mut buf) => {
                    receive(vehicle, &mut link, &buf, r?);
                    while let Some(r) = link.try_recv(&mut buf) {
                        receive(vehicle, &mut link, &buf, r);
                    }
                }
                _ = tokio::time::sleep_until(wake) => vehicle.handle_timeout(Instant::now()),
            }
        }
        while let Some(frame) = vehicle.poll_transmit() {
            if options.max_write == 0 {
                link.send(&frame).await;
                continue;
            }
            if !write.is_empty() && write.len() + frame.len() > options.max_write {
                link.send(&write).await;
                write.clear();
            }
            write.extend_from_slice(&frame);
        }
        if !write.is_empty() {
            link.send(&write).await;
            write.clear();
        }
        if vehicle.finished() && finished_at.is_none() {
            tracing::info!(
                chunks = vehicle.sent(),
                "the whole log was sent; streaming on until a STOP"
            );
            finished_at = Some(Instant::now());
            if let Some(n) = &options.finished {
                n.notify_one();
            }
        }
        let stopped = vehicle.stopped();
        if options.once && (stopped || finished_at.is_some_and(|t| t.elapsed() >= options.linger)) {
            break;
        }
    }
    // What the last frames (an ACCEPTED) need to leave.
    while let Some(frame) = vehicle.poll_transmit() {
        link.send(&frame).await;
    }
    Ok((finished_at, link.send_failures()))
}

/// Hands one received read to the vehicle. A listening link answers whoever speaks MAVLink to
/// it: the simulator trusts its receiver.
fn receive(vehicle: &mut impl Simulated, link: &mut Link, buf: &[u8], r: Received) {
    let now = Instant::now();
    vehicle.handle_bytes(&buf[..r.len], now);
    link.datagram_checked(r, true, now);
}
