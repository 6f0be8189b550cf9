//! Flight diagnostics (sans-IO): detectors fed a log's decoded samples in the log's order find
//! what went wrong in a flight (a pack browning out, the estimator failing its innovation
//! tests, GPS interference, a motor output dropping to zero or locked at the top, RC loss),
//! each as a [`Finding`]: an analyzer's id, a severity, a start and (for a window) an end in
//! log time, and typed evidence.
//!
//! The definitions are Flight Review v2's (PX4/flight-review-rs, `diagnostics/`): the same
//! topics and fields (a field of another type is absent, as there), thresholds, debounce and
//! severities, and the same JSON for a finding, so a finding made on the vehicle and one made
//! on the server compare field by field. Its quirks are kept on purpose and named where they
//! are kept (each analyzer's docs): a finding that differs from the server's would be the
//! bigger surprise.
//!
//! One walk serves every caller: [`Follower`] decodes a log's messages and hands each sample
//! to the [`Detectors`]. The daemon's store follows the live stream with one
//! ([`crate::store::events::TriggerWatch`]); [`Diagnosis`] follows a file's or a session's bytes
//! (`ulog-recv info --diagnostics`, the fleet's tables, the re-run after a fill).
//! An ArduPilot log feeds the same analyzers through [`dataflash`]: [`BinFollower`] for
//! its messages, [`BinDiagnosis`] for its bytes, with the vehicle's own `ERR` and `EV`
//! records kept beside the findings ([`Detectors::vehicle_records`]).
//!
//! The samples of the topics no analyzer reads need not be decoded ([`Follower::skips`]): a
//! walk for the diagnostics alone leaves them unparsed.
//!
//! A dropout closes every window still open (an exceedance, a loss, a run of samples) without
//! a finding: what happened in the gap is not known, so nothing is made of it. The gap is
//! listed as blind ([`Detectors::blind`]), from the last sample followed; a fill that closes
//! it re-runs the walk on the whole flight.

mod analyzers;
pub mod dataflash;

use std::fmt;
use std::str::FromStr;

use crate::ulog::framer::{Framer, Unit};
use crate::ulog::message::{FileHeader, Message, msg_type};
use crate::ulog::{BasicType, Decoder, Field, Layout, Sample};

use analyzers::{Battery, Ekf, Gps, Motors, RcLoss};
pub use dataflash::{BinDiagnosis, BinFollower, VehicleRecord};

/// How bad a finding is. Ordered: `Info < Warning < Critical`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for Severity {
    type Err = SelectionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "info" => Ok(Severity::Info),
            "warning" => Ok(Severity::Warning),
            "critical" => Ok(Severity::Critical),
            other => Err(SelectionError::Unknown(other.to_owned())),
        }
    }
}

/// The analyzers, by the id each finding carries.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum AnalyzerId {
    MotorFailure,
    GpsInterference,
    BatteryBrownout,
    EkfFailure,
    RcLoss,
}

impl AnalyzerId {
    /// Every analyzer, in the order Flight Review v2 lists them.
    pub const ALL: [AnalyzerId; 5] = [
        AnalyzerId::MotorFailure,
        AnalyzerId::GpsInterference,
        AnalyzerId::BatteryBrownout,
        AnalyzerId::EkfFailure,
        AnalyzerId::RcLoss,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AnalyzerId::MotorFailure => "motor_failure",
            AnalyzerId::GpsInterference => "gps_interference",
            AnalyzerId::BatteryBrownout => "battery_brownout",
            AnalyzerId::EkfFailure => "ekf_failure",
            AnalyzerId::RcLoss => "rc_loss",
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for AnalyzerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for AnalyzerId {
    type Err = SelectionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AnalyzerId::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| SelectionError::Unknown(s.to_owned()))
    }
}

/// What a finding rests on, by analyzer (Flight Review v2's evidence, field for field).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type")]
pub enum Evidence {
    MotorFailure {
        motor_index: u8,
        pwm_value: f32,
        /// `drop_to_zero` or `locked_at_max`.
        failure_mode: String,
        /// The navigation state's name when it happened (`Position`, `Mission`, ...).
        flight_mode: String,
    },
    GpsInterference {
        eph_m: f32,
        epv_m: f32,
        num_satellites: u16,
        /// Not measured (the receiver's noise level is not among the fields read).
        noise_level: Option<f32>,
    },
    BatteryBrownout {
        voltage_v: f32,
        critical_threshold_v: f32,
        current_a: Option<f32>,
    },
    EkfFailure {
        /// `velocity`, `position` or `height`.
        innovation: String,
        test_ratio: f32,
        threshold: f32,
    },
    RcLoss {
        last_signal_timestamp_us: u64,
        signal_lost_duration_ms: u64,
    },
}

/// One thing found wrong in a flight. Times are log time (µs since the vehicle's boot, the
/// samples' own `timestamp`). Serialised as Flight Review v2 serialises its diagnostics.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Finding {
    pub id: AnalyzerId,
    /// One line for a person.
    pub summary: String,
    pub severity: Severity,
    /// When it started.
    pub timestamp_us: u64,
    /// When it ended, for a finding that spans a window.
    pub end_timestamp_us: Option<u64>,
    pub evidence: Evidence,
}

impl Finding {
    /// When the finding was made, in log time: a window's end, else its start. What a live
    /// event and a published status are stamped with.
    pub fn made_at_us(&self) -> u64 {
        self.end_timestamp_us.unwrap_or(self.timestamp_us)
    }

    /// The finding in a line of at most [`BRIEF_BYTES`] bytes, from its evidence (the summary
    /// is longer): what a ground station's MAVLink STATUSTEXT holds.
    pub fn brief(&self) -> String {
        let text = match &self.evidence {
            Evidence::MotorFailure {
                motor_index,
                failure_mode,
                ..
            } if failure_mode == "locked_at_max" => {
                format!("motor {motor_index} output locked at max")
            }
            Evidence::MotorFailure { motor_index, .. } => {
                format!("motor {motor_index} output dropped to 0")
            }
            Evidence::GpsInterference {
                eph_m,
                num_satellites,
                ..
            } => format!("GPS interference: EPH {eph_m:.1} m, {num_satellites} sats"),
            Evidence::BatteryBrownout {
                voltage_v,
                critical_threshold_v,
                ..
            } => format!("battery brownout: {voltage_v:.2} V < {critical_threshold_v:.1} V"),
            Evidence::EkfFailure {
                innovation,
                test_ratio,
                ..
            } => {
                let lasted = self.made_at_us().saturating_sub(self.timestamp_us) as f64 / 1e6;
                format!("EKF {innovation} test ratio {test_ratio:.1} for {lasted:.1} s")
            }
            Evidence::RcLoss {
                signal_lost_duration_ms,
                ..
            } => format!("RC lost for {:.1} s", *signal_lost_duration_ms as f64 / 1e3),
        };
        let mut end = text.len().min(BRIEF_BYTES);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text[..end].to_owned()
    }
}

/// The longest [`Finding::brief`]: a MAVLink STATUSTEXT holds 50 bytes, which leaves room
/// for a prefix naming who says it (`ulog-recv: `).
pub const BRIEF_BYTES: usize = 39;

/// Why a list of analyzers or a severity cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectionError {
    #[error(
        "'{0}' is not an analyzer or severity (analyzers: motor_failure, gps_interference, \
         battery_brownout, ekf_failure, rc_loss; severities: info, warning, critical; or all, \
         none)"
    )]
    Unknown(String),
}

/// Which analyzers run: `all`, `none`, or a comma-separated list of ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection(u8);

impl Selection {
    pub const ALL: Selection = Selection(0b1_1111);
    pub const NONE: Selection = Selection(0);

    pub fn contains(self, id: AnalyzerId) -> bool {
        self.0 & id.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The selected analyzers, in [`AnalyzerId::ALL`]'s order.
    pub fn ids(self) -> impl Iterator<Item = AnalyzerId> {
        AnalyzerId::ALL
            .into_iter()
            .filter(move |a| self.contains(*a))
    }
}

impl Default for Selection {
    fn default() -> Self {
        Selection::ALL
    }
}

impl FromStr for Selection {
    type Err = SelectionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "all" => return Ok(Selection::ALL),
            "none" | "off" | "" => return Ok(Selection::NONE),
            _ => {}
        }
        s.split(',')
            .map(|id| id.trim().parse::<AnalyzerId>())
            .try_fold(Selection::NONE, |sel, id| Ok(Selection(sel.0 | id?.bit())))
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Selection::ALL => f.write_str("all"),
            Selection::NONE => f.write_str("none"),
            s => {
                let ids: Vec<&str> = s.ids().map(AnalyzerId::as_str).collect();
                f.write_str(&ids.join(","))
            }
        }
    }
}

/// Which findings count for something (open event buffers' windows, go to the ground
/// station): those of a severity or worse, or those of named analyzers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingFilter {
    /// Findings of this severity or worse.
    AtLeast(Severity),
    /// Findings of these analyzers.
    Of(Selection),
}

impl FindingFilter {
    pub fn takes(self, finding: &Finding) -> bool {
        match self {
            FindingFilter::AtLeast(s) => finding.severity >= s,
            FindingFilter::Of(sel) => sel.contains(finding.id),
        }
    }
}

impl FromStr for FindingFilter {
    type Err = SelectionError;
    /// A severity (`warning`: warnings and criticals), or analyzers as [`Selection`] takes
    /// them (`none` for no finding).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().parse::<Severity>() {
            Ok(sev) => Ok(FindingFilter::AtLeast(sev)),
            Err(_) => s.parse().map(FindingFilter::Of),
        }
    }
}

impl fmt::Display for FindingFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FindingFilter::AtLeast(s) => s.fmt(f),
            FindingFilter::Of(sel) => sel.fmt(f),
        }
    }
}

/// The topics the analyzers read, with the fields each found in one subscription's format.
#[derive(Debug, Clone)]
enum Bound {
    /// A topic no analyzer reads.
    Unread,
    Status {
        arming: Option<Field>,
        nav: Option<Field>,
    },
    Battery {
        voltage: Option<Field>,
        current: Option<Field>,
    },
    Estimator {
        /// Velocity, position, height.
        ratios: [Option<Field>; 3],
    },
    Gps {
        eph: Option<Field>,
        epv: Option<Field>,
        satellites: Option<Field>,
    },
    Outputs {
        /// `output[0]`, `output[1]`, ... as far as they run unbroken.
        outputs: Vec<Field>,
    },
    Rc {
        lost: Option<Field>,
    },
}

/// The topics the analyzers read.
const TOPICS_READ: [&str; 6] = [
    "vehicle_status",
    "battery_status",
    "estimator_status",
    "vehicle_gps_position",
    "actuator_outputs",
    "input_rc",
];

/// Most motor outputs read (`output[0]` to `output[15]`).
const MAX_MOTORS: usize = 16;

/// The leaf `name` of `layout` if it has type `ty`: a field of another type is taken as
/// absent, as Flight Review v2 takes it.
fn field(layout: &Layout, name: &str, ty: BasicType) -> Option<Field> {
    let f = layout.fields[layout.field_index(name)?];
    (f.ty == ty).then_some(f)
}

impl Bound {
    fn of(layout: &Layout) -> Bound {
        use BasicType::{Float, UInt8};
        let f = |name: &str| field(layout, name, Float);
        match layout.name.as_str() {
            "vehicle_status" => Bound::Status {
                arming: field(layout, "arming_state", UInt8),
                nav: field(layout, "nav_state", UInt8),
            },
            "battery_status" => Bound::Battery {
                voltage: f("voltage_v").or_else(|| f("voltage_filtered_v")),
                current: f("current_a").or_else(|| f("current_filtered_a")),
            },
            "estimator_status" => Bound::Estimator {
                ratios: [
                    f("vel_test_ratio"),
                    f("pos_test_ratio"),
                    f("hgt_test_ratio"),
                ],
            },
            "vehicle_gps_position" => Bound::Gps {
                eph: f("eph"),
                epv: f("epv"),
                satellites: field(layout, "satellites_used", UInt8),
            },
            "actuator_outputs" => Bound::Outputs {
                outputs: (0..MAX_MOTORS)
                    .map_while(|i| f(&format!("output[{i}]")))
                    .collect(),
            },
            "input_rc" => Bound::Rc {
                lost: field(layout, "rc_lost", UInt8),
            },
            _ => Bound::Unread,
        }
    }
}

/// A float field of a sample.
fn float(data: &[u8], field: Option<Field>) -> Option<f32> {
    field?.value_in(data).map(|v| v as f32)
}

/// A `uint8_t` field of a sample.
fn byte(data: &[u8], field: Option<Field>) -> Option<u8> {
    field?.value_in(data).map(|v| v as u8)
}

/// The selected analyzers over one log (see the module docs).
#[derive(Debug)]
pub struct Detectors {
    selection: Selection,
    /// Per message id: the fields its subscription carries, found at its first sample.
    bound: Vec<Option<Bound>>,
    /// Per message id: its topic is one of [`TOPICS_READ`] (by its 'A' message).
    reads: Vec<bool>,
    battery: Battery,
    ekf: Ekf,
    gps: Gps,
    motors: Motors,
    rc: RcLoss,
    /// Every finding so far, in the order made.
    findings: Vec<Finding>,
    /// Findings not yet taken by [`take_new`](Self::take_new).
    new_from: usize,
    /// Log time the detectors did not see: each dropout's `[from, to]`, µs.
    blind: Vec<[u64; 2]>,
    /// What the vehicle itself logged of its errors and events (an ArduPilot log's `ERR`
    /// and `EV`), in the log's order.
    vehicle_records: Vec<VehicleRecord>,
}

impl Detectors {
    pub fn new(selection: Selection) -> Self {
        Self {
            selection,
            bound: Vec::new(),
            reads: Vec::new(),
            battery: Battery::default(),
            ekf: Ekf::default(),
            gps: Gps::default(),
            motors: Motors::default(),
            rc: RcLoss::default(),
            findings: Vec::new(),
            new_from: 0,
            blind: Vec::new(),
            vehicle_records: Vec::new(),
        }
    }

    pub fn selection(&self) -> Selection {
        self.selection
    }

    /// `msg_id` is subscribed anew to topic `name` (`None`: unsubscribed): its fields are
    /// found again at its next sample.
    pub fn subscribed(&mut self, msg_id: u16, name: Option<&str>) {
        let i = usize::from(msg_id);
        if let Some(b) = self.bound.get_mut(i) {
            *b = None;
        }
        if self.reads.len() <= i {
            self.reads.resize(i + 1, false);
        }
        self.reads[i] = name.is_some_and(|n| TOPICS_READ.contains(&n));
    }

    /// The log's next message other than a sample, `log_time_us` the latest sample time: a
    /// subscription added or removed, or a dropout, is taken in; the rest passes.
    pub fn note(&mut self, message: &Message<'_>, log_time_us: u64) {
        match *message {
            Message::AddLogged { msg_id, name, .. } => self.subscribed(msg_id, Some(name)),
            Message::RemoveLogged { msg_id } => self.subscribed(msg_id, None),
            Message::Dropout { duration_ms } => {
                self.dropout(log_time_us, u64::from(duration_ms) * 1000)
            }
            _ => {}
        }
    }

    /// Whether `msg_id`'s topic (as last subscribed) is one the analyzers read: the samples of
    /// the others can be left undecoded.
    #[inline]
    pub fn reads(&self, msg_id: u16) -> bool {
        self.reads.get(usize::from(msg_id)).is_some_and(|r| *r)
    }

    /// The log's next sample, in the log's order.
    #[inline]
    pub fn observe(&mut self, sample: &Sample<'_>) {
        let i = usize::from(sample.msg_id);
        if self.bound.get(i).is_none_or(Option::is_none) {
            self.bind(sample.msg_id, sample.layout);
        }
        self.observe_bound(sample.msg_id, sample.timestamp.unwrap_or(0), sample.data);
    }

    /// For a reader that hands out samples by a key of its own rather than as a decoder's
    /// [`Sample`]s (the dataset export's channels): `key`'s samples have `layout`.
    pub fn bind(&mut self, key: u16, layout: &Layout) {
        let i = usize::from(key);
        if self.bound.len() <= i {
            self.bound.resize(i + 1, None);
        }
        self.bound[i] = Some(Bound::of(layout));
    }

    /// The log's next sample, of `key` (bound with [`bind`](Self::bind)), stamped `ts` (0:
    /// no timestamp), its bytes `data` (the message id excluded).
    #[inline]
    pub fn observe_bound(&mut self, key: u16, ts: u64, data: &[u8]) {
        let Some(Some(bound)) = self.bound.get(usize::from(key)) else {
            return;
        };
        let sel = self.selection;
        let out = &mut self.findings;
        match bound {
            Bound::Unread => {}
            Bound::Status { arming, nav } => {
                let arming = byte(data, *arming);
                let nav = byte(data, *nav);
                if sel.contains(AnalyzerId::BatteryBrownout) {
                    self.battery.status(arming);
                }
                if sel.contains(AnalyzerId::MotorFailure) {
                    self.motors.status(arming, nav);
                }
                if sel.contains(AnalyzerId::RcLoss) {
                    self.rc.status(ts, arming, out);
                }
            }
            Bound::Battery { voltage, current } if sel.contains(AnalyzerId::BatteryBrownout) => {
                self.battery
                    .sample(ts, float(data, *voltage), || float(data, *current), out);
            }
            Bound::Estimator { ratios } if sel.contains(AnalyzerId::EkfFailure) => {
                let ratios = ratios.map(|r| float(data, r));
                self.ekf.sample(ts, ratios, out);
            }
            Bound::Gps {
                eph,
                epv,
                satellites,
            } if sel.contains(AnalyzerId::GpsInterference) => {
                self.gps.sample(
                    ts,
                    float(data, *eph),
                    float(data, *epv),
                    byte(data, *satellites),
                    out,
                );
            }
            Bound::Outputs { outputs } if sel.contains(AnalyzerId::MotorFailure) => {
                let pwm = outputs.iter().map(|f| float(data, Some(*f)));
                self.motors.sample(ts, pwm, out);
            }
            Bound::Rc { lost } if sel.contains(AnalyzerId::RcLoss) => {
                self.rc.sample(ts, byte(data, *lost), out);
            }
            _ => {}
        }
    }

    /// A dropout of `duration_us` at log time `at_us`: every open window closes without a
    /// finding, and the gap is listed as blind.
    pub fn dropout(&mut self, at_us: u64, duration_us: u64) {
        self.ekf.lose_sight();
        self.motors.lose_sight();
        self.rc.lose_sight();
        self.blind.push([at_us, at_us.saturating_add(duration_us)]);
    }

    /// Every finding so far, in the order made.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// The findings made since the last call.
    pub fn take_new(&mut self) -> &[Finding] {
        let new = &self.findings[self.new_from..];
        self.new_from = self.findings.len();
        new
    }

    /// The log time the detectors did not see (dropouts), `[from, to]` µs each.
    pub fn blind(&self) -> &[[u64; 2]] {
        &self.blind
    }

    /// What the vehicle itself logged of its errors and events, in the log's order (none
    /// for a ULog log).
    pub fn vehicle_records(&self) -> &[VehicleRecord] {
        &self.vehicle_records
    }

    /// The indices in [`vehicle_records`](Self::vehicle_records) of those of the same moment
    /// as `finding` ([`VehicleRecord::is_beside`]).
    pub fn beside(&self, finding: &Finding) -> Vec<usize> {
        (self.vehicle_records.iter().enumerate())
            .filter(|(_, r)| r.is_beside(finding))
            .map(|(i, _)| i)
            .collect()
    }

    /// What the vehicle logged of `finding`'s moment, a line per record in log order:
    /// `ERR radio failsafe: occurred at 57.035 s` (the record, its words, its log time).
    pub fn vehicle_said(&self, finding: &Finding) -> Vec<String> {
        (self.beside(finding).into_iter())
            .map(|k| {
                let r = &self.vehicle_records[k];
                let at = r.timestamp_us as f64 / 1e6;
                format!("{} {} at {at:.3} s", r.record, r.text)
            })
            .collect()
    }

    /// Hands out every finding.
    pub fn into_findings(self) -> Vec<Finding> {
        self.findings
    }
}

/// Decodes a log's messages and hands each sample to the detectors: the one walk the live
/// stream and files share.
#[derive(Debug)]
pub struct Follower {
    decoder: Decoder,
    detectors: Option<Detectors>,
}

impl Follower {
    /// A follower running `selection` (none: it only decodes).
    pub fn new(selection: Selection) -> Self {
        Self {
            decoder: Decoder::new(),
            detectors: (!selection.is_empty()).then(|| Detectors::new(selection)),
        }
    }

    /// The file header (16 bytes).
    pub fn header(&mut self, header: &[u8]) {
        if let Ok(h) = FileHeader::check_file_start(header) {
            let _ = self.decoder.handle(&Message::Header(h));
        }
    }

    /// The log's next message; its sample when it is a data message that decodes.
    #[inline]
    pub fn follow<'s, 'a: 's>(&'s mut self, message: &Message<'a>) -> Option<Sample<'s>> {
        if let Some(d) = &mut self.detectors {
            d.note(message, self.decoder.last_timestamp());
        }
        let sample = self.decoder.handle(message).ok().flatten()?;
        if let Some(d) = &mut self.detectors {
            d.observe(&sample);
        }
        Some(sample)
    }

    /// The largest sample time seen so far, µs (of the samples followed: see
    /// [`skips`](Self::skips)).
    pub fn log_time(&self) -> u64 {
        self.decoder.last_timestamp()
    }

    /// Whether the whole message `framed` (its 3-byte header included) is a sample no analyzer
    /// reads, which a caller that needs nothing else of it may leave unparsed and undecoded
    /// (the log time then follows the samples the analyzers read). With no analyzer, every
    /// sample is.
    #[inline]
    pub fn skips(&self, framed: &[u8]) -> bool {
        match (framed, &self.detectors) {
            ([_, _, ty, id0, id1, ..], Some(d)) if *ty == msg_type::DATA => {
                !d.reads(u16::from_le_bytes([*id0, *id1]))
            }
            ([_, _, ty, ..], None) => *ty == msg_type::DATA,
            _ => false,
        }
    }

    pub fn detectors(&self) -> Option<&Detectors> {
        self.detectors.as_ref()
    }

    pub fn detectors_mut(&mut self) -> Option<&mut Detectors> {
        self.detectors.as_mut()
    }

    pub fn into_detectors(self) -> Option<Detectors> {
        self.detectors
    }
}

/// The detectors over a whole log's bytes (a file's, or a session's joined): push the bytes in
/// pieces of any size, then take the findings.
#[derive(Debug)]
pub struct Diagnosis {
    framer: Framer,
    follower: Follower,
}

impl Diagnosis {
    pub fn new(selection: Selection) -> Self {
        Self {
            framer: Framer::file(),
            follower: Follower::new(selection),
        }
    }

    /// The log's next bytes (the file header first).
    pub fn push(&mut self, bytes: &[u8]) {
        let follower = &mut self.follower;
        let _ = self.framer.push(bytes, |unit| {
            match unit {
                Unit::Header(h) => follower.header(h),
                Unit::Message(m) if follower.skips(m) => {}
                Unit::Message(m) => {
                    if let Some(parsed) = Message::parse_framed(m) {
                        follower.follow(&parsed);
                    }
                }
            }
            std::ops::ControlFlow::Continue(())
        });
    }

    /// The detectors, with what they found.
    pub fn finish(self) -> Detectors {
        self.follower
            .into_detectors()
            .unwrap_or_else(|| Detectors::new(Selection::NONE))
    }
}

/// Every finding `selection` makes in a whole log.
pub fn diagnose(log: &[u8], selection: Selection) -> Vec<Finding> {
    let mut d = Diagnosis::new(selection);
    d.push(log);
    d.finish().into_findings()
}

#[cfg(test)]
mod tests;
