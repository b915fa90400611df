//! The page, embedded: hand-written HTML, CSS and JavaScript (charts are inline SVG drawn
//! by the script). Nothing is fetched from the network.

pub const INDEX_HTML: &str = include_str!("../assets/index.html");
pub const APP_CSS: &str = include_str!("../assets/app.css");
pub const APP_JS: &str = include_str!("../assets/app.js");
pub const FAVICON_SVG: &str = include_str!("../assets/favicon.svg");

/// `(content type, body)` of an embedded asset.
pub fn get(name: &str) -> Option<(&'static str, &'static str)> {
    Some(match name {
        "index.html" => ("text/html; charset=utf-8", INDEX_HTML),
        "app.css" => ("text/css; charset=utf-8", APP_CSS),
        "app.js" => ("text/javascript; charset=utf-8", APP_JS),
        "favicon.svg" => ("image/svg+xml", FAVICON_SVG),
        _ => return None,
    })
}
