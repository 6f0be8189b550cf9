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

#[cfg(test)]
mod tests {
    use super::matches;

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
}
