//! Every integration test of the project, in one test binary: one module per area (they were 26
//! binaries, each compiling and linking `tests/common` again). `cargo test --test it golden::`
//! runs one module; `cargo test --test it -- --list` lists them all.
//!
//! `tests/common` stays where the benches include its pieces from (`benches/*.rs` use
//! `#[path = "../tests/common/..."]`).

#[path = "../common/mod.rs"]
mod common;

mod alerts;
mod alerts_e2e;
mod architecture;
mod cardinality;
mod cli;
mod corpus_harness;
mod dashboards;
mod dashboards_schema;
mod deb;
mod demo;
mod demo_fec;
mod demo_pcie;
mod deploy;
mod device_removal;
mod doctor;
mod ecn_settings;
mod ecn_tune;
mod ethtool_faults;
mod ethtool_netns;
mod exclusion;
mod fd_limit;
mod fleet_store;
mod fuzz_regressions;
mod golden;
mod gray_e2e;
mod helm;
mod hostile_peers;
mod hot_unplug;
mod http;
mod hung_reads;
mod ib_alerts_e2e;
mod ib_corpus;
mod ib_diags_source;
mod ib_fabric;
mod ib_report;
mod image;
mod landing;
mod landing_browser;
mod localizer_e2e;
mod nccl;
mod nccl_corpus;
mod nccl_tests;
mod nccl_triage;
mod netlink_pods;
mod node_exporter_crosscheck;
mod optics;
mod pcie;
mod ping;
mod pods;
mod probe_localization_e2e;
mod probe_two_faults_e2e;
mod prometheus_scrape;
mod quirks;
mod real_kernel;
mod real_kernel_probe;
mod reload;
mod secrets;
mod switch_gnmi;
mod switch_pfc;
mod switch_poll;
mod switch_settings;
mod switch_shard;
mod switch_snmp;
mod switch_snmpsim;
mod web;

/// Cargo makes a test binary of every `tests/*.rs` and `tests/*/main.rs`: a new test goes in a
/// module here, not in a 27th binary that compiles and links everything again.
#[test]
fn the_integration_tests_are_one_binary() {
    let tests = common::project_root().join("tests");
    let mut binaries: Vec<String> = std::fs::read_dir(&tests)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension().is_some_and(|e| e == "rs") || path.join("main.rs").is_file()
        })
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    binaries.sort();
    assert_eq!(binaries, ["it"], "test binaries in {}", tests.display());
}
