//! The page's files, compiled into the binary (the field has no internet): its HTML, its
//! stylesheet and its script, written for this page with no framework; and the plotting
//! library its flight view draws with, uPlot (MIT), vendored as its release ships it
//! (`page/vendor/`, with its licence, which the page links).

/// The page.
pub const INDEX_HTML: &str = include_str!("page/index.html");
/// The login form (beyond loopback).
pub const LOGIN_HTML: &str = include_str!("page/login.html");
const APP_JS: &str = include_str!("page/app.js");
const STYLE_CSS: &str = include_str!("page/style.css");
const UPLOT_JS: &str = include_str!("page/vendor/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("page/vendor/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("page/vendor/uPlot.LICENSE");
/// The page's icon (also served as `/favicon.ico`, where browsers look without being told).
const ICON_SVG: &str = include_str!("page/icon.svg");

/// An asset by name: its content type and bytes.
pub fn asset(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "app.js" => Some(("text/javascript; charset=utf-8", APP_JS)),
        "style.css" => Some(("text/css; charset=utf-8", STYLE_CSS)),
        "uPlot.iife.min.js" => Some(("text/javascript; charset=utf-8", UPLOT_JS)),
        "uPlot.min.css" => Some(("text/css; charset=utf-8", UPLOT_CSS)),
        "uPlot.LICENSE" => Some(("text/plain; charset=utf-8", UPLOT_LICENSE)),
        "icon.svg" => Some(("image/svg+xml", ICON_SVG)),
        _ => None,
    }
}
