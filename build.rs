//! Records the git revision and rustc version for `rdma_exporter_build_info`, and generates the
//! gNMI and kubelet pod-resources code.
use std::process::Command;

#[path = "build/git_watch.rs"]
mod git_watch;

fn output_of(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    compile_protos();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = output_of(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into());
    let revision =
        output_of("git", &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RFE_RUSTC_VERSION={rustc_version}");
    println!("cargo:rustc-env=RFE_GIT_REVISION={revision}");
    // Only files that exist: a missing one reruns this script, and rebuilds the crate, always.
    let here = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    for path in git_watch::watched(std::path::Path::new(&here)) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

/// Client and server code from proto/gnmi.proto (the server for the tests' in-process target)
/// and proto/podresources.proto (the server for the simulator's kubelet).
fn compile_protos() {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(["gnmi.proto", "podresources.proto"], ["proto"])
        .expect("proto/gnmi.proto and proto/podresources.proto compile");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)
        .expect("generating gNMI and pod-resources code");
}
