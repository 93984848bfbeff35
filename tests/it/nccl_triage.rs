//! `nccl` with a default run and a run with `NCCL_PROTO=Simple` (fixtures under
//! `tests/fixtures/nccl/triage/`, written from the line forms of the real logs in
//! the corpus kind `nccl`): the conclusion of each side and the evidence lines printed.

use crate::common;

use common::{fixture, path_str, run};
use serde_json::Value;

fn log(name: &str) -> String {
    fixture("nccl/triage").join(name).display().to_string()
}

fn nccl(args: &[&str]) -> (i32, String) {
    let mut all = vec!["nccl"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = run(&all);
    assert!(!stderr.contains("panicked"), "{stderr}");
    (code, stdout)
}

/// `nccl --output json ARGS`: the exit code and the `proto_triage` section.
fn triage(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--output", "json"];
    all.extend_from_slice(args);
    let (code, stdout) = nccl(&all);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(report["exit_code"], code);
    (code, report["proto_triage"].clone())
}

fn lines(evidence: &Value) -> Vec<u64> {
    evidence
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_u64().unwrap())
        .collect()
}

#[test]
fn simple_works_where_the_default_fails_blames_the_advanced_path() {
    let (default, simple) = (log("default-fails.log"), log("simple-works.log"));
    let (code, t) = triage(&[&default, &simple]);
    assert_eq!(code, 1, "{t}");
    assert_eq!(t["conclusion"], "advanced_path", "{t}");
    let runs = t["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["name"], default.as_str());
    assert_eq!(
        (runs[0]["simple"].clone(), runs[0]["failed"].clone()),
        (false.into(), true.into())
    );
    // The completion error (status 4) is the default side's evidence.
    assert_eq!(lines(&runs[0]["evidence"]), [11], "{t}");
    assert_eq!(
        (runs[1]["simple"].clone(), runs[1]["failed"].clone()),
        (true.into(), false.into())
    );
    assert_eq!(runs[1]["simple_by"], "setting");
    assert_eq!(runs[1]["proto"], "Simple");
    assert_eq!(runs[1]["simple_evidence"]["line"], 3);

    let (code, text) = nccl(&[&default, &simple]);
    assert_eq!(code, 1);
    assert!(
        text.contains("NCCL_PROTO=Simple triage: advanced path at fault (GPUDirect RDMA, LL/LL128 protocols, driver/firmware compatibility)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("  default run {default}: FAILS")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{default}:11: [2026-03-03 12:11:38] gpu-a:3101:3150 [0] transport/net_ib.cc:2453 NCCL WARN NET/IB: Got completion")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  Simple run {simple} (NCCL_PROTO=Simple at {simple}:3): works"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{simple}:3: gpu-a:5101:5140 [0] NCCL INFO NCCL_PROTO set by environment to Simple"
        )),
        "{text}"
    );
    // The job's own report says what the completion status means.
    assert!(
        text.contains("failed: ibv_poll_cq, work completion status 4 (IBV_WC_LOC_PROT_ERR)"),
        "{text}"
    );
}

#[test]
fn simple_failing_too_blames_rdma_connectivity() {
    let (default, simple) = (log("default-fails.log"), log("simple-fails.log"));
    let (code, t) = triage(&[&default, &simple]);
    assert_eq!(code, 1);
    assert_eq!(t["conclusion"], "rdma_connectivity", "{t}");
    let runs = t["runs"].as_array().unwrap();
    assert_eq!(runs[1]["simple_evidence"]["line"], 2, "{t}");
    assert_eq!(runs[1]["failed"], true);
    assert_eq!(lines(&runs[1]["evidence"]), [9], "{t}");
    let (_, text) = nccl(&[&default, &simple]);
    assert!(
        text.contains(
            "NCCL_PROTO=Simple triage: RDMA connectivity itself (driver, subnet manager, PFC/ECN)"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  Simple run {simple} (NCCL_PROTO=simple at {simple}:2): FAILS"
        )),
        "{text}"
    );
    assert!(text.contains(&format!("{simple}:9: ")), "{text}");
    assert!(text.contains("IBV_WC_RETRY_EXC_ERR"), "{text}");

    // A Simple run that fails is enough on its own.
    let (code, t) = triage(&[&simple]);
    assert_eq!(
        (code, t["conclusion"].clone()),
        (1, "rdma_connectivity".into()),
        "{t}"
    );
}

/// At NCCL_DEBUG=WARN a run that works prints only the banner: `--simple` names it.
#[test]
fn the_flag_names_a_simple_run_whose_log_does_not_show_it() {
    let (default, simple) = (log("default-fails.log"), log("simple-warn-level.log"));
    let (code, t) = triage(&[&default, "--simple", &simple]);
    assert_eq!(code, 1);
    assert_eq!(t["conclusion"], "advanced_path", "{t}");
    assert_eq!(t["runs"][1]["simple_by"], "flag");
    assert_eq!(t["runs"][1]["simple_evidence"], Value::Null);
    let (_, text) = nccl(&[&default, "--simple", &simple]);
    assert!(
        text.contains(&format!(
            "  Simple run {simple} (named with --simple): works"
        )),
        "{text}"
    );
    // Without the flag the same log is no Simple run: the suggestion instead.
    let (_, t) = triage(&[&default, &simple]);
    assert_eq!(t["conclusion"], "rerun_with_simple", "{t}");

    // A file without any NCCL line is no run that works.
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong.log");
    std::fs::write(&wrong, "Epoch 1/10 loss=0.3\n").unwrap();
    let (code, t) = triage(&[&default, "--simple", path_str(&wrong)]);
    assert_eq!(code, 1);
    assert_eq!(t["conclusion"], "rerun_with_simple", "{t}");
    assert_eq!(t["runs"][1]["nccl_lines"], false);
    let (_, text) = nccl(&[&default, "--simple", path_str(&wrong)]);
    assert!(text.contains("no NCCL line in it, left out"), "{text}");
    // `--simple` alone is enough arguments.
    let (code, t) = triage(&["--simple", &log("simple-fails.log")]);
    assert_eq!(
        (code, t["conclusion"].clone()),
        (1, "rdma_connectivity".into())
    );
}

#[test]
fn a_lone_failing_run_gets_the_suggestion() {
    let (code, t) = triage(&[&log("default-fails.log")]);
    assert_eq!(code, 1);
    assert_eq!(t["conclusion"], "rerun_with_simple", "{t}");
    assert!(t["message"]
        .as_str()
        .unwrap()
        .starts_with("re-run with NCCL_PROTO=Simple"));
}

/// NCCL_PROTO does not choose the transport: a socket fallback is no case for the comparison.
#[test]
fn a_socket_fallback_has_no_rdma_path_to_triage() {
    let socket = fixture("nccl/socket-fallback.log").display().to_string();
    let (code, t) = triage(&[&socket, &log("simple-works.log")]);
    assert_eq!(code, 1);
    assert_eq!(t["conclusion"], "no_rdma_path", "{t}");
    assert_eq!(t["runs"][0]["rdma"], false);
    assert!(!lines(&t["runs"][0]["evidence"]).is_empty(), "{t}");
}

#[test]
fn healthy_runs_get_no_triage_and_a_healthy_simple_run_nothing_to_compare() {
    let (code, t) = triage(&[&fixture("nccl/ib-gdr").display().to_string()]);
    assert_eq!((code, t), (0, Value::Null));
    let (_, text) = nccl(&[&fixture("nccl/ib-gdr").display().to_string()]);
    assert!(!text.contains("triage"), "{text}");
    let (code, t) = triage(&[&log("simple-works.log")]);
    assert_eq!(code, 0);
    assert_eq!(t["conclusion"], "nothing_to_compare", "{t}");
}

/// Exit 1 for any run that failed: an NCCL WARN error counts, a non-fatal port event does not.
#[test]
fn warn_errors_fail_a_run_non_fatal_port_events_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let healthy = "h1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n\
                   h1:1:1 [0] NCCL INFO Using network IB\n\
                   h1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n";
    let port_event = dir.path().join("port-event.log");
    std::fs::write(
        &port_event,
        format!("{healthy}h1:1:3 [0] transport/net_ib.cc:253 NCCL WARN NET/IB : mlx5_0:1 Got non-fatal async event: port active(9)\n"),
    )
    .unwrap();
    let (code, t) = triage(&[path_str(&port_event)]);
    assert_eq!((code, t), (0, Value::Null));
    let refused = dir.path().join("refused.log");
    std::fs::write(
        &refused,
        format!("{healthy}h1:1:4 [0] misc/socket.cc:484 (ncclSocketConnect) NCCL WARN Net : Connect to 10.0.0.2<43211> failed : Connection refused\n"),
    )
    .unwrap();
    let (code, t) = triage(&[path_str(&refused)]);
    assert_eq!(code, 1);
    assert_eq!(t["conclusion"], "rerun_with_simple", "{t}");
    assert_eq!(lines(&t["runs"][0]["evidence"]), [4], "{t}");
    let (_, text) = nccl(&[path_str(&refused)]);
    assert!(
        text.contains("error: NCCL WARN (") && text.contains("refused.log:4)"),
        "{text}"
    );
}
