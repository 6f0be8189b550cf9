//! An ArduPilot flight's signals (a `.bin`, or a session's splits in log order) as the web
//! page's plots draw them, each field read as pymavlink reads it. The first look:
//!
//! | signal | unit | from |
//! |---|---|---|
//! | battery voltage | V | `BAT.Volt`, the first battery (`Inst` 0) |
//! | height | m | `POS.RelHomeAlt`: above home |
//! | attitude error | ° | the angle between the attitude `ATT` says was achieved (`Roll`, `Pitch`, `Yaw`) and the one it says was desired (`DesRoll`, `DesPitch`, `DesYaw`), all three axes |
//!
//! Any numeric field is asked for as `TYPE.Field`, or `TYPE/N.Field` for instance `N` of a
//! type whose FMTU marks an instance field (`BAT/1.Volt`), as the MCAP export names its
//! channels. A dropout the receiver marked is a hole in every series, as in a PX4 flight's.

use std::collections::HashSet;
use std::path::PathBuf;

use super::{Ask, FieldPath, Runs, Signals, angle_deg};
use crate::dataflash::format::Format;
use crate::dataflash::gaps::dropout_ms;
use crate::dataflash::state::{LogState, Passing};
use crate::dataflash::values::{instance_field, value};
use crate::export::ExportError;
use crate::export::flight::each_dataflash_message;

/// A field of a message: its byte offset (header included) and character.
type At = (usize, u8);

/// What a type's messages give the signals.
#[derive(Debug, Clone, Copy)]
enum Role {
    Unread,
    /// A field into run `run`, from the messages of instance `instance` only.
    Value {
        run: usize,
        field: At,
        instance: u8,
    },
    /// `ATT`: the achieved and desired roll, pitch and yaw, into run `run`.
    Attitude {
        run: usize,
        achieved: [At; 3],
        desired: [At; 3],
    },
}

/// A type's role and where its instance field is.
#[derive(Debug, Clone, Copy)]
struct TypeRead {
    role: Role,
    instance: Option<At>,
}

/// See the module docs: one pass over `files`.
pub fn read(files: &[PathBuf], ask: &Ask) -> Result<Signals, ExportError> {
    let mut reader = BinSignals {
        ask: ask.clone(),
        state: LogState::default(),
        types: vec![None; 256],
        seen: HashSet::new(),
        runs: Runs::default(),
        fields: Vec::new(),
    };
    each_dataflash_message(files, |m, f| {
        reader.message(m, f);
        true
    })?;
    Ok(Signals {
        series: reader.runs.into_series(),
        fields: reader.fields,
    })
}

struct BinSignals {
    ask: Ask,
    state: LogState,
    /// Per type id, found at its first message (again after its FMT).
    types: Vec<Option<TypeRead>>,
    /// The type ids and instances whose fields are listed already.
    seen: HashSet<(u8, u8)>,
    runs: Runs,
    fields: Vec<String>,
}

/// Whether a field of character `c` reads as a number.
fn is_numeric(c: u8) -> bool {
    !matches!(c, b'n' | b'N' | b'Z' | b'a')
}

fn number(m: &[u8], (at, c): At) -> Option<f64> {
    let size = crate::dataflash::format::field_size(c)?;
    value(c, m.get(at..at + size)?)?.as_f64()
}

/// The unit quaternion of a roll, pitch and yaw in degrees (rotated yaw, then pitch, then
/// roll, as ArduPilot's Euler angles are).
fn quaternion(roll: f64, pitch: f64, yaw: f64) -> [f64; 4] {
    let half = |deg: f64| (deg.to_radians() / 2.0).sin_cos();
    let ((sr, cr), (sp, cp), (sy, cy)) = (half(roll), half(pitch), half(yaw));
    [
        cr * cp * cy + sr * sp * sy,
        sr * cp * cy - cr * sp * sy,
        cr * sp * cy + sr * cp * sy,
        cr * cp * sy - sr * sp * cy,
    ]
}

impl BinSignals {
    fn message(&mut self, m: &[u8], f: &Format) {
        let timestamp = match self.state.pass(m, f) {
            Passing::Defined(t) => {
                self.types[usize::from(t)] = None;
                self.seen.retain(|&(ty, _)| ty != t);
                return;
            }
            Passing::Definition => return,
            Passing::Data { timestamp } => timestamp,
        };
        if dropout_ms(m, f).is_some() {
            self.runs.hole();
            return;
        }
        let read = match self.types[usize::from(f.type_id)] {
            Some(read) => read,
            None => {
                let read = self.type_read(f);
                *self.types[usize::from(f.type_id)].insert(read)
            }
        };
        let instance = read
            .instance
            .and_then(|at| number(m, at))
            .map_or(0, |v| v.clamp(0.0, 255.0) as u8);
        if matches!(self.ask, Ask::FirstLook) && self.seen.insert((f.type_id, instance)) {
            self.list_fields(f, instance);
        }
        match read.role {
            Role::Unread => {}
            Role::Value {
                run,
                field,
                instance: wanted,
            } => {
                if instance == wanted {
                    self.runs.push(run, timestamp, number(m, field));
                }
            }
            Role::Attitude {
                run,
                achieved,
                desired,
            } => {
                let angles = |at: [At; 3]| -> Option<[f64; 3]> {
                    Some([number(m, at[0])?, number(m, at[1])?, number(m, at[2])?])
                };
                if let (Some([r, p, y]), Some([dr, dp, dy])) = (angles(achieved), angles(desired)) {
                    let error = angle_deg(quaternion(r, p, y), quaternion(dr, dp, dy));
                    self.runs.push(run, timestamp, Some(error));
                }
            }
        }
    }

    /// Lists the numeric fields of `f`'s instance `instance`, as [`FieldPath`]s print.
    fn list_fields(&mut self, f: &Format, instance: u8) {
        let names = f
            .format
            .bytes()
            .zip(&f.labels)
            .filter(|(c, label)| is_numeric(*c) && *label != "TimeUS")
            .map(|(_, label)| {
                FieldPath {
                    topic: f.name.clone(),
                    instance,
                    field: label.clone(),
                }
                .to_string()
            })
            .collect::<Vec<_>>();
        // A type defined again lists only what it did not have.
        for name in names {
            if !self.fields.contains(&name) {
                self.fields.push(name);
            }
        }
    }

    /// What `f`'s messages give, found at its first one.
    fn type_read(&mut self, f: &Format) -> TypeRead {
        let (unit_ids, _) = self.state.units.of_type(f.type_id);
        let instance = instance_field(&unit_ids)
            .and_then(|i| f.labels.get(i))
            .and_then(|label| f.field(label));
        let numeric = |label: &str| f.field(label).filter(|&(_, c)| is_numeric(c));
        let role = match self.ask.clone() {
            Ask::Field(path) => match numeric(&path.field).filter(|_| path.topic == f.name) {
                Some(field) if path.instance == 0 || instance.is_some() => {
                    let name = path.to_string();
                    Role::Value {
                        run: self.runs.run(&name, "", name.clone()),
                        field,
                        instance: path.instance,
                    }
                }
                _ => Role::Unread,
            },
            Ask::FirstLook => match f.name.as_str() {
                "BAT" => match numeric("Volt") {
                    Some(field) => Role::Value {
                        run: self.runs.run("battery voltage", "V", "BAT.Volt".into()),
                        field,
                        instance: 0,
                    },
                    None => Role::Unread,
                },
                "POS" => match numeric("RelHomeAlt") {
                    Some(field) => Role::Value {
                        run: self
                            .runs
                            .run("height", "m", "POS.RelHomeAlt (above home)".into()),
                        field,
                        instance: 0,
                    },
                    None => Role::Unread,
                },
                "ATT" => {
                    let three = |labels: [&str; 3]| -> Option<[At; 3]> {
                        Some([
                            numeric(labels[0])?,
                            numeric(labels[1])?,
                            numeric(labels[2])?,
                        ])
                    };
                    match (
                        three(["Roll", "Pitch", "Yaw"]),
                        three(["DesRoll", "DesPitch", "DesYaw"]),
                    ) {
                        (Some(achieved), Some(desired)) => Role::Attitude {
                            run: self.runs.run(
                                "attitude error",
                                "°",
                                "angle between ATT's Roll, Pitch, Yaw and its DesRoll, \
                                 DesPitch, DesYaw"
                                    .into(),
                            ),
                            achieved,
                            desired,
                        },
                        _ => Role::Unread,
                    }
                }
                _ => Role::Unread,
            },
        };
        TypeRead { role, instance }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflash::testing::{df, df_format};

    fn body(t: u64, rest: &[&[u8]]) -> Vec<u8> {
        let mut b = t.to_le_bytes().to_vec();
        for r in rest {
            b.extend_from_slice(r);
        }
        b
    }

    /// A log with FMTU marking BAT's instance, two batteries, an ATT off by 3° of roll, a
    /// POS, and the receiver's dropout mark between two samples.
    fn log() -> Vec<u8> {
        let fmtu = df_format(172, "FMTU", "QBNN", "TimeUS,FmtType,UnitIds,MultIds");
        let bat = df_format(40, "BAT", "QBf", "TimeUS,Inst,Volt");
        let att = df_format(
            35,
            "ATT",
            "Qcccccc",
            "TimeUS,DesRoll,Roll,DesPitch,Pitch,DesYaw,Yaw",
        );
        let pos = df_format(41, "POS", "Qf", "TimeUS,RelHomeAlt");
        let msg = df_format(91, "MSG", "QZ", "TimeUS,Message");
        let mut log = Vec::new();
        for f in [&fmtu, &bat, &att, &pos, &msg] {
            log.extend(f.to_bytes());
        }
        let padded = |s: &str| crate::dataflash::testing::padded::<16>(s);
        log.extend(df(
            &fmtu,
            &body(1, &[&[40], &padded("s#v"), &padded("F--")]),
        ));
        let centi = |deg: i16| (deg * 100).to_le_bytes();
        let a = [centi(3), centi(0), centi(0), centi(0), centi(90), centi(90)];
        let a: Vec<&[u8]> = a.iter().map(|x| &x[..]).collect();
        log.extend(df(&att, &body(10, &a)));
        log.extend(df(&bat, &body(11, &[&[1], &11.1f32.to_le_bytes()])));
        log.extend(df(&bat, &body(12, &[&[0], &12.5f32.to_le_bytes()])));
        log.extend(df(&pos, &body(13, &[&4.5f32.to_le_bytes()])));
        let mark = crate::dataflash::testing::padded::<64>("ulog-recv: dropout of 250 ms");
        log.extend(df(&msg, &body(14, &[&mark])));
        log.extend(df(&bat, &body(20, &[&[0], &12.4f32.to_le_bytes()])));
        log
    }

    /// `ask` of [`log`], written to a file of its own (`name`: the tests run side by side).
    fn read_log(name: &str, ask: &Ask) -> Signals {
        let path = std::env::temp_dir().join(format!("signals-{name}-{}.bin", std::process::id()));
        std::fs::write(&path, log()).unwrap();
        let signals = read(std::slice::from_ref(&path), ask).unwrap();
        std::fs::remove_file(&path).unwrap();
        signals
    }

    #[test]
    fn the_first_look_reads_the_first_battery_the_height_and_the_attitude_error() {
        let signals = read_log("first", &Ask::FirstLook);
        let names: Vec<&str> = signals.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, super::super::FIRST_LOOK);
        let [battery, height, attitude] = &signals.series[..] else {
            panic!("{signals:?}")
        };
        // Instance 0 only, the dropout a hole after its last sample before it.
        assert_eq!(battery.t_us, [12, 13, 20]);
        assert_eq!(battery.values[1], None);
        assert!((battery.values[0].unwrap() - 12.5).abs() < 1e-6);
        assert_eq!(height.values, [Some(4.5), None]);
        assert_eq!(attitude.t_us, [10, 11]);
        assert!(
            (attitude.values[0].unwrap() - 3.0).abs() < 1e-9,
            "{attitude:?}"
        );
        assert!(signals.fields.contains(&"BAT/1.Volt".to_string()));
        assert!(signals.fields.contains(&"BAT.Volt".to_string()));
        assert!(signals.fields.contains(&"ATT.DesYaw".to_string()));
        assert!(
            !signals
                .fields
                .iter()
                .any(|f| f.contains("TimeUS") || f.starts_with("MSG"))
        );
    }

    #[test]
    fn a_field_is_read_by_its_type_and_instance() {
        let signals = read_log("bat1", &Ask::Field("BAT/1.Volt".parse().unwrap()));
        let [one] = &signals.series[..] else {
            panic!("{signals:?}")
        };
        // Its sample, and the dropout's hole after it.
        assert_eq!(one.t_us, [11, 12]);
        assert!((one.values[0].unwrap() - 11.1).abs() < 1e-6);
        assert_eq!(one.values[1], None);
        assert!(signals.fields.is_empty());
        // A type without an instance field has no instance 1.
        let none = read_log("pos1", &Ask::Field("POS/1.RelHomeAlt".parse().unwrap()));
        assert!(none.series.is_empty());
    }
}
