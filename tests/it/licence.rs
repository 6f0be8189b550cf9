//! The project's licence, MIT OR Apache-2.0, said the same way everywhere: Cargo.toml, the
//! licence files at the top level, and the packages' copyright file (DEP-5).

use crate::common::project;

/// The project's licence, as Cargo.toml, the licence files and the packages' DEP-5 copyright
/// file state it, all saying the same: MIT OR Apache-2.0, the texts whole and unchanged.
#[test]
fn the_licence_is_mit_or_apache_2_0_in_the_manifest_the_licence_files_and_the_copyright_file() {
    let manifest = std::fs::read_to_string(project().join("Cargo.toml")).unwrap();
    assert!(
        manifest
            .lines()
            .any(|l| l == r#"license = "MIT OR Apache-2.0""#),
        "Cargo.toml's licence"
    );
    let mit = std::fs::read_to_string(project().join("LICENSE-MIT")).unwrap();
    assert!(
        mit.contains("Copyright (c) The ulog-recv developers\n"),
        "{mit}"
    );
    let apache = std::fs::read_to_string(project().join("LICENSE-APACHE")).unwrap();
    assert!(
        apache.contains("Apache License\n                           Version 2.0, January 2004")
    );
    assert!(
        apache
            .trim_end()
            .ends_with("limitations under the License.")
    );
    // Debian's own copy of the text (base-files), where there is one: the same bytes.
    if let Ok(debian) = std::fs::read_to_string("/usr/share/common-licenses/Apache-2.0") {
        assert_eq!(apache, debian, "LICENSE-APACHE is not the Apache-2.0 text");
    }

    // DEP-5: paragraphs separated by blank lines, each a set of `Field: value` lines with
    // continuation lines indented and "." for a blank line.
    let copyright = std::fs::read_to_string(project().join("systemd/package/copyright")).unwrap();
    let paragraphs: Vec<Vec<(String, String)>> = copyright
        .split("\n\n")
        .map(|paragraph| {
            let mut fields: Vec<(String, String)> = Vec::new();
            for line in paragraph.lines() {
                if let Some(continued) = line.strip_prefix(' ') {
                    let (_, value) = fields.last_mut().expect("a continuation after a field");
                    value.push('\n');
                    value.push_str(if continued == "." { "" } else { continued });
                } else {
                    let (name, value) = line
                        .split_once(": ")
                        .unwrap_or_else(|| panic!("not a DEP-5 field: {line:?}"));
                    fields.push((name.to_string(), value.to_string()));
                }
            }
            fields
        })
        .collect();
    let get = |paragraph: &[(String, String)], name: &str| -> Option<String> {
        paragraph
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        get(&paragraphs[0], "Format").as_deref(),
        Some("https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/")
    );
    let files = paragraphs
        .iter()
        .find(|p| get(p, "Files").as_deref() == Some("*"))
        .expect("a Files: * paragraph");
    assert_eq!(get(files, "License").as_deref(), Some("MIT or Apache-2.0"));
    let notice = get(files, "Copyright").expect("a copyright notice");
    assert!(
        notice.ends_with("The ulog-recv developers") && notice[..4].parse::<u32>().is_ok(),
        "the notice has a year and the holder: {notice}"
    );
    let licence_text = |name: &str| {
        paragraphs
            .iter()
            .filter(|p| p.len() == 1)
            .find_map(|p| {
                let text = get(p, "License")?;
                text.strip_prefix(&format!("{name}\n")).map(str::to_string)
            })
            .unwrap_or_else(|| panic!("no stand-alone License: {name} paragraph"))
    };
    let mit_permission = &mit[mit.find("Permission is hereby granted").unwrap()..];
    assert_eq!(licence_text("MIT").trim_end(), mit_permission.trim_end());
    assert!(licence_text("Apache-2.0").contains("/usr/share/common-licenses/Apache-2.0"));
}
