//! Session records, as `session.lua` keeps them in Redis: the terms and the
//! member leases, written only while the session's lease is valid, kept a
//! grace period past it.

use std::collections::BTreeMap;

use super::backend::Backend;
use crate::lease::LeaseToken;
use crate::name::LockName;
use crate::session::{SessionEntry, SessionMember, SessionRecord, SessionTerms, SessionWrite};

/// How long a record outlives its session's lease, as `session.lua` keeps it.
const GRACE_MS: u64 = 60_000;

/// One session's record.
#[derive(Default)]
pub(crate) struct Kept {
    terms: Option<SessionTerms>,
    /// Member leases by token.
    members: BTreeMap<String, LockName>,
    kept_until_ms: u64,
}

/// How long `token`'s lease on `session` stays valid, if it is valid now.
fn valid_for(
    backend: &Backend,
    session: &LockName,
    token: &LeaseToken,
    now_ms: u64,
) -> Option<u64> {
    let record = backend.leases.get(session)?;
    let valid = record.token == token.expose() && !record.released && record.expires_ms > now_ms;
    valid.then(|| record.expires_ms - now_ms)
}

/// The record of `session`, dropping it once its time is up.
fn kept<'a>(backend: &'a mut Backend, session: &LockName, now_ms: u64) -> Option<&'a mut Kept> {
    if backend
        .sessions
        .get(session)
        .is_some_and(|kept| kept.kept_until_ms <= now_ms)
    {
        backend.sessions.remove(session);
    }
    backend.sessions.get_mut(session)
}

pub(super) fn write(
    backend: &mut Backend,
    session: &LockName,
    token: &LeaseToken,
    entry: SessionEntry<'_>,
    now_ms: u64,
) -> SessionWrite {
    let Some(valid_for_ms) = valid_for(backend, session, token, now_ms) else {
        return SessionWrite::NotOpen;
    };
    let _ = kept(backend, session, now_ms);
    let kept = backend.sessions.entry(session.clone()).or_default();
    match entry {
        SessionEntry::Terms(terms) => kept.terms = Some(terms),
        SessionEntry::Member {
            member,
            max_members,
        } => {
            let token = member.token.expose();
            if !kept.members.contains_key(token) && kept.members.len() >= max_members as usize {
                return SessionWrite::Full;
            }
            kept.members.insert(token.to_owned(), member.name.clone());
        }
    }
    kept.kept_until_ms = kept.kept_until_ms.max(now_ms + valid_for_ms + GRACE_MS);
    SessionWrite::Written {
        valid_for_ms,
        expires_at_ms: now_ms + valid_for_ms,
    }
}

pub(super) fn read(
    backend: &mut Backend,
    session: &LockName,
    token: Option<&LeaseToken>,
    now_ms: u64,
) -> SessionRecord {
    let valid_for_ms = token.and_then(|token| valid_for(backend, session, token, now_ms));
    let owner = (backend.leases.get(session))
        .filter(|_| valid_for_ms.is_some())
        .map(|record| record.owner.clone())
        .filter(|owner| !owner.is_empty());
    let Some(kept) = kept(backend, session, now_ms) else {
        return SessionRecord {
            valid_for_ms,
            owner,
            ..SessionRecord::default()
        };
    };
    if let Some(valid_for_ms) = valid_for_ms {
        kept.kept_until_ms = kept.kept_until_ms.max(now_ms + valid_for_ms + GRACE_MS);
    }
    let mut members: Vec<SessionMember> = (kept.members.iter())
        .filter_map(|(token, name)| {
            Some(SessionMember {
                name: name.clone(),
                token: LeaseToken::parse(token).ok()?,
            })
        })
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    SessionRecord {
        valid_for_ms,
        owner,
        terms: kept.terms,
        members,
    }
}

pub(super) fn forget(backend: &mut Backend, session: &LockName, tokens: Option<&[LeaseToken]>) {
    match tokens {
        None => {
            backend.sessions.remove(session);
        }
        Some(tokens) => {
            if let Some(kept) = backend.sessions.get_mut(session) {
                for token in tokens {
                    kept.members.remove(token.expose());
                }
            }
        }
    }
}
