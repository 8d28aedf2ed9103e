//! `session.lua`: a session's record, its terms and member leases.

use lockbroker_core::{
    LeaseToken, LockDelay, LockName, SessionEntry, SessionMember, SessionRecord, SessionTerms,
    SessionWrite, StoreError, Ttl,
};

use super::super::{Reply, ScriptCall, ScriptContext, ScriptName};
use super::unknown_code;

/// The record's fields that hold the terms; every other field is a member
/// lease's token.
const TTL_FIELD: &str = "#ttl";
const DELAY_FIELD: &str = "#delay";

fn session_keys(context: &ScriptContext, session: &LockName) -> Vec<String> {
    vec![
        context.keys.lease(session),
        context.keys.session_record(session),
    ]
}

/// `write`: the terms or a member lease, while the session's lease is valid.
pub struct SessionWriteCall<'a> {
    /// The session's lease.
    pub session: &'a LockName,
    /// Its token.
    pub token: &'a LeaseToken,
    /// What to write.
    pub entry: SessionEntry<'a>,
}

impl ScriptCall for SessionWriteCall<'_> {
    type Output = SessionWrite;
    const SCRIPT: ScriptName = ScriptName::Session;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        session_keys(context, self.session)
    }

    fn args(&self, _: &ScriptContext) -> Vec<String> {
        let mut args = vec!["write".to_owned(), self.token.expose().to_owned()];
        match self.entry {
            SessionEntry::Terms(terms) => args.extend([
                "0".to_owned(),
                TTL_FIELD.to_owned(),
                terms.ttl.as_millis().to_string(),
                DELAY_FIELD.to_owned(),
                terms.lock_delay.as_millis().to_string(),
            ]),
            SessionEntry::Member {
                member,
                max_members,
            } => args.extend([
                max_members.max(1).to_string(),
                member.token.expose().to_owned(),
                member.name.wire(),
            ]),
        }
        args
    }

    fn decode(&self, reply: &mut Reply) -> Result<SessionWrite, StoreError> {
        Ok(match reply.int()? {
            1 => SessionWrite::Written {
                valid_for_ms: reply.uint()?,
                expires_at_ms: reply.uint()?,
            },
            0 => SessionWrite::NotOpen,
            -1 => SessionWrite::Full,
            other => return Err(unknown_code("session write", other)),
        })
    }
}

/// `read`: the record, and with a token how long the session stays valid.
pub struct SessionReadCall<'a> {
    /// The session's lease.
    pub session: &'a LockName,
    /// Its token, to learn whether it holds the session.
    pub token: Option<&'a LeaseToken>,
}

impl ScriptCall for SessionReadCall<'_> {
    type Output = SessionRecord;
    const SCRIPT: ScriptName = ScriptName::Session;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        session_keys(context, self.session)
    }

    fn args(&self, _: &ScriptContext) -> Vec<String> {
        vec![
            "read".to_owned(),
            self.token.map_or("", LeaseToken::expose).to_owned(),
        ]
    }

    fn decode(&self, reply: &mut Reply) -> Result<SessionRecord, StoreError> {
        let valid_for_ms = u64::try_from(reply.int()?).ok();
        let owner = reply.optional_text()?;
        let (mut ttl, mut delay, mut members) = (None, None, Vec::new());
        while reply.has_more() {
            let field = reply.text()?;
            let value = reply.text()?;
            let number = || {
                value.parse::<u64>().map_err(|_| {
                    StoreError::Protocol(format!("session record field {field} is not a number"))
                })
            };
            match field.as_str() {
                TTL_FIELD => ttl = Some(number()?),
                DELAY_FIELD => delay = Some(number()?),
                _ => members.push(SessionMember {
                    name: LockName::from_wire(&value)
                        .map_err(|_| StoreError::Protocol("session record names no lock".into()))?,
                    token: LeaseToken::parse(&field).map_err(|_| {
                        StoreError::Protocol("session record holds no lease token".into())
                    })?,
                }),
            }
        }
        let terms = match (ttl, delay) {
            (Some(ttl), Some(delay)) => Some(SessionTerms {
                ttl: Ttl::parse("ttl_ms", ttl, u64::MAX)
                    .map_err(|_| StoreError::Protocol("session record TTL is 0".into()))?,
                lock_delay: LockDelay::parse(delay, u64::MAX)
                    .map_err(|_| StoreError::Protocol("session record lock-delay".into()))?,
            }),
            _ => None,
        };
        members.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(SessionRecord {
            valid_for_ms,
            owner,
            terms,
            members,
        })
    }
}

/// `forget`: member leases out of the record, or the whole record.
pub struct SessionForgetCall<'a> {
    /// The session's lease.
    pub session: &'a LockName,
    /// The member tokens; `None` removes the record.
    pub tokens: Option<&'a [LeaseToken]>,
}

impl ScriptCall for SessionForgetCall<'_> {
    type Output = ();
    const SCRIPT: ScriptName = ScriptName::Session;

    fn keys(&self, context: &ScriptContext) -> Vec<String> {
        session_keys(context, self.session)
    }

    fn args(&self, _: &ScriptContext) -> Vec<String> {
        let mut args = vec!["forget".to_owned()];
        args.extend(
            (self.tokens.unwrap_or_default().iter()).map(|token| token.expose().to_owned()),
        );
        args
    }

    fn decode(&self, reply: &mut Reply) -> Result<(), StoreError> {
        match reply.int()? {
            1 => Ok(()),
            other => Err(unknown_code("session forget", other)),
        }
    }
}
