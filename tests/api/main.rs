//! The broker's HTTP contract, tested against a real `redis-server` per test.

mod faults;
mod fences;
mod leases;
mod lifecycle;
mod lockctl;
mod observability;
mod openapi;
mod outage;
mod security;
mod validation;
mod waiting;
