//! Helpers shared by the bench binaries.
#![allow(dead_code)]

pub mod proc;
