//! Topic-name patterns for subscriptions: `*` matches any run of characters, `?` one
//! character, everything else itself (`sensor_*`, `vehicle_?ps_position`, `*`).

/// True when `name` matches `pattern`.
pub fn matches(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Iterative wildcard matching with backtracking to the last '*'.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// Which of `sets` (each a list of patterns) is the first with a pattern `name` matches:
/// its index, `None` when none has one (how topics are routed to columns of patterns).
pub fn first_matching<'p>(
    sets: impl IntoIterator<Item = &'p [String]>,
    name: &str,
) -> Option<usize> {
    sets.into_iter()
        .position(|patterns| patterns.iter().any(|p| matches(p, name)))
}

#[cfg(test)]
mod tests {
    use super::{first_matching, matches};

    #[test]
    fn stars_and_question_marks() {
        assert!(matches("*", "vehicle_status"));
        assert!(matches("sensor_*", "sensor_accel"));
        assert!(!matches("sensor_*", "vehicle_sensor_x"));
        assert!(matches("*_status", "battery_status"));
        assert!(matches("vehicle_?ps_position", "vehicle_gps_position"));
        assert!(matches("a*b*c", "axxbyyc"));
        assert!(!matches("a*b*c", "axxbyy"));
        assert!(matches("vehicle_attitude", "vehicle_attitude"));
        assert!(!matches("vehicle_attitude", "vehicle_attitude_setpoint"));
        assert!(matches("", ""));
        assert!(!matches("", "x"));
    }

    #[test]
    fn the_first_set_with_a_matching_pattern_is_taken() {
        let imu = ["sensor_*".to_string(), "vehicle_imu*".to_string()];
        let all = ["*".to_string()];
        let sets = [&imu[..], &all[..]];
        assert_eq!(first_matching(sets, "vehicle_imu_status"), Some(0));
        assert_eq!(first_matching(sets, "battery_status"), Some(1));
        assert_eq!(first_matching([&imu[..]], "battery_status"), None);
    }
}
