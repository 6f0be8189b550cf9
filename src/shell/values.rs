//! Sizes and durations as the options give them, checked where they enter (the command line,
//! the config file, a reload): a size needs its unit, and each option has a sane range, so
//! that `split-size = 64` (meaning megabytes) or `fsync-interval = 1e20` is an error that
//! names the value, not a disk full of 64-byte splits or a panic.

use std::time::Duration;

/// Why a value is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    #[error("'{0}' is not a size (a number and a unit: 512K, 64M, 2G)")]
    NotASize(String),
    #[error("'{0}' has no unit: that would be {0} bytes; say 64M, 512K or, for bytes, {0}B")]
    NoUnit(String),
    #[error("'{value}' is {what} the allowed range, {min} to {max}")]
    OutOfRange {
        value: String,
        what: &'static str,
        min: String,
        max: String,
    },
    #[error("'{0}' is not a number of seconds")]
    NotSeconds(String),
}

/// An inclusive range a size must lie in, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct SizeRange {
    pub min: u64,
    pub max: u64,
}

/// Splits: at least 1 MiB (each split repeats 100-300 KB of definitions), at most 1 TiB.
pub const SPLIT_SIZE: SizeRange = SizeRange {
    min: 1 << 20,
    max: 1 << 40,
};
/// Disk budgets (the total size of the log sessions, the free space to leave).
pub const BUDGET: SizeRange = SizeRange {
    min: 1 << 20,
    max: 1 << 50,
};
/// Upload rate caps, bytes per second.
pub const UPLOAD_RATE: SizeRange = SizeRange {
    min: 1 << 10,
    max: 1 << 40,
};

/// Multipart upload parts: S3 takes 5 MiB to 5 GiB.
pub const PART_SIZE: SizeRange = SizeRange {
    min: 5 << 20,
    max: 5 << 30,
};

/// Memory queues (a live client's, the store's, an event buffer's): at least 64 KiB, at most
/// 4 GiB.
pub const QUEUE: SizeRange = SizeRange {
    min: 64 << 10,
    max: 4 << 30,
};

/// An inclusive range a duration must lie in.
#[derive(Debug, Clone, Copy)]
pub struct SecondsRange {
    pub min: f64,
    pub max: f64,
}

/// FTP read rate caps, bytes per second.
pub const FTP_RATE: SizeRange = SizeRange {
    min: 1 << 10,
    max: 1 << 40,
};

/// Waits for the vehicle: 100 ms to an hour.
pub const VEHICLE_WAIT: SecondsRange = SecondsRange {
    min: 0.1,
    max: 3600.0,
};

/// Splits by log time: 1 s to a week.
pub const SPLIT_DURATION: SecondsRange = SecondsRange {
    min: 1.0,
    max: 7.0 * 86_400.0,
};
/// Log time an event buffer keeps before an event, or writes after it: up to 10 minutes.
pub const EVENT_WINDOW: SecondsRange = SecondsRange {
    min: 0.0,
    max: 600.0,
};
/// Syncs of the open split: 10 ms to an hour.
pub const FSYNC_INTERVAL: SecondsRange = SecondsRange {
    min: 0.01,
    max: 3600.0,
};
/// How long an upload's request may go without moving: 1 s to an hour.
pub const UPLOAD_STALL: SecondsRange = SecondsRange {
    min: 1.0,
    max: 3600.0,
};

/// A size with its unit: `B`, `K`/`KB`/`KiB`, `M`/`MB`/`MiB`, `G`/`GB`/`GiB`, `T`/`TB`/`TiB`
/// (case-insensitive, powers of 1024), inside `range`.
pub fn parse_size(text: &str, range: SizeRange) -> Result<u64, ValueError> {
    let s = text.trim();
    let split =
        s.find(|c: char| c.is_ascii_alphabetic())
            .ok_or_else(|| match s.parse::<f64>() {
                Ok(_) => ValueError::NoUnit(s.to_owned()),
                Err(_) => ValueError::NotASize(s.to_owned()),
            })?;
    let (number, unit) = (s[..split].trim(), s[split..].trim());
    let shift = match unit.to_ascii_uppercase().as_str() {
        "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(ValueError::NotASize(s.to_owned())),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| ValueError::NotASize(s.to_owned()))?;
    let bytes = n * (1u64 << shift) as f64;
    let out_of = |what| ValueError::OutOfRange {
        value: s.to_owned(),
        what,
        min: show_size(range.min),
        max: show_size(range.max),
    };
    if !bytes.is_finite() || bytes < range.min as f64 {
        return Err(out_of("below"));
    }
    if bytes > range.max as f64 {
        return Err(out_of("above"));
    }
    Ok(bytes as u64)
}

/// Seconds (a decimal number) inside `range`: NaN, infinities and values outside are errors.
pub fn parse_seconds(text: &str, range: SecondsRange) -> Result<Duration, ValueError> {
    let s = text.trim();
    let secs: f64 = s
        .parse()
        .map_err(|_| ValueError::NotSeconds(s.to_owned()))?;
    let out_of = |what| ValueError::OutOfRange {
        value: s.to_owned(),
        what,
        min: format!("{} s", range.min),
        max: format!("{} s", range.max),
    };
    if secs.is_nan() || secs < range.min {
        return Err(out_of("below"));
    }
    if secs > range.max {
        return Err(out_of("above"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `1M`, `1.5G`: a size as a person reads it.
pub fn show_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if v.fract() == 0.0 {
        format!("{v}{}", UNITS[unit])
    } else {
        format!("{v:.1}{}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_need_a_unit_and_a_sane_range() {
        assert_eq!(parse_size("64M", SPLIT_SIZE), Ok(64 << 20));
        assert_eq!(parse_size(" 1.5 GiB", SPLIT_SIZE), Ok(3 << 29));
        assert_eq!(parse_size("2048kb", QUEUE), Ok(2 << 20));
        assert_eq!(parse_size("1048576B", SPLIT_SIZE), Ok(1 << 20));
        let e = parse_size("64", SPLIT_SIZE).unwrap_err();
        assert_eq!(e, ValueError::NoUnit("64".into()));
        assert!(e.to_string().contains("64M"), "{e}");
        assert!(matches!(
            parse_size("512K", SPLIT_SIZE),
            Err(ValueError::OutOfRange { what: "below", .. })
        ));
        assert!(matches!(
            parse_size("2T", SPLIT_SIZE),
            Err(ValueError::OutOfRange { what: "above", .. })
        ));
        for bad in ["big", "-5M", "nanM", "infG", "5X", "M", ""] {
            assert!(parse_size(bad, SPLIT_SIZE).is_err(), "{bad}");
        }
    }

    #[test]
    fn seconds_must_be_finite_and_in_range() {
        assert_eq!(
            parse_seconds("0.5", FSYNC_INTERVAL),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(
            parse_seconds("600", SPLIT_DURATION),
            Ok(Duration::from_secs(600))
        );
        for bad in ["nan", "NaN", "-5", "inf", "1e20", "0", "0.001", "soon", ""] {
            assert!(parse_seconds(bad, FSYNC_INTERVAL).is_err(), "{bad}");
        }
        let e = parse_seconds("-5", SPLIT_DURATION).unwrap_err();
        assert!(e.to_string().contains("'-5' is below"), "{e}");
    }

    #[test]
    fn sizes_read_back() {
        assert_eq!(show_size(1 << 20), "1M");
        assert_eq!(show_size(3 << 29), "1.5G");
        assert_eq!(show_size(100), "100B");
    }
}
