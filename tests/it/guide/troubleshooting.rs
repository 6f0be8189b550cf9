//! Every warning and error the code can print to an operator has an entry in the guide's
//! troubleshooting chapter, and every entry there is a message the code prints: the messages
//! are read from the source as Rust tokens (proc-macro2), their format strings made patterns.

use std::collections::BTreeSet;

use crate::common;
use crate::common::project;

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
