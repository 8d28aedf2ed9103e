//! [`ValidationError`]: what every checked constructor returns, kept apart
//! from the other errors so that the value types depend on nothing else.

use std::borrow::Cow;

/// A request field that broke a rule; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// The field as the API spells it, e.g. `ttl_ms`.
    pub field: &'static str,
    /// What the rule is, phrased for the caller.
    pub message: Cow<'static, str>,
}

impl ValidationError {
    /// A rejection of `field` with a human-readable rule.
    pub fn new(field: &'static str, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// Refuses `raw` for `field` when it holds a character that is not shown as
/// itself: a control character (category Cc), a format character (Cf: the
/// bidi overrides and isolates that make `\u{202e}1-rekrow-SSAP` read as
/// `PASS-worker-1`, zero-width spaces and joiners, the byte order mark, ...)
/// or a line or paragraph separator (Zl, Zp). They would break log lines and
/// terminals, or make one label look like another.
pub fn check_visible(field: &'static str, raw: &str) -> Result<(), ValidationError> {
    match raw.chars().find(|c| is_hidden(*c)) {
        Some(bad) => Err(ValidationError::new(
            field,
            format!(
                "must not contain control, format or separator characters (found U+{:04X})",
                u32::from(bad)
            ),
        )),
        None => Ok(()),
    }
}

/// Whether `c` is in Unicode category Cc, Cf, Zl or Zp.
pub fn is_hidden(c: char) -> bool {
    c.is_control() || FORMAT_AND_SEPARATORS.iter().any(|r| r.contains(&c))
}

/// Every character of categories Cf, Zl and Zp (Unicode 15.1). The list
/// changes rarely; a new format character stays accepted until added here.
const FORMAT_AND_SEPARATORS: &[std::ops::RangeInclusive<char>] = &[
    '\u{00AD}'..='\u{00AD}',
    '\u{0600}'..='\u{0605}',
    '\u{061C}'..='\u{061C}',
    '\u{06DD}'..='\u{06DD}',
    '\u{070F}'..='\u{070F}',
    '\u{0890}'..='\u{0891}',
    '\u{08E2}'..='\u{08E2}',
    '\u{180E}'..='\u{180E}',
    '\u{200B}'..='\u{200F}',
    '\u{2028}'..='\u{202E}',
    '\u{2060}'..='\u{2064}',
    '\u{2066}'..='\u{206F}',
    '\u{FEFF}'..='\u{FEFF}',
    '\u{FFF9}'..='\u{FFFB}',
    '\u{110BD}'..='\u{110BD}',
    '\u{110CD}'..='\u{110CD}',
    '\u{13430}'..='\u{1343F}',
    '\u{1BCA0}'..='\u{1BCA3}',
    '\u{1D173}'..='\u{1D17A}',
    '\u{E0001}'..='\u{E0001}',
    '\u{E0020}'..='\u{E007F}',
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_are_refused_naming_the_field() {
        for bad in [
            "\u{202e}1-rekrow-SSAP",
            "a\u{2066}b\u{2069}",
            "zero\u{200b}width",
            "\u{feff}bom",
            "line\u{2028}sep",
            "para\u{2029}sep",
            "soft\u{ad}hyphen",
            "tag\u{e0041}",
            "tab\there",
            "nul\0",
        ] {
            let error = check_visible("owner", bad).expect_err(bad);
            assert_eq!(error.field, "owner");
            assert!(error.message.contains("U+"), "{}", error.message);
        }
        for ok in ["worker-1", "é", "日本語", "emoji 🔒", "a b", "\u{a0}nbsp"] {
            assert!(check_visible("owner", ok).is_ok(), "{ok}");
        }
    }
}
