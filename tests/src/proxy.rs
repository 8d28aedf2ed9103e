//! [`Proxy`]: a TCP proxy between the broker and Redis that the test can slow
//! down or cut, for outages that are neither "Redis is dead" nor "Redis is
//! fine".

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

/// What the proxy does to traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Bytes pass after `delay` (0 for none), in both directions.
    Pass { delay: Duration },
    /// Every open connection is closed and new ones are closed on accept.
    Cut,
    /// Connections stay open but no byte passes (a silent partition).
    Blackhole,
}

/// A loopback TCP proxy to `127.0.0.1:<target>`. Stops on drop.
pub struct Proxy {
    port: u16,
    mode: watch::Sender<Mode>,
    accept: JoinHandle<()>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target_port`.
    pub async fn start(target_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy addr").port();
        let (mode, _) = watch::channel(Mode::Pass {
            delay: Duration::ZERO,
        });
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let target = SocketAddr::from(([127, 0, 0, 1], target_port));
        let accept = tokio::spawn({
            let mode = mode.clone();
            let conns = Arc::clone(&conns);
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if *mode.borrow() == Mode::Cut {
                        drop(client);
                        continue;
                    }
                    let task = tokio::spawn(relay(client, target, mode.subscribe()));
                    let mut conns = conns.lock().expect("conns");
                    conns.retain(|t| !t.is_finished());
                    conns.push(task);
                }
            }
        });
        Self {
            port,
            mode,
            accept,
            conns,
        }
    }

    /// The port the broker should connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<proxy port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Delays every byte by `delay` in each direction (a round trip gains
    /// twice that); `Duration::ZERO` restores normal service.
    pub fn delay(&self, delay: Duration) {
        self.mode.send_replace(Mode::Pass { delay });
    }

    /// Closes every connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.mode.send_replace(Mode::Cut);
        for task in self.conns.lock().expect("conns").drain(..) {
            task.abort();
        }
    }

    /// Keeps connections open but lets nothing through, like a partition.
    pub fn blackhole(&self) {
        self.mode.send_replace(Mode::Blackhole);
    }

    /// Normal service: no delay, connections accepted.
    pub fn restore(&self) {
        self.delay(Duration::ZERO);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for task in self.conns.lock().expect("conns").drain(..) {
            task.abort();
        }
    }
}

/// Carries one connection both ways until either side closes or it is cut.
async fn relay(client: TcpStream, target: SocketAddr, mode: watch::Receiver<Mode>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = pump(client_read, server_write, mode.clone()) => {}
        () = pump(server_read, client_write, mode) => {}
    }
}

/// Copies one direction. Each chunk is stamped when read and written no
/// earlier than its stamp plus the delay in force then, so latency is added
/// without reordering bytes; blackholed chunks are dropped.
async fn pump(from: OwnedReadHalf, to: OwnedWriteHalf, mut mode: watch::Receiver<Mode>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            sleep_until(due).await;
            if write_all(&to, &bytes).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = tokio::select! {
                read = read_some(&from, &mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                },
                changed = mode.changed() => {
                    if changed.is_err() || *mode.borrow() == Mode::Cut {
                        return;
                    }
                    continue;
                }
            };
            let current = *mode.borrow();
            match current {
                Mode::Pass { delay } => {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        return;
                    }
                }
                Mode::Blackhole => {}
                Mode::Cut => return,
            }
        }
    };
    tokio::select! {
        () = writer => {}
        () = reader => {}
    }
}

/// Reads what is available (0 at end of stream), without tokio's `io-util`.
async fn read_some(from: &OwnedReadHalf, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        from.readable().await?;
        match from.try_read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            result => return result,
        }
    }
}

/// Writes all of `bytes`.
async fn write_all(to: &OwnedWriteHalf, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        to.writable().await?;
        match to.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
