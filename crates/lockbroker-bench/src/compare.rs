//! `compare A.json B.json`: every figure two `--json` documents share, with
//! the ratio B/A, whether it moved the better or the worse way (by more than
//! `NOISE`), any goal it newly met or missed, and its ratio to its baseline
//! in each run (which the noise of a shared machine moves less, as both sides
//! of it were measured in the same run).
//!
//! The document (written by [`crate::stats::Table::write_json`]):
//! `{"lockbroker_bench": 1, "about": {...}, "figures": [{"name", "unit",
//! "value", "baseline", "ratio", "goal", "met", "better"}]}`, where `value`
//! is the broker's figure (or the one its name says), `baseline` what it was
//! compared with in that run, `met` `true`, `false` or `null` (no goal) and
//! `better` `"lower"` or `"higher"`.

use std::path::Path;

use serde::Deserialize;

/// Changes smaller than this are called "same": runs on a shared machine
/// move by more than that on their own, so read a single run with care.
const NOISE: f64 = 0.05;

#[derive(Deserialize)]
struct Document {
    #[serde(default)]
    about: serde_json::Value,
    figures: Vec<Figure>,
}

#[derive(Deserialize)]
struct Figure {
    name: String,
    unit: String,
    value: Option<f64>,
    #[serde(default)]
    ratio: Option<f64>,
    #[serde(default)]
    met: Option<bool>,
    #[serde(default)]
    better: Option<String>,
}

fn load(path: &Path) -> Result<Document, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a bench document: {e}", path.display()))
}

/// Prints the comparison of `a` (before) and `b` (after).
pub fn run(a: &Path, b: &Path) -> Result<(), String> {
    let (before, after) = (load(a)?, load(b)?);
    for (label, path, doc) in [("A", a, &before), ("B", b, &after)] {
        println!(
            "{label}: {} (commit {}, load {})",
            path.display(),
            doc.about["commit"].as_str().unwrap_or("?"),
            doc.about["load_average_at_start"].as_str().unwrap_or("?")
        );
    }
    println!();
    println!(
        "{:<56} {:>12} {:>12} {:>8}  {:>17}  change",
        "figure", "A", "B", "B/A", "vs baseline A->B"
    );
    let show = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"));
    for old in &before.figures {
        let Some(new) = after.figures.iter().find(|f| f.name == old.name) else {
            continue;
        };
        let ratio = match (old.value, new.value) {
            (Some(a), Some(b)) if a != 0.0 && a.is_finite() && b.is_finite() => Some(b / a),
            _ => None,
        };
        let higher_is_better = new.better.as_deref() == Some("higher");
        let mut change = match ratio {
            Some(r) if (r - 1.0).abs() <= NOISE => "same".to_owned(),
            Some(r) if (r > 1.0) == higher_is_better => "better".to_owned(),
            Some(_) => "worse".to_owned(),
            None => String::new(),
        };
        match (old.met, new.met) {
            (Some(false), Some(true)) => change += ", now met",
            (Some(true), Some(false)) => change += ", now MISSED",
            _ => {}
        }
        let baseline = match (old.ratio, new.ratio) {
            (Some(a), Some(b)) => format!("{a:.2}x->{b:.2}x"),
            _ => "-".to_owned(),
        };
        println!(
            "{:<56} {:>12} {:>12} {:>8}  {baseline:>17}  {change}",
            format!("{} ({})", old.name, old.unit),
            show(old.value),
            show(new.value),
            ratio.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x")),
        );
    }
    for (label, doc, other) in [("A", &before, &after), ("B", &after, &before)] {
        for figure in &doc.figures {
            if !other.figures.iter().any(|f| f.name == figure.name) {
                println!("only in {label}: {} ({})", figure.name, figure.unit);
            }
        }
    }
    Ok(())
}
