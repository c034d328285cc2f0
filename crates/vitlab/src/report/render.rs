//! Rendering, for every report alike: the document ([`Block`]s) and its
//! markdown and HTML renderers (table cells escaped for both), the number
//! formatters ([`pm`] mean ± std, [`p_value`], [`sig`], [`duration`]) and the
//! table cells and sentences both reports write the same way (n with the runs
//! it leaves out, the p-value column, the baseline sentence, the intro).

use super::cells::MeanStd;
use crate::util::html::escape;

/// The report's content, rendered to markdown and HTML alike.
#[derive(Clone, Debug)]
pub enum Block {
    Heading(u8, String),
    /// Text with `inline code`.
    Para(String),
    Table {
        header: Vec<String>,
        rows: Vec<Vec<String>>,
    },
    /// A figure: `figures/NAME.png` shown, `figures/NAME.svg` linked.
    Image {
        path: String,
        alt: String,
    },
    /// An image at `src` (relative to the report), shown as it is.
    Picture {
        src: String,
        alt: String,
    },
}

impl Block {
    /// A table from a header of `&str`.
    pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> Block {
        Block::Table { header: header.iter().map(|s| s.to_string()).collect(), rows }
    }
}

/// Mean ± std (the mean alone below two values), `-` for none.
pub fn pm(m: Option<MeanStd>) -> String {
    match m {
        None => "-".into(),
        Some(m) if m.n < 2 => format!("{:.4}", m.mean),
        Some(m) => format!("{:.4} ± {:.4}", m.mean, m.std),
    }
}

pub fn p_value(p: f64) -> String {
    if p.is_nan() {
        "n/a".into()
    } else if p < 1e-3 {
        "<0.001".into()
    } else {
        format!("{p:.3}")
    }
}

/// Three significant digits, scientific beyond 1e4.
pub fn sig(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e4).contains(&a) {
        format!("{v:.2e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

pub fn duration(s: f64) -> String {
    if s >= 3600.0 {
        format!("{}h{:02}m", (s / 3600.0) as u64, ((s % 3600.0) / 60.0) as u64)
    } else if s >= 60.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{s:.1}s")
    }
}

/// The n column: the runs with a value, then those left out (`2 (+1 unfinished)`).
pub fn n_cell(n: usize, unfinished: usize, failed: usize) -> String {
    let mut out = n.to_string();
    let others: Vec<String> = [(unfinished, "unfinished"), (failed, "failed")]
        .iter()
        .filter(|(k, _)| *k > 0)
        .map(|(k, what)| format!("{k} {what}"))
        .collect();
    if !others.is_empty() {
        out.push_str(&format!(" (+{})", others.join(", ")));
    }
    out
}

/// A p-value column: the p-value, `baseline` in the baseline cell, else `n/a`.
pub fn p_cell(p: Option<f64>, label: &str, baseline: Option<&str>) -> String {
    match (p, baseline) {
        (Some(p), _) => p_value(p),
        (None, Some(b)) if b == label => "baseline".into(),
        _ => "n/a".into(),
    }
}

/// What the p-values compare: `metric` over seeds against the baseline's cell.
pub fn baseline_sentence(metric: &str, baseline: &[(String, String)]) -> String {
    if baseline.is_empty() {
        "no baseline cell chosen (`--baseline KEY=VALUE`)".to_string()
    } else {
        format!(
            "p: Welch's two-sided t-test of the {metric} over seeds against the cell with {} (and the other values equal)",
            baseline.iter().map(|(k, v)| format!("`{k}={v}`")).collect::<Vec<_>>().join(", ")
        )
    }
}

/// The first paragraph: how many runs in how many cells, and what the cells differ in.
pub fn intro(runs: usize, finished: usize, cells: usize, keys: &[String]) -> String {
    let mut intro = format!("{runs} runs ({finished} finished) in {cells} cells.");
    if !keys.is_empty() {
        intro.push_str(&format!(
            " Cells differ in {}; runs within a cell differ only in the seed.",
            keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    intro
}

pub fn render_markdown(doc: &[Block]) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut out = String::new();
    for b in doc {
        match b {
            Block::Heading(level, text) => out.push_str(&format!("{} {text}\n\n", "#".repeat(*level as usize))),
            Block::Para(text) => out.push_str(&format!("{text}\n\n")),
            Block::Table { header, rows } => {
                out.push_str(&format!("| {} |\n", header.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | ")));
                out.push_str(&format!(
                    "|{}|\n",
                    header.iter().enumerate().map(|(i, _)| if i == 0 { "---" } else { "--:" }).collect::<Vec<_>>().join("|")
                ));
                for r in rows {
                    out.push_str(&format!("| {} |\n", r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")));
                }
                out.push('\n');
            }
            Block::Image { path, alt } => {
                out.push_str(&format!("![{alt}](figures/{path}.png)\n\n*{alt}* ([SVG](figures/{path}.svg))\n\n"));
            }
            Block::Picture { src, alt } => out.push_str(&format!("![{alt}]({src})\n\n")),
        }
    }
    out
}

/// HTML-escapes `text` and turns `code` spans into <code>.
fn inline(text: &str) -> String {
    escape(text)
        .split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 1 { format!("<code>{part}</code>") } else { part.to_string() })
        .collect()
}

pub fn render_html(title: &str, doc: &[Block]) -> String {
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n\
         body {{ font-family: sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}\n\
         th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}\n\
         th:first-child, td:first-child {{ text-align: left; }}\n\
         th {{ background: #f3f3f3; }}\n\
         img {{ max-width: 100%; }}\n\
         code {{ background: #f3f3f3; padding: 0 3px; }}\n\
         </style>\n</head>\n<body>\n",
        escape(title)
    );
    for b in doc {
        match b {
            Block::Heading(level, text) => out.push_str(&format!("<h{level}>{}</h{level}>\n", inline(text))),
            Block::Para(text) => out.push_str(&format!("<p>{}</p>\n", inline(text))),
            Block::Table { header, rows } => {
                out.push_str("<table>\n<thead><tr>");
                for h in header {
                    out.push_str(&format!("<th>{}</th>", inline(h)));
                }
                out.push_str("</tr></thead>\n<tbody>\n");
                for r in rows {
                    out.push_str("<tr>");
                    for c in r {
                        out.push_str(&format!("<td>{}</td>", inline(c)));
                    }
                    out.push_str("</tr>\n");
                }
                out.push_str("</tbody>\n</table>\n");
            }
            Block::Image { path, alt } => out.push_str(&format!(
                "<figure><img src=\"figures/{path}.png\" alt=\"{a}\"><figcaption>{c} (<a href=\"figures/{path}.svg\">SVG</a>)</figcaption></figure>\n",
                a = escape(alt),
                c = inline(alt)
            )),
            Block::Picture { src, alt } => {
                out.push_str(&format!("<figure><img src=\"{}\" alt=\"{}\"></figure>\n", escape(src), escape(alt)))
            }
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_are_escaped_in_markdown_and_html() {
        let doc = [Block::table(&["cell", "n"], vec![vec!["a|b <c>".into(), "2".into()]])];
        assert!(render_markdown(&doc).contains("| a\\|b <c> | 2 |"));
        assert!(render_html("t", &doc).contains("<td>a|b &lt;c&gt;</td>"));
    }

    #[test]
    fn numbers_format_alike_in_every_report() {
        assert_eq!(pm(MeanStd::of(&[1.0, 2.0, f64::NAN])), "1.5000 ± 0.7071");
        assert_eq!(pm(MeanStd::of(&[0.5])), "0.5000");
        assert_eq!((p_value(0.0004), p_value(0.0123), p_value(f64::NAN)), ("<0.001".into(), "0.012".into(), "n/a".into()));
        assert_eq!(n_cell(2, 1, 0), "2 (+1 unfinished)");
        assert_eq!(p_cell(None, "a", Some("a")), "baseline");
        assert_eq!(p_cell(None, "b", Some("a")), "n/a");
    }
}
