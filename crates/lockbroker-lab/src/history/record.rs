//! [`json_lines`]: a history as one JSON object per line, for reading a
//! finding by hand or with `jq`: every request in the order it was sent,
//! then the faults the run caused.

use serde::Serialize;

use super::{Backend, Event, LeaseKind, Op};
use crate::client::Outcome;

/// One request and its answer, as a line of the record.
#[derive(Serialize)]
struct Line<'a> {
    send_us: i64,
    recv_us: i64,
    client: usize,
    op: Op,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    lock: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<u64>,
    #[serde(flatten)]
    outcome: &'a Outcome,
}

/// One fault the run caused: a quorum node killed to come back empty, or a
/// Sentinel primary killed.
#[derive(Serialize)]
struct Fault {
    at_us: i64,
    fault: &'static str,
}

/// Every event of `events`, in the order they were sent, and then every
/// fault `backend` knows of, one JSON object per line. Times are the
/// checker's local µs; the answers' times are the Redis clock's, as the
/// broker reported them.
pub fn json_lines(events: &[Event], backend: &Backend) -> String {
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| (e.timed.send_us, e.timed.recv_us));
    let mut text = String::new();
    let mut push = |line: Result<String, serde_json::Error>| {
        if let Ok(line) = line {
            text.push_str(&line);
            text.push('\n');
        }
    };
    for e in sorted {
        let (kind, limit) = match e.kind {
            LeaseKind::Exclusive => ("exclusive", None),
            LeaseKind::Shared => ("shared", None),
            LeaseKind::Permit { limit } => ("permit", Some(limit)),
        };
        push(serde_json::to_string(&Line {
            send_us: e.timed.send_us,
            recv_us: e.timed.recv_us,
            client: e.client,
            op: e.op,
            kind,
            limit,
            lock: &e.lock,
            lease: e.lease,
            outcome: &e.timed.outcome,
        }));
    }
    let faults = match backend {
        Backend::Quorum {
            restarts: Some(at), ..
        } => at
            .iter()
            .map(|&at_us| (at_us, "node_restarted_empty"))
            .collect(),
        Backend::Sentinel {
            failovers: Some(at),
        } => at.iter().map(|&at_us| (at_us, "primary_killed")).collect(),
        _ => Vec::new(),
    };
    for (at_us, fault) in faults {
        push(serde_json::to_string(&Fault { at_us, fault }));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Timed;

    fn event(op: Op, kind: LeaseKind, send_us: i64, outcome: Outcome) -> Event {
        Event {
            client: 3,
            lock: "job".into(),
            kind,
            op,
            lease: (op == Op::Acquire).then_some(7),
            timed: Timed {
                send_us,
                recv_us: send_us + 500,
                outcome,
            },
        }
    }

    #[test]
    fn every_request_is_one_line_in_the_order_sent_then_the_faults() {
        let granted = Outcome::Granted {
            fence: 42,
            ttl_ms: 200,
            expires_at_ms: 1_200,
        };
        let busy = Outcome::Busy {
            fence: Some(42),
            in_the_way: vec![42],
        };
        let events = [
            event(Op::Status, LeaseKind::Permit { limit: 2 }, 2_000, busy),
            event(Op::Acquire, LeaseKind::Shared, 1_000, granted),
        ];
        let backend = Backend::Quorum {
            drift: super::super::Drift::default(),
            restarts: Some(vec![1_500]),
        };
        let text = json_lines(&events, &backend);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("JSON"))
            .collect();
        assert_eq!(
            lines,
            [
                serde_json::json!({"send_us": 1000, "recv_us": 1500, "client": 3,
                    "op": "acquire", "kind": "shared", "lock": "job", "lease": 7,
                    "answer": "granted", "fence": 42, "ttl_ms": 200, "expires_at_ms": 1200}),
                serde_json::json!({"send_us": 2000, "recv_us": 2500, "client": 3,
                    "op": "status", "kind": "permit", "limit": 2, "lock": "job",
                    "answer": "busy", "fence": 42, "in_the_way": [42]}),
                serde_json::json!({"at_us": 1500, "fault": "node_restarted_empty"}),
            ]
        );
    }
}
