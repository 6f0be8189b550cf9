//! A flight's signals as a plot draws them: the few an operator looks at first, picked by
//! name from the flight's topics, or any numeric field asked for by name; each a run of log
//! times and values, thinned to at most [`MAX_POINTS`] that keep every stretch's smallest and
//! largest value and every dropout's hole. The web page's flight view plots them.
//!
//! The first look ([`Ask::FirstLook`]):
//!
//! | signal | unit | from |
//! |---|---|---|
//! | battery voltage | V | `battery_status.voltage_v` (else `voltage_filtered_v`), instance 0 |
//! | height | m | `-vehicle_local_position.z`: above the local origin, as the flights table's `max_height_m` |
//! | attitude error | ° | the angle between `vehicle_attitude.q` and the `vehicle_attitude_setpoint.q_d` of the latest log time at or before it (all three axes), that setpoint at most [`SETPOINT_FRESH_US`] older |
//!
//! A signal the flight has no topic or field for is left out. A value that is not finite, and
//! a dropout, are a hole (`null`) in every series. An ArduPilot flight's signals are read
//! from its own messages by [`dataflash`].

pub mod dataflash;

use std::str::FromStr;

use crate::export::{ExportError, ExportOptions, Flight, Sink, TopicSource, walk};
use crate::ros::ros2::Ros2Type;
use crate::ulog::{BasicType, Field, Layout};

/// At most this many points in a series: its samples taken in stretches, each giving its
/// smallest and largest value and its first hole.
pub const MAX_POINTS: usize = 1500;

/// A setpoint older than this (log time, µs) gives no attitude error: the vehicle is not
/// flying on attitude setpoints then.
pub const SETPOINT_FRESH_US: u64 = 1_000_000;

/// The latest setpoints kept, to find the one at or before an attitude sample: PX4 writes
/// topics a few milliseconds out of log-time order, never this many setpoints.
const SETPOINTS_KEPT: usize = 8;

/// The first look's signals, in the order a plot shows them.
pub const FIRST_LOOK: [&str; 3] = ["battery voltage", "height", "attitude error"];

/// What to read from the flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// The signals of the module docs' table, and the names of every numeric field.
    FirstLook,
    /// One field.
    Field(FieldPath),
}

/// A numeric field of a topic instance: `battery_status.voltage_v`, `actuator_outputs/1.output[0]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    pub topic: String,
    pub instance: u8,
    pub field: String,
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.instance {
            0 => write!(f, "{}.{}", self.topic, self.field),
            n => write!(f, "{}/{n}.{}", self.topic, self.field),
        }
    }
}

/// Why a field's name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a field is named TOPIC.FIELD or TOPIC/INSTANCE.FIELD (battery_status.voltage_v), not {0:?}"
)]
pub struct BadFieldPath(String);

impl FromStr for FieldPath {
    type Err = BadFieldPath;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadFieldPath(s.to_owned());
        let (topic, field) = s.split_once('.').ok_or_else(bad)?;
        let (topic, instance) = match topic.split_once('/') {
            Some((topic, n)) => (topic, n.parse().map_err(|_| bad())?),
            None => (topic, 0),
        };
        let plain = |t: &str| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_[].".contains(&b))
        };
        if !plain(topic) || topic.contains(['[', ']', '.']) || !plain(field) {
            return Err(bad());
        }
        Ok(FieldPath {
            topic: topic.to_owned(),
            instance,
            field: field.to_owned(),
        })
    }
}

/// One signal: its name, unit and source, and its points (log time, value or a hole).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Series {
    pub name: String,
    pub unit: String,
    /// Where it comes from: a field's path, or how it is made.
    pub source: String,
    /// Samples read, before thinning.
    pub samples: u64,
    pub t_us: Vec<u64>,
    pub values: Vec<Option<f64>>,
}

/// What [`read`] found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Signals {
    pub series: Vec<Series>,
    /// With [`Ask::FirstLook`]: every numeric field of the flight's topics, as
    /// [`FieldPath`]s print, in the order the topics first appear.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

/// Reads `ask`'s signals from `flight` (one pass of [`walk`]).
pub fn read(flight: &(impl Flight + ?Sized), ask: &Ask) -> Result<Signals, ExportError> {
    let mut sink = SignalSink {
        ask: ask.clone(),
        roles: Vec::new(),
        runs: Runs::default(),
        fields: Vec::new(),
        setpoints: std::collections::VecDeque::with_capacity(SETPOINTS_KEPT),
    };
    walk(flight, &ExportOptions::default(), &mut sink)?;
    Ok(Signals {
        series: sink.runs.into_series(),
        fields: sink.fields,
    })
}

/// What a channel's samples are to the signals.
#[derive(Debug, Clone)]
enum Role {
    /// A field read into run `run`, negated if `negate`.
    Value {
        run: usize,
        field: Field,
        negate: bool,
    },
    /// `vehicle_attitude`: its `q`, for run `run`.
    Attitude {
        run: usize,
        q: [Field; 4],
    },
    /// `vehicle_attitude_setpoint`: its `q_d`.
    Setpoint {
        q_d: [Field; 4],
    },
    Unread,
}

/// The series as they are read, each made on first use.
#[derive(Debug, Default)]
pub(crate) struct Runs(Vec<Series>);

impl Runs {
    /// The run named `name`, made on first use.
    pub(crate) fn run(&mut self, name: &str, unit: &str, source: String) -> usize {
        if let Some(k) = self.0.iter().position(|r| r.name == name) {
            return k;
        }
        self.0.push(Series {
            name: name.to_owned(),
            unit: unit.to_owned(),
            source,
            samples: 0,
            t_us: Vec::new(),
            values: Vec::new(),
        });
        self.0.len() - 1
    }

    /// A sample of run `run` (a value that is not finite is a hole).
    pub(crate) fn push(&mut self, run: usize, t_us: u64, value: Option<f64>) {
        let run = &mut self.0[run];
        run.samples += 1;
        run.t_us.push(t_us);
        run.values.push(value.filter(|v| v.is_finite()));
    }

    /// A dropout: a hole in every series read so far, just after its last sample (the
    /// dropout's own time may lie ahead of a series' next sample).
    pub(crate) fn hole(&mut self) {
        for run in &mut self.0 {
            if let Some(&last) = run.t_us.last() {
                run.t_us.push(last + 1);
                run.values.push(None);
            }
        }
    }

    /// The series with samples, thinned, the first look's in its order first.
    pub(crate) fn into_series(mut self) -> Vec<Series> {
        self.0
            .sort_by_key(|run| FIRST_LOOK.iter().position(|name| *name == run.name));
        self.0
            .into_iter()
            .filter(|run| run.samples > 0)
            .map(|run| {
                let (t_us, values) = thin(run.t_us, run.values, MAX_POINTS);
                Series {
                    t_us,
                    values,
                    ..run
                }
            })
            .collect()
    }
}

struct SignalSink {
    ask: Ask,
    roles: Vec<Role>,
    runs: Runs,
    fields: Vec<String>,
    /// The latest attitude setpoints (in log order): their time and `q_d`.
    setpoints: std::collections::VecDeque<(u64, [f64; 4])>,
}

impl SignalSink {
    /// The role of a first-look topic instance.
    fn first_look(&mut self, topic: &str, multi_id: u8, layout: &Layout) -> Role {
        let field = |name: &str| numeric(layout, name);
        let quaternion = |name: &str| -> Option<[Field; 4]> {
            Some([
                field(&format!("{name}[0]"))?,
                field(&format!("{name}[1]"))?,
                field(&format!("{name}[2]"))?,
                field(&format!("{name}[3]"))?,
            ])
        };
        if multi_id != 0 {
            return Role::Unread;
        }
        match topic {
            "battery_status" => {
                let Some((name, f)) = ["voltage_v", "voltage_filtered_v"]
                    .into_iter()
                    .find_map(|n| Some((n, field(n)?)))
                else {
                    return Role::Unread;
                };
                Role::Value {
                    run: self
                        .runs
                        .run("battery voltage", "V", format!("battery_status.{name}")),
                    field: f,
                    negate: false,
                }
            }
            "vehicle_local_position" => match field("z") {
                Some(z) => Role::Value {
                    run: self
                        .runs
                        .run("height", "m", "-vehicle_local_position.z".into()),
                    field: z,
                    negate: true,
                },
                None => Role::Unread,
            },
            "vehicle_attitude" => match quaternion("q") {
                Some(q) => Role::Attitude {
                    run: self.runs.run(
                        "attitude error",
                        "°",
                        "angle between vehicle_attitude.q and vehicle_attitude_setpoint.q_d".into(),
                    ),
                    q,
                },
                None => Role::Unread,
            },
            "vehicle_attitude_setpoint" => match quaternion("q_d") {
                Some(q_d) => Role::Setpoint { q_d },
                None => Role::Unread,
            },
            _ => Role::Unread,
        }
    }
}

/// The leaf `name` of `layout`, if it is a number (not a character, not padding).
fn numeric(layout: &Layout, name: &str) -> Option<Field> {
    let f = layout.fields[layout.field_index(name)?];
    (!f.padding && f.ty != BasicType::Char).then_some(f)
}

fn quaternion(data: &[u8], q: &[Field; 4]) -> Option<[f64; 4]> {
    Some([
        q[0].value_in(data)?,
        q[1].value_in(data)?,
        q[2].value_in(data)?,
        q[3].value_in(data)?,
    ])
}

/// The rotation between two unit quaternions, in degrees.
pub(crate) fn angle_deg(a: [f64; 4], b: [f64; 4]) -> f64 {
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    2.0 * dot.abs().min(1.0).acos().to_degrees()
}

impl Sink for SignalSink {
    fn channel(
        &mut self,
        _topic: &str,
        _ty: &Ros2Type,
        source: &TopicSource<'_>,
    ) -> Result<u32, ExportError> {
        let layout = source.layout;
        let role = match &self.ask {
            Ask::FirstLook => {
                let path = |field: &str| FieldPath {
                    topic: source.format.to_owned(),
                    instance: source.multi_id,
                    field: field.to_owned(),
                };
                let names: Vec<String> = layout
                    .visible_fields()
                    .filter(|(i, f)| {
                        f.ty != BasicType::Char && layout.field_name(*i) != "timestamp"
                    })
                    .map(|(i, _)| path(layout.field_name(i)).to_string())
                    .collect();
                self.fields.extend(names);
                self.first_look(source.format, source.multi_id, layout)
            }
            Ask::Field(path) => {
                match numeric(layout, &path.field)
                    .filter(|_| path.topic == source.format && path.instance == source.multi_id)
                {
                    Some(field) => Role::Value {
                        run: self.runs.run(&path.to_string(), "", path.to_string()),
                        field,
                        negate: false,
                    },
                    None => Role::Unread,
                }
            }
        };
        self.roles.push(role);
        Ok(self.roles.len() as u32 - 1)
    }

    fn sample(
        &mut self,
        channel: u32,
        _ty: &Ros2Type,
        timestamp_us: u64,
        data: &[u8],
    ) -> Result<(), ExportError> {
        match &self.roles[channel as usize] {
            Role::Value { run, field, negate } => {
                let v = field.value_in(data).map(|v| if *negate { -v } else { v });
                self.runs.push(*run, timestamp_us, v);
            }
            Role::Setpoint { q_d } => {
                if let Some(q_d) = quaternion(data, q_d) {
                    if self.setpoints.len() == SETPOINTS_KEPT {
                        self.setpoints.pop_front();
                    }
                    self.setpoints.push_back((timestamp_us, q_d));
                }
            }
            Role::Attitude { run, q } => {
                let fresh = self
                    .setpoints
                    .iter()
                    .filter(|(t, _)| *t <= timestamp_us)
                    .max_by_key(|(t, _)| *t)
                    .filter(|(t, _)| timestamp_us - t <= SETPOINT_FRESH_US);
                if let (Some((_, q_d)), Some(q)) = (fresh, quaternion(data, q)) {
                    let q_d = *q_d;
                    self.runs.push(*run, timestamp_us, Some(angle_deg(q, q_d)));
                }
            }
            Role::Unread => {}
        }
        Ok(())
    }

    fn log(&mut self, _: u64, _: u8, _: &str, _: &[u8]) -> Result<(), ExportError> {
        Ok(())
    }

    fn dropout(&mut self, _timestamp_us: u64, _duration_ms: u16) -> Result<(), ExportError> {
        self.runs.hole();
        Ok(())
    }
}

/// `t_us` and `values` thinned to at most `max` points: each of `max / 3` stretches of
/// samples gives its smallest value, its largest and its first hole, in their order.
pub fn thin(t_us: Vec<u64>, values: Vec<Option<f64>>, max: usize) -> (Vec<u64>, Vec<Option<f64>>) {
    let n = t_us.len();
    let stretches = max / 3;
    if n <= max || stretches == 0 {
        return (t_us, values);
    }
    let (mut t_out, mut v_out) = (Vec::with_capacity(max), Vec::with_capacity(max));
    for s in 0..stretches {
        let range = s * n / stretches..(s + 1) * n / stretches;
        let (mut low, mut high, mut hole) = (None::<usize>, None::<usize>, None::<usize>);
        for i in range {
            match values[i] {
                None => hole = hole.or(Some(i)),
                Some(v) => {
                    if low.is_none_or(|l| v < values[l].unwrap_or(f64::INFINITY)) {
                        low = Some(i);
                    }
                    if high.is_none_or(|h| v > values[h].unwrap_or(f64::NEG_INFINITY)) {
                        high = Some(i);
                    }
                }
            }
        }
        let mut picked: Vec<usize> = [low, high, hole].into_iter().flatten().collect();
        picked.sort_unstable();
        picked.dedup();
        for i in picked {
            t_out.push(t_us[i]);
            v_out.push(values[i]);
        }
    }
    (t_out, v_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_paths_read_and_print_alike() {
        for text in [
            "battery_status.voltage_v",
            "actuator_outputs/1.output[3]",
            "esc_status.esc[2].esc_rpm",
        ] {
            assert_eq!(text.parse::<FieldPath>().unwrap().to_string(), text);
        }
        for bad in [
            "",
            "battery_status",
            ".x",
            "a/b.c",
            "a/1",
            "../etc.passwd",
            "a b.c",
        ] {
            assert!(bad.parse::<FieldPath>().is_err(), "{bad}");
        }
    }

    #[test]
    fn thinning_keeps_each_stretchs_extremes_and_holes_in_order() {
        let n = 10_000;
        let t: Vec<u64> = (0..n).collect();
        let mut v: Vec<Option<f64>> = (0..n).map(|i| Some((i % 100) as f64)).collect();
        v[5_000] = Some(1e6);
        v[7_777] = None;
        let (tt, vv) = thin(t, v, 300);
        assert!(tt.len() <= 300 && tt.len() == vv.len());
        assert!(tt.windows(2).all(|w| w[0] < w[1]), "out of time order");
        assert!(vv.contains(&Some(1e6)), "the spike went");
        assert_eq!(tt[vv.iter().position(Option::is_none).unwrap()], 7_777);
        assert_eq!(
            vv.iter().flatten().fold(f64::INFINITY, |a, b| a.min(*b)),
            0.0
        );
        // Short series stay as they are.
        let (t2, v2) = thin(vec![1, 2], vec![Some(1.0), None], 300);
        assert_eq!((t2, v2), (vec![1, 2], vec![Some(1.0), None]));
    }

    #[test]
    fn the_attitude_error_is_the_rotation_between_the_quaternions() {
        let level = [1.0, 0.0, 0.0, 0.0];
        let half = (10f64.to_radians() / 2.0).cos();
        let rolled = [half, (10f64.to_radians() / 2.0).sin(), 0.0, 0.0];
        assert!((angle_deg(level, rolled) - 10.0).abs() < 1e-9);
        // q and -q are one attitude.
        assert!(angle_deg(level, [-1.0, 0.0, 0.0, 0.0]).abs() < 1e-9);
    }
}
