//! Reading what Python's `json` module writes (pyulog's `.expected.json` dumps).

/// Python's `json` writes bare `NaN`, `Infinity` and `-Infinity`; turn them (outside strings)
/// into the strings the dump uses elsewhere: "nan", "inf", "-inf".
pub fn to_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            in_string = c != '"' || escaped;
            escaped = c == '\\' && !escaped;
        } else if c == '"' {
            in_string = true;
        } else {
            let replaced = [
                ("-Infinity", "\"-inf\""),
                ("Infinity", "\"inf\""),
                ("NaN", "\"nan\""),
            ]
            .into_iter()
            .find(|(token, _)| rest.starts_with(token));
            if let Some((token, with)) = replaced {
                out.push_str(with);
                rest = &rest[token.len()..];
                continue;
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}
