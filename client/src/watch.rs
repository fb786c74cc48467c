//! [`CoordinatorClient::watch`]: a batch's progress events while it runs, then its end, read
//! from the server-sent events of `GET /v1/batches/{id}/events`.

use cowork_schema::BatchId;
use cowork_schema::api::{BatchEnd, ProgressSnapshot, SSE_END, SSE_PROGRESS};
use futures::stream::{self, Stream};

use crate::sse::{SseEvent, SseReader};
use crate::{ClientError, CoordinatorClient};

/// One event of a watched batch.
// A watch handles one event at a time and most of its events are progress: boxing the large
// variant would cost an allocation per event and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent {
    Progress(ProgressSnapshot),
    /// The last event: the batch reached a final state.
    End(BatchEnd),
}

impl CoordinatorClient {
    /// Watches a batch: progress events while it runs, then one [`WatchEvent::End`], after
    /// which the stream ends. A stream that closes before the end yields an `Unavailable`
    /// error last.
    pub async fn watch(
        &self,
        batch_id: &BatchId,
    ) -> Result<impl Stream<Item = Result<WatchEvent, ClientError>> + Send + 'static, ClientError>
    {
        let events = self
            .event_stream(&format!("v1/batches/{batch_id}/events"))
            .await?;
        let state = WatchState {
            events,
            finished: false,
        };
        Ok(stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        }))
    }
}

/// State of a watch stream.
struct WatchState {
    events: SseReader,
    finished: bool,
}

impl WatchState {
    async fn next(&mut self) -> Option<Result<WatchEvent, ClientError>> {
        loop {
            if self.finished {
                return None;
            }
            match self.events.next().await {
                Some(Ok(event)) => match self.decode(&event) {
                    Ok(Some(WatchEvent::End(end))) => {
                        self.finished = true;
                        return Some(Ok(WatchEvent::End(end)));
                    }
                    Ok(Some(progress)) => return Some(Ok(progress)),
                    // An event name this client does not know: skipped, for forward
                    // compatibility.
                    Ok(None) => {}
                    Err(error) => {
                        self.finished = true;
                        return Some(Err(error));
                    }
                },
                Some(Err(error)) => {
                    self.finished = true;
                    return Some(Err(error));
                }
                None => {
                    self.finished = true;
                    return Some(Err(ClientError::Unavailable {
                        url: self.events.url().to_owned(),
                        message: "the event stream closed before the batch ended".to_owned(),
                    }));
                }
            }
        }
    }

    fn decode(&self, event: &SseEvent) -> Result<Option<WatchEvent>, ClientError> {
        let protocol = |e: serde_json::Error| ClientError::Protocol {
            url: self.events.url().to_owned(),
            message: format!("{} event is not the documented json: {e}", event.event),
        };
        Ok(match event.event.as_str() {
            SSE_PROGRESS => Some(WatchEvent::Progress(
                serde_json::from_str(&event.data).map_err(protocol)?,
            )),
            SSE_END => Some(WatchEvent::End(
                serde_json::from_str(&event.data).map_err(protocol)?,
            )),
            _ => None,
        })
    }
}
