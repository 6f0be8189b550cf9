//! Logs: tracing to stderr, without colour unless on a terminal and without timestamps under
//! journald; the level from `--log-level` (command line or config), else `RUST_LOG`, else a
//! default; changeable while running (a config reload).

use anyhow::Context;

/// Changes the log filter while running (a config reload).
pub(crate) type LogLevels =
    tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>;

/// The filter for `level` (from the command line or the config), else `$RUST_LOG`, else
/// `default`.
pub(crate) fn log_filter(
    level: Option<&str>,
    default: &str,
) -> anyhow::Result<tracing_subscriber::EnvFilter> {
    use tracing_subscriber::EnvFilter;
    match level {
        Some(l) => {
            EnvFilter::try_new(l).with_context(|| format!("bad value '{l}' for 'log-level'"))
        }
        None => Ok(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default))),
    }
}

/// Logs to stderr: with colour only on a terminal; without timestamps under journald (which
/// adds its own).
pub(crate) fn init_tracing(level: Option<&str>, default: &str) -> anyhow::Result<LogLevels> {
    use tracing_subscriber::prelude::*;
    let (filter, handle) = tracing_subscriber::reload::Layer::new(log_filter(level, default)?);
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && !journald;
    let journal = journald.then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .without_time()
    });
    let terminal = (!journald).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(journal)
        .with(terminal)
        .init();
    Ok(handle)
}
