//! The operations a scenario step names, run through the client's public
//! API, and what the client answered, as the scenarios' fields.

use lockbroker_client::LostReason;

use super::*;

impl Replay {
    /// Runs one operation through the client's public API; the client's
    /// errors become the outcome.
    pub(super) async fn step(
        &mut self,
        label: &str,
        op: &str,
        step: &Fields,
    ) -> Result<Outcome, Failure> {
        let client = self.client.clone();
        let outcome = match op {
            "acquire" | "acquire_permit" | "lock" => {
                let grant = self.grant(label, op, step)?;
                grant.send(client, self.prefix.clone()).await
            }
            "await" => {
                let name = self.text(label, step, "step")?;
                match self.candidates.get_mut(&name) {
                    Some(candidate) if !self.pending.contains_key(&name) => {
                        candidate.settle(true, label).await?;
                        let done = candidate.elected(label)?;
                        let fields = done
                            .result
                            .as_ref()
                            .map_or_else(|_| Fields::new(), Clone::clone);
                        self.results.insert(name, fields);
                        done
                    }
                    _ => self.finish_async(label, &name).await?,
                }
            }
            "extend" => {
                let lease = self.lease(label, step)?;
                let ttl = self.duration(label, step, "ttl_ms", None)?;
                Outcome::of(lease.extend(ttl).await, |_| Fields::new())
            }
            "extend_token" => {
                let lease = self.lease(label, step)?;
                let ttl = self.duration(label, step, "ttl_ms", None)?;
                let (name, token) = (lease.name(), lease.token());
                let renewal = match lease.kind() {
                    LeaseKind::Permit { .. } => client.extend_permit(name, token, ttl).await,
                    LeaseKind::Exclusive | LeaseKind::Shared => {
                        client.extend(name, token, ttl).await
                    }
                };
                Outcome::of(renewal, |renewal| {
                    object(json!({"fence": renewal.fence, "ttl_ms": renewal.ttl_ms}))
                })
            }
            "release" => {
                let lease = self.lease(label, step)?;
                Outcome::of(lease.release().await, |_| Fields::new())
            }
            "lease_state" => {
                let lease = self.lease(label, step)?;
                Outcome::fields(lease_state(label, &lease)?)
            }
            "status" => {
                let status = client.status(&self.name(label, step, "lock")?).await;
                Outcome::of(status, |s| {
                    object(json!({
                        "held": s.held, "owner": s.owner, "fence": s.fence, "mode": s.mode,
                        "holder_count": s.holder_count, "waiting": s.waiting,
                    }))
                })
            }
            "semaphore_status" => {
                let name = self.name(label, step, "semaphore")?;
                Outcome::of(client.semaphore_status(&name).await, |s| {
                    object(json!({
                        "limit": s.limit, "held": s.held, "available": s.available,
                        "fence": s.fence,
                    }))
                })
            }
            "check_fence" => {
                let (name, fence) = (self.name(label, step, "lock")?, self.fence(label, step)?);
                self.fence_check(client.check_fence(&name, fence).await)
            }
            "check_semaphore_fence" => {
                let name = self.name(label, step, "semaphore")?;
                let fence = self.fence(label, step)?;
                self.fence_check(client.check_semaphore_fence(&name, fence).await)
            }
            "lease_check_fence" => {
                let lease = self.lease(label, step)?;
                self.fence_check(lease.check_fence().await)
            }
            "watch" => {
                self.open_watch(label, step)?;
                Outcome::fields(Fields::new())
            }
            "next_event" => {
                let name = self.text(label, step, "watch")?;
                self.next_event(label, &name).await?
            }
            "sleep" => {
                tokio::time::sleep(self.duration(label, step, "ms", Some(Duration::ZERO))?).await;
                Outcome::fields(Fields::new())
            }
            "campaign" => {
                let Some(name) = step.get("as").and_then(Value::as_str) else {
                    return Err(format!("{label}: a candidate needs as"));
                };
                let election = self.election(label, step)?;
                let term = match timeout(AWAIT_LIMIT, election.campaign()).await {
                    Ok(Ok(leadership)) => Term::Won(leadership),
                    Ok(Err(error)) => Term::Failed(Some(error)),
                    Err(_) => {
                        let limit = AWAIT_LIMIT.as_secs();
                        return Err(format!("{label}: not elected within {limit} s"));
                    }
                };
                let mut candidate = Candidate { election, term };
                let outcome = candidate.elected(label)?;
                self.candidates.insert(name.to_owned(), candidate);
                outcome
            }
            op if op.contains("session") => self.session_step(label, op, step).await?,
            "leader_state" => {
                let candidate = self.candidate(label, step)?;
                candidate.settle(false, label).await?;
                leader_state(candidate).await
            }
            "resign" => {
                let candidate = self.candidate(label, step)?;
                match std::mem::replace(&mut candidate.term, Term::Resigned) {
                    Term::Won(leadership) => {
                        Outcome::of(leadership.resign().await, |_| Fields::new())
                    }
                    // Dropping a campaign ends it.
                    Term::Campaigning(task) => {
                        task.abort();
                        Outcome::fields(Fields::new())
                    }
                    Term::Failed(_) | Term::Resigned => Outcome::fields(Fields::new()),
                }
            }
            _ => return Err(format!("{label}: this client cannot express the operation")),
        };
        Ok(outcome)
    }

    /// A grant step's arguments, resolved now, to send now or in a task.
    pub(super) fn grant(&self, label: &str, op: &str, step: &Fields) -> Result<Grant, Failure> {
        let mut options = AcquireOptions {
            ttl: self.duration(label, step, "ttl_ms", Some(DEFAULT_TTL))?,
            owner: self.optional_text(label, step, "owner")?,
            ..AcquireOptions::default()
        };
        if op != "lock" {
            options.wait = self.duration(label, step, "wait_ms", Some(Duration::ZERO))?;
        }
        if op == "acquire_permit" {
            let limit = self.whole_arg(label, step, "limit")?;
            let limit = u32::try_from(limit)
                .map_err(|_| format!("{label}: limit {limit} is past what a semaphore takes"))?;
            let name = self.name(label, step, "semaphore")?;
            return Ok(Grant::Permit {
                name,
                limit,
                options,
            });
        }
        if self.arg(label, step, "shared")? == Value::Bool(true) {
            options.mode = LockMode::Shared;
        }
        let name = self.name(label, step, "lock")?;
        if op == "lock" {
            return Ok(Grant::Renewed { name, options });
        }
        options.request_id = self.optional_text(label, step, "request_id")?;
        Ok(Grant::Single { name, options })
    }

    /// A `campaign` step's election: its lock, TTL, longest term and owner.
    pub(super) fn election(&self, label: &str, step: &Fields) -> Result<Election, Failure> {
        let options = AcquireOptions {
            ttl: self.duration(label, step, "ttl_ms", Some(ELECTION_TTL))?,
            max_hold: self.duration(label, step, "max_hold_ms", Some(ELECTION_MAX_HOLD))?,
            owner: self.optional_text(label, step, "owner")?,
            ..AcquireOptions::default()
        };
        let name = self.name(label, step, "lock")?;
        Ok(self.client.election(name).with_options(options))
    }

    pub(super) fn candidate(
        &mut self,
        label: &str,
        step: &Fields,
    ) -> Result<&mut Candidate, Failure> {
        let name = self.text(label, step, "candidate")?;
        self.candidates
            .get_mut(&name)
            .ok_or_else(|| format!("{label}: no candidate {name:?}"))
    }

    /// `await`: the async step `name`'s outcome, kept under its name.
    pub(super) async fn finish_async(
        &mut self,
        label: &str,
        name: &str,
    ) -> Result<Outcome, Failure> {
        let mut task = self
            .pending
            .remove(name)
            .ok_or_else(|| format!("{label}: no async step {name:?} to await"))?;
        let done = match timeout(AWAIT_LIMIT, &mut task).await {
            Ok(Ok(done)) => done,
            Ok(Err(error)) => return Err(format!("{label}: the async step failed: {error}")),
            Err(_) => {
                task.abort();
                let limit = AWAIT_LIMIT.as_secs();
                return Err(format!(
                    "{label}: the async step did not finish within {limit} s"
                ));
            }
        };
        if let Some(lease) = &done.lease {
            let replaced = self.leases.insert(name.to_owned(), Arc::clone(lease));
            self.unnamed.extend(replaced);
        }
        let fields = done
            .result
            .as_ref()
            .map_or_else(|_| Fields::new(), Clone::clone);
        self.results.insert(name.to_owned(), fields);
        Ok(done)
    }

    pub(super) fn fence_check(&self, answer: Result<FenceCheckResponse, Error>) -> Outcome {
        Outcome::of(answer, |check| {
            object(json!({
                "name": unprefixed(&self.prefix, &check.name), "fence": check.fence,
                "current": check.current, "held": check.held,
                "expires_in_ms": check.expires_in_ms,
            }))
        })
    }

    /// Opens the watch; a task reads its events from now on.
    pub(super) fn open_watch(&mut self, label: &str, step: &Fields) -> Result<(), Failure> {
        let Some(as_name) = step.get("as").and_then(Value::as_str) else {
            return Err(format!("{label}: a watch needs as"));
        };
        let mut watch = self.client.watch(&self.name(label, step, "lock")?);
        let (sender, events) = mpsc::unbounded_channel();
        let pump = tokio::spawn(async move {
            while let Some(event) = watch.next().await {
                if sender.send(event).is_err() {
                    return;
                }
            }
        });
        let open = OpenWatch { events, pump };
        if let Some(replaced) = self.watches.insert(as_name.to_owned(), open) {
            replaced.pump.abort();
        }
        Ok(())
    }

    pub(super) async fn next_event(&mut self, label: &str, name: &str) -> Result<Outcome, Failure> {
        let watch =
            (self.watches.get_mut(name)).ok_or_else(|| format!("{label}: no watch {name:?}"))?;
        let event = match timeout(EVENT_WAIT, watch.events.recv()).await {
            Ok(Some(Ok(event))) => event,
            Ok(Some(Err(error))) => return Ok(Outcome::of(Err(error), |()| Fields::new())),
            Ok(None) => return Err(format!("{label}: the watch ended")),
            Err(_) => {
                let wait = EVENT_WAIT.as_secs();
                return Err(format!("{label}: no event within {wait} s"));
            }
        };
        let fields = match event.kind {
            EventKind::State(s) => json!({
                "type": "state", "held": s.held, "owner": s.owner, "fence": s.fence, "mode": s.mode,
            }),
            EventKind::Change(change) => json!({
                "type": change_type(change.kind), "fence": change.fence, "owner": change.owner,
                "mode": change.mode,
            }),
            EventKind::Lagged { .. } => json!({"type": "lagged"}),
            EventKind::StateComplete { .. } => json!({"type": "state_complete"}),
            EventKind::SemaphoreState(_) => {
                return Err(format!("{label}: a semaphore's state on a lock's watch"));
            }
        };
        Ok(Outcome::fields(object(fields)))
    }
}

/// A grant, resolved from its step: sent at once, or from a task of its own
/// for an `async` step.
pub(super) enum Grant {
    /// `acquire`: one lease, not renewed.
    Single {
        name: String,
        options: AcquireOptions,
    },
    /// `lock`: a lease renewed in the background.
    Renewed {
        name: String,
        options: AcquireOptions,
    },
    /// `acquire_permit`: one permit, not renewed.
    Permit {
        name: String,
        limit: u32,
        options: AcquireOptions,
    },
}

impl Grant {
    pub(super) async fn send(self, client: Client, prefix: String) -> Outcome {
        let answer = match self {
            Self::Single { name, options } => client.lock(name).acquire(options).await,
            Self::Renewed { name, options } => client.lock(name).lock(options).await,
            Self::Permit {
                name,
                limit,
                options,
            } => client.semaphore(name, limit).acquire(options).await,
        };
        match answer {
            Ok(lease) => Outcome {
                result: Ok(granted(&prefix, &lease)),
                lease: Some(Arc::new(lease)),
            },
            Err(error) => Outcome {
                result: Err(error),
                lease: None,
            },
        }
    }
}

/// A granted lease's fields.
pub(super) fn granted(prefix: &str, lease: &Lease) -> Fields {
    let mode = match lease.kind() {
        LeaseKind::Exclusive => "exclusive",
        LeaseKind::Shared => "shared",
        LeaseKind::Permit { .. } => "permit",
    };
    let mut fields = object(json!({
        "name": unprefixed(prefix, lease.name()), "fence": lease.fence(),
        "owner": lease.owner(), "mode": mode,
    }));
    if let LeaseKind::Permit { limit } = lease.kind() {
        fields.insert("limit".into(), json!(limit));
    }
    fields
}

/// The lease object's own account, with its loss signal (`lost()` and its
/// cancellation tokens) required to agree: done once lost or released, not
/// while held.
fn lease_state(label: &str, lease: &Lease) -> Result<Fields, Failure> {
    let (state, reason) = match lease.end() {
        None => ("held", None),
        Some(LeaseEnd::Released) => ("released", None),
        Some(LeaseEnd::Lost(reason)) => ("lost", Some(reason.as_str())),
    };
    let ended = lease.lost().now_or_never().is_some();
    let cancelled = lease.cancellation().is_cancelled();
    if (ended, cancelled) != (state != "held", state != "held") {
        return Err(format!(
            "{label}: the lease is {state} but lost() is {} and its cancellation {}",
            if ended { "done" } else { "pending" },
            if cancelled {
                "cancelled"
            } else {
                "not cancelled"
            }
        ));
    }
    Ok(object(json!({"state": state, "lost_reason": reason})))
}

/// An error's kind in the scenarios' words, and its fields.
pub(super) fn error_of(error: &Error) -> (&'static str, Fields) {
    let fields = match error {
        Error::Busy {
            holders,
            owner,
            fence,
            limit,
            ..
        } => {
            let holder = (holders.iter().find(|h| Some(h.fence) == *fence)).or(holders.first());
            json!({
                "owner": owner, "fence": fence, "mode": holder.map(|h| &h.mode),
                "holder_count": holders.len(), "limit": limit,
            })
        }
        Error::LimitConflict { limit } => json!({"limit": limit}),
        Error::Validation { field, .. } => json!({"field": field}),
        _ => json!({}),
    };
    let kind = match error {
        Error::Busy { .. } => "busy",
        Error::LeaseLost {
            reason: LostReason::SessionLost,
        } => "session_lost",
        Error::LeaseLost { .. } => "lease_lost",
        Error::Released => "released",
        Error::LimitConflict { .. } => "limit_conflict",
        Error::MaxHoldExceeded { .. } => "max_hold_exceeded",
        Error::Validation { .. } => "invalid_request",
        Error::Unavailable { .. }
        | Error::Contended { .. }
        | Error::TooManyStreams { .. }
        | Error::Transport { .. } => "unavailable",
        Error::Unauthorized { .. } | Error::Forbidden { .. } => "auth",
        _ => "other",
    };
    (kind, object(fields))
}

fn change_type(kind: ChangeKind) -> &'static str {
    match kind {
        ChangeKind::Acquired => "acquired",
        ChangeKind::Extended => "extended",
        ChangeKind::Released => "released",
        ChangeKind::Expired => "expired",
        ChangeKind::ForceReleased => "force_released",
    }
}

/// A name as the scenario wrote it.
fn unprefixed(prefix: &str, name: &str) -> String {
    name.strip_prefix(prefix).unwrap_or(name).to_owned()
}
