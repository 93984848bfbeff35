//! Helpers shared by the bench binaries.
#![allow(dead_code)]

pub mod fixture;
pub mod proc;
pub mod server;
pub mod stats;

/// The bench's exit status: figures were printed, or why it failed.
pub fn exit_code(bench: &str, result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\n{bench} bench FAILED: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
