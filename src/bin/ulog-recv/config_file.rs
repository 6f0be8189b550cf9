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

/// The guide's reference of the config file's keys, in Markdown, made from the same
/// definitions as `--help` and the man pages (`ulog-recv config-keys`): one table per help
/// section, each key with the TOML it takes, its default and what it sets. The committed
/// page (`docs/src/config-keys.md`) is checked against it, so it cannot drift from the binary.
pub(crate) fn config_keys_markdown() -> String {
    use clap::CommandFactory;
    let command = Cli::command();
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for (spec, id) in config_options() {
        let arg = command
            .get_arguments()
            .find(|a| a.get_id().as_str() == id)
            .expect("a config option is an argument");
        let heading = arg.get_help_heading().unwrap_or("General").to_owned();
        let row = config_key_row(&spec, arg);
        match sections.iter_mut().find(|(h, _)| *h == heading) {
            Some((_, rows)) => rows.push(row),
            None => sections.push((heading, vec![row])),
        }
    }
    let mut out = String::from(
        "<!-- Made by `ulog-recv config-keys` from the command line's own definitions; \
         tests/it/guide/ fails when this page differs from what the binary makes. -->\n\n\
         # Config file keys\n\n\
         Every key of the config file (`--config FILE`, `/etc/ulog-recv/ulog-recv.toml` under \
         the service) is a long option of the daemon, without its dashes, and takes the value \
         that option takes: a number or a string for a value, `true` for a switch, a list of \
         strings for an option that takes several, a table for columns and event buffers. The \
         command line wins over the file; a number may be written without quotes \
         (`udp = 14550`). `ulog-recv --config FILE --check-config` prints what is in force. \
         See [The config file](service.md#the-config-file) for how the file is read and \
         reloaded.\n",
    );
    for (heading, rows) in sections {
        out.push_str(&format!(
            "\n## {heading}\n\n| key | default | what it sets |\n|---|---|---|\n"
        ));
        for row in rows {
            out.push_str(&row);
            out.push('\n');
        }
    }
    out
}

/// One key's row of [`config_keys_markdown`]'s tables: the TOML it takes, its default and
/// its help. A default clap does not know (it depends on the environment) is said in the
/// help's own `[default: …]`; it goes to the default column.
fn config_key_row(spec: &OptionSpec, arg: &clap::Arg) -> String {
    let value_name = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(|n| n.to_string())
        .unwrap_or_else(|| spec.name.to_uppercase());
    let example = match spec.kind {
        OptionKind::Flag => format!("{} = true", spec.name),
        OptionKind::Value => format!("{} = \"{value_name}\"", spec.name),
        OptionKind::List | OptionKind::Repeated => {
            format!("{} = [\"{value_name}\", …]", spec.name)
        }
        OptionKind::Table => {
            let patterns = value_name.split_once('=').map_or("VALUES", |(_, v)| v);
            format!("[{}] NAME = [\"{patterns}\", …]", spec.name)
        }
    };
    let help = arg.get_long_help().or(arg.get_help());
    let mut help = help
        .map(|h| h.to_string())
        .unwrap_or_default()
        .replace('\n', " ");
    let mut default: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if let Some(at) = help.rfind("[default: ")
        && help.ends_with(']')
        && spec.kind != OptionKind::Flag
    {
        default = vec![help[at + "[default: ".len()..help.len() - 1].to_owned()];
        help = help[..at].trim_end().to_owned();
    }
    if !help.ends_with('.') {
        help.push('.');
    }
    if spec.kind != OptionKind::Flag && !arg.get_possible_values().is_empty() {
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        help = format!("{help} One of {}.", values.join(", "));
    }
    let default = match default.as_slice() {
        [] if spec.kind == OptionKind::Flag => "`false`".to_owned(),
        [] => "none".to_owned(),
        [v] if v.is_empty() => "empty".to_owned(),
        values => values.join(", "),
    };
    let cell = |s: &str| s.replace('|', "\\|");
    format!(
        "| `{}` | {} | {} |",
        cell(&example),
        cell(&default),
        cell(&help)
    )
}
