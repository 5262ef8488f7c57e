//! The crate's one integration-test binary (one link step on 2 cores); each module is one concern.

mod api;
mod cache;
mod cli;
mod cluster;
mod codec;
mod dataset;
mod decoder;
mod hybrid;
mod inbox;
mod monitoring;
mod producers;
mod properties;
mod properties_v2;
mod push;
mod repair;
mod replay;
mod restart;
mod schemas;
mod service;
mod soak;
mod support;
mod tls;
mod typescript;
mod v2;
mod v3;
mod v4;
