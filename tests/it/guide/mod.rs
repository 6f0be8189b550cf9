//! The operator's guide (`docs/`, an mdBook) and the README, held to what the binary does:
//!
//! - every shell block of the guide is run by CI or says why not, and CI runs the marked ones
//!   in order, each chapter in a scratch folder of its own, against the real parts (PX4's
//!   SITL, mavlink-router, Garage, Flight Review), checking the output the guide shows;
//! - the book builds with `mdbook` and no link or anchor in it is broken;
//! - every warning and error the code can print to an operator has an entry in the
//!   troubleshooting chapter, and every entry there is a message the code prints;
//! - the config file's key reference is what the binary makes of its own options;
//! - README.md stays a front door: short, its two commands in its top half.
//!
//! How a chapter marks its blocks (see also the guide's "Writing this guide" page):
//!
//! - ```` ```sh ci ```` runs, and must exit 0 (`exit=N`: with N; `retry=S`: run again until
//!   it succeeds, for at most S seconds; `timeout=S`: at most S seconds, 300 by default);
//! - ```` ```sh ci bg=NAME ```` runs in the background, as in a terminal of its own, until
//!   `<!-- ci: interrupt NAME -->` (Ctrl-C in that terminal: SIGINT to its process group,
//!   then it must exit 0, or as `exit=N` says) or the chapter's end (SIGTERM);
//! - ```` ```text output ```` right after a run block is what it printed (stdout and stderr):
//!   each line as shown, `...` on a line of its own for any lines, `[..]` in a line for any
//!   text; after a background block, what it printed by the time it stopped;
//! - a block of any language with `file=PATH` is written to PATH before the next block runs;
//! - `<!-- not run by CI: REASON -->` right before a shell block CI does not run;
//! - `<!-- ci: needs PART... -->` (`px4-sitl`, `flight-review`) starts the real parts a
//!   chapter talks to before its first block, `<!-- ci: wait SECONDS -->` lets time pass,
//!   `<!-- ci: check NAME -->` runs this file's own check NAME of what the chapter did,
//!   `<!-- ci: kill NAME -->` cuts NAME's power (SIGKILL to its process group).

mod runner;
mod troubleshooting;

use crate::common;
use crate::common::project;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A fenced block of a chapter.
#[derive(Debug, Clone)]
struct Block {
    /// `CHAPTER.md:LINE` of its opening fence.
    place: String,
    lang: String,
    /// The info string's words after the language: `ci`, `bg=NAME`, ...
    attrs: Vec<(String, String)>,
    body: String,
    /// The reason CI does not run it, from the comment right before it.
    not_run: Option<String>,
}

impl Block {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn is_shell(&self) -> bool {
        matches!(self.lang.as_str(), "sh" | "bash" | "shell" | "console")
    }

    fn runs(&self) -> bool {
        self.is_shell() && self.attr("ci").is_some()
    }
}

/// What a chapter holds, in order: its blocks and the runner's directives.
#[derive(Debug, Clone)]
enum Item {
    Block(Block),
    /// `<!-- ci: WORDS -->`, at `CHAPTER.md:LINE`.
    Directive(String, Vec<String>),
}

/// The guide's chapters in the book's order (`SUMMARY.md`), as paths under `docs/src`.
fn chapters() -> Vec<String> {
    let summary = std::fs::read_to_string(project().join("docs/src/SUMMARY.md")).unwrap();
    let link = regex::Regex::new(r"\]\(([^)#]+\.md)\)").unwrap();
    let mut out: Vec<String> = Vec::new();
    for line in summary.lines() {
        for cap in link.captures_iter(line) {
            let path = cap[1].to_owned();
            if !out.contains(&path) {
                out.push(path);
            }
        }
    }
    assert!(!out.is_empty(), "SUMMARY.md lists no chapter");
    out
}

/// A chapter's blocks and directives.
fn parse_chapter(name: &str) -> Vec<Item> {
    let text = std::fs::read_to_string(project().join("docs/src").join(name))
        .unwrap_or_else(|e| panic!("docs/src/{name}: {e}"));
    let mut items = Vec::new();
    let mut lines = text.lines().enumerate();
    let mut not_run: Option<String> = None;
    while let Some((n, line)) = lines.next() {
        let trimmed = line.trim_start();
        if let Some(fence) = opening_fence(trimmed) {
            let info = &trimmed[fence.len()..];
            let indent = line.len() - trimmed.len();
            let mut words = info.split_whitespace();
            let lang = words.next().unwrap_or("").to_owned();
            let attrs = words
                .map(|w| match w.split_once('=') {
                    Some((k, v)) => (k.to_owned(), v.to_owned()),
                    None => (w.to_owned(), String::new()),
                })
                .collect();
            let mut body = String::new();
            for (_, inner) in lines.by_ref() {
                // Closed by a fence of the same character, at least as long, alone.
                let inner_trimmed = inner.trim();
                if inner_trimmed.len() >= fence.len()
                    && inner_trimmed.chars().all(|c| fence.starts_with(c))
                {
                    break;
                }
                body.push_str(inner.get(indent..).unwrap_or(inner.trim_start()));
                body.push('\n');
            }
            items.push(Item::Block(Block {
                place: format!("{name}:{}", n + 1),
                lang,
                attrs,
                body,
                not_run: not_run.take(),
            }));
            continue;
        }
        if let Some(reason) = trimmed
            .strip_prefix("<!-- not run by CI:")
            .and_then(|r| r.strip_suffix("-->"))
        {
            not_run = Some(reason.trim().to_owned());
            continue;
        }
        if let Some(words) = trimmed
            .strip_prefix("<!-- ci:")
            .and_then(|r| r.strip_suffix("-->"))
        {
            items.push(Item::Directive(
                format!("{name}:{}", n + 1),
                words.split_whitespace().map(str::to_owned).collect(),
            ));
            continue;
        }
        // A reason belongs to the block right after it: prose between breaks the tie.
        if !trimmed.is_empty() {
            not_run = None;
        }
    }
    items
}

/// The opening fence of a fenced block (three or more backticks or tildes) that `line` starts
/// with.
fn opening_fence(line: &str) -> Option<&str> {
    let mark = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = line.chars().take_while(|c| *c == mark).count();
    (len >= 3).then(|| &line[..len])
}

fn all_blocks() -> Vec<Block> {
    chapters()
        .iter()
        .flat_map(|c| parse_chapter(c))
        .filter_map(|item| match item {
            Item::Block(b) => Some(b),
            Item::Directive(..) => None,
        })
        .collect()
}

#[test]
fn every_shell_block_of_the_guide_is_run_by_ci_or_says_why_not() {
    let blocks = all_blocks();
    let mut unmarked = Vec::new();
    let mut runs = 0;
    for block in blocks.iter().filter(|b| b.is_shell()) {
        match (block.runs(), &block.not_run) {
            (true, Some(_)) => unmarked.push(format!("{}: both run and not run", block.place)),
            (true, None) => runs += 1,
            (false, Some(reason)) if !reason.is_empty() => {}
            (false, _) => unmarked.push(format!(
                "{}: neither `ci` nor <!-- not run by CI: REASON -->",
                block.place
            )),
        }
    }
    assert!(unmarked.is_empty(), "{}", unmarked.join("\n"));
    assert!(runs >= 20, "only {runs} blocks are run by CI");
    // An output block follows a block CI runs, or it would never be checked.
    let mut last_ran = false;
    for item in chapters().iter().flat_map(|c| parse_chapter(c)) {
        if let Item::Block(block) = item {
            if block.lang == "text" && block.attr("output").is_some() {
                assert!(
                    last_ran,
                    "{}: output of a block CI does not run",
                    block.place
                );
            }
            if block.lang != "text" || block.attr("output").is_none() {
                last_ran = block.runs();
            }
        }
    }
}

#[test]
fn the_config_key_reference_is_the_binarys_own() {
    let made =
        common::text_output(std::process::Command::new(common::procs::BIN).arg("config-keys"));
    let page = project().join("docs/src/config-keys.md");
    let committed = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(
        committed == made,
        "{} is not what the binary makes of its options: run\n  cargo run -- config-keys > docs/src/config-keys.md",
        page.display()
    );
    // Every key a config file may set is on the page, and the packaged config only sets keys
    // the binary knows (its commented examples included).
    let toml_text = std::fs::read_to_string(project().join("systemd/ulog-recv.toml")).unwrap();
    let key = regex::Regex::new(r"(?m)^#?\s*([a-z][a-z-]+)\s*=").unwrap();
    for cap in key.captures_iter(&toml_text) {
        let name = &cap[1];
        if ["imu", "esc"].contains(&name) {
            continue; // a column's or event buffer's own name, in a table
        }
        assert!(
            made.contains(&format!("`{name} = ")) || made.contains(&format!("`[{name}]")),
            "systemd/ulog-recv.toml sets '{name}', which is no option of the daemon"
        );
    }
}

#[test]
fn the_readme_is_a_front_door_with_its_two_commands_in_its_top_half() {
    let readme = std::fs::read_to_string(project().join("README.md")).unwrap();
    assert!(
        readme.len() <= 15_000,
        "README.md is {} bytes: keep it under 15 KB, the rest belongs in the guide",
        readme.len()
    );
    let half = readme.len() / 2;
    for command in ["ulog-recv demo", ".ci/run"] {
        let at = readme
            .find(command)
            .unwrap_or_else(|| panic!("README.md does not give `{command}`"));
        assert!(
            at < half,
            "README.md gives `{command}` only in its second half"
        );
    }
    // Its links within the project (into the guide, to the licence files) lead somewhere.
    let link = regex::Regex::new(r"\]\(([^)#:]+)(#[^)]*)?\)").unwrap();
    let mut links = 0;
    for cap in link.captures_iter(&readme) {
        links += usize::from(cap[1].starts_with("docs/"));
        let target = project().join(&cap[1]);
        assert!(
            target.exists(),
            "README.md links to {}, which is missing",
            &cap[1]
        );
    }
    assert!(
        links >= 5,
        "README.md links into the guide only {links} times"
    );
}

/// What a run printed (stdout and stderr, as a terminal shows them) matches an output block:
/// line by line, `...` for any lines, `[..]` within a line for any text; trailing white space
/// does not count.
fn output_matches(expected: &str, actual: &str) -> bool {
    let expected: Vec<&str> = expected.lines().map(str::trim_end).collect();
    let actual: Vec<&str> = actual.lines().map(str::trim_end).collect();
    fn line_matches(pattern: &str, line: &str) -> bool {
        if !pattern.contains("[..]") {
            return pattern == line;
        }
        let parts: Vec<String> = pattern.split("[..]").map(regex::escape).collect();
        regex::Regex::new(&format!("^{}$", parts.join(".*")))
            .unwrap()
            .is_match(line)
    }
    fn from(e: &[&str], a: &[&str]) -> bool {
        match e.split_first() {
            None => a.is_empty(),
            Some((&"...", rest)) => (0..=a.len()).any(|k| from(rest, &a[k..])),
            Some((pattern, rest)) => {
                !a.is_empty() && line_matches(pattern, a[0]) && from(rest, &a[1..])
            }
        }
    }
    from(&expected, &actual)
}

#[test]
fn an_output_block_matches_as_the_guide_says() {
    let printed =
        "demo: 10 s at 60 KB/s\n  vehicle found\n  log 1 opened\nreceived 1 logs, 81019 bytes\n";
    assert!(output_matches(
        "demo: [..] s at [..]\n...\nreceived 1 logs, [..] bytes",
        printed
    ));
    assert!(output_matches("...\n  log 1 opened\n...", printed));
    assert!(!output_matches(
        "demo: [..]\nreceived 1 logs, [..]",
        printed
    ));
    assert!(!output_matches("...\nreceived 2 logs, [..]", printed));
    assert!(!output_matches("...\n  log 1 opened", printed));
}

/// `mdbook`: on `PATH`, else where `.ci/run` installs it; `None` (a loud skip, a failure
/// under CI) without one.
fn mdbook() -> Option<PathBuf> {
    let cached = PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
        .join(".cache/ulog-recv/mdbook-0.5.4/bin/mdbook");
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("mdbook"))
            .find(|p| p.is_file())
    });
    if let Some(found) = on_path.or_else(|| cached.is_file().then_some(cached)) {
        return Some(found);
    }
    eprintln!("\n!!! SKIPPED: no mdbook (cargo install --locked mdbook; .ci/run does) !!!\n");
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must build the guide: no mdbook"
    );
    None
}

#[test]
fn the_book_builds_and_no_link_in_it_is_broken() {
    let Some(mdbook) = mdbook() else { return };
    let out = common::procs::fresh_dir("book");
    let built = std::process::Command::new(&mdbook)
        .arg("build")
        .arg(project().join("docs"))
        .arg("-d")
        .arg(&out)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "mdbook build failed:\n{said}");
    assert!(
        !said.contains("WARN") && !said.contains("ERROR"),
        "mdbook warns:\n{said}"
    );
    let href = regex::Regex::new(r#"(?:href|src)="([^"]*)""#).unwrap();
    let id = regex::Regex::new(r#"\sid="([^"]*)""#).unwrap();
    let pages = common::procs::files_with_extension(&out, "html");
    assert!(pages.len() > 20, "{} pages", pages.len());
    let ids_of = |page: &Path| -> BTreeSet<String> {
        let text = std::fs::read_to_string(page).unwrap_or_default();
        id.captures_iter(&text).map(|c| c[1].to_owned()).collect()
    };
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for cap in href.captures_iter(&text) {
            let link = &cap[1];
            if link.is_empty()
                || link.contains("://")
                || link.starts_with("mailto:")
                || link.starts_with("data:")
            {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            checked += 1;
            let shown = page.strip_prefix(&out).unwrap().display();
            if !target.exists() {
                broken.push(format!("{shown}: {link} (no such file)"));
            } else if !anchor.is_empty() && !ids_of(&target).contains(anchor) {
                broken.push(format!("{shown}: {link} (no such anchor)"));
            }
        }
    }
    assert!(checked > 200, "only {checked} links checked");
    broken.sort();
    broken.dedup();
    assert!(
        broken.is_empty(),
        "broken links in the guide:\n{}",
        broken.join("\n")
    );
}
