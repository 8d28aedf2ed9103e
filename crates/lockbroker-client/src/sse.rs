//! The Server-Sent Events wire format, read from bytes as they arrive.
//!
//! A stream is lines (ending in LF, CRLF or CR) grouped into messages by
//! blank lines; `event:`, `id:` and `data:` fields fill a [`Message`], and
//! lines starting with `:` (the broker's keep-alives) are comments. Unlike a
//! browser's, a message's id is its own: the broker numbers changes but not
//! states, and a state must not pass for the change before it. Chunks
//! split the stream anywhere, inside a line, between a CR and its LF, or
//! inside a UTF-8 character, so [`Parser`] keeps the unfinished line until
//! its end arrives.

/// The longest line kept; the rest of a longer line is dropped (its JSON
/// then fails to parse and the message is reported as malformed).
const MAX_LINE: usize = 1 << 20;

/// One message of an event stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Message {
    /// The `event:` field: the event's type (`message` when absent).
    pub(crate) event: String,
    /// The message's own `id:` field, if it has one (the broker numbers
    /// changes, not states): `Last-Event-ID` sends the last one seen to
    /// resume after it.
    pub(crate) id: Option<String>,
    /// The `data:` lines, joined by newlines.
    pub(crate) data: String,
}

/// Turns chunks of an event stream into [`Message`]s.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    /// The line being read, not yet ended.
    line: Vec<u8>,
    /// The last byte ended a line with a CR: a LF right after it belongs to it.
    after_cr: bool,
    /// The message being read.
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
}

impl Parser {
    /// Reads one chunk; answers the messages it completes, in order.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<Message> {
        let mut complete = Vec::new();
        for &byte in chunk {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            match byte {
                b'\n' => self.end_line(&mut complete),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut complete);
                }
                _ if self.line.len() < MAX_LINE => self.line.push(byte),
                _ => {}
            }
        }
        complete
    }

    fn end_line(&mut self, complete: &mut Vec<Message>) {
        let line = std::mem::take(&mut self.line);
        let line = String::from_utf8_lossy(&line);
        if line.is_empty() {
            self.dispatch(complete);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => {
                self.id = Some(value.to_owned()).filter(|id| !id.is_empty());
            }
            // `retry:` and unknown fields are ignored.
            _ => {}
        }
    }

    /// A blank line: the message read so far is complete, unless it has no
    /// data (then it is dropped, id included).
    fn dispatch(&mut self, complete: &mut Vec<Message>) {
        let event = std::mem::take(&mut self.event);
        let id = self.id.take();
        if !std::mem::take(&mut self.has_data) {
            return;
        }
        complete.push(Message {
            event: if event.is_empty() {
                "message".to_owned()
            } else {
                event
            },
            id,
            data: std::mem::take(&mut self.data),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = ": keep-alive\n\nevent: state\ndata: {\"held\":false}\n\n\
        event: acquired\r\nid: 8\r\ndata: {\"owner\":\"h\u{e9}te\"}\r\n\r\n\
        event: lagged\rdata: {\"missed\": 3}\r\r";

    fn expected() -> Vec<Message> {
        let message = |event: &str, id: Option<&str>, data: &str| Message {
            event: event.to_owned(),
            id: id.map(str::to_owned),
            data: data.to_owned(),
        };
        vec![
            message("state", None, r#"{"held":false}"#),
            message("acquired", Some("8"), "{\"owner\":\"h\u{e9}te\"}"),
            message("lagged", None, r#"{"missed": 3}"#),
        ]
    }

    #[test]
    fn any_chunk_boundary_gives_the_same_messages() {
        let bytes = STREAM.as_bytes();
        for cut in 0..=bytes.len() {
            let mut parser = Parser::default();
            let mut got = parser.feed(&bytes[..cut]);
            got.extend(parser.feed(&bytes[cut..]));
            assert_eq!(got, expected(), "cut at {cut}");
        }
    }
}
