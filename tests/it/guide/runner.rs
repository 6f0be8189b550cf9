//! The guide run as printed: each chapter's marked blocks in order, in a scratch folder of its
//! own, against the real parts the chapter asks for, their output checked (see the module
//! above for the markup).

use std::path::{Path, PathBuf};

use super::{Block, Item, chapters, output_matches, parse_chapter};
use crate::common;
use crate::common::project;

/// A block running in the background, as in a terminal of its own.
struct Background {
    child: std::process::Child,
    block: Block,
    log: PathBuf,
    /// The output block shown after it, checked once it stops.
    expected: Option<Block>,
}

/// One chapter being run: its folder, its environment, what runs in the background and the
/// real parts it asked for.
struct ChapterRun {
    name: String,
    dir: PathBuf,
    env: Vec<(String, String)>,
    background: Vec<(String, Background)>,
    /// What the last foreground block printed, for an output block after it.
    last: Option<(Block, String)>,
    px4: Option<common::px4::Px4>,
    ardupilot: Option<common::ardupilot::ArduPilot>,
    flight_review: Option<common::flight_review::FlightReviewServer>,
}

/// Where the tools the guide's blocks call are found, before the machine's own `PATH`: the
/// binary under test as `ulog-recv`, mavlink-router, Garage and the project's virtualenv
/// (pymavlink, DuckDB, pyarrow).
fn tool_path(bin_dir: &Path) -> String {
    let mut dirs = vec![
        bin_dir.to_path_buf(),
        project().join("../shared/vendor/mavlink-router/bin"),
    ];
    if let Some(dir) = common::garage::binary().parent() {
        dirs.push(dir.to_path_buf());
    }
    dirs.push(project().join(".venv/bin"));
    let mut path: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    path.push(std::env::var("PATH").unwrap_or_default());
    path.join(":")
}

impl ChapterRun {
    fn new(name: &str) -> Self {
        let dir = common::procs::fresh_dir(&name.replace(['/', '.'], "-"));
        let bin = dir.join(".bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(common::procs::BIN, bin.join("ulog-recv")).unwrap();
        let home = dir.join(".home");
        let run = dir.join(".run");
        for d in [&home, &run] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .unwrap();
        }
        let env = vec![
            ("PATH".to_owned(), tool_path(&bin)),
            ("HOME".to_owned(), home.display().to_string()),
            ("XDG_RUNTIME_DIR".to_owned(), run.display().to_string()),
        ];
        ChapterRun {
            name: name.to_owned(),
            dir,
            env,
            background: Vec::new(),
            last: None,
            px4: None,
            ardupilot: None,
            flight_review: None,
        }
    }

    /// `bash` running `block`, in the chapter's folder and environment, its output to `log`.
    fn command(&self, block: &Block, log: &Path) -> std::process::Command {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(log).unwrap();
        let mut command = std::process::Command::new("bash");
        command
            .args(["-e", "-o", "pipefail", "-c", &block.body])
            .current_dir(&self.dir)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("LANG", "C.UTF-8")
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            // Its own process group, as a terminal's job: Ctrl-C reaches all of it.
            .process_group(0);
        // And Ctrl-C does what it does in a terminal, even where the tests were started with
        // SIGINT ignored (`cmd &` in a script): a program that inherits it ignored (Python)
        // never hears it.
        // SAFETY: between fork and exec only signal(), which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGQUIT, libc::SIG_DFL);
                Ok(())
            });
        }
        command
    }

    fn fail(&self, block: &Block, why: &str, output: &str) -> ! {
        let mut shown = String::new();
        for (name, bg) in &self.background {
            let log = std::fs::read_to_string(&bg.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            shown.push_str(&format!(
                "\n--- {name} ({}), its last lines:\n{}",
                bg.block.place,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        panic!(
            "{}: {why}\n--- the block:\n{}--- what it printed:\n{output}{shown}\n(the chapter's folder: {})",
            block.place,
            block.body,
            self.dir.display()
        );
    }

    /// Runs a foreground block to its end; what it printed.
    fn run(&mut self, block: &Block) -> String {
        let timeout = std::time::Duration::from_secs(
            block.attr("timeout").map_or(300, |t| t.parse().unwrap()),
        );
        let retry_for = block
            .attr("retry")
            .map(|t| std::time::Duration::from_secs(t.parse().unwrap()));
        let want: Option<i32> = block.attr("exit").map(|c| c.parse().unwrap());
        let t0 = std::time::Instant::now();
        let log = self.dir.join(".last-output");
        loop {
            let mut child = self.command(block, &log).spawn().unwrap();
            let status = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status;
                }
                if t0.elapsed() > timeout {
                    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                    let _ = child.wait();
                    let output = std::fs::read_to_string(&log).unwrap_or_default();
                    self.fail(block, &format!("still running after {timeout:?}"), &output);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            };
            let output = std::fs::read_to_string(&log).unwrap_or_default();
            let ok = match want {
                Some(code) => status.code() == Some(code),
                None => status.success(),
            };
            if ok {
                eprintln!(
                    "[guide] {} ran ({:.1} s)",
                    block.place,
                    t0.elapsed().as_secs_f64()
                );
                return output;
            }
            match retry_for {
                Some(limit) if t0.elapsed() < limit => {
                    std::thread::sleep(std::time::Duration::from_millis(500))
                }
                _ => self.fail(block, &format!("exited with {status}"), &output),
            }
        }
    }

    fn start_background(&mut self, name: &str, block: &Block) {
        let log = self.dir.join(format!(".{name}.log"));
        let child = self.command(block, &log).spawn().unwrap();
        eprintln!("[guide] {} started as {name}", block.place);
        self.background.push((
            name.to_owned(),
            Background {
                child,
                block: block.clone(),
                log,
                expected: None,
            },
        ));
    }

    /// The background block named `name`, no longer tracked as running.
    fn take_background(&mut self, place: &str, name: &str) -> Background {
        let at = self
            .background
            .iter()
            .position(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{place}: nothing named {name} runs in the background"));
        self.background.remove(at).1
    }

    /// Ctrl-C in `name`'s terminal: SIGINT to its process group; it must exit 0 within 30 s,
    /// having printed what the guide shows after it.
    fn interrupt(&mut self, place: &str, name: &str) {
        let mut bg = self.take_background(place, name);
        unsafe { libc::kill(-(bg.child.id() as i32), libc::SIGINT) };
        let t0 = std::time::Instant::now();
        let status = loop {
            if let Some(status) = bg.child.try_wait().unwrap() {
                break status;
            }
            if t0.elapsed() > std::time::Duration::from_secs(30) {
                unsafe { libc::kill(-(bg.child.id() as i32), libc::SIGKILL) };
                let _ = bg.child.wait();
                let output = std::fs::read_to_string(&bg.log).unwrap_or_default();
                self.fail(&bg.block, "did not stop within 30 s of Ctrl-C", &output);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let output = std::fs::read_to_string(&bg.log).unwrap_or_default();
        // `exit=130` on a background block: it ends as a program without its own handler
        // of Ctrl-C does (killed by SIGINT, or 130 as a shell reports that).
        let ok = match bg.block.attr("exit") {
            Some("130") => {
                use std::os::unix::process::ExitStatusExt;
                status.code() == Some(130) || status.signal() == Some(libc::SIGINT)
            }
            Some(code) => status.code() == Some(code.parse().unwrap()),
            None => status.success(),
        };
        if !ok {
            self.fail(
                &bg.block,
                &format!("exited with {status} on Ctrl-C"),
                &output,
            );
        }
        if let Some(expected) = &bg.expected
            && !output_matches(&expected.body, &output)
        {
            self.fail(
                &bg.block,
                &format!("did not print what {} shows", expected.place),
                &output,
            );
        }
        eprintln!("[guide] {place}: {name} stopped");
        // An output block right after shows what it printed, to its end.
        self.last = Some((bg.block, output));
    }

    /// A power cut for `name`: SIGKILL to its process group.
    fn kill(&mut self, place: &str, name: &str) {
        let mut bg = self.take_background(place, name);
        unsafe { libc::kill(-(bg.child.id() as i32), libc::SIGKILL) };
        let _ = bg.child.wait();
        eprintln!("[guide] {place}: {name} killed");
    }

    fn output_block(&mut self, block: &Block) {
        if let Some((ran, output)) = self.last.take() {
            if !output_matches(&block.body, &output) {
                self.fail(
                    &ran,
                    &format!("did not print what {} shows", block.place),
                    &output,
                );
            }
            return;
        }
        // Shown after a background block: checked when it stops.
        let Some((_, bg)) = self.background.last_mut() else {
            panic!("{}: an output block after no block that ran", block.place);
        };
        bg.expected = Some(block.clone());
    }

    fn needs(&mut self, place: &str, parts: &[String]) {
        for part in parts {
            match part.as_str() {
                "px4-sitl" => {
                    let name = format!("guide-{}", self.name.replace(['/', '.'], "-"));
                    let Some(px4) = common::px4::Px4::start(&name, 0) else {
                        panic!("{place}: no PX4 SITL")
                    };
                    self.px4 = Some(px4);
                }
                "ardupilot-sitl" => {
                    let name = format!("guide-{}", self.name.replace(['/', '.'], "-"));
                    let Some(sitl) = common::ardupilot::ArduPilot::start(&name, 0, 14551) else {
                        panic!("{place}: no ArduPilot SITL")
                    };
                    self.ardupilot = Some(sitl);
                }
                "flight-review" => {
                    self.flight_review =
                        common::flight_review::FlightReviewServer::start("guide", 5006);
                    assert!(self.flight_review.is_some(), "{place}: no Flight Review");
                }
                other => panic!("{place}: no real part named {other}"),
            }
        }
    }

    fn check(&mut self, place: &str, name: &str) {
        match name {
            "px4-session-whole" => self.check_px4_session_whole(place),
            "ardupilot-session-whole" => self.check_ardupilot_session_whole(place),
            other => panic!("{place}: no check named {other}"),
        }
        eprintln!("[guide] {place}: check {name} passed");
    }

    /// The chapter's one session under `logs/`, exported as one log, holds every sample of
    /// PX4's SD log from the stream's start to its end, none invented, none twice, every
    /// value equal; and it ends with PX4's post-flight data (the STOP handshake answered).
    fn check_px4_session_whole(&mut self, place: &str) {
        let py = common::venv_python().expect("the project's virtualenv");
        let sessions = common::procs::session_dirs(&self.dir.join("logs"));
        assert_eq!(sessions.len(), 1, "{place}: sessions {sessions:?}");
        let px4 = self.px4.take().expect("the chapter needs px4-sitl");
        let sd_logs = px4.stop();
        assert_eq!(sd_logs.len(), 1, "{place}: PX4's logs {sd_logs:?}");
        let merged =
            common::px4_compare::export_session(&sessions[0], &self.dir.join(".check/flight.ulg"));
        let sd_len = std::fs::metadata(&sd_logs[0]).unwrap().len() as usize;
        let report =
            common::px4_compare::check_whole(&py, &sd_logs[0], sd_len, &merged, None, place);
        assert_eq!(
            report["postflight"], true,
            "{place}: no post-flight data: the STOP handshake was not answered"
        );
    }

    /// The chapter's one session under `logs/` holds every message of the ArduPilot SITL's
    /// card log inside the streamed window, none invented (pymavlink on both sides). The
    /// card log, as the SITL has written it so far (it runs on: the chapter reads its card
    /// over FTP next), is then in the chapter's folder as `card/00000001.BIN`, as if copied
    /// off the card.
    fn check_ardupilot_session_whole(&mut self, place: &str) {
        let py = common::venv_python().expect("the project's virtualenv");
        let sessions = common::procs::session_dirs(&self.dir.join("logs"));
        assert_eq!(sessions.len(), 1, "{place}: sessions {sessions:?}");
        let sitl = self
            .ardupilot
            .as_ref()
            .expect("the chapter needs ardupilot-sitl");
        let copied = self.dir.join("card");
        std::fs::create_dir_all(&copied).unwrap();
        let card = copied.join("00000001.BIN");
        std::fs::copy(sitl.card_dir().join("00000001.BIN"), &card).unwrap();
        let splits = common::procs::files_with_extension(&sessions[0], "bin");
        let report = common::ardupilot::compare(&py, &card, &splits);
        assert!(
            report["card_in_window"].as_u64().unwrap() > 5000,
            "{place}: {report}"
        );
        assert_eq!(report["unexplained_missing"], 0, "{place}: {report}");
        assert_eq!(report["unexplained_invented"], 0, "{place}: {report}");
    }

    /// A background block that ended before it was stopped (a daemon that could not bind
    /// its port, say) fails the chapter there, not at the next block that needed it.
    fn check_background(&mut self) {
        let ended = self
            .background
            .iter_mut()
            .position(|(_, bg)| bg.child.try_wait().unwrap().is_some());
        if let Some(at) = ended {
            let (name, mut bg) = self.background.remove(at);
            let status = bg.child.wait().unwrap();
            let output = std::fs::read_to_string(&bg.log).unwrap_or_default();
            self.fail(
                &bg.block,
                &format!("{name} ended ({status}) before it was stopped"),
                &output,
            );
        }
    }

    /// Runs the chapter's items in order.
    fn run_items(&mut self, items: &[Item]) {
        for item in items {
            self.check_background();
            match item {
                Item::Directive(place, words) => match words.as_slice() {
                    [verb, parts @ ..] if verb == "needs" => self.needs(place, parts),
                    [verb, name] if verb == "interrupt" => self.interrupt(place, name),
                    [verb, name] if verb == "kill" => self.kill(place, name),
                    [verb, seconds] if verb == "wait" => std::thread::sleep(
                        std::time::Duration::from_secs_f64(seconds.parse().unwrap()),
                    ),
                    [verb, name] if verb == "check" => self.check(place, name),
                    _ => panic!("{place}: an unknown directive {words:?}"),
                },
                Item::Block(block) => {
                    if let Some(path) = block.attr("file") {
                        let path = self.dir.join(path);
                        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                        std::fs::write(&path, &block.body).unwrap();
                    }
                    if block.lang == "text" && block.attr("output").is_some() {
                        self.output_block(block);
                        continue;
                    }
                    self.last = None;
                    if !block.runs() {
                        continue;
                    }
                    match block.attr("bg") {
                        Some(name) => self.start_background(name, block),
                        None => {
                            let output = self.run(block);
                            self.last = Some((block.clone(), output));
                        }
                    }
                }
            }
        }
    }
}

impl Drop for ChapterRun {
    /// What still runs in the background stops as a closed terminal's jobs do.
    fn drop(&mut self) {
        for (_, bg) in &mut self.background {
            unsafe { libc::kill(-(bg.child.id() as i32), libc::SIGTERM) };
        }
        let t0 = std::time::Instant::now();
        for (_, bg) in &mut self.background {
            while bg.child.try_wait().ok().flatten().is_none()
                && t0.elapsed() < std::time::Duration::from_secs(10)
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            unsafe { libc::kill(-(bg.child.id() as i32), libc::SIGKILL) };
            let _ = bg.child.wait();
        }
    }
}

/// Runs the guide's chapters whose name contains `$GUIDE_CHAPTER` (all by default), each in a
/// folder of its own under `target/tmp/guide/`.
#[test]
fn the_guide_runs_as_printed_against_the_real_parts() {
    if common::venv_python().is_none() {
        return;
    }
    // The guide's daemons listen on UDP 14550 as printed, where any PX4 sends by itself.
    let _port = common::machine::listening_on_14550();
    // Its commands run with the waits an operator has on an idle companion computer (a
    // ground station stops within seconds of Ctrl-C, a topic shows within 30 s): alone.
    let _alone = common::alone();
    let only = std::env::var("GUIDE_CHAPTER").unwrap_or_default();
    let mut ran = 0;
    for chapter in chapters() {
        if !chapter.contains(&only) {
            continue;
        }
        let items = parse_chapter(&chapter);
        if !items
            .iter()
            .any(|i| matches!(i, Item::Block(b) if b.runs()))
        {
            continue;
        }
        let t0 = std::time::Instant::now();
        let mut run = ChapterRun::new(&chapter);
        run.run_items(&items);
        drop(run);
        eprintln!("[guide] {chapter}: {:.1} s", t0.elapsed().as_secs_f64());
        ran += 1;
    }
    assert!(ran > 0, "no chapter ran (GUIDE_CHAPTER={only:?})");
}
