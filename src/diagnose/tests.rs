use super::*;
use crate::sim::faults::{FAULT_AFTER_US, Fault, FaultFlight, START_US, fault_flight};

fn findings(fault: Fault, armed: bool) -> Vec<Finding> {
    diagnose(
        &fault_flight(FaultFlight {
            fault,
            armed,
            seed: 7,
            rc_lost_as_uint8: false,
        }),
        Selection::ALL,
    )
}

const FAULT_US: u64 = START_US + FAULT_AFTER_US;

#[test]
fn selections_and_filters_parse_and_print_back() {
    assert_eq!("all".parse(), Ok(Selection::ALL));
    assert_eq!("none".parse(), Ok(Selection::NONE));
    let two: Selection = "rc_loss, motor_failure".parse().unwrap();
    assert!(two.contains(AnalyzerId::RcLoss) && two.contains(AnalyzerId::MotorFailure));
    assert!(!two.contains(AnalyzerId::EkfFailure));
    assert_eq!(two.to_string(), "motor_failure,rc_loss");
    assert!("motor".parse::<Selection>().is_err());
    assert_eq!(
        "critical".parse(),
        Ok(FindingFilter::AtLeast(Severity::Critical))
    );
    assert_eq!("rc_loss".parse(), Ok(FindingFilter::Of(Selection(1 << 4))));
}

#[test]
fn a_quiet_flight_has_no_finding() {
    assert_eq!(findings(Fault::None, true), vec![]);
}

#[test]
fn a_motor_dropping_to_zero_is_found_at_its_first_zero_only_while_armed() {
    let found = findings(Fault::MotorDrop, true);
    assert_eq!(found.len(), 1, "{found:#?}");
    let f = &found[0];
    assert_eq!(
        (f.id, f.severity),
        (AnalyzerId::MotorFailure, Severity::Critical)
    );
    assert_eq!(f.timestamp_us, FAULT_US);
    assert!(
        matches!(&f.evidence, Evidence::MotorFailure { motor_index: 2, failure_mode, flight_mode, .. }
        if failure_mode == "drop_to_zero" && flight_mode == "Position")
    );
    assert_eq!(findings(Fault::MotorDrop, false), vec![]);
}

#[test]
fn a_sagging_pack_is_a_critical_brownout_once_per_30_s() {
    let found = findings(Fault::BatterySag, true);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].timestamp_us, FAULT_US);
    assert!(
        matches!(found[0].evidence, Evidence::BatteryBrownout { critical_threshold_v, .. }
        if critical_threshold_v == 4.0 * 3.3)
    );
    assert_eq!(findings(Fault::BatterySag, false), vec![]);
}

#[test]
fn innovation_failures_are_a_warning_at_2_s_and_a_critical_at_5_s() {
    let two = findings(Fault::Innovation { ms: 2000 }, true);
    assert_eq!(two.len(), 1, "{two:#?}");
    assert_eq!(two[0].severity, Severity::Warning);
    assert_eq!(
        (two[0].timestamp_us, two[0].end_timestamp_us),
        (FAULT_US, Some(FAULT_US + 2_000_000))
    );
    let five = findings(Fault::Innovation { ms: 5000 }, true);
    let severities: Vec<Severity> = five.iter().map(|f| f.severity).collect();
    assert_eq!(severities, [Severity::Warning, Severity::Critical]);
}

#[test]
fn a_dropout_closes_open_windows_without_a_finding() {
    let mut d = Detectors::new(Selection::ALL);
    let log = fault_flight(FaultFlight {
        fault: Fault::Innovation { ms: 5000 },
        armed: true,
        seed: 7,
        rc_lost_as_uint8: false,
    });
    // The same walk, with a dropout announced 1 s into the exceedance: neither window lasts
    // long enough on either side of it.
    let mut follower = Follower::new(Selection::ALL);
    let mut framer = Framer::file();
    let mut dropped = false;
    let _ = framer.push(&log, |unit| {
        match unit {
            Unit::Header(h) => follower.header(h),
            Unit::Message(m) => {
                if let Some(msg) = Message::parse_framed(m) {
                    if !dropped && follower.log_time() >= FAULT_US + 1_000_000 {
                        dropped = true;
                        follower.follow(&Message::Dropout { duration_ms: 10 });
                    }
                    follower.follow(&msg);
                }
            }
        }
        std::ops::ControlFlow::Continue(())
    });
    let detectors = follower.into_detectors().unwrap();
    // 1 s before the gap, 4 s after it: a warning (2 s) after it only.
    let severities: Vec<Severity> = detectors.findings().iter().map(|f| f.severity).collect();
    assert_eq!(severities, [Severity::Warning]);
    assert!(detectors.findings()[0].timestamp_us >= FAULT_US + 1_000_000);
    assert_eq!(detectors.blind().len(), 1);
    d.dropout(5, 10);
    assert_eq!(d.blind(), [[5, 15]]);
}

#[test]
fn each_finding_has_a_brief_line_for_the_ground_station() {
    let mut briefs = Vec::new();
    for fault in Fault::ALL {
        let flight = fault_flight(FaultFlight {
            fault,
            armed: true,
            seed: 7,
            rc_lost_as_uint8: true,
        });
        for f in diagnose(&flight, Selection::ALL) {
            let brief = f.brief();
            assert!(brief.len() <= BRIEF_BYTES, "{brief:?}");
            briefs.push(brief);
        }
    }
    briefs.sort();
    briefs.dedup();
    for want in [
        "motor 2 output dropped to 0",
        "RC lost for 6.1 s",
        "EKF velocity test ratio 1.6 for 5.0 s",
    ] {
        assert!(briefs.iter().any(|b| b == want), "{want:?} in {briefs:#?}");
    }
}
