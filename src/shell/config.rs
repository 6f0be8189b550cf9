//! The daemon's config file (TOML): every key is a command-line option's long name
//! (`udp = 14550`, `log-dir = "/var/lib/ulog-recv"`, `split-size = "64M"`,
//! `latched = ["vehicle_status", "battery_status"]`, `no-socket = true`, a table for a
//! repeatable option of `NAME=VALUES`: `[column]` then `imu = ["sensor_*"]`; a list for
//! another repeatable one: `event-on-log = ["(?i)failsafe", "crash"]`), turned into the
//! arguments that option would take, so that the command line and the file share one parser,
//! one set of defaults and one set of checks. The command line wins: its arguments come after
//! the file's.
//!
//! Unknown keys and values of the wrong shape are errors that name the key; values of the
//! right shape but wrong content (`split-size = "big"`) are left to the option's own parser,
//! whose error the binary reports under the key's name.

use std::ffi::OsString;

/// What kind of value an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// A switch: `key = true` gives `--key`, `false` nothing.
    Flag,
    /// One value: a string or a number.
    Value,
    /// Comma-separated values: a list of strings (or one string).
    List,
    /// A repeatable `NAME=VALUE[,VALUE…]`: a table of lists (or strings), `--key=NAME=…`
    /// for each entry.
    Table,
    /// A repeatable value that may hold commas (a regular expression): a list of strings (or
    /// one string), `--key=ITEM` for each.
    Repeated,
}

/// An option the file may set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionSpec {
    /// The long name, without dashes (`log-dir`).
    pub name: String,
    pub kind: OptionKind,
}

/// Why a config file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("not valid TOML: {0}")]
    Syntax(String),
    #[error("unknown key '{key}' (known keys: {known})")]
    UnknownKey { key: String, known: String },
    #[error("key '{key}': {expected}")]
    BadValue { key: String, expected: &'static str },
}

/// One key of the file and the arguments it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigArg {
    pub key: String,
    /// `--key` and its value, if any.
    pub args: Vec<OsString>,
}

/// Parses `text` against the options the daemon has; the arguments come sorted by key (each
/// key appears once in a TOML table, so the order carries no meaning).
pub fn parse(text: &str, options: &[OptionSpec]) -> Result<Vec<ConfigArg>, ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax(e.to_string()))?;
    let mut out = Vec::new();
    for (key, value) in &table {
        let Some(spec) = options.iter().find(|o| o.name == *key) else {
            let mut names: Vec<&str> = options.iter().map(|o| o.name.as_str()).collect();
            names.sort_unstable();
            return Err(ConfigError::UnknownKey {
                key: key.clone(),
                known: names.join(", "),
            });
        };
        let bad = |expected| ConfigError::BadValue {
            key: key.clone(),
            expected,
        };
        let flag = OsString::from(format!("--{key}"));
        // `--key=value`, one argument: a value that starts with '-' stays a value.
        let with_value = |v: String| vec![OsString::from(format!("--{key}={v}"))];
        let scalar = |v: &toml::Value| match v {
            toml::Value::String(s) => Some(s.clone()),
            toml::Value::Integer(i) => Some(i.to_string()),
            toml::Value::Float(f) => Some(f.to_string()),
            _ => None,
        };
        let args = match (spec.kind, value) {
            (OptionKind::Flag, toml::Value::Boolean(true)) => vec![flag],
            (OptionKind::Flag, toml::Value::Boolean(false)) => vec![],
            (OptionKind::Flag, _) => return Err(bad("must be true or false")),
            (OptionKind::Value, v) => match scalar(v) {
                Some(s) => with_value(s),
                None => return Err(bad("must be a string or a number")),
            },
            (OptionKind::List, toml::Value::Array(items)) => {
                let items: Option<Vec<String>> = items.iter().map(scalar).collect();
                match items {
                    Some(items) => with_value(items.join(",")),
                    None => return Err(bad("must be a list of strings")),
                }
            }
            (OptionKind::List, v) => match scalar(v) {
                Some(s) => with_value(s),
                None => return Err(bad("must be a list of strings")),
            },
            (OptionKind::Table, toml::Value::Table(entries)) => {
                let mut args = Vec::new();
                for (name, v) in entries {
                    let items: Option<Vec<String>> = match v {
                        toml::Value::Array(items) => items.iter().map(scalar).collect(),
                        v => scalar(v).map(|s| vec![s]),
                    };
                    match items {
                        Some(items) => {
                            args.extend(with_value(format!("{name}={}", items.join(","))))
                        }
                        None => return Err(bad("must be a table of lists of strings")),
                    }
                }
                args
            }
            (OptionKind::Table, _) => return Err(bad("must be a table of lists of strings")),
            (OptionKind::Repeated, toml::Value::Array(items)) => {
                let items: Option<Vec<String>> = items.iter().map(scalar).collect();
                match items {
                    Some(items) => items.into_iter().flat_map(with_value).collect(),
                    None => return Err(bad("must be a list of strings")),
                }
            }
            (OptionKind::Repeated, v) => match scalar(v) {
                Some(s) => with_value(s),
                None => return Err(bad("must be a list of strings")),
            },
        };
        out.push(ConfigArg {
            key: key.clone(),
            args,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs() -> Vec<OptionSpec> {
        [
            ("udp", OptionKind::Value),
            ("log-dir", OptionKind::Value),
            ("fsync-interval", OptionKind::Value),
            ("latched", OptionKind::List),
            ("no-socket", OptionKind::Flag),
            ("column", OptionKind::Table),
            ("event-on-log", OptionKind::Repeated),
        ]
        .into_iter()
        .map(|(n, kind)| OptionSpec {
            name: n.into(),
            kind,
        })
        .collect()
    }

    #[test]
    fn a_table_is_one_argument_per_entry() {
        assert_eq!(
            args("[column]\nimu = [\"sensor_*\", \"vehicle_imu*\"]\nesc = \"esc_status\"\n")
                .unwrap(),
            [vec![
                "--column=esc=esc_status",
                "--column=imu=sensor_*,vehicle_imu*"
            ]]
        );
        assert!(matches!(
            args("column = \"imu\"").unwrap_err(),
            ConfigError::BadValue { key, .. } if key == "column"
        ));
    }

    #[test]
    fn a_repeated_option_is_one_argument_per_item_commas_kept() {
        assert_eq!(
            args("event-on-log = [\"(?i)failsafe\", \"a{1,3}\"]\n").unwrap(),
            [vec!["--event-on-log=(?i)failsafe", "--event-on-log=a{1,3}"]]
        );
        assert_eq!(
            args("event-on-log = \"crash\"").unwrap(),
            [vec!["--event-on-log=crash"]]
        );
        assert!(matches!(
            args("event-on-log = [1.5, true]").unwrap_err(),
            ConfigError::BadValue { key, .. } if key == "event-on-log"
        ));
    }

    fn args(text: &str) -> Result<Vec<Vec<String>>, ConfigError> {
        Ok(parse(text, &specs())?
            .into_iter()
            .map(|a| {
                a.args
                    .into_iter()
                    .map(|s| s.into_string().unwrap())
                    .collect()
            })
            .collect())
    }

    #[test]
    fn keys_become_the_options_arguments() {
        let got = args(
            "udp = 14550\nlog-dir = \"/var/lib/x\"\nfsync-interval = 0.5\n\
             latched = [\"a\", \"b\"]\nno-socket = true\n",
        )
        .unwrap();
        assert_eq!(
            got,
            [
                vec!["--fsync-interval=0.5"],
                vec!["--latched=a,b"],
                vec!["--log-dir=/var/lib/x"],
                vec!["--no-socket"],
                vec!["--udp=14550"],
            ]
        );
        assert_eq!(args("no-socket = false").unwrap(), [Vec::<String>::new()]);
        assert_eq!(args("latched = \"a\"").unwrap(), [vec!["--latched=a"]]);
        // A value that looks like an option stays the option's value.
        assert_eq!(
            args("fsync-interval = \"-5\"").unwrap(),
            [vec!["--fsync-interval=-5"]]
        );
    }

    #[test]
    fn errors_name_the_key() {
        let e = args("udp = 1\nlog_dir = \"x\"").unwrap_err();
        assert!(
            matches!(&e, ConfigError::UnknownKey { key, .. } if key == "log_dir"),
            "{e}"
        );
        assert!(
            e.to_string().contains("log-dir"),
            "lists the known keys: {e}"
        );
        assert_eq!(
            args("no-socket = \"yes\"").unwrap_err(),
            ConfigError::BadValue {
                key: "no-socket".into(),
                expected: "must be true or false"
            }
        );
        assert!(matches!(
            args("udp = [1]").unwrap_err(),
            ConfigError::BadValue { key, .. } if key == "udp"
        ));
        assert!(matches!(
            args("latched = [1, {a = 1}]").unwrap_err(),
            ConfigError::BadValue { key, .. } if key == "latched"
        ));
        assert!(matches!(
            args("udp = ").unwrap_err(),
            ConfigError::Syntax(_)
        ));
    }
}
