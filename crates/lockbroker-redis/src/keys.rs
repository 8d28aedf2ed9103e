//! Key layout: one place that knows where a lock's state lives in Redis.

use lockbroker_core::{LockName, LockPrefix};

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

    /// A `SCAN MATCH` pattern for the lease keys of every lock whose name
    /// starts with `names`. The configured prefix is escaped, since it may
    /// contain glob characters; lock names cannot.
    pub fn lease_pattern(&self, names: &LockPrefix) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + names.as_str().len() + 10);
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push_str(":{");
        pattern.push_str(names.as_str());
        pattern.push_str("*}:lease");
        pattern
    }

    /// The lock whose lease lives at `key`, if `key` is a lease key of this layout.
    pub fn lock_of_lease_key(&self, key: &str) -> Option<LockName> {
        let name = key
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(":{")?
            .strip_suffix("}:lease")?;
        LockName::parse(name).ok()
    }

    /// The hash holding the current lease: `{prefix}:{<name>}:lease`.
    pub fn lease(&self, name: &LockName) -> String {
        format!("{}:{{{}}}:lease", self.prefix, name)
    }

    /// The last fence issued: `{prefix}:{<name>}:fence`.
    pub fn fence(&self, name: &LockName) -> String {
        format!("{}:{{{}}}:fence", self.prefix, name)
    }

    /// The fair waiters in arrival order: `{prefix}:{<name>}:queue`.
    pub fn queue(&self, name: &LockName) -> String {
        format!("{}:{{{}}}:queue", self.prefix, name)
    }

    /// When each fair waiter's entry expires: `{prefix}:{<name>}:queue:expiry`.
    pub fn queue_expiry(&self, name: &LockName) -> String {
        format!("{}:{{{}}}:queue:expiry", self.prefix, name)
    }

    /// A key readiness checks write to, to learn whether Redis takes writes:
    /// `{prefix}:probe`.
    pub fn probe(&self) -> String {
        format!("{}:probe", self.prefix)
    }

    /// Quorum mode: when this node's data began (an epoch id and its birth
    /// time), `{prefix}:epoch`.
    pub fn epoch(&self) -> String {
        format!("{}:epoch", self.prefix)
    }

    /// Quorum mode: the latest instant any lease on this node may stay
    /// valid, `{prefix}:horizon`.
    pub fn horizon(&self) -> String {
        format!("{}:horizon", self.prefix)
    }

    /// The Pub/Sub channel on which brokers announce releases: `{prefix}:wake`.
    /// A channel, not a key: one subscription per broker serves every lock.
    pub fn wake_channel(&self) -> String {
        format!("{}:wake", self.prefix)
    }

    /// Cluster mode: the sharded Pub/Sub channel of one lock's
    /// announcements, `{prefix}:{<name>}:wake`. Its hash tag puts it in the
    /// lock's slot, where a script may publish to it (`SPUBLISH`) and only
    /// the shard serving the lock carries the message; brokers subscribe to
    /// it while they have waiters for the lock.
    pub fn lock_wake_channel(&self, name: &LockName) -> String {
        format!("{}:{{{}}}:wake", self.prefix, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_keys_are_listed_by_an_escaped_pattern() {
        let keys = KeyLayout::new("lb*[1]");
        let billing = LockPrefix::parse("prefix", "billing:").expect("valid");
        assert_eq!(
            keys.lease_pattern(&billing),
            "lb\\*\\[1\\]:{billing:*}:lease"
        );
        let name = LockName::parse("billing:42").expect("valid");
        assert_eq!(keys.lock_of_lease_key(&keys.lease(&name)), Some(name));
        assert_eq!(keys.lock_of_lease_key("lb*[1]:{a b}:lease"), None);
        assert_eq!(keys.lock_of_lease_key("other:{a}:lease"), None);
    }

    #[test]
    fn keys_share_a_hash_tag() {
        let keys = KeyLayout::new("lockbroker");
        let name = LockName::parse("billing:42").expect("valid");
        assert_eq!(keys.lease(&name), "lockbroker:{billing:42}:lease");
        assert_eq!(keys.fence(&name), "lockbroker:{billing:42}:fence");
        assert_eq!(
            keys.lock_wake_channel(&name),
            "lockbroker:{billing:42}:wake"
        );
    }
}
