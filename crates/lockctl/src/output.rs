//! Printing answers: shell assignments (the default, for `eval`), `--json`,
//! or one `--field` alone for `$(...)`.

use serde_json::Value;

use crate::client::BrokerError;

/// How a subcommand prints its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// `PREFIX_KEY=value` lines, values shell-quoted where needed.
    Plain(Names),
    /// The broker's JSON body on one line.
    Json,
    /// One field's bare value.
    Field(String),
}

/// How the plain format names its shell variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Names {
    /// The prefix followed by the field in capitals: `LOCK_TOKEN`.
    Prefixed(String),
    /// The bare field names of older releases: `token` (`--unprefixed`).
    Unprefixed,
}

/// The prefix when none is given.
pub const DEFAULT_PREFIX: &str = "LOCK_";

// The lists name what `--field` may ask for and the print order; fields a
// broker adds beyond them are printed after, so `mode` and `holders` are
// listed to be asked for by name, not only to be printed.

/// Fields of a granted lock lease, in print order (`mode`: exclusive or shared).
pub const LEASE_FIELDS: &[&str] = &[
    "name",
    "token",
    "fence",
    "ttl_ms",
    "expires_at_ms",
    "owner",
    "mode",
];
/// Fields of a granted semaphore permit.
pub const PERMIT_FIELDS: &[&str] = &[
    "name",
    "token",
    "fence",
    "ttl_ms",
    "expires_at_ms",
    "owner",
    "limit",
];
/// Fields of an extended lease or permit.
pub const RENEWAL_FIELDS: &[&str] = &["name", "fence", "ttl_ms", "expires_at_ms", "owner"];
/// Fields of a release.
pub const RELEASE_FIELDS: &[&str] = &["name", "released", "fence"];
/// Fields of a lock's status; `holders` is a JSON list, every valid lease.
pub const STATUS_FIELDS: &[&str] = &[
    "name",
    "held",
    "mode",
    "owner",
    "fence",
    "expires_in_ms",
    "available_in_ms",
    "holder_count",
    "holders",
];
/// Fields of a fence check.
pub const FENCE_CHECK_FIELDS: &[&str] = &["name", "fence", "current", "held", "expires_in_ms"];
/// Fields of a semaphore's status: `held` counts the valid permits.
pub const SEMAPHORE_STATUS_FIELDS: &[&str] = &[
    "name",
    "limit",
    "held",
    "available",
    "fence",
    "available_in_ms",
    "holders",
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
            Self::Plain(names) => print!("{}", assignments(names, fields, body)),
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

impl Names {
    /// The shell variable for `field`.
    fn variable(&self, field: &str) -> String {
        match self {
            Self::Prefixed(prefix) => format!("{prefix}{}", field.to_ascii_uppercase()),
            Self::Unprefixed => field.to_owned(),
        }
    }
}

/// Checks a `--prefix`: the start of a shell variable name.
pub fn check_prefix(prefix: &str) -> Result<String, String> {
    let mut chars = prefix.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(prefix.to_owned())
    } else {
        Err(format!(
            "--prefix {prefix:?}: use letters, digits and _, not starting with a digit (e.g. JOB_)"
        ))
    }
}

/// One `VARIABLE=value` line per field, known fields in order, then any
/// others the broker added (named the same way, if they make a shell name).
fn assignments(names: &Names, fields: &[&str], body: &Value) -> String {
    let Some(map) = body.as_object() else {
        return String::new();
    };
    let shell_name = |k: &str| k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let extra = map
        .keys()
        .filter(|k| !fields.contains(&k.as_str()) && shell_name(k));
    let mut out = String::new();
    for key in fields.iter().copied().chain(extra.map(String::as_str)) {
        if let Some(value) = map.get(key) {
            let line = format!("{}={}\n", names.variable(key), shell_quote(&bare(value)));
            out.push_str(&line);
        }
    }
    out
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
    fn assignments_are_prefixed_unless_asked_otherwise() {
        let body = serde_json::json!({"name": "job", "token": "t0k", "fence": 7, "owner": "a b"});
        let fields = LEASE_FIELDS;
        let prefixed = Names::Prefixed(DEFAULT_PREFIX.to_owned());
        assert_eq!(
            assignments(&prefixed, fields, &body),
            "LOCK_NAME=job\nLOCK_TOKEN=t0k\nLOCK_FENCE=7\nLOCK_OWNER='a b'\n"
        );
        let chosen = Names::Prefixed("JOB_".to_owned());
        assert!(assignments(&chosen, fields, &body).starts_with("JOB_NAME=job\nJOB_TOKEN=t0k\n"));
        assert_eq!(
            assignments(&Names::Unprefixed, fields, &body),
            "name=job\ntoken=t0k\nfence=7\nowner='a b'\n"
        );
    }

    #[test]
    fn a_permit_prints_its_limit_and_a_list_prints_as_one_quoted_value() {
        let body = serde_json::json!({"name": "etl", "token": "s-1", "fence": 2, "limit": 3});
        let names = Names::Prefixed(DEFAULT_PREFIX.to_owned());
        assert_eq!(
            assignments(&names, PERMIT_FIELDS, &body),
            "LOCK_NAME=etl\nLOCK_TOKEN=s-1\nLOCK_FENCE=2\nLOCK_LIMIT=3\n"
        );
        let status = serde_json::json!({"name": "etl", "holders": [{"fence": 2}]});
        assert_eq!(
            assignments(&names, SEMAPHORE_STATUS_FIELDS, &status),
            "LOCK_NAME=etl\nLOCK_HOLDERS='[{\"fence\":2}]'\n"
        );
        assert!(Format::Field("limit".into()).check(PERMIT_FIELDS).is_ok());
        assert!(Format::Field("limit".into()).check(LEASE_FIELDS).is_err());
    }

    #[test]
    fn prefixes_must_make_shell_names() {
        assert!(check_prefix("LOCK_").is_ok());
        assert!(check_prefix("_x1").is_ok());
        for bad in ["", "1X", "A-B", "A B", "$(x)", "Ä"] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("worker-1"), "worker-1");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's $x"), r"'it'\''s $x'");
    }
}
