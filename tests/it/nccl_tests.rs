//! `nccl-tests FILE|-` on real nccl-tests outputs (corpus kind `nccl-tests`, sources in its
//! `SOURCES.md`) and on runs written here in nccl-tests' own table format
//! (src/util.cu of NVIDIA/nccl-tests: `writeResultHeader`, `writeBenchmarkLine*`,
//! `writeResultFooter`). Every run passes `--line-rate` or `--path.sysfs`: the test machine's
//! own RDMA ports must not decide a verdict.

use std::path::{Path, PathBuf};

use crate::common;

use common::{fixture, path_str, run};
use serde_json::Value;

fn sample(name: &str) -> PathBuf {
    common::corpus::corpus("nccl-tests").sample(name)
}

fn nccl_tests(args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["nccl-tests"];
    all.extend_from_slice(args);
    run(&all)
}

/// Runs with `--output json`; the exit code and the document, which must say the same code.
fn json(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--output", "json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = nccl_tests(&all);
    let report: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    assert_eq!(report["exit_code"], code, "{stdout}");
    (code, report)
}

/// What each corpus file must give: exit code, verdict, rows, footer average, hosts,
/// `#wrong` total, out-of-bounds count; with the `--line-rate` (Gb/s per GPU) its hardware has
/// where the run is multi-node.
struct Expected {
    file: &'static str,
    line_rate: Option<&'static str>,
    exit: i32,
    verdict: &'static str,
    rows: usize,
    avg_busbw: Option<f64>,
    hosts: usize,
    wrong: u64,
    out_of_bounds: Option<u64>,
    /// Lines inside the table that are not rows (a cut last row).
    skipped: u64,
}

const CORPUS: &[Expected] = &[
    // GCP A3 Mega: 8 x 200 Gb/s GPUDirect-TCPXO NICs for 8 H100s.
    Expected {
        file: "a3mega-h100-2node-all_reduce.md",
        line_rate: Some("200"),
        exit: 0,
        verdict: "healthy",
        rows: 31,
        avg_busbw: Some(70.742),
        hosts: 2,
        wrong: 0,
        out_of_bounds: Some(0),
        skipped: 0,
    },
    Expected {
        file: "issue-nccl-tests-37-all_gather-out-of-bounds.txt",
        line_rate: None,
        exit: 1,
        verdict: "data_errors",
        rows: 1,
        avg_busbw: Some(128.942),
        hosts: 0,
        wrong: 0,
        out_of_bounds: Some(2),
        skipped: 0,
    },
    Expected {
        file: "issue-nccl-tests-82-broadcast-excerpt.txt",
        line_rate: Some("100"),
        exit: 1,
        verdict: "incomplete",
        rows: 1,
        avg_busbw: None,
        hosts: 2,
        wrong: 0,
        out_of_bounds: None,
        skipped: 1,
    },
    Expected {
        file: "li-plus-a100-sendrecv-no-footer.md",
        line_rate: None,
        exit: 1,
        verdict: "incomplete",
        rows: 4,
        avg_busbw: None,
        hosts: 0,
        wrong: 0,
        out_of_bounds: None,
        skipped: 0,
    },
    Expected {
        file: "ocitutorials-a100-1node-all_reduce.txt",
        line_rate: Some("200"),
        exit: 0,
        verdict: "not_judged",
        rows: 1,
        avg_busbw: Some(232.167),
        hosts: 1,
        wrong: 0,
        out_of_bounds: Some(0),
        skipped: 0,
    },
    // OCI BM.GPU4.8: 16 x 100 Gb/s RoCE ports for 8 A100s.
    Expected {
        file: "ocitutorials-a100-2node-all_reduce.txt",
        line_rate: Some("200"),
        exit: 0,
        verdict: "healthy",
        rows: 1,
        avg_busbw: Some(191.752),
        hosts: 2,
        wrong: 0,
        out_of_bounds: Some(0),
        skipped: 0,
    },
    Expected {
        file: "superbench-a100-alltoall.log",
        line_rate: None,
        exit: 0,
        verdict: "not_judged",
        rows: 34,
        avg_busbw: Some(58.6481),
        hosts: 1,
        wrong: 0,
        out_of_bounds: Some(0),
        skipped: 0,
    },
    Expected {
        file: "superbench-a100-broadcast.log",
        line_rate: None,
        exit: 0,
        verdict: "not_judged",
        rows: 34,
        avg_busbw: Some(64.8653),
        hosts: 1,
        wrong: 0,
        out_of_bounds: Some(0),
        skipped: 0,
    },
];

#[test]
fn every_corpus_file_gives_its_expected_result() {
    // The line rate must come from the flags, never from the test machine.
    let empty_sysfs = tempfile::tempdir().unwrap();
    for (path, e) in common::corpus::corpus("nccl-tests").with_table(CORPUS, |e| e.file) {
        let mut args = vec![
            path_str(&path),
            "--path.sysfs",
            path_str(empty_sysfs.path()),
        ];
        if let Some(rate) = e.line_rate {
            args.extend(["--line-rate", rate]);
        }
        let (code, report) = json(&args);
        let what = format!("{}: {report:#}", e.file);
        assert_eq!(code, e.exit, "{what}");
        assert_eq!(report["verdict"], e.verdict, "{what}");
        assert_eq!(report["rows"].as_array().unwrap().len(), e.rows, "{what}");
        assert_eq!(report["avg_busbw_gbps"].as_f64(), e.avg_busbw, "{what}");
        assert_eq!(report["hosts"].as_array().unwrap().len(), e.hosts, "{what}");
        assert_eq!(report["wrong"], e.wrong, "{what}");
        assert_eq!(report["out_of_bounds"].as_u64(), e.out_of_bounds, "{what}");
        assert_eq!(report["skipped_total"], e.skipped, "{what}");
    }
}

#[test]
fn real_runs_keep_every_column() {
    let path = sample("superbench-a100-broadcast.log");
    let (_, report) = json(&[path_str(&path), "--line-rate", "200"]);
    let last = &report["rows"][33];
    assert_eq!(last["size_bytes"], 8589934592u64);
    assert_eq!(last["count"], 2147483648u64);
    assert_eq!(last["type"], "float");
    assert_eq!(last["root"], 0);
    assert!(last.get("redop").is_none(), "{last}");
    assert_eq!(last["out_of_place"]["time_us"], 36896.0);
    assert_eq!(last["out_of_place"]["busbw_gbps"], 232.81);
    assert_eq!(last["in_place"]["algbw_gbps"], 234.70);
    assert_eq!(last["in_place"]["wrong"], Value::Null);
    assert_eq!(report["parameters"]["validation"], 0);
    assert_eq!(report["wrong_unknown"], true);
    assert!(
        report["notes"][0].as_str().unwrap().contains("not checked"),
        "{report:#}"
    );
    // The NCCL INFO line inside the table is not a row.
    assert_eq!(report["rows"][0]["line"], 17);

    let path = sample("superbench-a100-alltoall.log");
    let (_, report) = json(&[path_str(&path), "--line-rate", "200"]);
    let row = &report["rows"][5];
    assert_eq!(
        (row["size_bytes"].as_u64(), row["count"].as_u64()),
        (Some(32), Some(1))
    );
    assert!(
        row.get("redop").is_none() && row.get("root").is_none(),
        "{row}"
    );
    assert_eq!(row["in_place"]["time_us"], 85.13);

    let path = sample("a3mega-h100-2node-all_reduce.md");
    let (_, report) = json(&[path_str(&path), "--line-rate", "200"]);
    assert_eq!(report["ranks"], 16);
    assert_eq!(
        report["hosts"],
        serde_json::json!(["ztan-mig-235z", "ztan-mig-gq73"])
    );
    assert_eq!(report["devices"][8]["pid"], 6733);
    assert_eq!(report["devices"][8]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(report["rows"][30]["redop"], "sum");
    assert_eq!(report["rows"][30]["root"], -1);
    assert_eq!(report["rows"][30]["in_place"]["wrong"], 0);
    assert_eq!(report["parameters"]["max_bytes"], 8589934592u64);
    let e = &report["expectation"];
    assert_eq!(e["largest_message_bytes"], 8589934592u64);
    assert_eq!(e["largest_busbw_gbps"], 338.82);
    assert_eq!(e["line_rate_gbyte_per_s"], 25.0);
    assert_eq!(e["expected_min_busbw_gbps"], 20.0);
}

#[test]
fn a_real_run_below_a_faster_fabric_fails() {
    // The OCI run reached 191.76 GB/s; against 8 x 250 Gb/s per GPU (250 GB/s) it is 77%.
    let path = sample("ocitutorials-a100-2node-all_reduce.txt");
    let (code, stdout, _) = nccl_tests(&[path_str(&path), "--line-rate", "2000"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("verdict: below expectation"), "{stdout}");
    assert!(
        stdout.contains("reaches only 77% of the per-GPU NIC line rate"),
        "{stdout}"
    );
    let (code, report) = json(&[
        path_str(&path),
        "--line-rate",
        "2000",
        "--min-fraction",
        "0.7",
    ]);
    assert_eq!((code, report["verdict"].as_str()), (0, Some("healthy")));
    assert_eq!(report["expectation"]["min_fraction"], 0.7);
}

/// A multi-node all_reduce_perf run as nccl-tests 2.17 prints it: `hosts` hosts of 8 GPUs,
/// one row per size with the given busbw and `#wrong`.
fn written_run(hosts: usize, rows: &[(u64, f64, &str)], footer: bool) -> String {
    let ranks = hosts * 8;
    let mut out = String::from(
        "# nccl-tests version 2.17.1 nccl-headers=22602 nccl-library=22602\n\
         # Collective test starting: all_reduce_perf\n",
    );
    out += "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0\n#\n# Using devices\n";
    for rank in 0..ranks {
        out += &format!(
            "#  Rank {rank:2} Group  0 Pid {:6} on gpu-node-{:02} device {:2} [0000:{:02x}:00] NVIDIA H100 80GB HBM3\n",
            1000 + rank,
            rank / 8,
            rank % 8,
            0x18 + rank % 8
        );
    }
    out += "#\n";
    out += "#                                                              out-of-place                       in-place          \n";
    out += "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n";
    out += "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         \n";
    out += "gpu-node-00:1000:1010 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA\n";
    let factor = 2.0 * (ranks as f64 - 1.0) / ranks as f64;
    for (size, busbw, wrong) in rows {
        let algbw = busbw / factor;
        let time = *size as f64 / (algbw * 1e3);
        out += &format!(
            "{size:12}  {:12}  {:>8}  {:>6}  {:>6}  {time:7.1}  {algbw:6.2}  {busbw:6.2}  {wrong:>6}  {time:7.1}  {algbw:6.2}  {busbw:6.2}  {wrong:>6}\n",
            size / 4,
            "float",
            "sum",
            -1
        );
    }
    if footer {
        let avg = rows.iter().map(|r| r.1).sum::<f64>() / rows.len() as f64;
        let bad = rows.iter().filter(|r| r.2 != "0" && r.2 != "N/A").count() * 2;
        let ok = if bad == 0 { "OK" } else { "FAILED" };
        out += &format!(
            "# Out of bounds values : {bad} {ok}\n# Avg bus bandwidth    : {avg:.4} \n#\n# Collective test concluded: all_reduce_perf\n#\n"
        );
    }
    out
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const GIB: u64 = 1 << 30;

#[test]
fn exit_codes_for_healthy_slow_wrong_truncated_unreadable_and_foreign_input() {
    let dir = tempfile::tempdir().unwrap();
    let rate = ["--line-rate", "400"];

    let healthy = write(
        dir.path(),
        "healthy.txt",
        &written_run(
            2,
            &[(1 << 20, 9.5, "0"), (GIB, 46.2, "0"), (8 * GIB, 47.9, "0")],
            true,
        ),
    );
    let (code, report) = json(&[path_str(&healthy), rate[0], rate[1]]);
    assert_eq!(
        (code, report["verdict"].as_str()),
        (0, Some("healthy")),
        "{report:#}"
    );
    assert_eq!(report["collective"], "all_reduce_perf");
    assert_eq!(report["nccl_tests_version"], "2.17.1");
    assert_eq!(report["expectation"]["largest_busbw_gbps"], 47.9);
    assert_eq!(report["expectation"]["met"], true);

    let slow = write(
        dir.path(),
        "slow.txt",
        &written_run(4, &[(GIB, 30.1, "0"), (8 * GIB, 31.0, "0")], true),
    );
    let (code, stdout, _) = nccl_tests(&[path_str(&slow), rate[0], rate[1]]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("verdict: below expectation"), "{stdout}");
    assert!(stdout.contains("38% short of it"), "{stdout}");
    assert!(stdout.contains("the floor is 80% = 40.00 GB/s"), "{stdout}");

    let wrong = write(
        dir.path(),
        "wrong.txt",
        &written_run(2, &[(GIB, 46.0, "0"), (8 * GIB, 47.0, "4096")], true),
    );
    let (code, report) = json(&[path_str(&wrong), rate[0], rate[1]]);
    assert_eq!(
        (code, report["verdict"].as_str()),
        (1, Some("data_errors")),
        "{report:#}"
    );
    assert_eq!(report["wrong"], 8192);
    assert_eq!(report["out_of_bounds"], 2);
    assert_eq!(report["rows"][1]["out_of_place"]["wrong"], 4096);
    assert_eq!(report["rows"][0]["in_place"]["wrong"], 0);

    // Killed after its first row, the second cut mid-line.
    let full = written_run(2, &[(GIB, 46.0, "0"), (8 * GIB, 47.0, "0")], false);
    let cut_at = full.rfind("  8589934592").unwrap() + 40;
    let truncated = write(dir.path(), "truncated.txt", &full[..cut_at]);
    let (code, report) = json(&[path_str(&truncated), rate[0], rate[1]]);
    assert_eq!(
        (code, report["verdict"].as_str()),
        (1, Some("incomplete")),
        "{report:#}"
    );
    assert_eq!(report["complete"], false);
    assert_eq!(report["rows"].as_array().unwrap().len(), 1);
    assert_eq!(report["skipped_total"], 1);
    assert!(report["summary"]
        .as_str()
        .unwrap()
        .contains("last row is cut short"));

    let (code, _, stderr) =
        nccl_tests(&[path_str(&dir.path().join("missing.txt")), rate[0], rate[1]]);
    assert_eq!(code, 2);
    assert!(stderr.contains("missing.txt"), "{stderr}");
    let (code, _, stderr) = nccl_tests(&[path_str(dir.path()), rate[0], rate[1]]);
    assert_eq!(code, 2);
    assert!(stderr.contains("not a regular file"), "{stderr}");

    let twice = write(
        dir.path(),
        "twice.txt",
        &format!(
            "{}{}",
            std::fs::read_to_string(&healthy).unwrap(),
            std::fs::read_to_string(&slow).unwrap()
        ),
    );
    // Two runs in one file (the same test with a setting off, then on): each is judged, and
    // the exit code is the worse one's.
    let (code, report) = json(&[path_str(&twice), rate[0], rate[1]]);
    assert_eq!(code, 1, "{report:#}");
    let runs = report["runs"].as_array().expect("runs");
    let verdicts: Vec<&str> = runs
        .iter()
        .map(|r| r["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["healthy", "below_expectation"]);
    assert_eq!(
        (
            runs[0]["rows"].as_array().unwrap().len(),
            runs[1]["hosts"].as_array().unwrap().len()
        ),
        (3, 4)
    );
    assert!(
        runs[1]["input"]
            .as_str()
            .unwrap()
            .ends_with("run 2 of 2 (line 35)"),
        "{report:#}"
    );
    let (code, stdout, _) = nccl_tests(&[path_str(&twice), rate[0], rate[1]]);
    assert_eq!(code, 1);
    assert_eq!(stdout.matches("verdict: ").count(), 2, "{stdout}");
    assert!(stdout.contains("2 runs, exit 1"), "{stdout}");

    // An NCCL_DEBUG log is NCCL's, not nccl-tests' output.
    let nccl_log = fixture("nccl/roce.log");
    let (code, stdout, stderr) = nccl_tests(&[path_str(&nccl_log), rate[0], rate[1]]);
    assert_eq!(code, 3, "{stdout}");
    assert!(stderr.contains("no nccl-tests output"), "{stderr}");
    let empty = write(dir.path(), "empty.txt", "");
    assert_eq!(nccl_tests(&[path_str(&empty), rate[0], rate[1]]).0, 3);
}

#[test]
fn line_rate_from_sysfs_and_stdin() {
    // The fixture node: ten active 400 Gb/s ports; eight GPUs per node in the run.
    let sysfs = fixture("cx7-roce/sys");
    let text = written_run(2, &[(GIB, 45.0, "0"), (8 * GIB, 46.5, "0")], true);
    let output = std::process::Command::new(common::binary())
        .args([
            "nccl-tests",
            "-",
            "--output",
            "json",
            "--path.sysfs",
            path_str(&sysfs),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["input"], "<stdin>");
    let rate = &report["line_rate"];
    assert_eq!(rate["source"], "sysfs");
    assert_eq!(rate["per_gpu_gbit_per_s"], 400.0);
    assert_eq!(rate["ports"].as_array().unwrap().len(), 10);
    assert_eq!(rate["ports"][0]["rate_gbit_per_s"], 400.0);
    assert_eq!(rate["gpus_per_node"], 8);
    assert_eq!(rate["gpus_counted_from"], "run");
    assert_eq!(report["expectation"]["line_rate_gbyte_per_s"], 50.0);

    // Without any RDMA port the bandwidth is not judged, and says how to make it so.
    let none = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "run.txt", &text);
    let (code, stdout, _) = nccl_tests(&[path_str(&path), "--path.sysfs", path_str(none.path())]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("bandwidth not judged: no line rate: give --line-rate"),
        "{stdout}"
    );
}

#[test]
fn bad_flags_are_refused() {
    let path = sample("ocitutorials-a100-2node-all_reduce.txt");
    for bad in [
        ["--line-rate", "0"],
        ["--line-rate", "fast"],
        ["--min-fraction", "1.5"],
        ["--min-fraction", "0"],
    ] {
        let (code, _, stderr) = nccl_tests(&[path_str(&path), bad[0], bad[1]]);
        assert_eq!(code, 2, "{bad:?}");
        assert!(stderr.contains(bad[0]), "{bad:?}: {stderr}");
    }
}
