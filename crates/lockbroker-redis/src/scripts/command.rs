//! The `FCALL` command of one script call, exactly as it is handed to fred.
//!
//! The broker builds it rather than fred's `fcall`, which copies the
//! function name into a new string and hashes every key for a Cluster slot
//! on every call (keeping only the last key's): here the name is a shared
//! string made once, and only a Cluster's client hashes a slot, once, of the
//! first key. Every key of one step shares the lock's hash tag, so the first
//! key's slot is the slot of them all.

use std::borrow::Borrow;

use fred::bytes_utils::Str;
use fred::types::{ClusterHash, Value};
use fred::util::redis_keyslot;

use super::{ScriptCall, ScriptContext};

/// `FCALL function numkeys key... arg...`, after the command name, and the
/// Cluster slot it is routed by (`Random`, unused, outside a Cluster).
pub(super) fn fcall<T>(
    function: &Str,
    keys: Vec<T>,
    args: Vec<T>,
    clustered: bool,
) -> (ClusterHash, Vec<Value>)
where
    T: Into<Str> + Borrow<str>,
{
    let slot = match (clustered, keys.first()) {
        (true, Some(key)) => ClusterHash::Custom(redis_keyslot(key.borrow().as_bytes())),
        _ => ClusterHash::Random,
    };
    let mut command = Vec::with_capacity(keys.len() + args.len() + 2);
    command.push(Value::String(function.clone()));
    command.push(Value::Integer(keys.len() as i64));
    command.extend((keys.into_iter().chain(args)).map(|text| Value::String(text.into())));
    (slot, command)
}

/// One script call's `KEYS` and `ARGV` as shared strings, made once for a
/// step a quorum sends to every node: each node's copy then costs a count
/// of references per part instead of a new string, and only what differs
/// by node (an acquire's epoch) is made for each.
#[derive(Clone, PartialEq, Eq)]
pub struct CallText {
    pub(crate) keys: Vec<Str>,
    pub(crate) args: Vec<Str>,
}

/// The keys, and only how many arguments: an acquire's or a release's
/// arguments hold the lease's token, which no log line may show.
impl std::fmt::Debug for CallText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallText")
            .field("keys", &self.keys)
            .field("args", &format_args!("{} arguments", self.args.len()))
            .finish()
    }
}

impl CallText {
    /// The text of `call` on the keys and settings of `context`.
    pub fn of<C: ScriptCall>(call: &C, context: &ScriptContext) -> Self {
        let shared = |texts: Vec<String>| texts.into_iter().map(Str::from).collect();
        Self {
            keys: shared(call.keys(context)),
            args: shared(call.args(context)),
        }
    }

    /// This text with `ARGV[at + 1]` replaced by `value`: the one argument
    /// of a step that differs by node.
    pub fn with_arg(&self, at: usize, value: Str) -> Self {
        let mut text = self.clone();
        if let Some(arg) = text.args.get_mut(at) {
            *arg = value;
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use lockbroker_core::{LockName, Space};

    use super::*;
    use crate::keys::KeyLayout;

    fn texts(values: &[Value]) -> Vec<String> {
        values
            .iter()
            .map(|value| match value {
                Value::String(text) => text.to_string(),
                Value::Integer(n) => format!("#{n}"),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_function_then_the_key_count_then_the_keys_then_the_arguments() {
        let function = Str::from("lockbroker_abc_acquire");
        let keys = vec!["p:{a}:lease".to_owned(), "p:{a}:queue".to_owned()];
        let args = vec!["token".to_owned(), "30000".to_owned(), String::new()];
        let (_, command) = fcall(&function, keys, args, false);
        assert_eq!(
            texts(&command),
            [
                "lockbroker_abc_acquire",
                "#2",
                "p:{a}:lease",
                "p:{a}:queue",
                "token",
                "30000",
                ""
            ]
        );
    }

    #[test]
    fn a_cluster_routes_by_the_slot_every_key_of_the_step_shares() {
        let layout = KeyLayout::new("lockbroker");
        let name = LockName::parse_in(Space::Lock, "jobs:nightly").expect("name");
        let keys = vec![layout.lease(&name), layout.queue(&name)];
        let expected = redis_keyslot(layout.queue(&name).as_bytes());
        let (slot, _) = fcall(&Str::from("f"), keys, Vec::new(), true);
        assert_eq!(slot, ClusterHash::Custom(expected));
    }

    #[test]
    fn a_text_shows_its_keys_and_never_its_arguments() {
        let text = CallText {
            keys: vec![Str::from("p:{a}:lease")],
            args: vec![
                Str::from("0123456789abcdef0123456789abcdef"),
                Str::from("30000"),
            ],
        };
        let shown = format!("{text:?}");
        assert!(
            shown.contains("p:{a}:lease") && shown.contains("2 arguments"),
            "{shown}"
        );
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
    }

    #[test]
    fn outside_a_cluster_no_slot_is_hashed() {
        let (slot, _) = fcall(&Str::from("f"), vec!["k".to_owned()], Vec::new(), false);
        assert_eq!(slot, ClusterHash::Random);
    }

    #[test]
    fn a_step_without_keys_sends_a_count_of_zero_and_routes_anywhere() {
        let (slot, command) = fcall(&Str::from("f"), Vec::new(), vec!["x".to_owned()], true);
        assert_eq!(slot, ClusterHash::Random);
        assert_eq!(texts(&command), ["f", "#0", "x"]);
    }
}
