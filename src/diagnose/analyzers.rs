//! The five analyzers, each a small state machine fed the fields it reads (found by
//! [`super::Detectors`]) and appending its findings. Definitions, thresholds and quirks are
//! Flight Review v2's; each says where it keeps one.

use super::{AnalyzerId, Evidence, Finding, Severity};

/// `vehicle_status.arming_state` of an armed vehicle.
pub(super) const ARMED: u8 = 2;
/// `vehicle_status.arming_state` of a vehicle on standby (disarmed, ready to arm).
pub(super) const STANDBY: u8 = 1;

/// Seconds, for a summary.
fn secs(us: u64) -> f64 {
    us as f64 / 1e6
}

/// Whether a finding made at `ts` is held back because one was made less than `repeat_us`
/// before. A finding is held back too in the first `repeat_us` of boot time (the last one is
/// taken as made at 0), and never when the sample has no time: both as Flight Review v2.
fn too_soon(ts: u64, last_us: u64, repeat_us: u64) -> bool {
    ts > 0 && ts.wrapping_sub(last_us) < repeat_us
}

/// Battery brownout: while armed, the pack's voltage below 3.3 V per cell; the cells are
/// counted once, from the first reading (taken as full, 4.2 V per cell, even when it is
/// logged disarmed or half-empty). Always critical, a point in time, at most one per 30 s.
#[derive(Debug, Default)]
pub(super) struct Battery {
    armed: bool,
    /// Cells and critical voltage, from the first reading.
    threshold: Option<(u8, f32)>,
    last_us: u64,
}

const CELL_FULL_V: f32 = 4.2;
const CELL_CRITICAL_V: f32 = 3.3;
const BROWNOUT_REPEAT_US: u64 = 30_000_000;

impl Battery {
    pub(super) fn status(&mut self, arming: Option<u8>) {
        if let Some(a) = arming {
            self.armed = a == ARMED;
        }
    }

    pub(super) fn sample(
        &mut self,
        ts: u64,
        voltage: Option<f32>,
        current: impl FnOnce() -> Option<f32>,
        out: &mut Vec<Finding>,
    ) {
        let Some(voltage) = voltage.filter(|v| v.is_finite() && *v > 0.0) else {
            return;
        };
        let (cells, critical_v) = *self.threshold.get_or_insert_with(|| {
            let cells = ((voltage / CELL_FULL_V).round() as u8).clamp(1, 12);
            (cells, f32::from(cells) * CELL_CRITICAL_V)
        });
        if !self.armed || too_soon(ts, self.last_us, BROWNOUT_REPEAT_US) {
            return;
        }
        if voltage < critical_v {
            self.last_us = ts;
            out.push(Finding {
                id: AnalyzerId::BatteryBrownout,
                summary: format!(
                    "battery at {voltage:.2} V, below {critical_v:.1} V ({cells}S at 3.3 V a \
                     cell), armed, at {:.1} s",
                    secs(ts)
                ),
                severity: Severity::Critical,
                timestamp_us: ts,
                end_timestamp_us: None,
                evidence: Evidence::BatteryBrownout {
                    voltage_v: voltage,
                    critical_threshold_v: critical_v,
                    current_a: current(),
                },
            });
        }
    }
}

/// EKF failure: an innovation test ratio (velocity, position, height) above 1.0 without a
/// break, a warning once it has lasted 2 s and a critical once 5 s; one of each per
/// exceedance (a critical stands for the warning not yet made). Every instance of
/// `estimator_status` feeds the same three windows, and armed or not, as Flight Review v2.
#[derive(Debug, Default)]
pub(super) struct Ekf {
    tests: [Exceedance; 3],
}

const INNOVATIONS: [&str; 3] = ["velocity", "position", "height"];
const TEST_RATIO_LIMIT: f32 = 1.0;
const EKF_WARNING_US: u64 = 2_000_000;
const EKF_CRITICAL_US: u64 = 5_000_000;

/// One test ratio's run above the limit.
#[derive(Debug, Default)]
struct Exceedance {
    since: Option<u64>,
    warned: bool,
    critical: bool,
}

impl Ekf {
    pub(super) fn sample(&mut self, ts: u64, ratios: [Option<f32>; 3], out: &mut Vec<Finding>) {
        for ((test, ratio), name) in self.tests.iter_mut().zip(ratios).zip(INNOVATIONS) {
            let Some(ratio) = ratio.filter(|r| r.is_finite()) else {
                continue;
            };
            if ratio <= TEST_RATIO_LIMIT {
                *test = Exceedance::default();
                continue;
            }
            let start = *test.since.get_or_insert(ts);
            let lasted = ts.saturating_sub(start);
            let severity = if lasted >= EKF_CRITICAL_US && !test.critical {
                test.critical = true;
                test.warned = true;
                Severity::Critical
            } else if lasted >= EKF_WARNING_US && !test.warned {
                test.warned = true;
                Severity::Warning
            } else {
                continue;
            };
            out.push(Finding {
                id: AnalyzerId::EkfFailure,
                summary: format!(
                    "EKF {name} test ratio above {TEST_RATIO_LIMIT} for {:.1} s from {:.1} s",
                    secs(lasted),
                    secs(start)
                ),
                severity,
                timestamp_us: start,
                end_timestamp_us: Some(ts),
                evidence: Evidence::EkfFailure {
                    innovation: name.to_owned(),
                    test_ratio: ratio,
                    threshold: TEST_RATIO_LIMIT,
                },
            });
        }
    }

    /// A gap: a run above the limit starts again after it (what was said stays said).
    pub(super) fn lose_sight(&mut self) {
        for t in &mut self.tests {
            t.since = None;
        }
    }
}

/// GPS interference, against the flight's own first 10 fixes (their mean EPH and satellite
/// count): EPH above 5 m where the baseline was under 2 m, EPV above 10 m, or the satellites
/// used below half the baseline. Critical when EPH is above 10 m or fewer than 4 satellites
/// are used, else a warning; a point in time, at most one per 5 s. Armed or not, as Flight
/// Review v2.
#[derive(Debug, Default)]
pub(super) struct Gps {
    samples: u32,
    eph_sum: f64,
    satellites_sum: f64,
    /// Mean EPH and satellites of the first fixes.
    baseline: Option<(f32, f64)>,
    last_us: u64,
}

const BASELINE_FIXES: u32 = 10;
const EPH_SPIKE_M: f32 = 5.0;
const EPH_BASELINE_GOOD_M: f32 = 2.0;
const EPH_CRITICAL_M: f32 = 10.0;
const EPV_SPIKE_M: f32 = 10.0;
const SATELLITES_CRITICAL: u16 = 4;
const GPS_REPEAT_US: u64 = 5_000_000;

impl Gps {
    pub(super) fn sample(
        &mut self,
        ts: u64,
        eph: Option<f32>,
        epv: Option<f32>,
        satellites: Option<u8>,
        out: &mut Vec<Finding>,
    ) {
        let Some((base_eph, base_sats)) = self.baseline else {
            if let Some(e) = eph.filter(|e| e.is_finite()) {
                self.eph_sum += f64::from(e);
            }
            if let Some(s) = satellites {
                self.satellites_sum += f64::from(s);
            }
            self.samples += 1;
            if self.samples == BASELINE_FIXES {
                let n = f64::from(BASELINE_FIXES);
                self.baseline = Some(((self.eph_sum / n) as f32, self.satellites_sum / n));
            }
            return;
        };
        if too_soon(ts, self.last_us, GPS_REPEAT_US) {
            return;
        }
        let (eph, epv) = (eph.unwrap_or(0.0), epv.unwrap_or(0.0));
        let satellites = satellites.map_or(0, u16::from);
        let eph_spike = base_eph < EPH_BASELINE_GOOD_M && eph > EPH_SPIKE_M;
        let epv_spike = epv > EPV_SPIKE_M;
        let satellites_drop = base_sats > 0.0 && f64::from(satellites) < base_sats * 0.5;
        if !(eph_spike || epv_spike || satellites_drop) {
            return;
        }
        let severity = if eph > EPH_CRITICAL_M || satellites < SATELLITES_CRITICAL {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let mut why = Vec::new();
        if eph_spike {
            why.push(format!("EPH {eph:.1} m (first fixes {base_eph:.1} m)"));
        }
        if epv_spike {
            why.push(format!("EPV {epv:.1} m"));
        }
        if satellites_drop {
            why.push(format!(
                "{satellites} satellites (first fixes {base_sats:.0})"
            ));
        }
        self.last_us = ts;
        out.push(Finding {
            id: AnalyzerId::GpsInterference,
            summary: format!("GPS degraded at {:.1} s: {}", secs(ts), why.join(", ")),
            severity,
            timestamp_us: ts,
            end_timestamp_us: None,
            evidence: Evidence::GpsInterference {
                eph_m: eph,
                epv_m: epv,
                num_satellites: satellites,
                noise_level: None,
            },
        });
    }
}

/// Motor failure, while armed: an output that was non-zero reads exactly 0 (critical, a point
/// in time), or an output's last 50 samples are all at 1900 or more (a warning, over those
/// samples). Each motor fires each mode once per log. The outputs counted are those of the
/// first armed sample; every instance of `actuator_outputs` feeds the same motors, as Flight
/// Review v2.
#[derive(Debug)]
pub(super) struct Motors {
    armed: bool,
    /// The navigation state's name.
    mode: &'static str,
    /// Outputs read, set at the first armed sample.
    count: Option<usize>,
    /// Per motor: how many of its latest samples in a row were at [`PWM_TOP`] or more, and
    /// the time of the first of them. Its last [`LOCK_SAMPLES`] are all at the top when the
    /// run is as long; the first time it is, they are the run's first ones.
    at_top: Vec<(usize, u64)>,
    /// Per motor: it has read non-zero.
    active: Vec<bool>,
    /// Per motor: dropped to zero, locked at the top, already said.
    fired: Vec<[bool; 2]>,
}

const LOCK_SAMPLES: usize = 50;
const PWM_TOP: f32 = 1900.0;

impl Default for Motors {
    fn default() -> Self {
        Self {
            armed: false,
            mode: "Unknown",
            count: None,
            at_top: Vec::new(),
            active: Vec::new(),
            fired: Vec::new(),
        }
    }
}

/// PX4's navigation states by name, as Flight Review names them.
fn nav_state_name(nav: u8) -> &'static str {
    match nav {
        0 => "Manual",
        1 => "Altitude",
        2 => "Position",
        3 => "Mission",
        4 => "Loiter",
        5 => "RTL",
        10 => "Acro",
        12 => "Descend",
        13 => "Terminate",
        14 => "Offboard",
        15 => "Stabilized",
        17 => "Takeoff",
        18 => "Land",
        19 => "Follow",
        20 => "Precision Land",
        21 => "Orbit",
        22 => "VTOL Takeoff",
        _ => "Unknown",
    }
}

impl Motors {
    pub(super) fn status(&mut self, arming: Option<u8>, nav: Option<u8>) {
        if let Some(a) = arming {
            self.armed = a == ARMED;
        }
        if let Some(n) = nav {
            self.mode = nav_state_name(n);
        }
    }

    /// The flight mode by name (an autopilot whose modes are not PX4's navigation states).
    pub(super) fn mode_named(&mut self, name: &'static str) {
        self.mode = name;
    }

    /// One sample of the outputs, in order (`None`: an output that does not read).
    pub(super) fn sample(
        &mut self,
        ts: u64,
        outputs: impl ExactSizeIterator<Item = Option<f32>>,
        out: &mut Vec<Finding>,
    ) {
        if !self.armed {
            return;
        }
        let count = *self.count.get_or_insert_with(|| {
            let n = outputs.len();
            self.at_top = vec![(0, 0); n];
            self.active = vec![false; n];
            self.fired = vec![[false; 2]; n];
            n
        });
        for (motor, pwm) in outputs.enumerate().take(count) {
            let Some(pwm) = pwm else {
                continue;
            };
            let at_top = &mut self.at_top[motor];
            *at_top = match (pwm >= PWM_TOP, *at_top) {
                (false, _) => (0, 0),
                (true, (0, _)) => (1, ts),
                (true, (n, from)) => (n + 1, from),
            };
            if pwm != 0.0 {
                self.active[motor] = true;
            }
            let mut say = |mode: &str, severity, from_us, end| {
                out.push(Finding {
                    id: AnalyzerId::MotorFailure,
                    summary: match end {
                        None => format!(
                            "motor {motor} output dropped to 0 at {:.1} s, armed, in {}",
                            secs(ts),
                            self.mode
                        ),
                        Some(_) => format!(
                            "motor {motor} output at {PWM_TOP} or more from {:.1} s to {:.1} \
                             s, armed",
                            secs(from_us),
                            secs(ts)
                        ),
                    },
                    severity,
                    timestamp_us: from_us,
                    end_timestamp_us: end,
                    evidence: Evidence::MotorFailure {
                        motor_index: motor as u8,
                        pwm_value: pwm,
                        failure_mode: mode.to_owned(),
                        flight_mode: self.mode.to_owned(),
                    },
                });
            };
            let fired = &mut self.fired[motor];
            if pwm == 0.0 && self.active[motor] && !fired[0] {
                fired[0] = true;
                say("drop_to_zero", Severity::Critical, ts, None);
            }
            if !fired[1] && at_top.0 >= LOCK_SAMPLES {
                fired[1] = true;
                let from = at_top.1;
                say("locked_at_max", Severity::Warning, from, Some(ts));
            }
        }
    }

    /// A gap: the run of samples starts again after it.
    pub(super) fn lose_sight(&mut self) {
        self.at_top.iter_mut().for_each(|run| *run = (0, 0));
    }
}

/// RC loss, while armed: `input_rc.rc_lost` set for at least 0.5 s (critical from 5 s),
/// from the sample that says it is lost to the one that says it is back, or to the disarm.
/// A loss still going when the log ends is not reported (its end is not known), as Flight
/// Review v2.
#[derive(Debug, Default)]
pub(super) struct RcLoss {
    armed: bool,
    lost: bool,
    since: Option<u64>,
    /// The last sample with the signal.
    last_signal_us: u64,
}

const RC_LOSS_MIN_US: u64 = 500_000;
const RC_LOSS_CRITICAL_US: u64 = 5_000_000;

impl RcLoss {
    pub(super) fn status(&mut self, ts: u64, arming: Option<u8>, out: &mut Vec<Finding>) {
        let was_armed = self.armed;
        if let Some(a) = arming {
            self.armed = a == ARMED;
        }
        if was_armed && !self.armed {
            if let Some(start) = self.since.take() {
                self.say(start, ts, out);
            }
            self.lost = false;
        }
    }

    pub(super) fn sample(&mut self, ts: u64, lost: Option<u8>, out: &mut Vec<Finding>) {
        let lost = lost.is_some_and(|v| v != 0);
        if lost && self.armed && !self.lost {
            self.lost = true;
            self.since = Some(ts);
        } else if !lost && self.lost {
            self.lost = false;
            if let Some(start) = self.since.take()
                && self.armed
            {
                self.say(start, ts, out);
            }
        }
        if !lost {
            self.last_signal_us = ts;
        }
    }

    fn say(&self, start: u64, end: u64, out: &mut Vec<Finding>) {
        let lasted = end.saturating_sub(start);
        if lasted < RC_LOSS_MIN_US {
            return;
        }
        out.push(Finding {
            id: AnalyzerId::RcLoss,
            summary: format!(
                "RC signal lost for {:.1} s from {:.1} s, armed",
                secs(lasted),
                secs(start)
            ),
            severity: match lasted >= RC_LOSS_CRITICAL_US {
                true => Severity::Critical,
                false => Severity::Warning,
            },
            timestamp_us: start,
            end_timestamp_us: Some(end),
            evidence: Evidence::RcLoss {
                last_signal_timestamp_us: self.last_signal_us,
                signal_lost_duration_ms: lasted / 1000,
            },
        });
    }

    /// A gap: a loss open across it is dropped (its end is not known).
    pub(super) fn lose_sight(&mut self) {
        self.lost = false;
        self.since = None;
    }
}
