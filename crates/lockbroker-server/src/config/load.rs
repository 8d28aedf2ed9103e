//! Loading: the built-in defaults, then the `--config` file, then the
//! `LOCKBROKER_*` environment, each a TOML table laid over the one before and
//! read into the schema once at the end.
//!
//! An environment variable names a key by its path in upper case with `_`
//! between the parts (`LOCKBROKER_REDIS_URL` is `redis.url`); with a `_FILE`
//! suffix its value is read from that file, for secrets. The variable's text
//! is typed like the key's default (a number stays a number). Any other
//! `LOCKBROKER_*` variable is an error unless a client reads it: a typo such
//! as `LOCKBROKER_REDIS_URl` must not quietly run against the default Redis.

use std::collections::BTreeMap;
use std::path::Path;

use super::schema::Settings;
use super::ConfigError;

/// The prefix of every environment variable the broker reads.
pub const ENV_PREFIX: &str = "LOCKBROKER_";

/// Variables that share the prefix but are not broker settings. They are
/// often set in the same environment as the broker (a shell profile, a
/// container running a worker beside it), so they must not stop it. Add
/// here any variable a client or tool of this repository starts to read.
pub const CLIENT_VARIABLES: &[&str] = &[
    // lockctl and the Go, Python and TypeScript clients: where the broker is,
    // how to log in.
    "LOCKBROKER_URL",
    "LOCKBROKER_API_KEY",
    "LOCKBROKER_API_KEY_FILE",
    "LOCKBROKER_CA_CERT",
    // What `lockctl run` hands the command it runs, which may start a broker.
    "LOCKBROKER_LOCK",
    "LOCKBROKER_FENCE",
    "LOCKBROKER_TOKEN",
    "LOCKBROKER_RUN_PID",
    // The client test harnesses and the deploy checks.
    "LOCKBROKER_BIN",
    "LOCKBROKER_VENV",
    "LOCKBROKER_DEPLOY_VENV",
    "LOCKBROKER_TEST_PG_DSN",
    "LOCKBROKER_TEST_PG_URL",
    // The test harnesses (Rust and every client's): which mode their brokers run in.
    "LOCKBROKER_TEST_MODE",
];

impl Settings {
    /// Builds settings from the defaults, then `file` (if any), then the
    /// `LOCKBROKER_*` variables among `env`, and checks them.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let keys = Keys::of(&Settings::default())?;
        let mut merged = toml::Table::new();
        if let Some(path) = file {
            let layer = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: layer.clone(),
                source,
            })?;
            let table: toml::Table =
                text.parse()
                    .map_err(|e: toml::de::Error| ConfigError::Invalid {
                        layer: layer.clone(),
                        message: e.message().to_owned(),
                    })?;
            read(&table, &layer)?;
            merge(&mut merged, table);
        }
        merge(&mut merged, keys.env_layer(env)?);
        let settings = read(&merged, "settings")?;
        settings.validate()?;
        Ok(settings)
    }
}

/// Reads `table` (all layers, or one alone: every key has a default) into
/// settings; errors name the key's path and `layer`.
fn read(table: &toml::Table, layer: &str) -> Result<Settings, ConfigError> {
    serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(
        |e: serde_path_to_error::Error<toml::de::Error>| ConfigError::Invalid {
            layer: layer.to_owned(),
            message: format!("{}: {}", e.path(), e.inner().message()),
        },
    )
}

/// Overlays `top` on `base`, table by table.
fn merge(base: &mut toml::Table, top: toml::Table) {
    for (key, value) in top {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(base_table)), toml::Value::Table(top_table)) => {
                merge(base_table, top_table);
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Every setting by its environment variable name, with its path in the
/// table and its default (which types the variable's text).
struct Keys(BTreeMap<String, Key>);

/// One setting: where it sits in the settings table, and its default.
struct Key {
    path: Vec<String>,
    default: toml::Value,
}

impl Keys {
    /// Walks the serialized defaults, which name every key (optional ones
    /// included, spelled empty).
    fn of(defaults: &Settings) -> Result<Self, ConfigError> {
        let table = toml::Table::try_from(defaults).map_err(|e| ConfigError::Invalid {
            layer: "defaults".into(),
            message: e.to_string(),
        })?;
        let mut keys = BTreeMap::new();
        collect(&table, &mut Vec::new(), &mut keys);
        Ok(Self(keys))
    }

    /// Turns the `LOCKBROKER_*` variables among `env` into a table shaped
    /// like the settings. Each value is read into settings alone first, so a
    /// bad one is reported with the variable that holds it.
    fn env_layer(
        &self,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<toml::Table, ConfigError> {
        let mut env: Vec<_> = env
            .into_iter()
            .filter(|(var, _)| var.starts_with(ENV_PREFIX))
            .collect();
        // Sorted, so that of several unknown variables the same one is named
        // on every run.
        env.sort();
        let mut layer = toml::Table::new();
        for (var, raw) in env {
            let Some((Key { path, default }, from_file)) = self.find(&var)? else {
                continue;
            };
            let text = if from_file {
                std::fs::read_to_string(&raw)
                    .map_err(|e| ConfigError::Invalid {
                        layer: var.clone(),
                        message: format!("cannot read {raw}: {e}"),
                    })?
                    .trim_end_matches(['\n', '\r'])
                    .to_owned()
            } else {
                raw
            };
            let name = path.last().map_or("", String::as_str);
            let value = typed_like(name, default, &text).ok_or_else(|| ConfigError::Invalid {
                layer: var.clone(),
                message: format!("expected {}", default.type_str()),
            })?;
            let mut alone = toml::Table::new();
            insert(&mut alone, path, value.clone());
            read(&alone, &var)?;
            insert(&mut layer, path, value);
        }
        Ok(layer)
    }

    /// The key `var` sets, and whether it names a file holding the value;
    /// `None` for a client's variable; an error for any other.
    fn find(&self, var: &str) -> Result<Option<(&Key, bool)>, ConfigError> {
        if let Some(key) = self.0.get(var) {
            return Ok(Some((key, false)));
        }
        if let Some(key) = var.strip_suffix("_FILE").and_then(|base| self.0.get(base)) {
            return Ok(Some((key, true)));
        }
        if CLIENT_VARIABLES.contains(&var) {
            return Ok(None);
        }
        Err(ConfigError::UnknownVariable {
            name: var.to_owned(),
            hint: self.nearest(var),
        })
    }

    /// The known variable closest to `var`, ignoring case, if it is close
    /// enough to be a typo of it.
    fn nearest(&self, var: &str) -> Option<String> {
        let settings = self.0.keys().map(String::as_str);
        let files = self.0.keys().map(|name| format!("{name}_FILE"));
        let typed = var.to_ascii_uppercase();
        let (distance, best) = settings
            .map(str::to_owned)
            .chain(files)
            .chain(CLIENT_VARIABLES.iter().map(|&name| name.to_owned()))
            .map(|name| (edit_distance(&typed, &name), name))
            .min()?;
        let allowed = (var.len().saturating_sub(ENV_PREFIX.len()) / 3).max(1);
        (distance <= allowed).then_some(best)
    }
}

/// Adds every leaf of `table` under its variable name.
fn collect(table: &toml::Table, path: &mut Vec<String>, keys: &mut BTreeMap<String, Key>) {
    for (name, value) in table {
        path.push(name.clone());
        match value {
            toml::Value::Table(section) => collect(section, path, keys),
            leaf => {
                let var = format!("{ENV_PREFIX}{}", path.join("_").to_ascii_uppercase());
                let key = Key {
                    path: path.clone(),
                    default: leaf.clone(),
                };
                keys.insert(var, key);
            }
        }
        path.pop();
    }
}

/// Sets `path` in `table` to `value`, creating the tables on the way.
fn insert(table: &mut toml::Table, path: &[String], value: toml::Value) {
    let Some((last, sections)) = path.split_last() else {
        return;
    };
    let mut table = table;
    for section in sections {
        let entry = table
            .entry(section.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(inner) = entry else {
            return;
        };
        table = inner;
    }
    table.insert(last.clone(), value);
}

/// Reads `text` as a value of the type of `default`. A list (such as
/// `auth.keys`) is TOML: an inline array, or a document holding the list
/// under its own name (`[[keys]]` tables), as in a keys file.
///
/// An empty variable stays an empty string whatever the type: for an optional
/// key that means `None`, for any other the schema rejects it, naming it.
fn typed_like(key: &str, default: &toml::Value, text: &str) -> Option<toml::Value> {
    if text.trim().is_empty() && !matches!(default, toml::Value::Array(_)) {
        return Some(toml::Value::String(String::new()));
    }
    Some(match default {
        toml::Value::Array(_) => {
            if let Ok(mut document) = text.parse::<toml::Table>() {
                if let Some(list @ toml::Value::Array(_)) = document.remove(key) {
                    return Some(list);
                }
            }
            if let Some(list) = format!("{key} = {text}")
                .parse::<toml::Table>()
                .ok()
                .and_then(|mut wrapped| wrapped.remove(key))
                .filter(toml::Value::is_array)
            {
                return Some(list);
            }
            // A plain comma-separated list of words, such as node URLs or
            // `host:port` pairs (`[::1]:26379` included); what looks like a
            // TOML list or table but did not parse is an error, not words.
            let trimmed = text.trim();
            let toml_list = trimmed.starts_with('[') && trimmed.ends_with(']');
            if toml_list || text.contains(['{', '=', '"']) {
                return None;
            }
            toml::Value::Array(
                text.split(',')
                    .map(str::trim)
                    .filter(|item| !item.is_empty())
                    .map(|item| toml::Value::String(item.to_owned()))
                    .collect(),
            )
        }
        toml::Value::Integer(_) => toml::Value::Integer(text.trim().parse().ok()?),
        toml::Value::Boolean(_) => toml::Value::Boolean(text.trim().parse().ok()?),
        toml::Value::Float(_) => toml::Value::Float(text.trim().parse().ok()?),
        _ => toml::Value::String(text.to_owned()),
    })
}

/// Levenshtein distance between two short ASCII names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.as_bytes().iter().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let substitute = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitute.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}
