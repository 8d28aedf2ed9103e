//! Printing answers: `key=value` lines (the default), `--json`, or one
//! `--field` alone for `$(...)`.

use serde_json::Value;

use crate::client::BrokerError;

/// How a subcommand prints its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// `key=value` lines, values shell-quoted where needed.
    Plain,
    /// The broker's JSON body on one line.
    Json,
    /// One field's bare value.
    Field(String),
}

/// Fields of a granted lease, in print order.
pub const LEASE_FIELDS: &[&str] = &["name", "token", "fence", "ttl_ms", "expires_at_ms", "owner"];
/// Fields of an extended lease.
pub const RENEWAL_FIELDS: &[&str] = &["name", "fence", "ttl_ms", "expires_at_ms", "owner"];
/// Fields of a release.
pub const RELEASE_FIELDS: &[&str] = &["name", "released", "fence"];
/// Fields of a lock's status.
pub const STATUS_FIELDS: &[&str] = &[
    "name",
    "held",
    "owner",
    "fence",
    "expires_in_ms",
    "available_in_ms",
];

impl Format {
    /// Refuses a `--field` this answer never has, before anything is sent.
    pub fn check(&self, fields: &[&str]) -> Result<(), String> {
        match self {
            Self::Field(field) if !fields.contains(&field.as_str()) => Err(format!(
                "--field {field:?}: this answer has {}",
                fields.join(", ")
            )),
            _ => Ok(()),
        }
    }

    /// Prints a success body: known fields in order, then any others.
    pub fn print(&self, fields: &[&str], body: &Value) {
        match self {
            Self::Json => println!("{body}"),
            Self::Field(field) => println!("{}", bare(body.get(field).unwrap_or(&Value::Null))),
            Self::Plain => {
                let Some(map) = body.as_object() else {
                    return;
                };
                let extra = map.keys().filter(|k| !fields.contains(&k.as_str()));
                for key in fields.iter().copied().chain(extra.map(String::as_str)) {
                    if let Some(value) = map.get(key) {
                        println!("{key}={}", shell_quote(&bare(value)));
                    }
                }
            }
        }
    }

    /// Reports a failure: one line on stderr, and the error object on stdout
    /// with `--json` so a script reading JSON always gets JSON.
    pub fn report(&self, error: &BrokerError) {
        eprintln!("lockctl: {error}");
        if *self == Self::Json {
            println!("{}", error.to_json());
        }
    }
}

/// A JSON value as text: strings unquoted, `null` empty.
fn bare(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Quotes `text` for a POSIX shell unless it is plainly safe, so that
/// `eval "$(lockctl acquire ...)"` is safe whatever the owner says.
fn shell_quote(text: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-.:/@%+,".contains(c);
    if !text.is_empty() && text.chars().all(safe) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("worker-1"), "worker-1");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's $x"), r"'it'\''s $x'");
    }
}
