//! A minimal HTTP/1.1 client for the HTTP side of the pair benchmarks (the
//! broker, and etcd's gateway): one keep-alive TCP connection, one request
//! at a time, `Content-Length` bodies.
//!
//! It is the HTTP twin of [`crate::resp`]: both sides of a comparison are
//! driven by a client that does no more work than its protocol needs, so the
//! load generator's own cost (it shares the cores with the broker and Redis)
//! weighs the same on both. The broker speaks plain HTTP/1.1 to it, as to any
//! client; nothing about the broker is special-cased.

use std::net::{Ipv4Addr, SocketAddr};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};

/// A persistent HTTP/1.1 connection to one loopback port.
pub struct Connection {
    stream: BufReader<TcpStream>,
    out: Vec<u8>,
    line: String,
}

impl Connection {
    /// Connects to `127.0.0.1:port` with Nagle off.
    pub async fn connect(port: u16) -> Result<Self, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect to {port}: {e}"))?;
        Self::over(stream, 4096)
    }

    /// Connects to `127.0.0.1:port` from the loopback address `from`, with a
    /// read buffer of `buffer` bytes: for many connections at once, which
    /// need more source ports than one address has.
    pub async fn connect_from(from: Ipv4Addr, port: u16, buffer: usize) -> Result<Self, String> {
        let socket = TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
        socket
            .bind(SocketAddr::from((from, 0)))
            .map_err(|e| format!("bind {from}: {e}"))?;
        let stream = socket
            .connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .await
            .map_err(|e| format!("connect to {port} from {from}: {e}"))?;
        Self::over(stream, buffer)
    }

    fn over(stream: TcpStream, buffer: usize) -> Result<Self, String> {
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Self {
            stream: BufReader::with_capacity(buffer, stream),
            out: Vec::with_capacity(buffer.min(512)),
            line: String::with_capacity(128),
        })
    }

    /// `POST path` with a JSON `body`; returns the status and the body.
    pub async fn post(&mut self, path: &str, body: &[u8]) -> Result<(u16, Vec<u8>), String> {
        self.out.clear();
        self.out.extend_from_slice(b"POST ");
        self.out.extend_from_slice(path.as_bytes());
        self.out.extend_from_slice(
            b" HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ",
        );
        self.out
            .extend_from_slice(body.len().to_string().as_bytes());
        self.out.extend_from_slice(b"\r\n\r\n");
        self.out.extend_from_slice(body);
        let io = |e: std::io::Error| format!("connection: {e}");
        self.stream
            .get_mut()
            .write_all(&self.out)
            .await
            .map_err(io)?;

        let status = self.read_line().await?;
        let status: u16 = status
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("bad status line {status:?}"))?;
        let mut length = None;
        loop {
            let header = self.read_line().await?;
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse::<usize>().ok();
                }
            }
        }
        let length = length.ok_or("the response has no content-length")?;
        let mut body = vec![0; length];
        self.stream.read_exact(&mut body).await.map_err(io)?;
        Ok((status, body))
    }

    async fn read_line(&mut self) -> Result<String, String> {
        self.line.clear();
        let read = self
            .stream
            .read_line(&mut self.line)
            .await
            .map_err(|e| format!("connection: {e}"))?;
        if read == 0 {
            return Err("the server closed the connection".into());
        }
        Ok(self.line.trim_end_matches(['\r', '\n']).to_owned())
    }
}
