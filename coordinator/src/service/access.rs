//! Who may do what on `/v1/*`: the bearer token of a request checked against the configured
//! full and read-only tokens, by their digests and in constant time.

use super::{CoordinatorConfig, Service, TokenPolicy};

/// What a request's token lets it do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Everything: read, submit and steer batches.
    Full,
    /// `GET` only: status, reports, artifacts, workers, the pages.
    Read,
}

/// The sha256 of each configured token: comparing fixed-size digests in constant time reveals
/// neither a token's bytes nor its length.
pub(super) struct TokenDigests {
    /// Of each accepted (full) token.
    full: Vec<[u8; 32]>,
    /// Of each read-only token, compared the same way.
    read: Vec<[u8; 32]>,
}

impl TokenDigests {
    /// The digests of the tokens `config` accepts.
    pub(super) fn of(config: &CoordinatorConfig) -> TokenDigests {
        let full = config
            .api_tokens
            .iter()
            .map(|token| digest(token.expose().as_bytes()))
            .collect();
        let read = config
            .read_tokens
            .iter()
            .map(|token| digest(token.expose().as_bytes()))
            .collect();
        TokenDigests { full, read }
    }
}

impl Service {
    /// What `presented` (the bearer token of a request, if any) may do on `/v1/*`; `None`
    /// when it is missing or matches no configured token.
    pub(crate) fn access(&self, presented: Option<&str>) -> Option<Access> {
        if self.tokens.full.is_empty() && self.tokens.read.is_empty() {
            return self.config.allow_unauthenticated.then_some(Access::Full);
        }
        let presented = digest(presented?.as_bytes());
        // Every configured token of both kinds is compared, so the time taken says neither
        // which one matched nor of which kind it is.
        let full = any_matches(&self.tokens.full, &presented);
        let read = any_matches(&self.tokens.read, &presented);
        if full {
            Some(Access::Full)
        } else if read {
            Some(Access::Read)
        } else {
            None
        }
    }
}

impl Service {
    /// The policy of `presented` (a request's bearer token), if one binds it. Every policy's
    /// digest is compared in constant time, as [`Service::access`] compares the tokens.
    pub(crate) fn token_policy(&self, presented: Option<&str>) -> Option<&TokenPolicy> {
        use subtle::ConstantTimeEq;
        let presented = digest(presented?.as_bytes());
        let mut found = None;
        for policy in &self.config.token_policies {
            if bool::from(policy.token_sha256.ct_eq(&presented)) && found.is_none() {
                found = Some(policy);
            }
        }
        found
    }
}

/// `true` when any of `accepted` equals `presented`, comparing all of them in constant time.
fn any_matches(accepted: &[[u8; 32]], presented: &[u8; 32]) -> bool {
    use subtle::ConstantTimeEq;
    let mut matched = subtle::Choice::from(0);
    for digest in accepted {
        matched |= digest.ct_eq(presented);
    }
    bool::from(matched)
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    super::config::sha256(bytes)
}
