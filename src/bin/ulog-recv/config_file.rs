//! The config file at the binary's edge: which options it may set (from clap's own
//! definitions), merging it under the command line, and `--check-config`'s listing. The
//! file's parsing is [`ulog_recv::shell::config`].

use std::ffi::OsString;
use std::path::Path;

use anyhow::{Context, bail};
use clap::Parser;
use ulog_recv::shell::config::{self, OptionKind, OptionSpec};

use crate::args::Cli;

/// The options a config file may set: every long option of the daemon but `--config` (and
/// hidden ones), with its clap id.
pub(crate) fn config_options() -> Vec<(OptionSpec, String)> {
    use clap::CommandFactory;
    Cli::command()
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter(|a| {
            !matches!(
                a.get_id().as_str(),
                "config" | "check_config" | "help" | "version"
            )
        })
        .filter_map(|a| {
            let kind = match a.get_action() {
                clap::ArgAction::SetTrue => OptionKind::Flag,
                _ if a.get_value_delimiter().is_some() => OptionKind::List,
                // `NAME=PATTERNS`: a table; any other repeatable value: a list of its own.
                clap::ArgAction::Append
                    if a.get_value_names()
                        .is_some_and(|n| n.iter().any(|n| n.contains('='))) =>
                {
                    OptionKind::Table
                }
                clap::ArgAction::Append => OptionKind::Repeated,
                _ => OptionKind::Value,
            };
            let spec = OptionSpec {
                name: a.get_long()?.to_owned(),
                kind,
            };
            Some((spec, a.get_id().as_str().to_owned()))
        })
        .collect()
}

/// Every option a config file may set, as `key = value` in TOML (the values as given, from
/// the file or the command line), or `# key: default` when not set.
pub(crate) fn options_in_force(args: &[OsString]) -> String {
    use clap::CommandFactory;
    let matches = Cli::command().get_matches_from(args);
    let mut out = String::new();
    for (spec, id) in config_options() {
        let given = matches.value_source(&id) == Some(clap::parser::ValueSource::CommandLine);
        if !given {
            out.push_str(&format!("# {}: default\n", spec.name));
            continue;
        }
        let value = match spec.kind {
            OptionKind::Flag => matches.get_flag(&id).to_string(),
            _ => {
                let raw: Vec<String> = matches
                    .get_raw(&id)
                    .into_iter()
                    .flatten()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                let toml_string = |v: &String| toml::Value::String(v.clone()).to_string();
                match spec.kind {
                    OptionKind::List | OptionKind::Repeated => {
                        let items: Vec<String> = raw.iter().map(toml_string).collect();
                        format!("[{}]", items.join(", "))
                    }
                    OptionKind::Table => {
                        // An inline table: NAME = [VALUE, …] per entry.
                        let entries: Vec<String> = raw
                            .iter()
                            .map(|entry| {
                                let (name, values) = entry.split_once('=').unwrap_or((entry, ""));
                                let items: Vec<String> = values
                                    .split(',')
                                    .map(|v| toml_string(&v.to_owned()))
                                    .collect();
                                format!(
                                    "{} = [{}]",
                                    toml_string(&name.to_owned()),
                                    items.join(", ")
                                )
                            })
                            .collect();
                        format!("{{ {} }}", entries.join(", "))
                    }
                    _ => raw.first().map(toml_string).unwrap_or_default(),
                }
            }
        };
        out.push_str(&format!("{} = {value}\n", spec.name));
    }
    out
}

/// The command line with the config file's options before it (so that it wins), parsed, and
/// the arguments that made it. A file key in a group of exclusive options (the link;
/// `socket` / `no-socket`) is left out when the command line sets a member of that group.
pub(crate) fn with_config(argv: &[OsString], path: &Path) -> anyhow::Result<(Cli, Vec<OsString>)> {
    use clap::CommandFactory;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    let options = config_options();
    let specs: Vec<OptionSpec> = options.iter().map(|(s, _)| s.clone()).collect();
    let entries =
        config::parse(&text, &specs).with_context(|| format!("config file {}", path.display()))?;
    let matches = Cli::command().get_matches_from(argv);
    let on_command_line =
        |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
    const EXCLUSIVE: [&[&str]; 2] = [
        &["udp", "udp_connect", "tcp", "serial"],
        &["socket", "no_socket"],
    ];
    let program = argv.first().cloned().unwrap_or_else(|| "ulog-recv".into());
    let mut args = vec![program.clone()];
    for entry in entries {
        let id = options
            .iter()
            .find(|(s, _)| s.name == entry.key)
            .map(|(_, id)| id.as_str())
            .unwrap_or_default();
        if EXCLUSIVE
            .iter()
            .any(|group| group.contains(&id) && group.iter().any(|m| on_command_line(m)))
        {
            continue;
        }
        // The value alone, so that an error names the key.
        let alone: Vec<OsString> = std::iter::once(program.clone())
            .chain(entry.args.iter().cloned())
            .collect();
        if let Err(e) = Cli::try_parse_from(&alone) {
            let message = e.to_string();
            let first = message.lines().next().unwrap_or_default();
            bail!(
                "config file {}: key '{}': {}",
                path.display(),
                entry.key,
                first.trim_start_matches("error: ")
            );
        }
        args.extend(entry.args);
    }
    args.extend(argv.iter().skip(1).cloned());
    let cli = Cli::try_parse_from(&args).map_err(|e| {
        anyhow::anyhow!(
            "config file {} with the command line: {}",
            path.display(),
            e.to_string().lines().next().unwrap_or_default()
        )
    })?;
    Ok((cli, args))
}
