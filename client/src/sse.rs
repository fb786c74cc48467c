//! Server-sent events (`text/event-stream`) as the API sends them: [`SseParser`] turns the
//! body's bytes into events, [`SseReader`] reads a response's body event by event. `event:`
//! and `data:` lines, a blank line ends an event, comment lines (keep-alives) are skipped.

use std::collections::VecDeque;

use bytes::Bytes;
use futures::stream::{self, BoxStream, Stream, StreamExt};

use crate::ClientError;

/// One server-sent event: its name (`message` when none was given) and its data lines joined
/// with `\n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// An incremental parser of a `text/event-stream` body (the subset the API uses: `event:`,
/// `data:`, comments; `id:` and `retry:` are ignored).
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of an incomplete line.
    line: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
}

impl SseParser {
    /// Feeds a chunk of the body; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in chunk {
            if byte != b'\n' {
                self.line.push(byte);
                continue;
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let line = String::from_utf8_lossy(&self.line).into_owned();
            self.line.clear();
            if let Some(event) = self.take_line(&line) {
                events.push(event);
            }
        }
        events
    }

    fn take_line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = self.event.take();
            if self.data.is_empty() {
                return None;
            }
            return Some(SseEvent {
                event: event.unwrap_or_else(|| "message".to_owned()),
                data: std::mem::take(&mut self.data).join("\n"),
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => self.data.push(value.to_owned()),
            _ => {}
        }
        None
    }
}

/// The body of an event-stream response, read event by event. It ends after the body's end or
/// after the first error.
pub(crate) struct SseReader {
    url: String,
    bytes: BoxStream<'static, reqwest::Result<Bytes>>,
    parser: SseParser,
    pending: VecDeque<SseEvent>,
    ended: bool,
}

impl SseReader {
    /// A reader of `response`'s body, `url` naming it in errors.
    pub(crate) fn new(url: &reqwest::Url, response: reqwest::Response) -> SseReader {
        SseReader {
            url: url.to_string(),
            bytes: response.bytes_stream().boxed(),
            parser: SseParser::default(),
            pending: VecDeque::new(),
            ended: false,
        }
    }

    /// The url the events come from.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The next event; `None` once the body ended, an `Unavailable` error when it broke.
    pub(crate) async fn next(&mut self) -> Option<Result<SseEvent, ClientError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.ended {
                return None;
            }
            match self.bytes.next().await {
                Some(Ok(chunk)) => self.pending.extend(self.parser.push(&chunk)),
                Some(Err(error)) => {
                    self.ended = true;
                    return Some(Err(ClientError::Unavailable {
                        url: self.url.clone(),
                        message: format!(
                            "the event stream broke: {}",
                            cowork_fabric::error_chain(&error)
                        ),
                    }));
                }
                None => {
                    self.ended = true;
                    return None;
                }
            }
        }
    }

    /// The events as a stream.
    pub(crate) fn into_stream(
        self,
    ) -> impl Stream<Item = Result<SseEvent, ClientError>> + Send + 'static {
        stream::unfold(self, |mut reader| async move {
            let item = reader.next().await?;
            Some((item, reader))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: name.to_owned(),
            data: data.to_owned(),
        }
    }

    /// Parses `chunks` in order and compares every completed event with `expect`.
    fn check(chunks: &[&str], expect: &[SseEvent]) {
        let mut parser = SseParser::default();
        let events: Vec<SseEvent> = chunks
            .iter()
            .flat_map(|chunk| parser.push(chunk.as_bytes()))
            .collect();
        assert_eq!(events, expect, "{chunks:?}");
    }

    #[test]
    fn sse_events_are_parsed_across_chunks() {
        check(
            &["event: progress\ndata: {}\n\n"],
            &[event("progress", "{}")],
        );
        check(
            &["event: prog", "ress\r\ndata: {\"a\"", ":1}\r\n", "\r\n"],
            &[event("progress", "{\"a\":1}")],
        );
        check(&[": keep-alive\n\n"], &[]);
        check(&["data: a\ndata: b\n\n"], &[event("message", "a\nb")]);
        check(
            &["data:x\n\nevent: end\ndata: {}\n\n"],
            &[event("message", "x"), event("end", "{}")],
        );
        check(&["event: end\ndata: {}\n"], &[]);
        check(
            &["id: 3\nretry: 10\nevent: end\ndata: {}\n\n"],
            &[event("end", "{}")],
        );
    }
}
