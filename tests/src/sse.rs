//! A Server-Sent Events reader for the event-stream tests: opens a stream
//! with reqwest and hands out one parsed message at a time.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use crate::TestApp;

/// One message of a stream.
#[derive(Clone, Debug)]
pub struct SseEvent {
    /// `event:`; `message` when absent.
    pub event: String,
    /// `id:`, when sent.
    pub id: Option<u64>,
    /// `data:`, as JSON.
    pub data: Value,
    /// `data:` as sent, to look for what must never be there.
    pub raw: String,
}

/// An open stream.
pub struct EventStream {
    response: reqwest::Response,
    buffer: String,
}

impl EventStream {
    /// `GET path` as a stream, resuming after `last_event_id` if given.
    /// A refusal comes back as its status and JSON body.
    pub async fn open(
        app: &TestApp,
        path: &str,
        last_event_id: Option<u64>,
    ) -> Result<Self, (StatusCode, Value)> {
        Self::open_with(app, path, last_event_id, None).await
    }

    /// `GET path` as a stream with `Authorization: Bearer key`.
    pub async fn open_as(
        app: &TestApp,
        path: &str,
        key: &str,
    ) -> Result<Self, (StatusCode, Value)> {
        Self::open_with(app, path, None, Some(key)).await
    }

    async fn open_with(
        app: &TestApp,
        path: &str,
        last_event_id: Option<u64>,
        key: Option<&str>,
    ) -> Result<Self, (StatusCode, Value)> {
        let mut request = app
            .http
            .get(app.url(path))
            .timeout(Duration::from_secs(3600));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let response = request.send().await.expect("the broker answers");
        let status = response.status();
        if status != StatusCode::OK {
            let body = response.json().await.unwrap_or(Value::Null);
            return Err((status, body));
        }
        let kind = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(kind.starts_with("text/event-stream"), "content type {kind}");
        Ok(Self {
            response,
            buffer: String::new(),
        })
    }

    /// The next message within `limit`; `None` when none came or the stream
    /// ended.
    pub async fn next(&mut self, limit: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(event) = self.parse_one() {
                return Some(event);
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk()).await;
            match chunk {
                Ok(Ok(Some(bytes))) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                _ => return None,
            }
        }
    }

    /// The next message that is not `skip`'s type, within `limit`.
    pub async fn next_but(&mut self, skip: &str, limit: Duration) -> Option<SseEvent> {
        loop {
            let event = self.next(limit).await?;
            if event.event != skip {
                return Some(event);
            }
        }
    }

    /// Takes one complete message off the buffer (comments are skipped).
    fn parse_one(&mut self) -> Option<SseEvent> {
        loop {
            let end = self.buffer.find("\n\n")?;
            let block: String = self.buffer.drain(..end + 2).collect();
            if let Some(event) = parse_block(&block) {
                return Some(event);
            }
        }
    }
}

/// Every complete message in `text`, a stream's bytes as read (comments
/// and an unfinished last message are skipped).
pub fn parse_all(text: &str) -> Vec<SseEvent> {
    let complete = text.rfind("\n\n").map_or("", |end| &text[..end]);
    complete.split("\n\n").filter_map(parse_block).collect()
}

/// One message; `None` for a block without data (a comment).
fn parse_block(block: &str) -> Option<SseEvent> {
    let (mut event, mut id, mut data) = ("message".to_owned(), None, Vec::new());
    for line in block.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            event = value.trim().to_owned();
        } else if let Some(value) = line.strip_prefix("id:") {
            id = value.trim().parse().ok();
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push(value.strip_prefix(' ').unwrap_or(value).to_owned());
        }
    }
    if data.is_empty() {
        return None;
    }
    let raw = data.join("\n");
    let data = serde_json::from_str(&raw).unwrap_or(Value::Null);
    Some(SseEvent {
        event,
        id,
        data,
        raw,
    })
}
