//! Integration tests of the coordinator service: real HTTP on 127.0.0.1:0, the embedded ports,
//! and a fake worker inside the test.

mod auth;
mod cancel;
mod digest;
mod k8s;
mod notify;
mod pause;
mod probes;
mod refusals;
mod restart;
mod silence;
mod submit;
mod support;
