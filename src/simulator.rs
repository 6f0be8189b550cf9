//! The simulated vehicle's shell (tokio): runs a sans-IO [`SimVehicle`] on a [`Link`], in real
//! time. What `ulog-recv sim` and the demo run.

use std::time::{Duration, Instant};

use crate::link::{ChunkedLog, SimVehicle, VehicleConfig, VehicleStats};
use crate::transport::Link;

/// Runs the vehicle until `shutdown` completes, or, with `once`, until the whole file was sent
/// and `linger` has passed (time for the receiver to ask for lost acks).
pub async fn run(
    mut link: Link,
    log: ChunkedLog,
    config: VehicleConfig,
    once: bool,
    linger: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<VehicleStats> {
    let mut vehicle = SimVehicle::new(log, config, Instant::now());
    let mut buf = Vec::with_capacity(crate::transport::MAX_READ);
    let mut finished_at: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let wake = vehicle
            .poll_timeout()
            .map(tokio::time::Instant::from_std)
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(1));
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            r = link.recv(&mut buf) => {
                let n = r?;
                vehicle.handle_bytes(&buf[..n], Instant::now());
                while let Some(n) = link.try_recv(&mut buf) {
                    vehicle.handle_bytes(&buf[..n], Instant::now());
                }
            }
            _ = tokio::time::sleep_until(wake) => vehicle.handle_timeout(Instant::now()),
        }
        while let Some(frame) = vehicle.poll_transmit() {
            link.send(&frame).await;
        }
        if vehicle.finished() && finished_at.is_none() {
            tracing::info!(stats = ?vehicle.stats(), "sim: the whole log was sent");
            finished_at = Some(Instant::now());
        }
        if once && finished_at.is_some_and(|t| t.elapsed() >= linger) {
            break;
        }
    }
    Ok(vehicle.stats())
}
