//! [`LossyFront`]: an HTTP front between the client and the broker that
//! passes every request on but answers the first acquire with a `503`, as a
//! load balancer does when the broker's answer is lost on the way back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The front, listening on a loopback port until dropped.
pub struct LossyFront {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    task: JoinHandle<()>,
}

impl LossyFront {
    /// A front for the broker at `broker` (its base URL).
    pub async fn start(broker: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind front");
        let base = format!("http://{}", listener.local_addr().expect("front address"));
        let lost_one = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(async move {
            let http = reqwest::Client::new();
            while let Ok((conn, _)) = listener.accept().await {
                let (http, broker, lost_one) =
                    (http.clone(), broker.clone(), Arc::clone(&lost_one));
                tokio::spawn(async move {
                    let _ = serve(conn, &http, &broker, &lost_one).await;
                });
            }
        });
        Self { base, task }
    }
}

impl Drop for LossyFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One request: read it whole, send it to the broker, answer with the
/// broker's answer, or with a 503 for the first acquire.
async fn serve(
    mut conn: TcpStream,
    http: &reqwest::Client,
    broker: &str,
    lost_one: &AtomicBool,
) -> std::io::Result<()> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let read = conn.read(&mut buf).await?;
        if read == 0 {
            return Ok(());
        }
        bytes.extend_from_slice(&buf[..read]);
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_string();
    let length: usize = (head.lines())
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while bytes.len() < head_end + length {
        let read = conn.read(&mut buf).await?;
        if read == 0 {
            return Ok(());
        }
        bytes.extend_from_slice(&buf[..read]);
    }
    let mut request_line = head.lines().next().unwrap_or("").split(' ');
    let method = request_line.next().unwrap_or("GET").to_owned();
    let path = request_line.next().unwrap_or("/").to_owned();
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let answer = http
        .request(method, format!("{broker}{path}"))
        .header("content-type", "application/json")
        .body(bytes[head_end..head_end + length].to_vec())
        .send()
        .await
        .expect("the broker answers");
    let mut status = answer.status().as_u16();
    let mut body = answer.bytes().await.expect("answer body").to_vec();
    if path.ends_with("/acquire") && !lost_one.swap(true, Ordering::SeqCst) {
        status = 503;
        body =
            br#"{"error":{"code":"backend_unavailable","message":"the answer was lost"}}"#.to_vec();
    }
    let head = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(&body).await?;
    conn.shutdown().await
}
