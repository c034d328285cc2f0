//! Text for HTML pages (reports, the translate test page).

/// `s` with `&`, `<`, `>` and `"` escaped, for element text and attribute values.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
