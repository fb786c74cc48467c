//! A stored object streamed as an answer body from a local spool file, with its length said up
//! front.

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use cowork_fabric::{ArtifactError, ArtifactStore};

/// A stored object as an answer body that streams: the store copies it into a local spool
/// file (checking its digest on the way, so no byte it cannot vouch for is ever sent) and the
/// answer reads the file back piece by piece. A 1.5 GB envelope costs the coordinator a file,
/// not its memory, and any number of downloads at once cost one buffer each. The spool is
/// unlinked as soon as it is open: nothing is left behind when the answer ends or is dropped.
pub(super) struct StoredBody {
    pub(super) body: Body,
    pub(super) size: u64,
}

/// Says the size up front, so a client sees a download cut short as such.
pub(super) fn set_length(response: &mut Response, size: u64) {
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(size));
}

pub(super) async fn stored_body(
    store: &dyn ArtifactStore,
    key: &str,
) -> Result<StoredBody, ArtifactError> {
    let local = |error: std::io::Error| ArtifactError::Failed {
        key: key.to_owned(),
        message: format!("spooling the object to a local file: {error}"),
    };
    let spool = tempfile::NamedTempFile::new()
        .map_err(local)?
        .into_temp_path();
    let size = store.get_file(key, &spool).await?;
    let file = tokio::fs::File::open(&spool).await.map_err(local)?;
    // Unlinked here; the open handle keeps the bytes until the body is done with them.
    drop(spool);
    Ok(StoredBody {
        body: Body::from_stream(tokio_util::io::ReaderStream::with_capacity(file, 64 * 1024)),
        size,
    })
}
