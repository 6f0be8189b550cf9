//! The page's files, compiled into the binary (the field has no internet): its HTML, its
//! stylesheet and its script, written for this page with no framework.

/// The page.
pub const INDEX_HTML: &str = include_str!("page/index.html");
/// The login form (beyond loopback).
pub const LOGIN_HTML: &str = include_str!("page/login.html");
const APP_JS: &str = include_str!("page/app.js");
const STYLE_CSS: &str = include_str!("page/style.css");

/// An asset by name: its content type and bytes.
pub fn asset(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "app.js" => Some(("text/javascript; charset=utf-8", APP_JS)),
        "style.css" => Some(("text/css; charset=utf-8", STYLE_CSS)),
        _ => None,
    }
}
