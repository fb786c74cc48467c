//! Reading a harness's stdout and stderr concurrently into bounded buffers, so a chatty child can
//! neither deadlock on a full pipe nor exhaust memory.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use crate::executor::classify::ProcessEnd;

/// After the process group was killed, how long the pipes are still read. Only a process that
/// left the group (its own `setsid`) can keep them open that long; its output is then given up
/// rather than letting it hold the job forever.
const PIPE_DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Size of one read from a pipe.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// How the process ended and what it printed.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) end: ProcessEnd,
    pub(crate) stdout: Captured,
    pub(crate) stderr: Captured,
}

/// Which part of an over-long stream is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keep {
    /// The first bytes (stderr: the first lines name the run dir and the first error).
    Head,
    /// The last bytes, starting at a line boundary (stdout: the envelope is the last line).
    Tail,
}

/// A bounded buffer for one stream.
#[derive(Debug)]
pub(crate) struct Capture {
    bytes: Vec<u8>,
    limit: usize,
    keep: Keep,
    dropped_bytes: u64,
}

impl Capture {
    pub(crate) fn new(limit: usize, keep: Keep) -> Capture {
        Capture {
            bytes: Vec::new(),
            limit,
            keep,
            dropped_bytes: 0,
        }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        match self.keep {
            Keep::Head => {
                let room = self.limit.saturating_sub(self.bytes.len());
                let taken = room.min(chunk.len());
                self.bytes.extend_from_slice(&chunk[..taken]);
                self.dropped_bytes += (chunk.len() - taken) as u64;
            }
            Keep::Tail => {
                self.bytes.extend_from_slice(chunk);
                // Trimming only once the buffer holds twice the limit keeps the cost of the
                // front removals linear in the bytes read.
                if self.bytes.len() > self.limit.saturating_mul(2).max(READ_CHUNK_BYTES) {
                    self.trim_front();
                }
            }
        }
    }

    fn trim_front(&mut self) {
        let excess = self.bytes.len().saturating_sub(self.limit);
        if excess > 0 {
            self.bytes.drain(..excess);
            self.dropped_bytes += excess as u64;
        }
    }

    pub(crate) fn finish(mut self) -> Captured {
        if self.keep == Keep::Tail {
            self.trim_front();
            if self.dropped_bytes > 0 {
                // The first kept line is a fragment; drop it so that only whole lines remain.
                let cut = self
                    .bytes
                    .iter()
                    .position(|&byte| byte == b'\n')
                    .map_or(self.bytes.len(), |newline| newline + 1);
                self.bytes.drain(..cut);
                self.dropped_bytes += cut as u64;
            }
        }
        Captured {
            bytes: self.bytes,
            dropped_bytes: self.dropped_bytes,
            abandoned: false,
            read_error: None,
        }
    }
}

/// What was read from one stream.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub(crate) bytes: Vec<u8>,
    pub(crate) dropped_bytes: u64,
    /// `true` when the pipe stayed open [`PIPE_DRAIN_GRACE`] after the group was killed.
    pub(crate) abandoned: bool,
    pub(crate) read_error: Option<io::Error>,
}

/// Reads a stream to its end into `capture`, or until [`PIPE_DRAIN_GRACE`] after the leader
/// is gone.
pub(super) async fn capture(
    reader: &mut (dyn AsyncRead + Unpin + Send),
    mut capture: Capture,
    leader_gone: &CancellationToken,
) -> Captured {
    let deadline = async {
        leader_gone.cancelled().await;
        tokio::time::sleep(PIPE_DRAIN_GRACE).await;
    };
    tokio::pin!(deadline);
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut abandoned = false;
    let mut read_error = None;
    loop {
        // Reading a pipe is cancel-safe: bytes not yet returned stay in the pipe, so dropping
        // the read when the deadline wins loses only output we are giving up anyway.
        tokio::select! {
            read = reader.read(&mut chunk) => match read {
                Ok(0) => break,
                Ok(n_read) => capture.push(&chunk[..n_read]),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    read_error = Some(err);
                    break;
                }
            },
            () = &mut deadline => {
                abandoned = true;
                break;
            }
        }
    }
    let mut captured = capture.finish();
    captured.abandoned = abandoned;
    captured.read_error = read_error;
    captured
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_capture(keep: Keep, limit: usize, chunks: &[&str], expect: &str, expect_dropped: u64) {
        let mut capture = Capture::new(limit, keep);
        for chunk in chunks {
            capture.push(chunk.as_bytes());
        }
        let captured = capture.finish();
        assert_eq!(
            String::from_utf8_lossy(&captured.bytes),
            expect,
            "{keep:?} {chunks:?}"
        );
        assert_eq!(
            captured.dropped_bytes, expect_dropped,
            "{keep:?} {chunks:?}"
        );
    }

    #[test]
    fn captures_are_bounded() {
        check_capture(Keep::Head, 10, &["abc", "def"], "abcdef", 0);
        check_capture(Keep::Head, 4, &["abc", "def"], "abcd", 2);
        check_capture(Keep::Head, 0, &["abc"], "", 3);
        check_capture(Keep::Tail, 10, &["abc", "def"], "abcdef", 0);
        // Over the limit the tail is kept, from the first whole line on.
        check_capture(Keep::Tail, 8, &["junk\nmore", "\n{env}\n"], "{env}\n", 10);
        check_capture(Keep::Tail, 4, &["0123456789"], "", 10);
    }

    #[test]
    fn tail_capture_stays_bounded_while_reading() {
        let mut capture = Capture::new(16, Keep::Tail);
        let line = "x".repeat(1000) + "\n";
        for _ in 0..1000 {
            capture.push(line.as_bytes());
            assert!(capture.bytes.len() <= 2 * READ_CHUNK_BYTES + line.len());
        }
        capture.push(b"{\"tool\":1}\n");
        let captured = capture.finish();
        assert_eq!(captured.bytes, b"{\"tool\":1}\n");
        assert_eq!(captured.dropped_bytes, 1000 * 1001);
    }
}
