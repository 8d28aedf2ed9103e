//! The few flags the tools take, as `--name value` pairs.

use std::collections::HashMap;
use std::str::FromStr;

/// Parsed `--name value` flags and bare `--switch`es.
pub struct Args {
    values: HashMap<String, String>,
    /// The first argument when it is not a flag (a subcommand).
    pub command: Option<String>,
}

impl Args {
    /// Parses `args` (without the program name). `switches` take no value.
    pub fn parse(
        args: impl IntoIterator<Item = String>,
        switches: &[&str],
    ) -> Result<Self, String> {
        let mut values = HashMap::new();
        let mut command = None;
        let mut args = args.into_iter().peekable();
        if let Some(first) = args.peek() {
            if !first.starts_with("--") {
                command = args.next();
            }
        }
        while let Some(arg) = args.next() {
            let Some(name) = arg.strip_prefix("--") else {
                return Err(format!("unexpected argument {arg:?}"));
            };
            let (name, value) = match name.split_once('=') {
                Some((name, value)) => (name.to_owned(), value.to_owned()),
                None if switches.contains(&name) => (name.to_owned(), "true".to_owned()),
                None => {
                    let value = args.next().ok_or(format!("--{name} needs a value"))?;
                    (name.to_owned(), value)
                }
            };
            values.insert(name, value);
        }
        Ok(Self { values, command })
    }

    /// The raw value of `--name`.
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// `--name` parsed, or `default` when absent.
    pub fn get<T: FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.values.get(name) {
            None => Ok(default),
            Some(raw) => raw
                .parse()
                .map_err(|_| format!("--{name}: cannot parse {raw:?}")),
        }
    }

    /// Whether the switch `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// Fails on any flag not in `known`, so a typo is not silently ignored.
    pub fn only(&self, known: &[&str]) -> Result<(), String> {
        match self.values.keys().find(|k| !known.contains(&k.as_str())) {
            Some(unknown) => Err(format!("unknown flag --{unknown}")),
            None => Ok(()),
        }
    }
}
