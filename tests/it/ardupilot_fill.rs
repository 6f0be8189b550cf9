//! The fill of an ArduPilot flight from the vehicle's card, its engine
//! ([`ulog_recv::fill::dataflash`]) on ArduPilot's own log: the log streamed by the
//! simulated ArduPilot through a lossy link (the vehicle's buffer overruns and it drops
//! messages at the source) and an outage longer than its patience (it drops the daemon and
//! starts its stream again), then the session filled from the log itself as the card
//! (`ulog-recv fill SESSION --card FILE`), reported by `info` with the fill in place, and exported as one `.bin` (`ulog-recv export
//! SESSION -o flight.bin`). That log holds every card message of the streamed window, read
//! by pymavlink on both sides, and the fill read about what it recovered of the card.

use crate::common;

use common::ardupilot::{ardupilot_logs, compare_filled, replay};
use common::procs::run_ok;

#[test]
fn a_flight_that_lost_messages_at_the_source_and_in_an_outage_is_completed_from_the_card() {
    let Some(logs) = ardupilot_logs() else { return };
    let Some(py) = common::venv_python() else {
        return;
    };
    let log = logs
        .iter()
        .find(|l| l.ends_with("sitl_copter_hover.bin"))
        .expect("the hover log");
    let impairments = [
        "--loss",
        "0.15",
        "--outage-every-ms",
        "17000",
        "--outage-ms",
        "11000",
    ];
    let (splits, counters) = replay(log, "fill-card", &impairments);
    let before = compare_filled(&py, log, &splits);
    eprintln!("streamed: {}", brief(&before));
    assert!(before["dms_dropped"].as_u64().unwrap() > 0, "{counters}");
    assert!(before["marks"].as_u64().unwrap() > 0, "{counters}");
    assert!(before["missing"].as_u64().unwrap() > 1000);

    let session = splits[0].parent().unwrap();
    let card_len = std::fs::metadata(log).unwrap().len();
    let (session_arg, log_arg) = (session.display().to_string(), log.display().to_string());
    let fill = || {
        let out = run_ok(&["fill", &session_arg, "--card", &log_arg, "--json"]);
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let report = fill();
    assert_eq!(report["unfilled"], serde_json::json!([]), "{report}");
    assert!(report["marked"].as_u64().unwrap() >= 1, "{report}");
    assert!(report["amendment"].is_string(), "{report}");
    let read = report["fetched_bytes"].as_u64().unwrap();
    let recovered = report["record_bytes"].as_u64().unwrap();
    // `info` reads the flight with the fill in place: every marked dropout gone, each filled
    // gap placed in the flight's time.
    let info: serde_json::Value =
        serde_json::from_str(&run_ok(&["info", &session_arg, "--json"])).unwrap();
    let figures = &info["session"];
    assert!(
        figures["dropouts_received"].as_u64().unwrap() >= 1,
        "{figures}"
    );
    assert_eq!(figures["dropouts_remaining"], 0, "{figures}");
    assert_eq!(figures["gaps_filled"], report["filled"], "{figures}");
    assert_eq!(figures["records_recovered"], report["records"], "{figures}");
    assert_eq!(
        figures["amendments"],
        serde_json::json!([report["amendment"]])
    );
    let (first, last) = (&info["flight"]["first_us"], &info["flight"]["last_us"]);
    let filled = figures["filled"].as_array().unwrap();
    assert_eq!(
        filled.len() as u64,
        report["filled"].as_u64().unwrap(),
        "{figures}"
    );
    for gap in filled {
        assert!(
            gap["first_us"].as_u64() >= first.as_u64(),
            "{gap} before {first}"
        );
        assert!(
            gap["last_us"].as_u64() <= last.as_u64(),
            "{gap} after {last}"
        );
    }
    // Filled once: run again, nothing is done.
    let again = fill();
    assert_eq!(again["filled_before"], true, "{again}");
    assert!(again["amendment"].is_null(), "{again}");

    // The whole flight as one DataFlash log, the fills in place.
    let dir = common::procs::fresh_dir("fill-card-merged");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("flight.bin");
    run_ok(&["export", &session_arg, "-o", &path.display().to_string()]);
    let after = compare_filled(&py, log, &[path]);
    eprintln!(
        "filled: {}; {report}, {recovered} bytes recovered, {read} of the card's {} read",
        brief(&after),
        card_len
    );
    assert_eq!(after["missing"], 0, "{}", brief(&after));
    assert_eq!(after["unexplained_invented"], 0, "{}", brief(&after));
    assert!(read < card_len as u64 / 2);
    assert!(read <= 2 * recovered, "{read} read for {recovered}");
}

fn brief(report: &serde_json::Value) -> serde_json::Value {
    let mut brief = report.clone();
    brief.as_object_mut().unwrap().remove("windows");
    brief
}
