//! Integration tests of the fabric's distributed implementations against real servers started
//! by `cowork-testkit` (one server per test, on a loopback port, in a temp dir; `cluster`
//! starts a three-node JetStream cluster on loopback).

mod auth;
mod cluster;
mod fence;
mod lease;
mod listing;
mod nats;
mod nats_pipeline;
mod s3;
