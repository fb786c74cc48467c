//! Ports and bundles (in progress).
