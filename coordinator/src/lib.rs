//! Coordinator (in progress).
