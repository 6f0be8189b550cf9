//! The receiving daemon (no subcommand): the link, the live socket, the receiver loop, and
//! its life as a service (sd_notify, the watchdog, signals, the config reloaded on SIGHUP).

use std::ffi::OsString;
use std::time::{Duration, Instant};

use ulog_recv::link::{Event, SigningSetup};
use ulog_recv::live::thread::PublishServer;
use ulog_recv::monitor::Exposition;
use ulog_recv::shell::keyfile::Reservation;
use ulog_recv::shell::metrics_server::{MetricsConfig, MetricsServer};
use ulog_recv::shell::monitoring::{StatusMetrics, link_kind};
use ulog_recv::shell::receiver::{Control, Notice, ReceiverOptions, RunError, Status};
use ulog_recv::shell::service::{Notifier, StatusText};
use ulog_recv::shell::transport::{Link, LinkSpec};
use ulog_recv::web::served::Actions;
use ulog_recv::web::server::{WebConfig, WebServer};

use crate::args::{FillArg, ReceiveArgs};
use crate::config_file::with_config;
use crate::logging::{LogLevels, log_filter};

/// Sends [`Control::Roll`] on every SIGHUP; with `reload`, also what it returns (the config
/// file read again). SIGHUP is handled from the moment this returns (before READY=1: a
/// reload right after it must not kill the daemon).
pub(crate) fn controls_on_sighup(
    mut reload: impl FnMut() -> Option<Control> + Send + 'static,
) -> std::io::Result<tokio::sync::mpsc::UnboundedReceiver<Control>> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            if let Some(c) = reload() {
                let _ = tx.send(c);
            }
            if tx.send(Control::Roll).is_err() {
                break;
            }
        }
    });
    Ok(rx)
}

/// Completes on Ctrl-C (SIGINT) or SIGTERM (systemd's stop). Both are handled from the moment
/// this returns, not from the first poll: a stop right after READY=1 still completes the log.
pub(crate) fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {},
            _ = term.recv() => {},
        }
    })
}

pub(crate) async fn receive(
    spec: LinkSpec,
    args: ReceiveArgs,
    argv: Vec<OsString>,
    levels: LogLevels,
) -> anyhow::Result<()> {
    let log_dir = args.log_dir();
    // The exposition before anything counts (without --metrics, nothing is recorded).
    let exposition = args.metrics.map(|_| Exposition::install()).transpose()?;
    let mut status_metrics =
        (exposition.as_ref()).map(|_| StatusMetrics::new(link_kind(&spec), Instant::now()));
    // The key first: a bad one must stop the start before anything listens.
    let (signing, signing_reservation) = match args.signing_key_file() {
        Some(path) => {
            let key = ulog_recv::shell::keyfile::load_key(&path)?;
            let (reservation, timestamp) = Reservation::open(&log_dir)?;
            tracing::info!(key = %path.display(), "MAVLink 2 signing on");
            let setup = SigningSetup {
                key,
                link_id: 0,
                timestamp,
            };
            (Some(setup), Some(reservation))
        }
        None => (None, None),
    };
    let mut upload_config = args.upload.config()?;
    upload_config.wait_for_fill = args.fill == FillArg::Auto;
    let uploader = if upload_config.is_on() {
        Some(ulog_recv::upload::uploader::start(
            upload_config,
            log_dir.clone(),
        )?)
    } else {
        None
    };
    let link = Link::open(&spec).await?;
    let metrics_server = match (args.metrics, exposition, &status_metrics) {
        (Some(addr), Some(exposition), Some(fed)) => Some(MetricsServer::start(MetricsConfig {
            addr,
            exposition,
            health: fed.health(),
            log_dir: log_dir.clone(),
            budget: args.store.max_total,
        })?),
        _ => None,
    };
    let web_feed = args.http.map(|_| {
        ulog_recv::web::live::WebFeed::new(ulog_recv::web::live::LiveState::new(
            link_kind(&spec),
            spec.to_string(),
        ))
    });
    let (event_tx, event_rx) = tokio::sync::mpsc::unbounded_channel();
    let (feed, server) = args.publish.start(event_tx)?.unzip();
    // The handlers before the start line: a SIGHUP or SIGTERM from then on is taken as meant.
    let controls = controls_on_sighup(reloader(args.clone(), argv, levels))?;
    let stop_signal = shutdown_signal()?;
    tracing::info!(
        "ulog-recv {}: {spec}, logs into {}{}",
        env!("CARGO_PKG_VERSION"),
        log_dir.display(),
        publishing_note(server.as_ref())
    );
    if let Some(m) = &metrics_server {
        tracing::info!("metrics on http://{}/metrics, health on /healthz", m.addr());
    }
    let systemd = Notifier::from_env();
    tracing::debug!(
        watchdog = ?systemd.watchdog(),
        config = ?args.config,
        "running as a service: {}",
        std::env::var_os("NOTIFY_SOCKET").is_some()
    );
    let mut store = args.store.options(log_dir.clone());
    store.uploads = uploader.is_some();
    ulog_recv::store::events::check_buffers(&store.columns, &store.event_buffers)?;
    // The vehicle's files through the stream's own session: for the fill, and for the web
    // page's view of the SD card.
    let (ftp_tx, ftp) = if args.fill == FillArg::Auto || args.http.is_some() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (
            Some(ulog_recv::shell::vehicle_files::SharedFiles::new(tx)),
            Some(rx),
        )
    } else {
        (None, None)
    };
    let auto_fill = match (args.fill, &ftp_tx) {
        (FillArg::Auto, Some(tx)) => Some(ulog_recv::shell::fill::AutoFill::start(
            tx.clone(),
            &log_dir,
        )?),
        _ => None,
    };
    let web_server = match (args.http, &web_feed) {
        (Some(addr), Some(feed)) => {
            let server = WebServer::start(WebConfig {
                addr,
                password_file: args.http_password_file.clone(),
                feed: feed.clone(),
                log_dir: log_dir.clone(),
                budget: args.store.max_total,
                actions: Actions {
                    fill: auto_fill.as_ref().map(|f| f.queue()),
                    upload: uploader.as_ref().map(|u| u.nudger()),
                    ftp: ftp_tx.clone(),
                },
            })?;
            tracing::info!("the web page on http://{}/", server.addr());
            Some(server)
        }
        _ => None,
    };
    drop(ftp_tx);
    let options = ReceiverOptions {
        store,
        session: args.session(signing),
        status_interval: systemd.report_interval(),
        publish: feed,
        signing_reservation,
        store_queue_bytes: args.store.store_queue as usize,
        uploads: uploader.as_ref().map(|u| u.shared_status()),
        ftp,
        event_requests: Some(event_rx),
        diagnostics_statustext: args.store.diagnostics_statustext,
    };
    let clients = server.as_ref().map(|s| s.clients_counter());
    let mut text = StatusText::default();
    let waiting_on = spec.to_string();
    systemd.ready(&text.line(
        &Default::default(),
        &Default::default(),
        None,
        &waiting_on,
        Instant::now(),
    ));
    let started = Instant::now();
    let stall_after = args.debug_stall_after.map(Duration::from_secs_f64);
    let mut reports = 0u64;
    let stopping = systemd.clone();
    let shutdown = async move {
        stop_signal.await;
        stopping.stopping();
    };
    let status = ulog_recv::shell::receiver::run(link, options, shutdown, controls, |n| match n {
        Notice::Event(e) => {
            if let Some(m) = status_metrics.as_mut() {
                m.event(e);
            }
            if let Some(w) = &web_feed {
                w.event(e);
            }
            if let (Some(f), Event::Armed(armed)) = (&auto_fill, e) {
                f.set_armed(*armed);
            }
            if let Some(u) = &uploader {
                match e {
                    Event::Armed(armed) => u.set_armed(*armed),
                    // A vehicle not heard (landed and powered off, or gone): not in flight.
                    Event::VehicleLost => u.set_armed(false),
                    Event::LogClosed { .. } => u.nudge(),
                    _ => {}
                }
            }
            text.event(e)
        }
        Notice::SessionOpened(dir) => {
            if let Some(w) = &web_feed {
                w.session(dir, true);
            }
        }
        Notice::Recorded(record) => {
            if let Some(w) = &web_feed {
                w.recorded(record);
            }
        }
        Notice::SessionClosed(dir) => {
            if let Some(w) = &web_feed {
                w.session(dir, false);
            }
            if let Some(f) = &auto_fill {
                f.session_closed(dir);
            }
            if let Some(u) = &uploader {
                u.nudge();
            }
        }
        Notice::Status(s) => {
            if let Some(m) = status_metrics.as_mut() {
                m.status(s, Instant::now());
            }
            let clients = clients
                .as_ref()
                .map(|c| c.load(std::sync::atomic::Ordering::Relaxed));
            let mut line = text.line(&s.session, &s.storage, clients, &waiting_on, Instant::now());
            let upload_status = uploader.as_ref().map(|u| u.status().to_string());
            if let Some(u) = &upload_status {
                line.push_str(&format!("; {u}"));
            }
            if let Some(w) = &web_feed {
                w.status(
                    &s.session,
                    &s.storage,
                    s.write_errors,
                    s.link.open,
                    upload_status,
                );
            }
            systemd.alive(&line);
            reports += 1;
            if reports.is_multiple_of(10) {
                tracing::info!("{line}");
            }
            if stall_after.is_some_and(|after| started.elapsed() >= after) {
                tracing::warn!("stalling the main loop, as asked (--debug-stall-after)");
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    })
    .await
    .map_err(|e| match e {
        RunError::Link(e) => anyhow::Error::new(e).context(format!("link {spec} failed")),
        RunError::Store(e) => anyhow::Error::new(e),
    });
    if let Some(server) = server {
        server.join();
    }
    // Before the fill and the uploader: the page holds a way to each.
    drop(web_server);
    if let Some(u) = uploader {
        u.stop();
    }
    if let Some(f) = auto_fill {
        f.stop();
    }
    drop(metrics_server);
    let status = status?;
    tracing::info!("stopped");
    print_status(&status);
    Ok(())
}

/// What SIGHUP re-reads: the config file (if any) with the same command line. Storage options
/// (but columns and event buffers) and the log level apply at once; other changes need a
/// restart, and the log says so.
pub(crate) fn reloader(
    running: ReceiveArgs,
    argv: Vec<OsString>,
    levels: LogLevels,
) -> impl FnMut() -> Option<Control> + Send + 'static {
    move || {
        let path = running.config.clone()?;
        let cli = match with_config(&argv, &path) {
            Ok((cli, _)) => cli,
            Err(e) => {
                tracing::error!("config not reloaded: {e:#}");
                return None;
            }
        };
        let new = cli.receive;
        match log_filter(new.log_level.as_deref(), "info") {
            Ok(filter) => {
                let _ = levels.reload(filter);
            }
            Err(e) => tracing::error!("log level not changed: {e:#}"),
        }
        let needs_restart = [
            (
                "the link",
                format!("{:?}{}", new.link, new.baud)
                    != format!("{:?}{}", running.link, running.baud),
            ),
            ("log-dir", new.log_dir() != running.log_dir()),
            (
                "the MAVLink ids",
                (new.sysid, new.compid, new.target_system, new.autopilot)
                    != (
                        running.sysid,
                        running.compid,
                        running.target_system,
                        running.autopilot,
                    ),
            ),
            (
                "signing-key",
                new.signing_key_file() != running.signing_key_file(),
            ),
            (
                "store-queue",
                new.store.store_queue != running.store.store_queue,
            ),
            (
                "publishing",
                format!("{:?}", new.publish) != format!("{:?}", running.publish),
            ),
            ("metrics", new.metrics != running.metrics),
            (
                "the web page",
                (&new.http, &new.http_password_file)
                    != (&running.http, &running.http_password_file),
            ),
            (
                "uploads",
                format!("{:?}", new.upload) != format!("{:?}", running.upload),
            ),
        ];
        for (what, changed) in needs_restart {
            if changed {
                tracing::warn!("config reloaded: {what} changed, which takes a restart");
            }
        }
        // Columns, event buffers and triggers shape the session directories: kept as they
        // were checked at start.
        let mut options = new.store.options(running.log_dir());
        let kept = running.store.options(running.log_dir());
        let layout = |o: &ulog_recv::store::StoreOptions| {
            format!("{:?}{:?}{:?}", o.columns, o.event_buffers, o.triggers)
        };
        if layout(&options) != layout(&kept) {
            tracing::warn!(
                "config reloaded: columns, event buffers or event triggers changed, which \
                 takes a restart"
            );
        }
        options.columns = kept.columns;
        options.event_buffers = kept.event_buffers;
        options.triggers = kept.triggers;
        tracing::info!("config reloaded from {}", path.display());
        Some(Control::Reconfigure(Box::new(options)))
    }
}

/// ", live topics on PATH" for the start-up line.
pub(crate) fn publishing_note(server: Option<&PublishServer>) -> String {
    let Some(server) = server else {
        return String::new();
    };
    let mut places = Vec::new();
    if let Some(p) = server.unix_path() {
        places.push(p.display().to_string());
    }
    if let Some(a) = server.tcp_addr() {
        places.push(format!("tcp:{a}"));
    }
    if let Some(a) = server.foxglove_addr() {
        places.push(format!("Foxglove ws://{a}"));
    }
    format!(", live topics on {}", places.join(" and "))
}

pub(crate) fn print_status(s: &Status) {
    let st = &s.session;
    let q = |x| {
        s.ack_latency
            .quantile_us(x)
            .map_or("-".to_owned(), |v| format!("{v} µs"))
    };
    println!(
        "received {} logs, {} bytes: {} chunks ({} acked), {} duplicates, {} late ones put back, \
         {} lost in {} gaps, {} dropouts written, {} implausible chunks dropped, {} frames \
         refused by signing, {} foreign datagrams; ack latency p50 {} p99 {}",
        st.logs,
        st.log_bytes,
        st.chunks,
        st.acked_chunks,
        st.duplicates,
        st.recovered,
        st.lost_chunks,
        st.gaps,
        st.dropouts,
        st.implausible,
        st.refused_frames(),
        s.link.foreign_datagrams,
        q(0.5),
        q(0.99)
    );
}
