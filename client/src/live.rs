//! The live page of a batch as a browser opens it: the page (`GET /v1/batches/{id}/live.html`),
//! its script (`GET /assets/live.js`) and its live stream (`GET /v1/batches/{id}/live/events`).

use cowork_schema::BatchId;
use futures::stream::Stream;

use crate::sse::SseEvent;
use crate::{ClientError, CoordinatorClient};

impl CoordinatorClient {
    /// The live page of a batch (HTML).
    pub async fn live_page(&self, batch_id: &BatchId) -> Result<String, ClientError> {
        self.text(&format!("v1/batches/{batch_id}/live.html")).await
    }

    /// The script of the live pages.
    pub async fn live_script(&self) -> Result<String, ClientError> {
        self.text("assets/live.js").await
    }

    /// The live stream of a batch: a `snapshot` event, then a `delta` whenever something
    /// changed, until the coordinator ends the stream after the verdict (or at its shutdown).
    /// A stream that breaks yields an `Unavailable` error last.
    pub async fn live_events(
        &self,
        batch_id: &BatchId,
    ) -> Result<impl Stream<Item = Result<SseEvent, ClientError>> + Send + 'static, ClientError>
    {
        let events = self
            .event_stream(&format!("v1/batches/{batch_id}/live/events"))
            .await?;
        Ok(events.into_stream())
    }
}
