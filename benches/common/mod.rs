//! Helpers shared by the bench binaries.
#![allow(dead_code)]

pub mod fixture;
pub mod proc;
pub mod server;
