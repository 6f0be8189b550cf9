//! Being a good systemd service: readiness, a status line a person can read, watchdog pings
//! and the stop notice (sd_notify), and the daemon's status text.
//!
//! [`StatusText`] is plain state (events and counters in, a line out), tested without systemd;
//! [`Notifier`] sends what the daemon's loop decides, and does nothing when the daemon is not
//! run by systemd (no `NOTIFY_SOCKET`).

use std::time::{Duration, Instant};

use sd_notify::NotifyState;

use crate::autopilot::Autopilot;
use crate::link::{Event, SessionStats};
use crate::store::thread::StorageStats;

/// Sends sd_notify messages; see the module docs.
#[derive(Debug, Clone)]
pub struct Notifier {
    enabled: bool,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From the environment systemd gives (`NOTIFY_SOCKET`, `WATCHDOG_USEC`, `WATCHDOG_PID`).
    pub fn from_env() -> Self {
        Self {
            enabled: std::env::var_os("NOTIFY_SOCKET").is_some(),
            watchdog: sd_notify::watchdog_enabled(),
        }
    }

    /// The watchdog timeout, when systemd asks for pings.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    /// How often the daemon's loop should report (and ping): every second, or a third of the
    /// watchdog timeout if that is shorter.
    pub fn report_interval(&self) -> Duration {
        let second = Duration::from_secs(1);
        self.watchdog.map_or(second, |w| (w / 3).min(second))
    }

    fn send(&self, states: &[NotifyState<'_>]) {
        if self.enabled
            && let Err(e) = sd_notify::notify(states)
        {
            tracing::warn!(error = %e, "cannot notify systemd");
        }
    }

    /// `READY=1` with a first status.
    pub fn ready(&self, status: &str) {
        self.send(&[NotifyState::Ready, NotifyState::Status(status)]);
    }

    /// `STATUS=`, and `WATCHDOG=1` when the watchdog is on: call it from the main loop only,
    /// so that the pings stop when the loop is stuck.
    pub fn alive(&self, status: &str) {
        if self.watchdog.is_some() {
            self.send(&[NotifyState::Status(status), NotifyState::Watchdog]);
        } else {
            self.send(&[NotifyState::Status(status)]);
        }
    }

    /// `STOPPING=1`.
    pub fn stopping(&self) {
        self.send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
    }
}

/// The daemon's one-line status: "streaming from sysid 1 (PX4): 96.3 KB/s, 0.2 % lost, 3
/// clients".
#[derive(Debug, Default)]
pub struct StatusText {
    vehicle: Option<(u8, Autopilot)>,
    streaming: bool,
    previous: Option<(Instant, SessionStats)>,
}

impl StatusText {
    /// Follows the session's events (vehicle found or lost, log opened or closed).
    pub fn event(&mut self, event: &Event) {
        match event {
            Event::VehicleFound {
                system_id,
                autopilot,
                ..
            } => self.vehicle = Some((*system_id, *autopilot)),
            Event::VehicleLost => {
                self.vehicle = None;
                self.streaming = false;
            }
            Event::LogOpened { .. } => self.streaming = true,
            Event::LogClosed { .. } => self.streaming = false,
            _ => {}
        }
    }

    /// The line for the counters at `now` (rates over the time since the previous call);
    /// `clients` of the live socket, if it runs; `waiting_on` names the link. A link problem,
    /// start-up repairs, a stalled store and samples the disk could not take follow it.
    pub fn line(
        &mut self,
        stats: &SessionStats,
        storage: &StorageStats,
        clients: Option<usize>,
        waiting_on: &str,
        now: Instant,
    ) -> String {
        let rates = self
            .previous
            .as_ref()
            .map(|(then, prev)| stats.rates_since(prev, now.duration_since(*then).as_secs_f64()))
            .unwrap_or_default();
        self.previous = Some((now, *stats));
        let clients = match clients {
            Some(1) => ", 1 client".to_owned(),
            Some(n) => format!(", {n} clients"),
            None => String::new(),
        };
        let line = match (self.vehicle, self.streaming) {
            (None, _) => format!("waiting for a vehicle on {waiting_on}{clients}"),
            (Some((id, autopilot)), false) => {
                format!("vehicle sysid {id} ({autopilot}) found, not streaming{clients}")
            }
            (Some((id, autopilot)), true) => format!(
                "streaming from sysid {id} ({autopilot}): {:.1} KB/s, {:.1} % lost{clients}",
                rates.log_bytes_per_s / 1000.0,
                rates.loss_percent
            ),
        };
        let mut line = line;
        if let Some(problem) = stats.problem {
            line.push_str(&format!("; {problem}"));
        }
        if storage.recovering {
            line.push_str("; repairing what a crash left in the log directory");
        }
        if let Some(ms) = storage.stalled_ms {
            line.push_str(&format!(
                "; storage stalled for {} s ({} waiting)",
                ms / 1000,
                crate::shell::values::show_size(storage.queued_bytes)
            ));
        }
        if storage.lost_samples > 0 {
            line.push_str(&format!(
                "; {} samples not stored (the disk was too slow)",
                storage.lost_samples
            ));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_follows_the_vehicle_and_the_rates() {
        let mut s = StatusText::default();
        let t0 = Instant::now();
        let mut stats = SessionStats::default();
        let none = StorageStats::default();
        assert_eq!(
            s.line(&stats, &none, Some(0), "udp 0.0.0.0:14550", t0),
            "waiting for a vehicle on udp 0.0.0.0:14550, 0 clients"
        );
        s.event(&Event::VehicleFound {
            system_id: 1,
            component_id: 1,
            autopilot: crate::autopilot::Autopilot::Px4,
        });
        assert_eq!(
            s.line(&stats, &none, None, "x", t0),
            "vehicle sysid 1 (PX4) found, not streaming"
        );
        s.event(&Event::LogOpened {
            number: 0,
            format: crate::autopilot::LogFormat::ULog,
        });
        stats.log_bytes = 96_300;
        stats.chunks = 998;
        stats.lost_chunks = 2;
        assert_eq!(
            s.line(&stats, &none, Some(3), "x", t0 + Duration::from_secs(1)),
            "streaming from sysid 1 (PX4): 96.3 KB/s, 0.2 % lost, 3 clients"
        );
        s.event(&Event::VehicleLost);
        assert!(
            s.line(&stats, &none, Some(1), "x", t0)
                .starts_with("waiting")
        );
        // A link problem in force is said after the state.
        stats.problem = Some(crate::link::LinkProblem::VehicleSignsNoKey { system_id: 1 });
        let line = s.line(&stats, &none, None, "x", t0);
        assert!(
            line.starts_with("waiting for a vehicle on x; vehicle 1 signs its MAVLink frames")
                && line.contains("--signing-key"),
            "{line}"
        );
        // A stalled store and samples it could not take.
        let slow = StorageStats {
            queued_bytes: 12 << 20,
            lost_samples: 4321,
            stalled_ms: Some(7_400),
            ..StorageStats::default()
        };
        stats.problem = None;
        let line = s.line(&stats, &slow, None, "x", t0);
        assert!(
            line.ends_with(
                "; storage stalled for 7 s (12M waiting); 4321 samples not stored (the disk \
                 was too slow)"
            ),
            "{line}"
        );
    }

    #[test]
    fn reports_come_three_times_per_watchdog_timeout_at_least() {
        let mut n = Notifier {
            enabled: false,
            watchdog: None,
        };
        assert_eq!(n.report_interval(), Duration::from_secs(1));
        n.watchdog = Some(Duration::from_millis(600));
        assert_eq!(n.report_interval(), Duration::from_millis(200));
        n.watchdog = Some(Duration::from_secs(30));
        assert_eq!(n.report_interval(), Duration::from_secs(1));
    }
}
