//! A minimal Redis client for the direct baselines: one TCP connection, one
//! command at a time, or a few in one write where a careful client would
//! pipeline them (the minimal lock's SET + INCR); RESP2 replies of scalars or
//! one flat array, which is all the lock scripts return.
//!
//! Kept small on purpose: it is the "careful client" the broker is measured
//! against, so it must not add work a good client would not do.

use std::io::Write;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// One RESP2 reply element.
#[derive(Debug)]
pub enum Reply {
    /// `:<n>`
    Int(i64),
    /// `$<len>` (or `+<text>`); `None` for a nil bulk string.
    Text(Option<String>),
    /// `*<n>` of scalars.
    Array(Vec<Reply>),
}

impl Reply {
    /// The text, if this is a non-nil string.
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Text(Some(text)) => Some(text),
            _ => None,
        }
    }
}

/// A persistent connection to one Redis.
pub struct Connection {
    stream: BufReader<TcpStream>,
    out: Vec<u8>,
    line: Vec<u8>,
}

impl Connection {
    /// Connects to `127.0.0.1:port` with Nagle off, as the broker's pool does.
    pub async fn connect(port: u16) -> Result<Self, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect to redis: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Self {
            stream: BufReader::with_capacity(4096, stream),
            out: Vec::with_capacity(512),
            line: Vec::with_capacity(64),
        })
    }

    /// Sends one command and reads its reply; a Redis error reply is `Err`.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        self.out.clear();
        encode(&mut self.out, args);
        self.send().await?;
        self.read_reply().await?
    }

    /// Sends `commands` in one write and reads their replies in order; the
    /// first Redis error reply is `Err`, after every reply has been read.
    pub async fn pipeline(&mut self, commands: &[&[&[u8]]]) -> Result<Vec<Reply>, String> {
        self.out.clear();
        for args in commands {
            encode(&mut self.out, args);
        }
        self.send().await?;
        let mut replies = Vec::with_capacity(commands.len());
        let mut first_error = None;
        for _ in commands {
            match self.read_reply().await? {
                Ok(reply) => replies.push(reply),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(replies), Err)
    }

    async fn send(&mut self) -> Result<(), String> {
        self.stream
            .get_mut()
            .write_all(&self.out)
            .await
            .map_err(|e| format!("write to redis: {e}"))
    }

    /// One whole reply: the outer `Err` is a broken connection, the inner
    /// one a Redis error reply (after which the connection is still in step).
    async fn read_reply(&mut self) -> Result<Result<Reply, String>, String> {
        match self.read_scalar().await? {
            Head::Array(len) => {
                let mut items = Vec::with_capacity(len);
                for _ in 0..len {
                    match self.read_scalar().await? {
                        Head::Scalar(reply) => items.push(reply),
                        Head::Array(_) => return Err("nested array reply".into()),
                        // Out of step with the rest of the array: give up.
                        Head::Error(error) => return Err(error),
                    }
                }
                Ok(Ok(Reply::Array(items)))
            }
            Head::Scalar(reply) => Ok(Ok(reply)),
            Head::Error(error) => Ok(Err(error)),
        }
    }

    async fn read_scalar(&mut self) -> Result<Head, String> {
        self.line.clear();
        let read = self
            .stream
            .read_until(b'\n', &mut self.line)
            .await
            .map_err(|e| format!("read from redis: {e}"))?;
        if read < 3 || !self.line.ends_with(b"\r\n") {
            return Err("redis closed the connection".into());
        }
        let body = &self.line[1..self.line.len() - 2];
        let text = || String::from_utf8_lossy(body).into_owned();
        let number = || -> Result<i64, String> {
            std::str::from_utf8(body)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("bad number in reply: {}", text()))
        };
        match self.line[0] {
            b':' => Ok(Head::Scalar(Reply::Int(number()?))),
            b'+' => Ok(Head::Scalar(Reply::Text(Some(text())))),
            b'-' => Ok(Head::Error(format!("redis error: {}", text()))),
            b'*' => Ok(Head::Array(usize::try_from(number()?).unwrap_or(0))),
            b'$' => {
                let Ok(len) = usize::try_from(number()?) else {
                    return Ok(Head::Scalar(Reply::Text(None)));
                };
                let mut data = vec![0u8; len + 2];
                self.stream
                    .read_exact(&mut data)
                    .await
                    .map_err(|e| format!("read from redis: {e}"))?;
                data.truncate(len);
                let text = String::from_utf8(data).map_err(|_| "reply is not UTF-8")?;
                Ok(Head::Scalar(Reply::Text(Some(text))))
            }
            other => Err(format!("unexpected reply type {:?}", other as char)),
        }
    }
}

enum Head {
    Scalar(Reply),
    Array(usize),
    Error(String),
}

/// Appends `args` as one RESP command.
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    push_header(out, b'*', args.len());
    for arg in args {
        push_header(out, b'$', arg.len());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

fn push_header(out: &mut Vec<u8>, kind: u8, len: usize) {
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{}{len}\r\n", kind as char);
}
