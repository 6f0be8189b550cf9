//! A deterministic synthetic flight log, written with our own [`Writer`]: every message type,
//! every basic type, nested formats defined after their use, nested arrays, padding in the
//! middle, inside nested formats and at the end, multi-instance topics, NaNs, default
//! parameters, continued multi-info, tagged strings, sync messages, a dropout, an unknown
//! message type, a removed subscription and (optionally) appended data. As PX4's logger, it
//! adds a topic instance in flight ('A' half a second in), writes its perf output a second in
//! ('M' `perf_top_preflight`) and its post-flight perf counters at the end
//! ('M' `perf_counter_postflight`): what a streaming vehicle sends reliably mid-flight and on
//! its STOP.
//!
//! Values come from a seeded PRNG and plain IEEE arithmetic only (no `sin`, whose last bits
//! vary between platforms), so the same options give the same bytes everywhere.

use crate::ulog::message::{COMPAT_DEFAULT_PARAMETERS, INCOMPAT_DATA_APPENDED, msg_type};
use crate::ulog::{ParamValue, WriteError, Writer};

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct SynthOptions {
    /// Seconds of flight (log time).
    pub duration_s: u32,
    pub seed: u64,
    /// Append a hardfault-style section after a cut-off message, as PX4 does.
    pub appended_data: bool,
}

impl Default for SynthOptions {
    fn default() -> Self {
        Self {
            duration_s: 10,
            seed: 1,
            appended_data: true,
        }
    }
}

/// A vehicle of a fleet, for a flight as a fleet's tables see it ([`generate_for`]): the
/// default flight has no hardware id, no GPS time and no vehicle status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynthVehicle {
    /// The autopilot's hardware id, written as `sys_uuid` (24 hex digits).
    pub uid: u64,
    /// The MAVLink system id (`MAV_SYS_ID`).
    pub system_id: u8,
    /// UTC at the log's start, µs since the epoch: what the GPS's `time_utc_usec` says.
    pub utc_start_us: u64,
    /// The vehicle goes into failsafe two thirds into the flight: `vehicle_status.failsafe`
    /// turns true, and a critical string says so.
    pub failsafe: bool,
}

/// Formats a [`SynthVehicle`]'s flight adds.
const VEHICLE_FORMATS: &[&str] = &[
    "vehicle_status:uint64_t timestamp;uint8_t arming_state;bool failsafe;uint8_t[6] _padding0;",
    "vehicle_gps_position:uint64_t timestamp;uint64_t time_utc_usec;double lat;double lon;float alt;uint8_t fix_type;uint8_t[3] _padding0;",
    "vehicle_local_position:uint64_t timestamp;float x;float y;float z;uint8_t[4] _padding0;",
];
const STATUS: u16 = 7;
const GPS: u16 = 8;
const LOCAL: u16 = 9;

/// Log start, microseconds since boot.
pub const START_US: u64 = 20_000_000;

/// Small, fast, deterministic PRNG (SplitMix64): the simulator's flights' values.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    /// Uniform in [0, 1), 24 bits of it.
    pub(crate) fn fraction(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

const FORMATS: &[&str] = &[
    // Uses position_setpoint before it is defined.
    "position_setpoint_triplet:uint64_t timestamp;position_setpoint previous;position_setpoint current;",
    "position_setpoint:uint64_t timestamp;double lat;double lon;float alt;bool valid;uint8_t type;uint8_t[2] _padding0;",
    "vehicle_attitude:uint64_t timestamp;float[4] q;float[3] delta_q_reset;uint8_t quat_reset_counter;uint8_t[7] _padding0;",
    "type_zoo:uint64_t timestamp;int8_t i8;uint8_t u8;int16_t i16;uint16_t u16;int32_t i32;uint32_t u32;int64_t i64;uint64_t u64;float f32;double f64;bool flag;char[8] label;uint8_t[1] _padding0;int16_t[3] arr;uint8_t[3] _padding1;",
    "sensor_accel:uint64_t timestamp;uint32_t device_id;float x;float y;float z;float temperature;uint8_t error_count;uint8_t[3] _padding0;",
    "esc_status:uint64_t timestamp;uint8_t esc_count;uint8_t[3] _padding0;esc_report[2] esc;",
    "esc_report:int32_t esc_rpm;float esc_voltage;uint8_t esc_state;uint8_t[3] _padding0;",
    "battery_status:uint64_t timestamp;float voltage_v;float remaining;uint8_t warning;uint8_t[3] _padding0;",
];

/// Message ids of the subscriptions.
const ATT: u16 = 0;
const ZOO: u16 = 1;
const TRIPLET: u16 = 2;
const ACCEL0: u16 = 3;
const ACCEL1: u16 = 4;
const ESC: u16 = 5;
const BATTERY: u16 = 6;

/// Generates the log.
pub fn generate(opts: SynthOptions) -> Vec<u8> {
    build(opts, None).expect("synthetic messages are far below the size limits")
}

/// The flight of [`generate`] flown by `vehicle`: the same, plus its hardware id, system id,
/// GPS time (`vehicle_gps_position`, 5 Hz), `vehicle_status` (armed from the first second
/// to the last, 10 Hz) and `vehicle_local_position` (climbing 1 m/s to 20 m, 10 Hz).
pub fn generate_for(opts: SynthOptions, vehicle: &SynthVehicle) -> Vec<u8> {
    build(opts, Some(vehicle)).expect("synthetic messages are far below the size limits")
}

fn build(opts: SynthOptions, vehicle: Option<&SynthVehicle>) -> Result<Vec<u8>, WriteError> {
    let mut rng = Rng(opts.seed);
    let mut w = Writer::new();
    w.header(1, START_US);
    let incompat0 = if opts.appended_data {
        INCOMPAT_DATA_APPENDED
    } else {
        0
    };
    w.flag_bits(
        [COMPAT_DEFAULT_PARAMETERS, 0, 0, 0, 0, 0, 0, 0],
        [incompat0, 0, 0, 0, 0, 0, 0, 0],
        [0; 3],
    )?;
    let vehicle_formats = if vehicle.is_some() {
        VEHICLE_FORMATS
    } else {
        &[]
    };
    for f in FORMATS.iter().chain(vehicle_formats) {
        w.message(msg_type::FORMAT, &[f.as_bytes()])?;
    }
    if let Some(v) = vehicle {
        w.info_string("sys_uuid", &format!("{:024X}", v.uid))?;
    }
    w.info_string("sys_name", "PX4")?;
    w.info_string("ver_hw", "ULOG_RECV_SYNTHETIC")?;
    w.info_string("ver_sw", "0123456789abcdef0123456789abcdef01234567")?;
    w.info_string("sys_os_name", "ulog-recv")?;
    raw_info(
        &mut w,
        "uint32_t",
        "ver_sw_release",
        &0x010e_00ffu32.to_le_bytes(),
    )?;
    raw_info(&mut w, "int32_t", "time_ref_utc", &(-3600i32).to_le_bytes())?;
    raw_info(&mut w, "float", "synth_gain", &0.25f32.to_le_bytes())?;
    raw_info(&mut w, "uint64_t", "synth_seed", &opts.seed.to_le_bytes())?;
    w.info_multiple_string("boot_console_output", "HW arch: SYNTHETIC\n", false)?;
    w.info_multiple_string(
        "boot_console_output",
        "FW git-hash: 0123456789abcdef\n",
        true,
    )?;
    w.info_multiple_string(
        "boot_console_output",
        "Startup script returned successfully\n",
        true,
    )?;
    w.info_multiple_string("perf_counter_preflight", "logger: 3 events", false)?;
    w.info_multiple_string("perf_counter_preflight", "navigator: 9 events", false)?;
    let params: [(&str, ParamValue); 8] = [
        ("BAT1_N_CELLS", ParamValue::Int32(4)),
        ("COM_RC_IN_MODE", ParamValue::Int32(1)),
        ("MC_ROLL_P", ParamValue::Float(6.5)),
        ("MC_PITCH_P", ParamValue::Float(6.5)),
        ("MPC_XY_VEL_MAX", ParamValue::Float(12.0)),
        ("SDLOG_PROFILE", ParamValue::Int32(3)),
        ("SYS_AUTOSTART", ParamValue::Int32(4001)),
        ("CAL_ACC0_ID", ParamValue::Int32(-1)),
    ];
    for (name, value) in params {
        w.parameter(name, value)?;
    }
    if let Some(v) = vehicle {
        w.parameter("MAV_SYS_ID", ParamValue::Int32(v.system_id.into()))?;
        w.parameter("MAV_TYPE", ParamValue::Int32(2))?;
    }
    w.parameter_default(0b01, "BAT1_N_CELLS", ParamValue::Int32(0))?;
    w.parameter_default(0b10, "MC_ROLL_P", ParamValue::Float(6.0))?;
    w.parameter_default(0b11, "SDLOG_PROFILE", ParamValue::Int32(1))?;

    // Data section.
    // The second accelerometer appears in flight (its 'A' comes then).
    let subs: [(u8, u16, &str); 6] = [
        (0, ATT, "vehicle_attitude"),
        (0, ZOO, "type_zoo"),
        (0, TRIPLET, "position_setpoint_triplet"),
        (0, ACCEL0, "sensor_accel"),
        (0, ESC, "esc_status"),
        (0, BATTERY, "battery_status"),
    ];
    let vehicle_subs: &[(u8, u16, &str)] = match vehicle {
        Some(_) => &[
            (0, STATUS, "vehicle_status"),
            (0, GPS, "vehicle_gps_position"),
            (0, LOCAL, "vehicle_local_position"),
        ],
        None => &[],
    };
    for &(multi_id, msg_id, name) in subs.iter().chain(vehicle_subs) {
        w.write(&crate::ulog::Message::AddLogged {
            multi_id,
            msg_id,
            name,
        })?;
    }
    w.write(&crate::ulog::Message::Logging {
        level: b'6',
        timestamp: START_US,
        text: b"[logger] Start file log (type: full)",
    })?;

    let mut flight = Flight::new(&mut rng);
    let end_us = START_US + opts.duration_s as u64 * 1_000_000;
    // The dropout: 30 ms of nothing, four seconds in.
    let gap = (START_US + 4_000_000, START_US + 4_030_000);
    let mut t = START_US + 10_000;
    while t < end_us {
        if t >= gap.0 && t < gap.1 {
            t = gap.1;
            w.write(&crate::ulog::Message::Dropout { duration_ms: 30 })?;
            continue;
        }
        let tick = (t - START_US) / 10_000; // 100 Hz base tick
        flight.step(&mut rng);
        if tick.is_multiple_of(2) {
            data(&mut w, ATT, &flight.attitude(t))?;
        }
        if tick.is_multiple_of(10) {
            data(&mut w, ZOO, &flight.zoo(t, &mut rng))?;
            data(&mut w, ESC, &flight.esc(t))?;
        }
        data(&mut w, ACCEL0, &flight.accel(t, 0, &mut rng))?;
        if tick == 49 {
            w.write(&crate::ulog::Message::AddLogged {
                multi_id: 1,
                msg_id: ACCEL1,
                name: "sensor_accel",
            })?;
        }
        if tick % 4 == 1 && tick >= 49 {
            data(&mut w, ACCEL1, &flight.accel(t, 1, &mut rng))?;
        }
        if tick == 100 {
            perf_lines(&mut w, "perf_top_preflight", 24)?;
        }
        if let Some(v) = vehicle {
            vehicle_samples(&mut w, v, &flight, t, tick, end_us)?;
        }
        if tick % 100 == 50 {
            data(&mut w, TRIPLET, &flight.triplet(t))?;
            data(&mut w, BATTERY, &flight.battery(t, tick))?;
            w.write(&crate::ulog::Message::Sync)?;
        }
        if tick == 250 {
            w.parameter("MPC_XY_VEL_MAX", ParamValue::Float(8.0))?;
            w.parameter("COM_RC_IN_MODE", ParamValue::Int32(2))?;
            w.write(&crate::ulog::Message::Logging {
                level: b'4',
                timestamp: t,
                text: b"[commander] Takeoff detected",
            })?;
        }
        if tick == 300 {
            for (tag, text) in [
                (1u16, "tagged message test"),
                (2, "[navigator] mission item 2"),
            ] {
                w.write(&crate::ulog::Message::LoggingTagged {
                    level: b'6',
                    tag,
                    timestamp: t,
                    text: text.as_bytes(),
                })?;
            }
            // A message type from the future: readers skip it.
            w.message(b'X', &[b"future message"])?;
        }
        t += 10_000;
    }
    w.write(&crate::ulog::Message::Logging {
        level: b'3',
        timestamp: t,
        text: b"[commander] Disarmed by landing",
    })?;
    w.write(&crate::ulog::Message::RemoveLogged { msg_id: BATTERY })?;
    perf_lines(&mut w, "perf_counter_postflight", 30)?;

    if opts.appended_data {
        // The log is cut mid-message (the start of a sample), then the appended section.
        let cut = flight.attitude(t);
        let mut partial = Writer::new();
        data(&mut partial, ATT, &cut)?;
        let partial = partial.take();
        let cut_len = partial.len() / 2;
        let mut bytes = w.take();
        bytes.extend_from_slice(&partial[..cut_len]);
        let first = bytes.len() as u64;
        let mut w = Writer::new();
        w.info_multiple_string(
            "hardfault_plain",
            "[hardfault_log] -- Begin Fault Log --\n",
            false,
        )?;
        w.info_multiple_string(
            "hardfault_plain",
            "Hard Fault in file: synth.c at line 42\n",
            true,
        )?;
        bytes.extend_from_slice(w.bytes());
        // A second appended section after another cut (pyulog, like PX4, keeps no
        // subscriptions there, so appended sections hold no data messages).
        bytes.extend_from_slice(&partial[..3]);
        let second = bytes.len() as u64;
        let mut w = Writer::new();
        w.info_multiple_string(
            "hardfault_plain",
            "[hardfault_log] -- Second Fault --\n",
            false,
        )?;
        bytes.extend_from_slice(w.bytes());
        crate::ulog::writer::patch_appended_offsets(&mut bytes, [first, second, 0])?;
        return Ok(bytes);
    }
    Ok(w.take())
}

/// A [`SynthVehicle`]'s samples at `t` (tick `tick` of 10 ms) of a flight ending at `end_us`.
fn vehicle_samples(
    w: &mut Writer,
    v: &SynthVehicle,
    flight: &Flight,
    t: u64,
    tick: u64,
    end_us: u64,
) -> Result<(), WriteError> {
    let since_start = t - START_US;
    if tick % 10 == 3 {
        let armed = since_start >= 1_000_000 && t + 1_000_000 < end_us;
        let failsafe_at = START_US + (end_us - START_US) * 2 / 3;
        let failsafe = v.failsafe && t >= failsafe_at;
        let mut b = t.to_le_bytes().to_vec();
        b.push(if armed { 2 } else { 1 });
        b.push(failsafe.into());
        data(w, STATUS, &b)?;
        if v.failsafe && t >= failsafe_at && t < failsafe_at + 100_000 {
            w.write(&crate::ulog::Message::Logging {
                level: b'2',
                timestamp: t,
                text: b"[commander] Failsafe activated: battery critical, returning",
            })?;
        }
        let height = (since_start as f32 / 1e6).min(20.0);
        let mut b = t.to_le_bytes().to_vec();
        for x in [height * 0.5, -height * 0.25, -height] {
            b.extend_from_slice(&x.to_le_bytes());
        }
        data(w, LOCAL, &b)?;
    }
    if tick % 20 == 7 {
        let mut b = t.to_le_bytes().to_vec();
        b.extend_from_slice(&(v.utc_start_us + since_start).to_le_bytes());
        b.extend_from_slice(&flight.lat.to_le_bytes());
        b.extend_from_slice(&flight.lon.to_le_bytes());
        b.extend_from_slice(&flight.alt.to_le_bytes());
        b.push(3);
        data(w, GPS, &b)?;
    }
    Ok(())
}

/// `lines` continued 'M' messages `name` in the shape of PX4's perf output.
fn perf_lines(w: &mut Writer, name: &str, lines: usize) -> Result<(), WriteError> {
    let tasks = [
        "logger",
        "ekf2",
        "mavlink_if0",
        "sensors",
        "navigator",
        "commander",
    ];
    for (i, task) in tasks.iter().cycle().take(lines).enumerate() {
        let line = format!(
            "{task}: {} events, {}us elapsed, {}.{:02}us avg, min {}us max {}us",
            500 + 17 * i,
            24_000 + 733 * i,
            40 + i,
            (13 * i) % 100,
            2 + i % 7,
            300 + 11 * i
        );
        w.info_multiple_string(name, &line, i > 0)?;
    }
    Ok(())
}

fn raw_info(w: &mut Writer, ty: &str, name: &str, raw: &[u8]) -> Result<(), WriteError> {
    w.key_value(
        msg_type::INFO,
        None,
        &crate::ulog::KeyValue {
            type_name: ty,
            name,
            raw_value: raw,
        },
    )
}

fn data(w: &mut Writer, msg_id: u16, payload: &[u8]) -> Result<(), WriteError> {
    w.write(&crate::ulog::Message::Data {
        msg_id,
        data: payload,
    })
}

/// The state of the simulated vehicle.
struct Flight {
    q: [f32; 4],
    lat: f64,
    lon: f64,
    alt: f32,
    voltage: f32,
    rpm: [i32; 2],
}

impl Flight {
    fn new(rng: &mut Rng) -> Self {
        Self {
            q: [1.0, 0.0, 0.0, 0.0],
            lat: 47.397742 + rng.unit() * 1e-4,
            lon: 8.545594 + rng.unit() * 1e-4,
            alt: 488.0,
            voltage: 16.8,
            rpm: [0, 0],
        }
    }

    fn step(&mut self, rng: &mut Rng) {
        for (i, q) in self.q.iter_mut().enumerate().skip(1) {
            *q = (*q + (rng.unit() * 0.002) as f32).clamp(-0.2, 0.2)
                * if i == 3 { 1.0 } else { 0.999 };
        }
        let n2: f32 = self.q[1..].iter().map(|x| x * x).sum();
        self.q[0] = 1.0 - n2 / 2.0;
        self.lat += rng.unit() * 1e-7;
        self.lon += rng.unit() * 1e-7;
        self.alt += (rng.unit() * 0.05) as f32;
        self.voltage -= 0.0001;
        for r in &mut self.rpm {
            *r = (*r + (rng.unit() * 200.0) as i32).clamp(0, 12_000);
        }
    }

    fn attitude(&self, t: u64) -> Vec<u8> {
        let mut b = t.to_le_bytes().to_vec();
        for q in self.q {
            b.extend_from_slice(&q.to_le_bytes());
        }
        for _ in 0..3 {
            b.extend_from_slice(&0f32.to_le_bytes());
        }
        b.push(((t / 1_000_000) % 3) as u8);
        b // trailing padding not logged
    }

    fn zoo(&self, t: u64, rng: &mut Rng) -> Vec<u8> {
        let r = rng.next_u64();
        let mut b = t.to_le_bytes().to_vec();
        b.push(r as u8); // i8
        b.push((r >> 8) as u8); // u8
        b.extend_from_slice(&((r >> 16) as u16).to_le_bytes()); // i16
        b.extend_from_slice(&((r >> 32) as u16).to_le_bytes()); // u16
        b.extend_from_slice(&((r >> 8) as u32).to_le_bytes()); // i32
        b.extend_from_slice(&((r >> 24) as u32).to_le_bytes()); // u32
        b.extend_from_slice(&(-(t as i64) * 1000).to_le_bytes()); // i64
        b.extend_from_slice(&(u64::MAX - t).to_le_bytes()); // u64, beyond 2^53
        b.extend_from_slice(&(rng.unit() as f32 * 1e3).to_le_bytes()); // f32
        b.extend_from_slice(&(rng.unit() * 1e-300).to_le_bytes()); // f64, tiny
        b.push((r >> 63) as u8); // bool
        let mut label = *b"zoo-0000";
        let n = (t / 100_000) % 10_000;
        for (i, c) in label[4..].iter_mut().enumerate() {
            *c = b'0' + ((n / 10u64.pow(3 - i as u32)) % 10) as u8;
        }
        b.extend_from_slice(&label);
        b.push(0xaa); // mid padding, logged
        for k in 0..3i16 {
            b.extend_from_slice(&(k * 1000 - (r as i16 >> 4)).to_le_bytes());
        }
        b
    }

    fn accel(&self, t: u64, instance: u32, rng: &mut Rng) -> Vec<u8> {
        let mut b = t.to_le_bytes().to_vec();
        b.extend_from_slice(&(0x0024_0000 + instance).to_le_bytes());
        for g in [0.0, 0.0, -9.81] {
            b.extend_from_slice(&((g + rng.unit() * 0.3) as f32).to_le_bytes());
        }
        b.extend_from_slice(&(35.0f32 + instance as f32).to_le_bytes());
        b.push(instance as u8);
        b
    }

    fn setpoint(&self, t: u64, valid: bool, b: &mut Vec<u8>) {
        b.extend_from_slice(&t.to_le_bytes());
        let (lat, lon) = if valid {
            (self.lat, self.lon)
        } else {
            (f64::NAN, f64::NAN)
        };
        b.extend_from_slice(&lat.to_le_bytes());
        b.extend_from_slice(&lon.to_le_bytes());
        b.extend_from_slice(&self.alt.to_le_bytes());
        b.push(valid as u8);
        b.push(if valid { 3 } else { 0 });
        b.extend_from_slice(&[0, 0]); // padding inside a nested format is logged
    }

    fn triplet(&self, t: u64) -> Vec<u8> {
        let mut b = t.to_le_bytes().to_vec();
        self.setpoint(
            t.saturating_sub(1_000_000),
            (t / 1_000_000).is_multiple_of(2),
            &mut b,
        );
        self.setpoint(t, true, &mut b);
        b
    }

    fn esc(&self, t: u64) -> Vec<u8> {
        let mut b = t.to_le_bytes().to_vec();
        b.extend_from_slice(&[2, 0, 0, 0]);
        for (i, rpm) in self.rpm.iter().enumerate() {
            b.extend_from_slice(&rpm.to_le_bytes());
            b.extend_from_slice(&(self.voltage - i as f32 * 0.01).to_le_bytes());
            b.push(i as u8 + 1);
            b.extend_from_slice(&[0, 0, 0]); // nested padding, logged even at the end
        }
        b
    }

    fn battery(&self, t: u64, tick: u64) -> Vec<u8> {
        let mut b = t.to_le_bytes().to_vec();
        // Every third reading is invalid (NaN), as a real driver reports it.
        let v = if tick % 300 == 50 {
            f32::NAN
        } else {
            self.voltage
        };
        b.extend_from_slice(&v.to_le_bytes());
        b.extend_from_slice(&((self.voltage - 13.2) / 3.6).to_le_bytes());
        b.push(0);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_options_same_bytes_and_seed_matters() {
        let a = generate(SynthOptions::default());
        assert_eq!(a, generate(SynthOptions::default()));
        let b = generate(SynthOptions {
            seed: 2,
            ..SynthOptions::default()
        });
        assert_ne!(a, b);
        assert_eq!(&a[..7], &crate::ulog::message::FILE_MAGIC);
    }
}
