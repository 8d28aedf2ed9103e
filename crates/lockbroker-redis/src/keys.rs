//! Key layout: one place that knows where a lock's state lives in Redis.

use lockbroker_core::{LockName, LockPrefix, Space};

/// Builds the Redis keys of a lock under a configurable prefix.
///
/// The lock name sits inside a hash tag (`{...}`), so every key of one lock
/// maps to the same Redis Cluster slot and one script may touch them
/// together. [`LockName`] forbids braces, so a name can never break out of
/// its tag. The keys of one lock differ only after the tag, so a script is
/// sent the lease hash's name and names the others itself (prelude.lua's
/// `lock_key`: the lease key without its last five characters, `lease`,
/// then the part).
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

    /// A `SCAN MATCH` pattern for the keys that tell a name of `space` is
    /// held, of every name that starts with `names`: a lock's lease hash
    /// and holder set (`:[lh]*` matches `:lease` and `:holders` and no other
    /// key of a lock), a semaphore's holder set. The configured prefix is
    /// escaped, since it may contain glob characters; names cannot.
    pub fn held_pattern(&self, space: Space, names: &LockPrefix) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + names.as_str().len() + 16);
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push(':');
        pattern.push_str(space_segment(space));
        pattern.push('{');
        pattern.push_str(names.as_str());
        pattern.push_str(match space {
            Space::Lock => "*}:[lh]*",
            Space::Semaphore => "*}:holders",
            Space::Session => "*}:lease",
        });
        pattern
    }

    /// The name of `space` whose lease hash or holder set lives at `key`, if
    /// `key` is one of this layout.
    pub fn name_of_held_key(&self, space: Space, key: &str) -> Option<LockName> {
        let tagged = key
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(':')?
            .strip_prefix(space_segment(space))?
            .strip_prefix('{')?;
        let name = tagged
            .strip_suffix("}:lease")
            .or_else(|| tagged.strip_suffix("}:holders"))?;
        LockName::parse_in(space, name).ok()
    }

    /// `{prefix}:{<name>}:<suffix>` for a lock, `{prefix}:sem:{<name>}:<suffix>`
    /// for a semaphore.
    ///
    /// Built in one allocation of the exact size: every lock step builds
    /// several of these, and `format!` grew each string a few times over.
    fn key(&self, name: &LockName, suffix: &str) -> String {
        let (space, name) = (space_segment(name.space()), name.as_str());
        let mut key =
            String::with_capacity(self.prefix.len() + space.len() + name.len() + suffix.len() + 4);
        for part in [self.prefix.as_str(), ":", space, "{", name, "}:", suffix] {
            key.push_str(part);
        }
        key
    }

    /// The hash holding the exclusive lease: `{prefix}:{<name>}:lease` (a
    /// semaphore's is never written).
    pub fn lease(&self, name: &LockName) -> String {
        self.key(name, "lease")
    }

    /// Where brokers before the fence moved into the lease hash kept a
    /// name's last fence: `{prefix}:{<name>}:fence`. Read only when a lease
    /// hash has no fence of its own (`acquire.lua`), never written.
    pub fn fence(&self, name: &LockName) -> String {
        self.key(name, "fence")
    }

    /// The waiters in arrival order: `{prefix}:{<name>}:queue`.
    pub fn queue(&self, name: &LockName) -> String {
        self.key(name, "queue")
    }

    /// When each waiter's entry expires: `{prefix}:{<name>}:queue:expiry`.
    pub fn queue_expiry(&self, name: &LockName) -> String {
        self.key(name, "queue:expiry")
    }

    /// The holder set (shared leases, permits) by when each frees its
    /// place: `{prefix}:{<name>}:holders` (holders.lua).
    pub fn holders(&self, name: &LockName) -> String {
        self.key(name, "holders")
    }

    /// Each holder's lease: `{prefix}:{<name>}:members`.
    pub fn members(&self, name: &LockName) -> String {
        self.key(name, "members")
    }

    /// Released holders remembered for a re-sent release:
    /// `{prefix}:{<name>}:released`.
    pub fn released(&self, name: &LockName) -> String {
        self.key(name, "released")
    }

    /// A session's record beside its lease (`session.lua`):
    /// `{prefix}:session:{<id>}:record`.
    pub fn session_record(&self, session: &LockName) -> String {
        self.key(session, "record")
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

    /// The Pub/Sub channel on which brokers announce changes while anyone
    /// watches: `{prefix}:events` (a plain channel, which a Redis Cluster
    /// carries to every node).
    pub fn events_channel(&self) -> String {
        format!("{}:events", self.prefix)
    }

    /// Cluster mode: the sharded Pub/Sub channel of one lock's
    /// announcements, `{prefix}:{<name>}:wake`. Its hash tag puts it in the
    /// lock's slot, where a script may publish to it (`SPUBLISH`) and only
    /// the shard serving the lock carries the message; brokers subscribe to
    /// it while they have waiters for the lock.
    pub fn lock_wake_channel(&self, name: &LockName) -> String {
        self.key(name, "wake")
    }
}

/// What sets a space's keys apart, after the configured prefix.
fn space_segment(space: Space) -> &'static str {
    match space {
        Space::Lock => "",
        Space::Semaphore => "sem:",
        Space::Session => "session:",
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
            keys.held_pattern(Space::Lock, &billing),
            "lb\\*\\[1\\]:{billing:*}:[lh]*"
        );
        assert_eq!(
            keys.held_pattern(Space::Semaphore, &billing),
            "lb\\*\\[1\\]:sem:{billing:*}:holders"
        );
        let name = LockName::parse("billing:42").expect("valid");
        let lock = Some(name.clone());
        assert_eq!(keys.name_of_held_key(Space::Lock, &keys.lease(&name)), lock);
        assert_eq!(
            keys.name_of_held_key(Space::Lock, &keys.holders(&name)),
            lock
        );
        assert_eq!(keys.name_of_held_key(Space::Lock, &keys.fence(&name)), None);
        let sem = LockName::parse_in(Space::Semaphore, "billing:42").expect("valid");
        let found = keys.name_of_held_key(Space::Semaphore, &keys.holders(&sem));
        assert_eq!(found, Some(sem.clone()));
        assert_eq!(
            keys.name_of_held_key(Space::Lock, &keys.holders(&sem)),
            None
        );
        assert_eq!(
            keys.name_of_held_key(Space::Lock, "lb*[1]:{a b}:lease"),
            None
        );
        assert_eq!(keys.name_of_held_key(Space::Lock, "other:{a}:lease"), None);
    }

    #[test]
    fn keys_share_a_hash_tag() {
        let keys = KeyLayout::new("lockbroker");
        let name = LockName::parse("billing:42").expect("valid");
        assert_eq!(keys.lease(&name), "lockbroker:{billing:42}:lease");
        assert_eq!(keys.fence(&name), "lockbroker:{billing:42}:fence");
        let sem = LockName::parse_in(Space::Semaphore, "billing:42").expect("valid");
        assert_eq!(keys.holders(&sem), "lockbroker:sem:{billing:42}:holders");
        assert_eq!(
            keys.lock_wake_channel(&name),
            "lockbroker:{billing:42}:wake"
        );
    }

    /// What prelude.lua's `lock_key` relies on to name a lock's keys from
    /// its lease hash's, in every space.
    #[test]
    fn every_key_of_a_lock_is_its_lease_key_with_another_last_part() {
        let keys = KeyLayout::new("lb:x");
        for space in [Space::Lock, Space::Semaphore, Space::Session] {
            let name = LockName::parse_in(space, "billing:42").expect("valid");
            let lease = keys.lease(&name);
            let stem = lease
                .strip_suffix("lease")
                .expect("a lease key ends in lease");
            let lua_named = |part: &str| format!("{stem}{part}");
            assert_eq!(keys.fence(&name), lua_named("fence"));
            assert_eq!(keys.queue(&name), lua_named("queue"));
            assert_eq!(keys.queue_expiry(&name), lua_named("queue:expiry"));
            assert_eq!(keys.holders(&name), lua_named("holders"));
            assert_eq!(keys.members(&name), lua_named("members"));
            assert_eq!(keys.released(&name), lua_named("released"));
        }
    }
}
