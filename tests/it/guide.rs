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

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn project() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

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

/// The messages an operator can be shown: every `tracing::warn!`/`error!`, every error's
/// text (`#[error("…")]`, a `Display` of a problem or error), every `bail!`/`anyhow!` and
/// `.context(…)`, as format strings, with where each is.
fn operator_messages() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for file in common::procs::files_with_extension(&project().join("src"), "rs") {
        let text = std::fs::read_to_string(&file).unwrap();
        let tokens: proc_macro2::TokenStream = text
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e:?}", file.display()));
        let place = file.strip_prefix(project()).unwrap().display().to_string();
        let mut found = Vec::new();
        scan_tokens(tokens, false, &mut found);
        out.extend(found.into_iter().map(|m| (m, place.clone())));
    }
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    // A message that is only placeholders passes another's text on: nothing to document.
    out.retain(|(m, _)| {
        template_regex(m)
            .as_str()
            .chars()
            .filter(|c| c.is_alphabetic())
            .count()
            >= 3
    });
    out
}

/// Walks a file's tokens for the messages [`operator_messages`] lists; `in_problem`: inside
/// the `Display` impl of an error or a problem.
fn scan_tokens(tokens: proc_macro2::TokenStream, in_problem: bool, out: &mut Vec<String>) {
    use proc_macro2::TokenTree;
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, token) in tokens.iter().enumerate() {
        let next = tokens.get(i + 1);
        let group_after = |k: usize| match tokens.get(k) {
            Some(TokenTree::Group(g)) => Some(g.stream()),
            _ => None,
        };
        match token {
            TokenTree::Ident(id) => {
                let name = id.to_string();
                let bang = matches!(next, Some(TokenTree::Punct(p)) if p.as_char() == '!');
                if bang && let Some(args) = group_after(i + 2) {
                    let strings = top_level_strings(&args);
                    let message = match name.as_str() {
                        // The message is a tracing call's last literal (fields come first).
                        "warn" | "error" => strings.last().cloned(),
                        "bail" | "anyhow" => strings.first().cloned(),
                        "write" | "writeln" if in_problem => strings.first().cloned(),
                        _ => None,
                    };
                    out.extend(message);
                }
                if (name == "context" || name == "with_context")
                    && i > 0
                    && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '.')
                    && let Some(args) = group_after(i + 1)
                {
                    out.extend(first_string_within(args));
                }
                // `impl … Display for NAME { … }` of an error or a problem.
                if name == "Display"
                    && matches!(tokens.get(i + 1), Some(TokenTree::Ident(f)) if f == "for")
                    && let Some(TokenTree::Ident(ty)) = tokens.get(i + 2)
                {
                    let ty = ty.to_string();
                    if (ty.ends_with("Error") || ty.ends_with("Problem"))
                        && let Some(body) = group_after(i + 3)
                    {
                        scan_tokens(body, true, out);
                    }
                }
            }
            // `#[error("…")]`
            TokenTree::Punct(p) if p.as_char() == '#' => {
                if let Some(attr) = group_after(i + 1) {
                    let inner: Vec<TokenTree> = attr.into_iter().collect();
                    if let [TokenTree::Ident(id), TokenTree::Group(args)] = inner.as_slice()
                        && id == "error"
                    {
                        out.extend(top_level_strings(&args.stream()).first().cloned());
                    }
                }
            }
            TokenTree::Group(g) => scan_tokens(g.stream(), in_problem, out),
            _ => {}
        }
    }
}

/// The string literals among a macro's top-level arguments, unescaped.
fn top_level_strings(args: &proc_macro2::TokenStream) -> Vec<String> {
    args.clone()
        .into_iter()
        .filter_map(|t| match t {
            proc_macro2::TokenTree::Literal(l) => unescape(&l.to_string()),
            _ => None,
        })
        .collect()
}

/// The first string literal anywhere in `args` (`.with_context(|| format!("…", …))`).
fn first_string_within(args: proc_macro2::TokenStream) -> Option<String> {
    for t in args {
        match t {
            proc_macro2::TokenTree::Literal(l) => {
                if let Some(s) = unescape(&l.to_string()) {
                    return Some(s);
                }
            }
            proc_macro2::TokenTree::Group(g) => {
                if let Some(s) = first_string_within(g.stream()) {
                    return Some(s);
                }
            }
            _ => {}
        }
    }
    None
}

/// A Rust string literal's value (`"…"` with escapes and line continuations, `r#"…"#`), or
/// `None` for any other literal.
fn unescape(literal: &str) -> Option<String> {
    if let Some(raw) = literal.strip_prefix('r') {
        let hashes = raw.len() - raw.trim_start_matches('#').len();
        let inner = raw.get(hashes + 1..raw.len() - hashes - 1)?;
        return Some(inner.to_owned());
    }
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('\n') => {
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
            }
            Some('u') => {
                let code: String = chars.by_ref().skip(1).take_while(|c| *c != '}').collect();
                out.extend(u32::from_str_radix(&code, 16).ok().and_then(char::from_u32));
            }
            Some('x') => {
                let code: String = chars.by_ref().take(2).collect();
                out.extend(u8::from_str_radix(&code, 16).ok().map(char::from));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Some(out)
}

/// A format string as a regular expression over what it prints: its text as written, each
/// `{…}` any text; runs of white space as one space.
fn template_regex(template: &str) -> regex::Regex {
    let mut pattern = String::from("^");
    let mut literal = String::new();
    let mut chars = template.chars().peekable();
    let flush = |literal: &mut String, pattern: &mut String| {
        let spaced = literal.split_whitespace().collect::<Vec<_>>().join(" ");
        let lead = literal.starts_with(char::is_whitespace) && !spaced.is_empty();
        let trail = literal.ends_with(char::is_whitespace) && !spaced.is_empty();
        if lead {
            pattern.push(' ');
        }
        pattern.push_str(&regex::escape(&spaced));
        if trail || (spaced.is_empty() && !literal.is_empty()) {
            pattern.push(' ');
        }
        literal.clear();
    };
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '{' => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                flush(&mut literal, &mut pattern);
                pattern.push_str(".*");
            }
            c => literal.push(c),
        }
    }
    flush(&mut literal, &mut pattern);
    pattern.push('$');
    regex::Regex::new(&pattern).unwrap()
}

/// The troubleshooting chapter's entries: the message of each list item that begins with one
/// in bold code (`- **\`MESSAGE\`**`), white space as one space.
fn troubleshooting_entries() -> Vec<(String, usize)> {
    let text = std::fs::read_to_string(project().join("docs/src/troubleshooting.md")).unwrap();
    let entry = regex::Regex::new(r"^\s*- \*\*`(.+?)`\*\*").unwrap();
    text.lines()
        .enumerate()
        .filter_map(|(n, line)| {
            let cap = entry.captures(line)?;
            Some((
                cap[1].split_whitespace().collect::<Vec<_>>().join(" "),
                n + 1,
            ))
        })
        .collect()
}

#[test]
fn every_message_an_operator_can_see_has_an_entry_in_troubleshooting() {
    let messages = operator_messages();
    assert!(
        messages.len() > 150,
        "only {} messages found in src/: is the scan broken?",
        messages.len()
    );
    // The scan itself: a message of each kind it looks for is among them.
    for known in [
        "the storage cannot keep up: samples are dropped (a dropout in the log says how long); receiving goes on",
        "cannot bind UDP {addr}: {source}",
        "no live socket: {e}; give --socket PATH to publish",
        "link {spec} failed",
        "frames from system {system_id} are signed with another key than ours: the \
         --signing-key file does not hold the vehicle's key",
    ] {
        assert!(
            messages.iter().any(|(m, _)| m == known),
            "the scan missed {known:?}"
        );
    }
    let entries = troubleshooting_entries();
    let mut missing = Vec::new();
    let mut used = BTreeSet::new();
    for (message, place) in &messages {
        let re = template_regex(message);
        let matching: Vec<usize> = entries
            .iter()
            .filter(|(e, _)| re.is_match(e))
            .map(|(_, line)| *line)
            .collect();
        if matching.is_empty() {
            missing.push(format!("{place}: {message:?}"));
        }
        used.extend(matching);
    }
    let stale: Vec<String> = entries
        .iter()
        .filter(|(_, line)| !used.contains(line))
        .map(|(e, line)| format!("troubleshooting.md:{line}: {e:?}"))
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "{} message(s) the code prints have no entry in docs/src/troubleshooting.md \
         (an entry is `- **`MESSAGE`**`, the message as printed):\n{}\n\n\
         {} entr(ies) match no message the code prints:\n{}",
        missing.len(),
        missing.join("\n"),
        stale.len(),
        stale.join("\n")
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
        let report = common::px4_compare::check_whole(&py, &sd_logs[0], sd_len, &merged, place);
        assert_eq!(
            report["postflight"], true,
            "{place}: no post-flight data: the STOP handshake was not answered"
        );
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
