use super::*;
use crate::dataflash::testing::{df, df_format, padded};
use crate::diagnose::Severity;

/// A DataFlash log made by hand, a message at a time.
struct Log {
    bytes: Vec<u8>,
    formats: Vec<Format>,
}

impl Log {
    fn new() -> Self {
        let formats = vec![
            df_format(60, "ARM", "QB", "TimeUS,ArmState"),
            df_format(61, "MODE", "QMB", "TimeUS,Mode,ModeNum"),
            df_format(62, "BAT", "QBff", "TimeUS,Inst,Volt,Curr"),
            df_format(63, "XKF4", "QBcccB", "TimeUS,C,SV,SP,SH,PI"),
            df_format(64, "GPS", "QBBB", "TimeUS,I,Status,NSats"),
            df_format(65, "GPA", "QBCC", "TimeUS,I,HAcc,VAcc"),
            df_format(66, "RCOU", "QHHHH", "TimeUS,C1,C2,C3,C4"),
            df_format(67, "RCI2", "QB", "TimeUS,Flags"),
            df_format(68, "ERR", "QBB", "TimeUS,Subsys,ECode"),
            df_format(69, "EV", "QB", "TimeUS,Id"),
            df_format(70, "MSG", "QZ", "TimeUS,Message"),
        ];
        let bytes = formats.iter().flat_map(Format::to_bytes).collect();
        Self { bytes, formats }
    }

    /// A message of type `name` at `secs` of log time, its fields after `TimeUS` in `rest`.
    fn put(&mut self, name: &str, secs: f64, rest: &[&[u8]]) -> &mut Self {
        let f = self.formats.iter().find(|f| f.name == name).unwrap();
        let mut body = ((secs * 1e6) as u64).to_le_bytes().to_vec();
        rest.iter().for_each(|r| body.extend_from_slice(r));
        self.bytes.extend(df(f, &body));
        self
    }

    fn text(&mut self, secs: f64, words: &str) -> &mut Self {
        self.put("MSG", secs, &[&padded::<64>(words)])
    }

    fn armed(&mut self, secs: f64, armed: bool) -> &mut Self {
        self.put("ARM", secs, &[&[u8::from(armed)]])
    }

    fn battery(&mut self, secs: f64, volt: f32) -> &mut Self {
        self.put(
            "BAT",
            secs,
            &[&[0], &volt.to_le_bytes(), &20f32.to_le_bytes()],
        )
    }

    fn ekf(&mut self, secs: f64, core: u8, ratio: f64, primary: u8) -> &mut Self {
        let r = ((ratio * 100.0) as i16).to_le_bytes();
        self.put("XKF4", secs, &[&[core], &r, &[0, 0], &[0, 0], &[primary]])
    }

    fn gps(&mut self, secs: f64, status: u8, satellites: u8, hacc: f64) -> &mut Self {
        let cm = |m: f64| ((m * 100.0) as u16).to_le_bytes();
        self.put("GPS", secs, &[&[0, status, satellites]]);
        self.put("GPA", secs, &[&[0], &cm(hacc), &cm(0.5)])
    }

    fn outputs(&mut self, secs: f64, pwm: [u16; 4]) -> &mut Self {
        let b: Vec<u8> = pwm.iter().flat_map(|p| p.to_le_bytes()).collect();
        self.put("RCOU", secs, &[&b])
    }

    fn rc_flags(&mut self, secs: f64, flags: u8) -> &mut Self {
        self.put("RCI2", secs, &[&[flags]])
    }

    fn diagnose(&self) -> Detectors {
        let mut d = BinDiagnosis::new(Selection::ALL);
        d.push(&self.bytes);
        d.finish()
    }
}

#[test]
fn a_pack_browning_out_while_armed_is_found_beside_the_vehicles_battery_failsafe() {
    // (No brownout is said in the first 30 s of boot, as Flight Review v2.)
    let mut log = Log::new();
    log.battery(1.0, 16.8).armed(32.0, true).battery(33.0, 15.0);
    log.battery(40.0, 12.9).put("ERR", 40.5, &[&[6, 1]]);
    log.put("EV", 60.0, &[&[11]]);
    let d = log.diagnose();
    let [f] = d.findings() else {
        panic!("{:?}", d.findings())
    };
    assert_eq!(
        (f.id, f.severity),
        (AnalyzerId::BatteryBrownout, Severity::Critical)
    );
    assert_eq!(f.timestamp_us, 40_000_000);
    let records = d.vehicle_records();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].text, "battery failsafe: occurred");
    assert_eq!(records[1].text, "disarmed");
    assert_eq!(d.beside(f), [0]);
}

#[test]
fn a_disarmed_vehicle_low_on_battery_is_no_finding() {
    let mut log = Log::new();
    log.battery(1.0, 16.8).battery(10.0, 12.0);
    log.armed(20.0, true).armed(21.0, false).battery(22.0, 12.0);
    assert!(log.diagnose().findings().is_empty());
}

#[test]
fn only_the_primary_ekf_cores_test_ratios_count() {
    let mut log = Log::new();
    // Core 0 fails its tests for 6 s while core 1 is the primary: nothing.
    for k in 0..=60 {
        log.ekf(1.0 + f64::from(k) * 0.1, 0, 1.5, 1);
        log.ekf(1.0 + f64::from(k) * 0.1, 1, 0.2, 1);
    }
    assert!(log.diagnose().findings().is_empty());
    // The primary fails them for 2.5 s: a warning, from its first sample above 1.
    for k in 0..=25 {
        log.ekf(10.0 + f64::from(k) * 0.1, 1, 1.5, 1);
    }
    let d = log.diagnose();
    let [f] = d.findings() else {
        panic!("{:?}", d.findings())
    };
    assert_eq!(
        (f.id, f.severity),
        (AnalyzerId::EkfFailure, Severity::Warning)
    );
    assert_eq!(f.timestamp_us, 10_000_000);
}

#[test]
fn gps_interference_is_judged_against_the_first_3d_fixes() {
    let mut log = Log::new();
    // Before its fix the receiver sees 3 satellites at 50 m: not the baseline.
    for k in 0..5 {
        log.gps(1.0 + f64::from(k) * 0.2, 1, 3, 50.0);
    }
    for k in 0..10 {
        log.gps(3.0 + f64::from(k) * 0.2, 3, 12, 0.5);
    }
    log.gps(6.0, 3, 12, 0.6);
    assert!(log.diagnose().findings().is_empty());
    log.gps(7.0, 3, 5, 8.0);
    let d = log.diagnose();
    let [f] = d.findings() else {
        panic!("{:?}", d.findings())
    };
    assert_eq!(
        (f.id, f.severity),
        (AnalyzerId::GpsInterference, Severity::Warning)
    );
    assert!(f.summary.contains("EPH 8.0 m"), "{}", f.summary);
    assert!(f.summary.contains("5 satellites"), "{}", f.summary);
}

#[test]
fn a_motor_dropping_to_zero_names_the_copters_mode() {
    let mut log = Log::new();
    log.text(0.5, "ArduCopter V4.6.0 (abcdef12)");
    log.put("MODE", 1.0, &[&[4], &[4]]).armed(2.0, true);
    for k in 0..10 {
        log.outputs(3.0 + f64::from(k) * 0.1, [1500, 1510, 1490, 1505]);
    }
    log.outputs(4.0, [1500, 1510, 0, 1505]);
    let d = log.diagnose();
    let [f] = d.findings() else {
        panic!("{:?}", d.findings())
    };
    assert_eq!(f.id, AnalyzerId::MotorFailure);
    assert!(f.summary.contains("motor 2"), "{}", f.summary);
    assert!(f.summary.ends_with("in Guided"), "{}", f.summary);
}

#[test]
fn rc_failsafe_flags_make_an_rc_loss_and_a_dropout_hides_one() {
    let mut log = Log::new();
    log.armed(1.0, true).rc_flags(2.0, 1).rc_flags(3.0, 2);
    log.put("ERR", 3.0, &[&[5, 1]]).put("ERR", 4.2, &[&[5, 0]]);
    log.rc_flags(4.0, 2).rc_flags(4.5, 1);
    let d = log.diagnose();
    let [f] = d.findings() else {
        panic!("{:?}", d.findings())
    };
    assert_eq!((f.id, f.severity), (AnalyzerId::RcLoss, Severity::Warning));
    assert_eq!(
        (f.timestamp_us, f.end_timestamp_us),
        (3_000_000, Some(4_500_000))
    );
    assert_eq!(d.beside(f), [0, 1]);

    // Lost again, then a dropout of the link: back after it, nothing is made of the loss.
    log.rc_flags(10.0, 2)
        .text(11.0, "ulog-recv: dropout of 2000 ms");
    log.rc_flags(13.0, 1);
    let d = log.diagnose();
    assert_eq!(d.findings().len(), 1, "{:?}", d.findings());
    assert_eq!(d.blind(), [[11_000_000, 13_000_000]]);
}

#[test]
fn pieces_of_any_size_find_what_the_whole_finds() {
    let mut log = Log::new();
    log.armed(31.0, true).battery(31.5, 16.8).rc_flags(32.0, 2);
    log.battery(32.5, 12.0)
        .rc_flags(34.0, 1)
        .put("EV", 35.0, &[&[11]]);
    let whole = log.diagnose();
    assert_eq!(whole.findings().len(), 2, "{:?}", whole.findings());
    for size in [1, 7, 89, 1000] {
        let mut d = BinDiagnosis::new(Selection::ALL);
        log.bytes.chunks(size).for_each(|p| d.push(p));
        let d = d.finish();
        assert_eq!(d.findings(), whole.findings(), "{size}");
        assert_eq!(d.vehicle_records(), whole.vehicle_records(), "{size}");
    }
    // Only the analyzers selected run; the vehicle's records are kept all the same.
    let mut d = BinDiagnosis::new("rc_loss".parse().unwrap());
    d.push(&log.bytes);
    let d = d.finish();
    assert_eq!(d.findings().len(), 1);
    assert_eq!(d.findings()[0].id, AnalyzerId::RcLoss);
    assert_eq!(d.vehicle_records().len(), 1);
}
