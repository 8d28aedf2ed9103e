//! What brokers tell each other about watching, as Pub/Sub messages on the
//! channel `{prefix}:events`: a change (never a token) or "watching".
//!
//! `change <origin> <seq> <kind> <mode> <fence> <expires_in_ms>
//! <expires_at_ms or -> <name> <owner, the rest of the line>` and
//! `watching <origin>`. Names never hold a space; owners may, so they come
//! last.

use lockbroker_core::{Announcement, Change, ChangeKind, Fence, LeaseKind, LockName};

/// The message of `announcement`.
pub fn write(announcement: &Announcement) -> String {
    match announcement {
        Announcement::Watching { origin } => format!("watching {origin}"),
        Announcement::Change {
            origin,
            seq,
            change,
        } => format!(
            "change {origin} {seq} {} {} {} {} {} {} {}",
            change.kind.as_str(),
            change.mode.as_str(),
            change.fence,
            change.expires_in_ms,
            change.expires_at_ms.map_or("-".into(), |at| at.to_string()),
            change.name.wire(),
            change.owner.as_deref().unwrap_or(""),
        ),
    }
}

/// Reads a message [`write`] wrote; `None` for anything else.
pub fn read(text: &str) -> Option<Announcement> {
    if let Some(origin) = text.strip_prefix("watching ") {
        return Some(Announcement::Watching {
            origin: origin.to_owned(),
        });
    }
    let mut parts = text.strip_prefix("change ")?.splitn(9, ' ');
    let mut next = || parts.next();
    let origin = next()?.to_owned();
    let seq = next()?.parse().ok()?;
    let kind = ChangeKind::parse(next()?)?;
    let mode = match next()? {
        "exclusive" => LeaseKind::Exclusive,
        "shared" => LeaseKind::Shared,
        "permit" => LeaseKind::Permit,
        _ => return None,
    };
    let fence = Fence::new(next()?.parse().ok()?);
    let expires_in_ms = next()?.parse().ok()?;
    let expires_at_ms = match next()? {
        "-" => None,
        at => Some(at.parse().ok()?),
    };
    let name = LockName::from_wire(next()?).ok()?;
    let owner = next().filter(|owner| !owner.is_empty()).map(str::to_owned);
    Some(Announcement::Change {
        origin,
        seq,
        change: Change {
            name,
            kind,
            mode,
            fence,
            owner,
            expires_in_ms,
            expires_at_ms,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockbroker_core::Space;

    #[test]
    fn announcements_survive_the_wire_owners_with_spaces_included() {
        let change = |owner: Option<&str>, at: Option<u64>| Announcement::Change {
            origin: "b1".into(),
            seq: 7,
            change: Change {
                name: LockName::parse_in(Space::Semaphore, "jobs:gpu").expect("name"),
                kind: ChangeKind::Extended,
                mode: LeaseKind::Permit,
                fence: Fence::new(42),
                owner: owner.map(str::to_owned),
                expires_in_ms: 900,
                expires_at_ms: at,
            },
        };
        for announcement in [
            change(Some("host a (eu-1)"), Some(1_700_000_000_000)),
            change(None, None),
            Announcement::Watching {
                origin: "b2".into(),
            },
        ] {
            assert_eq!(read(&write(&announcement)), Some(announcement));
        }
        assert_eq!(
            read("released b1 job -"),
            None,
            "a wake is not an announcement"
        );
    }
}
