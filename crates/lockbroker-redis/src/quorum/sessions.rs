//! Session records on a quorum: each node keeps a copy beside its copy of
//! the session's lease. A lease joins a session when a majority of nodes
//! took it while they held the session's lease; a read takes the union of
//! the members a majority reports (a member one node missed is still
//! renewed and released), and how long the session stays valid as a
//! majority holds it.

use lockbroker_core::{
    LeaseToken, LockName, SessionEntry, SessionMember, SessionRecord, SessionTerms, SessionWrite,
    StoreError,
};

use super::fan_out::in_hand;
use super::{nodes, QuorumStore};
use lockbroker_core::LockStore;

impl QuorumStore {
    pub(super) async fn write_session(
        &self,
        session: &LockName,
        token: &LeaseToken,
        entry: SessionEntry<'_>,
    ) -> Result<SessionWrite, StoreError> {
        let majority = self.inner.majority;
        let owned = match entry {
            SessionEntry::Member {
                member,
                max_members,
            } => Owned::Member(member.clone(), max_members),
            SessionEntry::Terms(terms) => Owned::Terms(terms),
        };
        let written = |answer: &SessionWrite| matches!(answer, SessionWrite::Written { .. });
        let (answers, late) = self
            .fan_out(
                |_, node| {
                    let (session, token, owned) = (session.clone(), token.clone(), owned.clone());
                    async move {
                        let entry = match &owned {
                            Owned::Member(member, max_members) => SessionEntry::Member {
                                member,
                                max_members: *max_members,
                            },
                            Owned::Terms(terms) => SessionEntry::Terms(*terms),
                        };
                        node.session_write(&session, &token, entry).await
                    }
                },
                |progress| {
                    let yes = progress.count(written);
                    yes >= majority || yes + progress.awaited < majority
                },
            )
            .await;
        late.finish();
        let answers: Vec<_> = in_hand(answers).into_iter().flatten().collect();
        // How long a majority holds the session: the majority-th longest.
        let mut valid: Vec<u64> = Vec::new();
        let mut expiries: Vec<u64> = Vec::new();
        for answer in &answers {
            if let SessionWrite::Written {
                valid_for_ms,
                expires_at_ms,
            } = answer
            {
                valid.push(*valid_for_ms);
                expiries.push(*expires_at_ms);
            }
        }
        if valid.len() >= majority {
            valid.sort_unstable_by(|a, b| b.cmp(a));
            expiries.sort_unstable_by(|a, b| b.cmp(a));
            return Ok(SessionWrite::Written {
                valid_for_ms: valid[majority - 1],
                expires_at_ms: expiries[majority - 1],
            });
        }
        // Refused: a node that still held the session (a close it has not
        // applied yet) may have taken the lease; it is taken out again.
        if let Owned::Member(member, _) = &owned {
            let _ = self
                .forget_session(session, Some(std::slice::from_ref(&member.token)))
                .await;
        }
        if answers.contains(&SessionWrite::Full) {
            return Ok(SessionWrite::Full);
        }
        if answers.len() >= majority {
            return Ok(SessionWrite::NotOpen);
        }
        Err(StoreError::Unavailable(format!(
            "only {} answered the session's write; a majority is {}",
            nodes(answers.len()),
            nodes(majority)
        )))
    }

    pub(super) async fn read_session(
        &self,
        session: &LockName,
        token: Option<&LeaseToken>,
    ) -> Result<SessionRecord, StoreError> {
        let majority = self.inner.majority;
        let (answers, late) = self
            .fan_out(
                |_, node| {
                    let (session, token) = (session.clone(), token.cloned());
                    async move { node.session_read(&session, token.as_ref()).await }
                },
                // With the token, a read is decided once a majority holds the
                // session or can no longer: the first answers may be of nodes
                // that lost it (restarted empty) while the rest still hold it.
                |progress| {
                    let holding = progress.count(|r: &SessionRecord| r.valid_for_ms.is_some());
                    match token {
                        Some(_) => holding >= majority || holding + progress.awaited < majority,
                        None => progress.answered() >= majority,
                    }
                },
            )
            .await;
        late.finish();
        let records: Vec<SessionRecord> = in_hand(answers).into_iter().flatten().collect();
        if records.len() < majority {
            return Err(StoreError::Unavailable(format!(
                "only {} answered the session's read; a majority is {}",
                nodes(records.len()),
                nodes(majority)
            )));
        }
        let mut valid: Vec<u64> = records.iter().filter_map(|r| r.valid_for_ms).collect();
        valid.sort_unstable_by(|a, b| b.cmp(a));
        let mut members: Vec<SessionMember> = Vec::new();
        for member in records.iter().flat_map(|r| r.members.iter()) {
            if !members.iter().any(|m| m.token == member.token) {
                members.push(member.clone());
            }
        }
        members.sort_by(|a, b| a.name.cmp(&b.name));
        let owner = (records.iter())
            .filter(|r| r.valid_for_ms.is_some())
            .find_map(|r| r.owner.clone());
        Ok(SessionRecord {
            valid_for_ms: valid.get(majority - 1).copied(),
            owner,
            terms: records.iter().find_map(|r| r.terms),
            members,
        })
    }

    pub(super) async fn forget_session(
        &self,
        session: &LockName,
        tokens: Option<&[LeaseToken]>,
    ) -> Result<(), StoreError> {
        let majority = self.inner.majority;
        let tokens = tokens.map(<[LeaseToken]>::to_vec);
        let (answers, late) = self
            .fan_out(
                |_, node| {
                    let (session, tokens) = (session.clone(), tokens.clone());
                    async move { node.session_forget(&session, tokens.as_deref()).await }
                },
                // Every node not known slow: a read right after a close
                // must not find the record on a node that had not yet
                // removed it.
                |_| false,
            )
            .await;
        late.finish();
        let done = in_hand(answers).into_iter().flatten().count();
        if done >= majority {
            return Ok(());
        }
        Err(StoreError::Unavailable(format!(
            "only {} took the leases out of the session; a majority is {}",
            nodes(done),
            nodes(majority)
        )))
    }
}

/// A [`SessionEntry`] that each node's step owns.
#[derive(Clone)]
enum Owned {
    Terms(SessionTerms),
    Member(SessionMember, u32),
}
