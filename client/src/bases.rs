//! Several coordinators behind one client (decisions.md#coordinator-lease): `--coordinator`
//! may name a comma-separated list; the client talks to one of them at a time and moves to
//! another when the one it talks to cannot be reached, or when a standby names the leader in
//! its `Cowork-Leader` header. Pure: parsing, matching and re-basing URLs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The coordinators a client may talk to, and the one it talks to now (shared by clones of
/// the client, so what one call learnt the next one uses).
#[derive(Clone, Debug)]
pub(crate) struct Bases {
    urls: Arc<[reqwest::Url]>,
    current: Arc<AtomicUsize>,
}

impl Bases {
    /// `text` is one base URL or several separated by commas; each is read by `parse_one`
    /// (which gives it a trailing slash). An error names the entry.
    pub(crate) fn parse(
        text: &str,
        parse_one: impl Fn(&str) -> Result<reqwest::Url, String>,
    ) -> Result<Bases, String> {
        let entries: Vec<&str> = text.split(',').map(str::trim).collect();
        let several = entries.len() > 1;
        let mut urls = Vec::with_capacity(entries.len());
        for entry in entries {
            let url = parse_one(entry).map_err(|problem| {
                if several {
                    format!("{entry:?} of the list: {problem}")
                } else {
                    problem
                }
            })?;
            if urls.contains(&url) {
                return Err(format!("{entry:?} is listed twice"));
            }
            urls.push(url);
        }
        Ok(Bases {
            urls: urls.into(),
            current: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The coordinator the client talks to now.
    pub(crate) fn current(&self) -> &reqwest::Url {
        &self.urls[self.current_index()]
    }

    fn current_index(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.urls.len()
    }

    /// How many coordinators the client knows.
    pub(crate) fn len(&self) -> usize {
        self.urls.len()
    }

    /// Moves on from the one `url` was sent to (it could not be reached) to the next; returns
    /// `url` re-based there. Clones that already moved on are not moved again.
    pub(crate) fn next_after(&self, url: &reqwest::Url) -> Option<reqwest::Url> {
        let from = self.index_of_request(url)?;
        let to = (from + 1) % self.urls.len();
        // Only from where it was sent: another call may have moved on already.
        let _ = self
            .current
            .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed);
        rebase(url, &self.urls[from], &self.urls[to])
    }

    /// A standby said the leader is at `leader`: when that is one of the known coordinators,
    /// the client talks to it from now on and `url` is re-based there; else `None`.
    pub(crate) fn follow_leader(
        &self,
        url: &reqwest::Url,
        leader: &reqwest::Url,
    ) -> Option<reqwest::Url> {
        let from = self.index_of_request(url)?;
        let to = self.urls.iter().position(|base| same_base(base, leader))?;
        if to == from {
            return None;
        }
        self.current.store(to, Ordering::Relaxed);
        rebase(url, &self.urls[from], &self.urls[to])
    }

    /// The base `url` was built on (the longest that prefixes it).
    fn index_of_request(&self, url: &reqwest::Url) -> Option<usize> {
        self.urls
            .iter()
            .enumerate()
            .filter(|(_, base)| url.as_str().starts_with(base.as_str()))
            .max_by_key(|(_, base)| base.as_str().len())
            .map(|(index, _)| index)
    }
}

/// `url`, built on `from`, built on `to` instead (path and query kept).
fn rebase(url: &reqwest::Url, from: &reqwest::Url, to: &reqwest::Url) -> Option<reqwest::Url> {
    let rest = url.as_str().strip_prefix(from.as_str())?;
    to.join(rest).ok()
}

/// The same coordinator: scheme, host, port and path alike, a trailing slash aside.
fn same_base(base: &reqwest::Url, other: &reqwest::Url) -> bool {
    base.origin() == other.origin()
        && base.path().trim_end_matches('/') == other.path().trim_end_matches('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_one(text: &str) -> Result<reqwest::Url, String> {
        let mut url = reqwest::Url::parse(text).map_err(|e| e.to_string())?;
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        Ok(url)
    }

    fn url(text: &str) -> reqwest::Url {
        reqwest::Url::parse(text).expect("a literal URL")
    }

    #[test]
    fn a_list_is_read_in_order_and_a_bad_entry_is_named() {
        let bases = Bases::parse("http://a:8700, http://b:8700/fleet", parse_one).expect("valid");
        assert_eq!(bases.len(), 2);
        assert_eq!(bases.current().as_str(), "http://a:8700/");
        let bad = Bases::parse("http://a:8700,nope", parse_one).expect_err("refused");
        assert!(bad.starts_with("\"nope\" of the list: "), "{bad}");
        let twice = Bases::parse("http://a:8700,http://a:8700/", parse_one).expect_err("refused");
        assert!(twice.contains("listed twice"), "{twice}");
        // One URL: the message is the URL's own, as before lists.
        assert!(
            !Bases::parse("nope", parse_one)
                .expect_err("refused")
                .contains("of the list")
        );
    }

    #[test]
    fn an_unreachable_coordinator_moves_the_client_to_the_next_and_around() {
        let bases = Bases::parse("http://a:1,http://b:2/fleet", parse_one).expect("valid");
        let sent = url("http://a:1/v1/batches/x?kill_running=true");
        let next = bases.next_after(&sent).expect("re-based");
        assert_eq!(
            next.as_str(),
            "http://b:2/fleet/v1/batches/x?kill_running=true"
        );
        assert_eq!(bases.current().as_str(), "http://b:2/fleet/");
        // A clone that still sent to `a` does not move the client back.
        let late = bases.clone().next_after(&sent).expect("re-based");
        assert_eq!(
            late.as_str(),
            "http://b:2/fleet/v1/batches/x?kill_running=true"
        );
        assert_eq!(bases.current().as_str(), "http://b:2/fleet/");
        let around = bases.next_after(&next).expect("re-based");
        assert_eq!(around.as_str(), "http://a:1/v1/batches/x?kill_running=true");
    }

    #[test]
    fn a_named_leader_among_the_known_ones_is_followed() {
        let bases = Bases::parse("http://a:1,http://b:2", parse_one).expect("valid");
        let sent = url("http://a:1/v1/batches");
        assert_eq!(
            bases
                .follow_leader(&sent, &url("http://b:2"))
                .map(|u| u.to_string()),
            Some("http://b:2/v1/batches".to_owned())
        );
        assert_eq!(bases.current().as_str(), "http://b:2/");
        // Unknown to this client (another network's address): not followed.
        assert_eq!(
            bases.follow_leader(&sent, &url("http://10.0.0.9:8700")),
            None
        );
        // The one already asked.
        let again = url("http://b:2/v1/batches");
        assert_eq!(bases.follow_leader(&again, &url("http://b:2/")), None);
    }
}
