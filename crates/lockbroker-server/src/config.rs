//! Settings in layers: defaults built in, then a `--config` TOML file, then
//! `LOCKBROKER_*` environment variables. Unknown keys in the file and unknown
//! `LOCKBROKER_*` variables are errors, so a typo never goes unnoticed.
//!
//! - [`schema`]: the typed settings and their defaults.
//! - [`load`]: the layers, read into the schema.
//! - `redis`: the `[redis]` settings; `modes`: each backend mode's own rules.
//! - [`validate`]: the rules settings must follow, and their conversions
//!   (durations, the lock policy, the Redis settings, the key ring).

mod load;
mod modes;
mod redis;
mod schema;
mod validate;

#[cfg(test)]
mod tests;

pub use load::{CLIENT_VARIABLES, ENV_PREFIX};
pub use schema::{
    AuthConfig, HttpSettings, LockConfig, LogFormat, LogSettings, MetricsSettings, RedisConfig,
    RedisMode, Settings,
};

/// Why settings could not be loaded. Printed as one line before exiting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The `--config` file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file named on the command line.
        path: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A layer is not valid TOML or has keys or values the broker rejects.
    #[error("invalid config ({layer}): {message}")]
    Invalid {
        /// Which layer: the file name or the environment variable.
        layer: String,
        /// What is wrong.
        message: String,
    },
    /// A `LOCKBROKER_*` variable that is neither a setting nor read by a
    /// client: most likely a misspelt setting, which must not be ignored.
    #[error("unknown setting {name}{}", did_you_mean(.hint.as_deref()))]
    UnknownVariable {
        /// The variable, as set (its value is never shown: it may be a secret).
        name: String,
        /// The known variable closest to it, if any is close.
        hint: Option<String>,
    },
}

fn did_you_mean(hint: Option<&str>) -> String {
    match hint {
        Some(hint) => format!("; did you mean {hint}?"),
        None => format!(
            "; settings are {ENV_PREFIX}<SECTION>_<KEY> for the keys in config/lockbroker.toml"
        ),
    }
}
