//! A small W3C WebDriver client over reqwest: just enough of the protocol to
//! drive headless Chromium through `chromedriver` (Debian's `chromium` and
//! `chromium-driver` packages).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockbroker_tests::redis::free_port;
use reqwest::Method;
use serde_json::{json, Value};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The key a W3C element reference is sent under.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long [`Browser::wait_until`] polls before failing the test.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// `chromedriver` on a free port with one headless Chromium session. Dropping
/// it kills chromedriver's process group, the browser it started included.
pub struct Browser {
    http: reqwest::Client,
    /// `http://127.0.0.1:<port>/session/<id>`.
    session: String,
    driver: Child,
}

impl Browser {
    /// Starts chromedriver and opens a session in a 1024x768 headless window.
    pub async fn new_session() -> Self {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(binary).exists(),
                "{binary} is missing: apt-get install chromium chromium-driver"
            );
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so Drop can end the browser with it.
            .process_group(0)
            .spawn()
            .expect("start chromedriver: apt-get install chromium chromium-driver");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("http client");
        let base = format!("http://127.0.0.1:{port}");
        let mut browser = Self {
            http,
            session: String::new(),
            driver,
        };
        browser.wait_ready(&base).await;
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1024,768"],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let value = browser
            .send(Method::POST, &format!("{base}/session"), Some(capabilities))
            .await;
        let id = value["sessionId"].as_str().expect("a session id");
        browser.session = format!("{base}/session/{id}");
        browser
    }

    async fn wait_ready(&mut self, base: &str) {
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline {
            if let Some(status) = self.driver.try_wait().expect("chromedriver status") {
                panic!("chromedriver exited at start ({status})");
            }
            if let Ok(response) = self.http.get(format!("{base}/status")).send().await {
                let body: Value = response.json().await.unwrap_or_default();
                if body["value"]["ready"] == true {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("chromedriver was not ready within {DEADLINE:?}");
    }

    /// One WebDriver command; its `value`. Panics on a WebDriver error.
    async fn send(&self, method: Method, url: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method.clone(), url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = response.status();
        let mut body: Value = response
            .json()
            .await
            .unwrap_or_else(|e| panic!("{method} {url}: the answer is not JSON: {e}"));
        assert!(
            status.is_success(),
            "{method} {url}: {status}: {} {}",
            body["value"]["error"],
            body["value"]["message"]
        );
        body["value"].take()
    }

    /// A command on this session: `path` after `/session/<id>`.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        self.send(method, &format!("{}{path}", self.session), body)
            .await
    }

    /// Navigates to `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        self.call(Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// The element reference of the first element matching `css`.
    pub async fn find(&self, css: &str) -> String {
        let body = json!({"using": "css selector", "value": css});
        let value = self.call(Method::POST, "/element", Some(body)).await;
        value[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element reference for {css}: {value}"))
            .to_owned()
    }

    /// Clicks `element` as a user would (scrolled into view, not covered).
    pub async fn click(&self, element: &str) {
        self.call(
            Method::POST,
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Types `text` into `element` (`\u{E007}` is Enter).
    pub async fn send_keys(&self, element: &str, text: &str) {
        self.call(
            Method::POST,
            &format!("/element/{element}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// The rendered text of `element`.
    pub async fn text(&self, element: &str) -> String {
        let value = self
            .call(Method::GET, &format!("/element/{element}/text"), None)
            .await;
        value.as_str().expect("element text").to_owned()
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page
    /// and returns what it returns.
    pub async fn execute(&self, script: &str, args: Value) -> Value {
        let body = json!({"script": script, "args": args});
        self.call(Method::POST, "/execute/sync", Some(body)).await
    }

    /// Polls `script` until it returns `true`, for at most [`DEADLINE`].
    pub async fn wait_until(&self, what: &str, script: &str, args: Value) {
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline {
            if self.execute(script, args.clone()).await == true {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let status = self
            .execute(
                "const s = document.getElementById('status'); return s && s.textContent;",
                json!([]),
            )
            .await;
        panic!("{what}: not within {DEADLINE:?} (the page's status line: {status})");
    }

    /// Resizes the window to `width` by `height` CSS pixels.
    pub async fn resize(&self, width: u32, height: u32) {
        let rect = json!({"width": width, "height": height});
        self.call(Method::POST, "/window/rect", Some(rect)).await;
    }

    /// A PNG of the window.
    pub async fn screenshot(&self) -> Vec<u8> {
        let value = self.call(Method::GET, "/screenshot", None).await;
        base64_decode(value.as_str().expect("base64 screenshot"))
    }

    /// The browser console's messages so far (chromedriver's log extension).
    pub async fn console(&self) -> Vec<String> {
        let value = self
            .call(Method::POST, "/se/log", Some(json!({"type": "browser"})))
            .await;
        value
            .as_array()
            .expect("log entries")
            .iter()
            .map(|entry| entry["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Ends the session, closing the browser and removing its profile.
    pub async fn quit(self) {
        self.call(Method::DELETE, "", None).await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64 (as WebDriver sends screenshots) to bytes.
fn base64_decode(text: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let sextet = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {:?}", char::from(c)),
        };
        buffer = (buffer << 6) | u32::from(sextet);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    bytes
}

#[test]
fn base64_decodes_padded_and_unpadded_text() {
    assert_eq!(base64_decode("TWFu"), b"Man");
    assert_eq!(base64_decode("TWE="), b"Ma");
    assert_eq!(base64_decode("TQ=="), b"M");
    assert_eq!(base64_decode("iVBORw0KGgo="), b"\x89PNG\r\n\x1a\n");
}
