//! The broker's HTTP contract, tested against a real `redis-server` per test.

mod alerts;
mod cluster;
mod config;
mod conformance;
mod cross_site;
mod events;
mod faults;
mod fences;
mod http_errors;
mod keys;
mod leases;
mod lifecycle;
mod lockctl;
mod observability;
mod openapi;
mod outage;
mod overload;
mod quorum;
mod retries;
mod security;
mod semaphores;
mod sentinel;
mod transcripts;
mod ui;
mod validation;
mod waiting;
