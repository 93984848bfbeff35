//! `nccl` over every real NCCL log of the corpus kind `nccl` (`tests/common/corpus.rs`; sources
//! in its `SOURCES.md`): the verdict, exit code and triage conclusion each file must get, and
//! what each one proves about the parser. A file missing from the table fails.

use crate::common;

use common::corpus::corpus;
use common::{path_str, run};
use serde_json::Value;

/// What one corpus file must give.
struct Expected {
    file: &'static str,
    verdict: &'static str,
    exit: i32,
    /// `proto_triage.conclusion`, `None` for no triage section.
    triage: Option<&'static str>,
    /// Further checks on the report (the point of the file).
    check: fn(&Value),
}

fn job(report: &Value) -> &Value {
    &report["jobs"][0]
}

fn processes(report: &Value) -> &Vec<Value> {
    job(report)["processes"].as_array().unwrap()
}

fn failures(report: &Value) -> Vec<String> {
    job(report)["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["detail"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn warnings(report: &Value) -> Vec<String> {
    job(report)["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            format!(
                "{}={}",
                w["setting"].as_str().unwrap(),
                w["value"].as_str().unwrap()
            )
        })
        .collect()
}

fn setting<'a>(process: &'a Value, name: &str) -> Option<&'a str> {
    process["settings"]
        .as_array()?
        .iter()
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair[1].as_str())
}

const TABLE: &[Expected] = &[
    Expected {
        file: "aks-rdma-infiniband-36-gdr-level-sys.log",
        verdict: "rdma_with_gdr",
        exit: 0,
        triage: None,
        // A `grep GDR` keeps the settings of ranks whose channels it dropped: those ranks say
        // nothing about their network and are not "no network chosen".
        check: |r| {
            let with_channels = processes(r)
                .iter()
                .filter(|p| p["channels_gdrdma"].as_u64().unwrap() > 0)
                .count();
            assert_eq!((processes(r).len(), with_channels), (8, 4));
            assert_eq!(setting(&processes(r)[0], "NCCL_NET_GDR_LEVEL"), Some("SYS"));
        },
    },
    Expected {
        file: "aws-ofi-nccl-715-efa-plugin-sets-proto-simple.log",
        verdict: "rdma_gdr_unknown",
        exit: 0,
        triage: Some("nothing_to_compare"),
        // The plugin's own `Setting NCCL_PROTO to "simple"` makes it a Simple run.
        check: |r| {
            let chosen: Vec<&Value> = processes(r).iter().filter(|p| p["network"] != "").collect();
            assert_eq!(chosen.len(), 1);
            assert_eq!(chosen[0]["network"], "AWS Libfabric");
            assert_eq!(setting(chosen[0], "NCCL_PROTO"), Some("simple"));
            assert_eq!(r["proto_triage"]["runs"][0]["simple_by"], "setting");
            assert!(
                warnings(r).contains(&"NCCL_PROTO=simple".to_string()),
                "{r}"
            );
        },
    },
    Expected {
        file: "deeplearningexamples-383-gdr-per-gpu.log",
        verdict: "unknown",
        exit: 0,
        triage: None,
        check: |r| {
            assert_eq!(processes(r).len(), 3);
            assert_eq!(setting(&processes(r)[0], "NCCL_NET_GDR_LEVEL"), Some("PHB"));
        },
    },
    Expected {
        file: "nccl-1053-socket-lo-ib-disabled.log",
        verdict: "socket_fallback",
        exit: 1,
        triage: Some("no_rdma_path"),
        // `NCCL_IB_DISABLE set by environment to 1.`: the integer's period is not its value.
        check: |r| {
            assert!(
                warnings(r).contains(&"NCCL_IB_DISABLE=1".to_string()),
                "{r}"
            );
            assert_eq!(processes(r)[0]["socket_interfaces"][0], "lo:127.0.0.1<0>");
        },
    },
    Expected {
        file: "nccl-1405-completion-status12-roce.log",
        verdict: "unknown",
        exit: 1,
        triage: Some("rerun_with_simple"),
        check: |r| {
            assert_eq!(
                failures(r),
                ["work completion status 12 (IBV_WC_RETRY_EXC_ERR)"]
            );
            assert_eq!(job(r)["failures"][0]["evidence"]["line"], 1);
        },
    },
    Expected {
        file: "nccl-147-ib-2.3.5.log",
        verdict: "rdma_gdr_unknown",
        exit: 0,
        triage: None,
        // v2.3 wordings: `NET/IB: [0] mlx5_3:1/IB` per device, `Using internal Network IB`.
        check: |r| {
            let p = &processes(r)[0];
            assert_eq!(p["network"], "IB");
            assert_eq!(p["hcas"].as_array().unwrap().len(), 4);
            assert_eq!(p["link_layer"], "IB");
            assert_eq!(p["nccl_version"], "2.3.5+cuda9.0");
        },
    },
    Expected {
        file: "nccl-1537-roce-gdr-disabled.log",
        verdict: "rdma_without_gdr",
        exit: 0,
        triage: None,
        check: |r| {
            let p = &processes(r)[0];
            assert_eq!(
                (p["link_layer"].as_str(), p["gdr"].as_str()),
                (Some("RoCE"), Some("disabled"))
            );
            assert_eq!(job(r)["comm_id"], "0x65e0bd6ee7449db4");
        },
    },
    Expected {
        file: "nccl-1597-efa-gdrdma-hang-2.23.4.log",
        verdict: "rdma_with_gdr",
        exit: 1,
        triage: None,
        // The run hung; the excerpt shows no error line: a hang leaves nothing to read. The
        // benchmark's own output says it: started, devices listed, no result row.
        check: |r| {
            let p = &processes(r)[0];
            assert_eq!(p["network"], "AWS Libfabric");
            assert_eq!(p["nccl_version"], "2.23.4+cuda12.4");
            let stalls = r["stalls"].as_array().unwrap();
            assert_eq!(stalls.len(), 1, "{r}");
            assert_eq!(stalls[0]["line"], 19);
        },
    },
    Expected {
        file: "nccl-1737-ibext-sharp-2.21.5.log",
        verdict: "rdma_gdr_unknown",
        exit: 0,
        triage: None,
        // `/IB/SHARP` ports of the HPC-X plugin; the excerpt is cut inside the fifth port.
        check: |r| {
            let p = &processes(r)[0];
            assert_eq!(p["hcas"].as_array().unwrap().len(), 4);
            assert_eq!(p["link_layer"], "IB");
        },
    },
    Expected {
        file: "nccl-1814-completion-status12-status5.log",
        verdict: "unknown",
        exit: 1,
        triage: Some("rerun_with_simple"),
        check: |r| {
            assert_eq!(
                failures(r),
                [
                    "work completion status 12 (IBV_WC_RETRY_EXC_ERR)",
                    "work completion status 5 (IBV_WC_WR_FLUSH_ERR)"
                ]
            );
        },
    },
    Expected {
        file: "nccl-1936-no-ib-device-2.27.5.log",
        verdict: "socket_fallback",
        exit: 1,
        triage: Some("no_rdma_path"),
        // `NET/IB : Using [RO]; OOB ...` after `No device found.` is no IB device.
        check: |r| {
            let socket: Vec<&Value> = processes(r)
                .iter()
                .filter(|p| p["transport"] == "socket")
                .collect();
            assert_eq!(socket.len(), 1);
            assert_eq!(socket[0]["pid"], 205632);
            assert!(socket[0]["hcas"].as_array().unwrap().is_empty());
        },
    },
    Expected {
        file: "nccl-224-horovod-roce-mpirun-tags.log",
        verdict: "rdma_gdr_unknown",
        exit: 0,
        triage: None,
        // `[1,1]<stdout>:` tags of mpirun before the prefix.
        check: |r| {
            assert_eq!(processes(r).len(), 2);
            assert_eq!(processes(r)[0]["hcas"].as_array().unwrap().len(), 34);
            assert_eq!(processes(r)[0]["link_layer"], "RoCE");
        },
    },
    Expected {
        file: "nccl-367-socket-no-libibverbs-2.4.8.log",
        verdict: "socket_fallback",
        exit: 1,
        triage: Some("no_rdma_path"),
        check: |r| {
            let socket = processes(r)
                .iter()
                .filter(|p| p["transport"] == "socket")
                .count();
            assert_eq!(socket, 2);
        },
    },
    Expected {
        file: "nccl-429-roce-bond-2.8.3.log",
        verdict: "rdma_gdr_unknown",
        exit: 0,
        triage: None,
        check: |r| {
            assert_eq!(processes(r).len(), 2);
            assert_eq!(processes(r)[0]["hcas"][0]["name"], "mlx5_bond_0");
            assert_eq!(setting(&processes(r)[0], "NCCL_IB_GID_INDEX"), Some("3"));
        },
    },
    Expected {
        file: "nccl-857-socket-no-libibverbs-2.10.3.log",
        verdict: "socket_fallback",
        exit: 1,
        triage: Some("no_rdma_path"),
        check: |r| {
            assert!(job(r)["summary"]
                .as_str()
                .unwrap()
                .contains("SOCKET FALLBACK"));
            assert_eq!(processes(r)[0]["nccl_version"], "2.10.3+cuda11.3");
        },
    },
    Expected {
        file: "nccl-928-completion-error4-ib.log",
        verdict: "unknown",
        exit: 1,
        triage: Some("rerun_with_simple"),
        // The older `with error 4, opcode ...` wording; a local protection error.
        check: |r| {
            assert_eq!(
                failures(r),
                ["work completion status 4 (IBV_WC_LOC_PROT_ERR)"]
            );
            assert!(job(r)["failures"][0]["hint"]
                .as_str()
                .unwrap()
                .contains("GPUDirect RDMA"));
        },
    },
    Expected {
        file: "nv_peer_memory-56-ib-2.4.7.log",
        verdict: "rdma_gdr_unknown",
        exit: 0,
        triage: None,
        // v2.4 prints `NET/Socket : Using` for bootstrap before IB starts: no fallback.
        check: |r| {
            assert!(
                processes(r).iter().all(|p| p["transport"] != "socket"),
                "{r}"
            );
            let ib = processes(r)
                .iter()
                .filter(|p| p["transport"] == "rdma")
                .count();
            assert_eq!(ib, 1);
            assert_eq!(setting(&processes(r)[0], "NCCL_IB_DISABLE"), Some("0"));
        },
    },
    Expected {
        file: "vllm-15769-ray-repeated-single-node.log",
        verdict: "unknown",
        exit: 0,
        triage: None,
        // Ray's ` [repeated 15x across cluster]` is not part of a value.
        check: |r| {
            let p = &processes(r)[0];
            assert_eq!(setting(p, "NCCL_CUMEM_ENABLE"), Some("0"));
            assert_eq!(setting(p, "NCCL_P2P_LEVEL"), Some("NVL"));
            assert_eq!(job(r)["comm_id"], "0xaab4a40f4078b738");
        },
    },
];

#[test]
fn every_corpus_log_gets_its_expected_verdict() {
    // Every sample has its row, every row its sample, and each sample its source.
    for (path, expected) in corpus("nccl").with_table(TABLE, |e| e.file) {
        let (code, stdout, stderr) = run(&["nccl", "--output", "json", path_str(&path)]);
        let report: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{}: {e}: {stdout}{stderr}", expected.file));
        assert_eq!(
            report["jobs"].as_array().unwrap().len(),
            1,
            "{}: {report}",
            expected.file
        );
        assert_eq!(
            job(&report)["verdict"],
            expected.verdict,
            "{}: {report}",
            expected.file
        );
        assert_eq!(code, expected.exit, "{}: {report}", expected.file);
        let conclusion = report["proto_triage"]["conclusion"].as_str();
        assert_eq!(conclusion, expected.triage, "{}: {report}", expected.file);
        (expected.check)(&report);
    }
}
