//! A small driver of headless Chromium over the DevTools protocol, for pages that never finish
//! loading (the live page keeps its event stream open, so `--dump-dom` would never print).
//!
//! Chromium starts with `--remote-debugging-port=0` and says where it listens on stderr
//! (`DevTools listening on ws://…`); the driver connects to that browser endpoint over a
//! websocket, opens one page target and talks to it through a flattened session: navigate,
//! evaluate script in the page (`Runtime.evaluate`), wait for a condition of the DOM (a
//! promise in the page that a `MutationObserver` resolves: no polling from here), click where
//! an element is (`Input.dispatchMouseEvent`, so a covered or hidden button cannot be clicked)
//! and take screenshots at a given width (`Emulation.setDeviceMetricsOverride`,
//! `Page.captureScreenshot`). Every wait is capped by [`CDP_TIMEOUT`] so that a wedged browser
//! fails the test instead of hanging it; the cap is a guard, never what a test waits for.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_websockets::{MaybeTlsStream, Message, WebSocketStream};

/// Longest wait for one answer or condition of the browser.
pub const CDP_TIMEOUT: Duration = Duration::from_secs(90);

/// Height of the viewport of every screenshot (the full page is captured below it).
const VIEWPORT_HEIGHT: u32 = 900;

type Socket = WebSocketStream<MaybeTlsStream<tokio::net::TcpStream>>;

/// A headless Chromium with one page open, killed on drop.
pub struct Browser {
    child: Child,
    socket: Socket,
    session: String,
    next_id: u64,
    /// Chromium's profile dir (one per browser, so parallel tests do not share its lock).
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium and opens a blank page.
    pub async fn launch() -> Browser {
        let profile = tempfile::Builder::new()
            .prefix("cowork-cdp-")
            .tempdir()
            .expect("a profile dir");
        let mut child = Command::new(crate::browser::chromium())
            .args(crate::browser::HEADLESS_FLAGS)
            .args([
                "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting chromium");
        let stderr = child.stderr.take().expect("chromium's stderr");
        let (found, endpoint) = std::sync::mpsc::channel();
        // Reads stderr to its end, so Chromium never blocks on a full pipe; the first
        // `DevTools listening on` line is the browser endpoint.
        std::thread::spawn(move || {
            let mut found = Some(found);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ")
                    && let Some(found) = found.take()
                {
                    let _ = found.send(url.trim().to_owned());
                }
            }
        });
        let url = endpoint
            .recv_timeout(CDP_TIMEOUT)
            .expect("chromium said where its DevTools endpoint listens");
        let (socket, _) = tokio_websockets::ClientBuilder::new()
            .uri(&url)
            .expect("a websocket url")
            .limits(tokio_websockets::Limits::default().max_payload_len(Some(256 << 20)))
            .connect()
            .await
            .expect("connecting to chromium's DevTools endpoint");
        let mut browser = Browser {
            child,
            socket,
            session: String::new(),
            next_id: 0,
            _profile: profile,
        };
        let target = browser
            .call_browser("Target.createTarget", json!({ "url": "about:blank" }))
            .await;
        let target_id = target["targetId"].as_str().expect("a target id").to_owned();
        let attached = browser
            .call_browser(
                "Target.attachToTarget",
                json!({ "targetId": target_id, "flatten": true }),
            )
            .await;
        browser.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        browser.call("Page.enable", json!({})).await;
        browser.call("Runtime.enable", json!({})).await;
        browser
    }

    /// Sends `method` to the browser itself; returns its result.
    async fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, None).await
    }

    /// Sends `method` to the page; returns its result.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(method, params, Some(session)).await
    }

    async fn send(&mut self, method: &str, params: Value, session: Option<String>) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            message["sessionId"] = Value::String(session);
        }
        self.socket
            .send(Message::text(message.to_string()))
            .await
            .expect("sending to chromium");
        let answer = tokio::time::timeout(CDP_TIMEOUT, async {
            loop {
                let frame = self
                    .socket
                    .next()
                    .await
                    .expect("chromium closed the DevTools connection")
                    .expect("reading from chromium");
                let Some(text) = frame.as_text() else {
                    continue;
                };
                let answer: Value = serde_json::from_str(text).expect("DevTools json");
                // Events (no id) and answers to other calls are not this call's.
                if answer["id"].as_u64() == Some(id) {
                    return answer;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("chromium did not answer {method} in {CDP_TIMEOUT:?}"));
        assert!(
            answer.get("error").is_none(),
            "{method} failed: {}",
            answer["error"]
        );
        answer["result"].clone()
    }

    /// Opens `url` in the page (returns once the navigation is committed).
    pub async fn open(&mut self, url: &str) {
        let navigated = self.call("Page.navigate", json!({ "url": url })).await;
        assert!(
            navigated.get("errorText").is_none(),
            "opening {url}: {navigated}"
        );
    }

    /// The value of `expression` in the page (a promise is awaited).
    pub async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expression, "returnByValue": true, "awaitPromise": true }),
            )
            .await;
        assert!(
            result.get("exceptionDetails").is_none(),
            "evaluating {expression}: {}",
            result["exceptionDetails"]
        );
        result["result"]["value"].clone()
    }

    /// Waits until `condition` (a JavaScript expression) is truthy in the page, checked now
    /// and after every change of the DOM; returns the value of `value` (an expression) at
    /// that moment. Panics with `what` after [`CDP_TIMEOUT`].
    pub async fn wait_for(&mut self, condition: &str, value: &str, what: &str) -> Value {
        let script = format!(
            r#"new Promise((resolve) => {{
  const check = () => {{ try {{ if ({condition}) {{ observer.disconnect(); resolve({value}); }} }} catch (e) {{}} }};
  const observer = new MutationObserver(check);
  observer.observe(document, {{ subtree: true, childList: true, characterData: true, attributes: true }});
  check();
}})"#
        );
        match tokio::time::timeout(CDP_TIMEOUT, self.eval(&script)).await {
            Ok(value) => value,
            Err(_) => {
                let body = self
                    .eval("document.body ? document.body.innerText : ''")
                    .await;
                panic!("{what}: not seen in {CDP_TIMEOUT:?}; the page says:\n{body}")
            }
        }
    }

    /// Clicks the middle of the element `selector` with the mouse, as a person would.
    pub async fn click(&mut self, selector: &str) {
        let selector_json = serde_json::to_string(selector).expect("a selector");
        let rect = self
            .eval(&format!(
                r#"(() => {{ const node = document.querySelector({selector_json}); if (!node) return null;
  node.scrollIntoView({{ block: 'center' }}); const r = node.getBoundingClientRect();
  return {{ x: r.left + r.width / 2, y: r.top + r.height / 2, disabled: !!node.disabled }}; }})()"#
            ))
            .await;
        assert!(!rect.is_null(), "no element {selector} to click");
        assert_eq!(rect["disabled"], false, "{selector} is disabled");
        let (x, y) = (rect["x"].clone(), rect["y"].clone());
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }),
            )
            .await;
        }
    }

    /// Sets the viewport to `width` px wide.
    pub async fn set_width(&mut self, width: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": VIEWPORT_HEIGHT, "deviceScaleFactor": 1, "mobile": false }),
        )
        .await;
    }

    /// A PNG of the whole page at `width` px, saved as `<dir>/<name>-<width>.png`.
    pub async fn screenshot(&mut self, dir: &Path, name: &str, width: u32) -> PathBuf {
        self.set_width(width).await;
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({ "format": "png", "captureBeyondViewport": true }),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("screenshot base64");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = dir.join(format!("{name}-{width}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
