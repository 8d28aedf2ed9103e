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
pub struct Message {
    /// The `event:` field: the event's type (`message` when absent).
    pub event: String,
    /// The message's own `id:` field, if it has one (the broker numbers
    /// changes, not states): `Last-Event-ID` sends the last one seen to
    /// resume after it.
    pub id: Option<String>,
    /// The `data:` lines, joined by newlines.
    pub data: String,
}

/// Turns chunks of an event stream into [`Message`]s.
#[derive(Debug, Default)]
pub struct Parser {
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
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Message> {
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

    const STREAM: &str = ": keep-alive\n\nevent: state\ndata: {\"name\":\"billing:42\",\"held\":false}\n\n\
        event: acquired\r\nid: 8\r\ndata: {\"name\":\"billing:42\",\"owner\":\"h\u{e9}te-1\"}\r\n\r\n\
        : keep-alive\r\r\
        event: lagged\rid: 12\rdata: {\"missed\": 3}\r\r";

    fn message(event: &str, id: &str, data: &str) -> Message {
        Message {
            event: event.to_owned(),
            id: Some(id.to_owned()).filter(|id| !id.is_empty()),
            data: data.to_owned(),
        }
    }

    fn expected() -> Vec<Message> {
        vec![
            // A state has no id; the changes do.
            message("state", "", r#"{"name":"billing:42","held":false}"#),
            message(
                "acquired",
                "8",
                "{\"name\":\"billing:42\",\"owner\":\"h\u{e9}te-1\"}",
            ),
            message("lagged", "12", r#"{"missed": 3}"#),
        ]
    }

    #[test]
    fn a_stream_read_at_once_gives_every_message_and_skips_comments() {
        assert_eq!(Parser::default().feed(STREAM.as_bytes()), expected());
    }

    #[test]
    fn any_chunk_boundary_gives_the_same_messages() {
        let bytes = STREAM.as_bytes();
        // Every single cut: inside fields, between CR and LF, inside the é.
        for cut in 0..=bytes.len() {
            let mut parser = Parser::default();
            let mut got = parser.feed(&bytes[..cut]);
            got.extend(parser.feed(&bytes[cut..]));
            assert_eq!(got, expected(), "cut at {cut}");
        }
        // One byte at a time.
        let mut parser = Parser::default();
        let got: Vec<Message> = bytes.iter().flat_map(|b| parser.feed(&[*b])).collect();
        assert_eq!(got, expected());
    }

    #[test]
    fn a_message_is_complete_only_at_its_blank_line() {
        let mut parser = Parser::default();
        assert!(parser
            .feed(b"event: released\nid: 9\ndata: {}\n")
            .is_empty());
        assert_eq!(
            parser.feed(b"\n"),
            [message("released", "9", "{}")],
            "the blank line ends it"
        );
    }

    #[test]
    fn fields_follow_the_format() {
        let mut parser = Parser::default();
        let got =
            parser.feed(b"data:a\ndata:  b\ndata\nretry: 10\nfoo: bar\n\nid: 3\n\ndata: x\n\n");
        assert_eq!(
            got,
            [
                // No event field: "message"; one leading space dropped; a
                // field without a colon has an empty value.
                Message {
                    event: "message".to_owned(),
                    id: None,
                    data: "a\n b\n".to_owned(),
                },
                // A message without data is dropped, its id too: an id
                // belongs to its own message only.
                Message {
                    event: "message".to_owned(),
                    id: None,
                    data: "x".to_owned(),
                },
            ]
        );
    }
}
