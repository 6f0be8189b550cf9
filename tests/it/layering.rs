//! The crate's layout holds: every file of `src/` (the binary aside) imports only the parts
//! its own part may use, as the table in `src/lib.rs` lists them (the one place they are
//! listed); no two files import each other, directly or around a circle; the sans-IO parts
//! touch no socket, file, thread or clock; every file and folder says what it is (`//!`); no
//! file is over 800 lines, its tests included.
//!
//! Imports are read from the source text: `use` trees (braces and `self` expanded) and
//! inline `crate::` / `super::` paths, outside comments and outside the `#[cfg(test)] mod
//! tests` at a file's end (a test may use a higher part, as a dev-dependency does). A path
//! into a folder's `mod.rs` that names an item it re-exports counts as an import of the file
//! that defines it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A part of the crate (a folder of `src/`) as the table in `src/lib.rs` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    may_use: BTreeSet<String>,
    sans_io: bool,
}

/// The table of parts in `lib_rs`: the rows between `<!-- parts -->` and `<!-- /parts -->`,
/// each `| [`name`] | sans-IO: yes/no | what it is | may use: `a`, `b` |`.
fn parts_table(lib_rs: &str) -> BTreeMap<String, Part> {
    let doc: Vec<&str> = lib_rs
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(str::trim)
        .collect();
    let start = doc
        .iter()
        .position(|l| *l == "<!-- parts -->")
        .expect("parts table start");
    let end = doc
        .iter()
        .position(|l| *l == "<!-- /parts -->")
        .expect("parts table end");
    let names = |cell: &str| -> BTreeSet<String> {
        cell.split(',')
            .map(|n| n.trim().trim_matches(|c| "`[]".contains(c)).to_string())
            .filter(|n| !n.is_empty() && n != "—")
            .collect()
    };
    let mut parts = BTreeMap::new();
    for row in &doc[start + 1..end] {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() != 4 || cells[0].starts_with("---") || cells[0] == "part" {
            continue;
        }
        let name = names(cells[0]).into_iter().next().expect("a part's name");
        let sans_io = match cells[1] {
            "yes" => true,
            "no" => false,
            other => panic!("part {name}: sans-IO must be yes or no, not {other:?}"),
        };
        parts.insert(
            name,
            Part {
                may_use: names(cells[3]),
                sans_io,
            },
        );
    }
    parts
}

/// A source file: its module path under the crate (`["live", "ndjson", "server"]`; a
/// `mod.rs` is its folder's module) and its code outside comments and trailing tests.
#[derive(Debug)]
struct Source {
    path: PathBuf,
    module: Vec<String>,
    is_mod_rs: bool,
    code: String,
    has_module_doc: bool,
}

/// The code that ships: comments removed, the `#[cfg(test)] mod tests { .. }` at the end cut
/// off (a `#[cfg(test)] mod tests;` in its own file is left out whole: [`is_test_module`]).
fn shipped_code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines
                    .get(i + 1)
                    .is_some_and(|n| n.trim_start().starts_with("mod tests {"))
        })
        .unwrap_or(lines.len());
    lines[..end]
        .iter()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn load_sources(src: &Path) -> Vec<Source> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path != src.join("bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path == src.join("lib.rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut module: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            let is_mod_rs = module.last().is_some_and(|m| m == "mod");
            if is_mod_rs {
                module.pop();
            }
            if is_test_module(&path) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            out.push(Source {
                has_module_doc: text.trim_start().starts_with("//!"),
                code: shipped_code(&text),
                path,
                module,
                is_mod_rs,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// A module's tests in a file of their own: `tests.rs` beside a `mod.rs` that declares it
/// `#[cfg(test)] mod tests;` (test code, which may use what a dev-dependency may).
fn is_test_module(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs")
        && std::fs::read_to_string(path.with_file_name("mod.rs"))
            .is_ok_and(|parent| parent.contains("#[cfg(test)]\nmod tests;"))
}

/// Every path a `use` tree names, expanded (`a::{b, c::{d, self}}` → `a::b`, `a::c::d`,
/// `a::c`); `as` renames and globs are dropped to their path.
fn expand_use_tree(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let tree = tree.trim();
        let join = |a: &str, b: &str| {
            if a.is_empty() {
                b.to_string()
            } else if b == "self" {
                a.to_string()
            } else {
                format!("{a}::{b}")
            }
        };
        if let Some(open) = tree.find('{') {
            let head = tree[..open].trim_end_matches("::").trim();
            let inner = &tree[open + 1..tree.rfind('}').expect("closing brace")];
            let base = join(prefix, head);
            let mut depth = 0;
            let mut from = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&base, &inner[from..i], out);
                        from = i + 1;
                    }
                    _ => {}
                }
            }
            expand(&base, &inner[from..], out);
        } else if !tree.is_empty() {
            let item = tree
                .split(" as ")
                .next()
                .unwrap()
                .trim()
                .trim_end_matches("::*");
            out.push(join(prefix, item));
        }
    }
    let mut out = Vec::new();
    expand("", &tree, &mut out);
    out
}

/// The crate paths a file's code names, as module paths from the crate root
/// (`super::` resolved against the file's module).
fn crate_paths(source: &Source) -> Vec<Vec<String>> {
    let code = &source.code;
    let mut raw: Vec<String> = Vec::new();
    let mut rest = String::new();
    // `use` statements, whole (they may span lines and nest braces): a line that begins with
    // `use` (or `pub use`, `pub(crate) use`) up to the `;`.
    let mut statement: Option<String> = None;
    for line in code.lines() {
        let trimmed = line.trim_start();
        let starts_use = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| trimmed.strip_prefix(p));
        match (&mut statement, starts_use) {
            (None, Some(tree)) => statement = Some(tree.to_string()),
            (Some(s), _) => s.push_str(line),
            (None, None) => {
                rest.push_str(line);
                rest.push('\n');
            }
        }
        if let Some(s) = &statement
            && let Some(end) = s.find(';')
        {
            raw.extend(expand_use_tree(&s[..end]));
            rest.push_str(&s[end + 1..]);
            rest.push('\n');
            statement = None;
        }
    }
    // Inline paths.
    let bytes = rest.as_bytes();
    for prefix in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = rest[from..].find(prefix) {
            let start = from + at;
            from = start + prefix.len();
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b':') {
                continue;
            }
            let len = rest[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len() - start);
            raw.push(rest[start..start + len].trim_end_matches(':').to_string());
        }
    }
    // The module `super` stands for, from this file.
    let parent: Vec<String> = source.module[..source.module.len().saturating_sub(1)].to_vec();
    raw.into_iter()
        .filter_map(|p| {
            let mut segs: Vec<String> = p.split("::").map(str::to_string).collect();
            match segs.first().map(String::as_str) {
                Some("crate") => Some(segs.split_off(1)),
                Some("super") => {
                    let mut base = parent.clone();
                    base.extend(segs.split_off(1));
                    Some(base)
                }
                Some("self") => {
                    let mut base = source.module.clone();
                    base.extend(segs.split_off(1));
                    Some(base)
                }
                _ => None,
            }
        })
        .filter(|p| !p.is_empty())
        .collect()
}

/// The files of `src/` by module path, and each folder's re-exports (name → child module).
struct Tree {
    files: BTreeMap<Vec<String>, usize>,
    reexports: BTreeMap<Vec<String>, BTreeMap<String, String>>,
}

impl Tree {
    fn new(sources: &[Source]) -> Self {
        let mut files = BTreeMap::new();
        let mut reexports = BTreeMap::new();
        for (i, s) in sources.iter().enumerate() {
            files.insert(s.module.clone(), i);
            if s.is_mod_rs {
                let mut names = BTreeMap::new();
                for stmt in s.code.split(';') {
                    if let Some(tree) = stmt.trim().strip_prefix("pub use ") {
                        for path in expand_use_tree(tree) {
                            let segs: Vec<&str> = path.split("::").collect();
                            if segs.len() >= 2 {
                                names.insert(segs[segs.len() - 1].to_string(), segs[0].to_string());
                            }
                        }
                    }
                }
                reexports.insert(s.module.clone(), names);
            }
        }
        Tree { files, reexports }
    }

    /// The file a crate path leads into: the deepest module file on it, or the child a
    /// folder's re-export names; `None` for a path that stops at a folder's `mod.rs`.
    fn resolve(&self, path: &[String], sources: &[Source]) -> Option<usize> {
        let mut found = None;
        for len in 1..=path.len() {
            if let Some(&i) = self.files.get(&path[..len]) {
                found = Some((i, len));
            } else {
                break;
            }
        }
        let (i, len) = found?;
        if !sources[i].is_mod_rs {
            return Some(i);
        }
        let child = self.reexports.get(&path[..len])?.get(path.get(len)?)?;
        let mut module = path[..len].to_vec();
        module.push(child.clone());
        self.files.get(&module).copied()
    }
}

/// Everything wrong with the layout of the sources under `src`, one line each.
fn violations(src: &Path) -> Vec<String> {
    let parts = parts_table(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let sources = load_sources(src);
    let tree = Tree::new(&sources);
    let mut problems = Vec::new();
    let mut edges: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let rel = |p: &Path| {
        p.strip_prefix(src.parent().unwrap())
            .unwrap()
            .display()
            .to_string()
    };

    for (i, s) in sources.iter().enumerate() {
        let file = rel(&s.path);
        if !s.has_module_doc {
            problems.push(format!(
                "{file}: does not begin with a `//!` saying what it is"
            ));
        }
        let Some(part_name) = s.module.first() else {
            continue;
        };
        let Some(part) = parts.get(part_name) else {
            problems.push(format!(
                "{file}: part `{part_name}` is not in src/lib.rs's table"
            ));
            continue;
        };
        for path in crate_paths(s) {
            let target = &path[0];
            if target != part_name && !part.may_use.contains(target) {
                problems.push(format!(
                    "{file}: imports `crate::{}`, but `{part_name}` may not use `{target}`",
                    path.join("::")
                ));
            }
            if let Some(j) = tree.resolve(&path, &sources)
                && j != i
            {
                edges.entry(i).or_default().insert(j);
            }
        }
        if part.sans_io {
            for io in [
                "tokio::",
                "std::fs",
                "std::net",
                "std::thread",
                "Instant::now()",
                "SystemTime::now()",
            ] {
                if s.code.contains(io) {
                    problems.push(format!("{file}: the sans-IO part `{part_name}` uses {io}"));
                }
            }
        }
    }

    // Circles between files: a depth-first search that meets a file on its own path.
    fn visit(
        n: usize,
        edges: &BTreeMap<usize, BTreeSet<usize>>,
        state: &mut BTreeMap<usize, bool>,
        path: &mut Vec<usize>,
        circles: &mut Vec<Vec<usize>>,
    ) {
        state.insert(n, false);
        path.push(n);
        for &m in edges.get(&n).into_iter().flatten() {
            match state.get(&m) {
                None => visit(m, edges, state, path, circles),
                Some(false) => {
                    let from = path.iter().position(|&p| p == m).unwrap();
                    circles.push(path[from..].to_vec());
                }
                Some(true) => {}
            }
        }
        path.pop();
        state.insert(n, true);
    }
    let mut state = BTreeMap::new();
    let mut circles = Vec::new();
    for n in 0..sources.len() {
        if !state.contains_key(&n) {
            visit(n, &edges, &mut state, &mut Vec::new(), &mut circles);
        }
    }
    for circle in circles {
        let names: Vec<String> = circle.iter().map(|&n| rel(&sources[n].path)).collect();
        problems.push(format!("import circle: {} → back", names.join(" → ")));
    }
    problems
}

#[test]
fn every_file_imports_only_the_parts_its_part_may_use_and_no_file_imports_in_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = violations(&src);
    assert!(
        problems.is_empty(),
        "the layout is broken:\n{}",
        problems.join("\n")
    );
}

/// The most lines a file of `src/` holds, its tests included: past that a reader no longer
/// takes it in whole, and it is split by what it owns, as a folder whose `mod.rs` says what
/// each file holds.
const MAX_FILE_LINES: usize = 800;

#[test]
fn no_file_of_src_is_over_800_lines_tests_included() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = 0;
    let mut too_long = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files += 1;
                let lines = std::fs::read_to_string(&path).unwrap().lines().count();
                if lines > MAX_FILE_LINES {
                    too_long.push(format!("{}: {lines} lines", path.display()));
                }
            }
        }
    }
    assert!(files > 100, "only {files} files of src/ were read");
    assert!(
        too_long.is_empty(),
        "over {MAX_FILE_LINES} lines (split each by what it owns):\n{}",
        too_long.join("\n")
    );
}

#[test]
fn every_part_of_src_is_in_the_table_and_every_part_in_the_table_is_a_folder_with_a_mod_rs() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let parts = parts_table(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(
        parts.len() >= 5,
        "the table in src/lib.rs lists {} parts",
        parts.len()
    );
    for (name, part) in &parts {
        assert!(
            src.join(name).join("mod.rs").is_file(),
            "part {name} has no src/{name}/mod.rs"
        );
        for used in &part.may_use {
            assert!(
                parts.contains_key(used),
                "part {name} may use `{used}`, which is no part"
            );
        }
    }
    for entry in std::fs::read_dir(&src).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            name == "lib.rs" || name == "bin" || parts.contains_key(&name),
            "src/{name} is not a part listed in src/lib.rs's table (loose files belong in a part)"
        );
    }
}

/// The checker itself finds what it must: a crate made up here with an upward import, a
/// circle, a clock in a sans-IO part and a file without its `//!`.
#[test]
fn the_checker_finds_an_upward_import_a_circle_a_clock_and_a_missing_doc() {
    let dir = std::env::temp_dir().join(format!("ulog-recv-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |path: &str, text: &str| {
        let p = dir.join("src").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "lib.rs",
        "//! A crate.\n//!\n//! <!-- parts -->\n//! | part | sans-IO | what it is | may use |\n\
         //! |---|---|---|---|\n//! | [`low`] | yes | the bottom | — |\n\
         //! | [`high`] | no | the top | `low` |\n//! <!-- /parts -->\npub mod low;\npub mod high;\n",
    );
    write(
        "low/mod.rs",
        "//! Low.\npub mod a;\npub mod b;\npub use a::Thing;\n",
    );
    write(
        "low/a.rs",
        "//! A.\nuse crate::low::b::other;\nuse crate::high::Top;\npub struct Thing;\n\
         #[cfg(test)]\nmod tests {\n    use crate::high::Fine;\n}\n",
    );
    write(
        "low/b.rs",
        "//! B.\npub fn other() { let _ = crate::low::Thing; let _ = std::time::Instant::now(); }\n",
    );
    write(
        "high/mod.rs",
        "//! High.\nuse crate::low::{self, a::{Thing}};\npub struct Top;\n",
    );
    write("high/c.rs", "use super::Top;\n");
    let problems = violations(&dir.join("src"));
    let _ = std::fs::remove_dir_all(&dir);
    let text = problems.join("\n");
    assert!(
        text.contains("src/low/a.rs: imports `crate::high::Top`, but `low` may not use `high`"),
        "{text}"
    );
    assert!(
        text.contains("import circle: src/low/a.rs → src/low/b.rs → back"),
        "{text}"
    );
    assert!(
        text.contains("src/low/b.rs: the sans-IO part `low` uses Instant::now()"),
        "{text}"
    );
    assert!(
        text.contains("src/high/c.rs: does not begin with a `//!`"),
        "{text}"
    );
    // The test module's import of a higher part and the high part's imports are allowed.
    assert_eq!(problems.len(), 4, "{text}");
}
