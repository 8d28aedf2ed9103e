//! Key layout: one place that knows where a lock's state lives in Redis.

use lockbroker_core::LockName;

/// Builds the Redis keys of a lock under a configurable prefix.
///
/// The lock name sits inside a hash tag (`{...}`), so both keys of one lock map
/// to the same Redis Cluster slot and one script may touch them together.
/// [`LockName`] forbids braces, so a name can never break out of its tag.
#[derive(Clone, Debug)]
pub struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// A layout under `prefix`, e.g. `lockbroker`.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The hash holding the current lease: `{prefix}:{<name>}:lease`.
    pub fn lease(&self, name: &LockName) -> String {
        format!("{}:{{{}}}:lease", self.prefix, name)
    }

    /// The last fence issued: `{prefix}:{<name>}:fence`.
    pub fn fence(&self, name: &LockName) -> String {
        format!("{}:{{{}}}:fence", self.prefix, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_hash_tag() {
        let keys = KeyLayout::new("lockbroker");
        let name = LockName::parse("billing:42").expect("valid");
        assert_eq!(keys.lease(&name), "lockbroker:{billing:42}:lease");
        assert_eq!(keys.fence(&name), "lockbroker:{billing:42}:fence");
    }
}
