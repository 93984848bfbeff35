//! `ib-report FILE...` on the infiniband-diags corpus (corpus kind `infiniband-diags`) and on
//! outputs written here in the tools' own formats for what no public sample shows: iblinkinfo
//! `--line` with its `Could be` hints on a 1X link, perfquery of a congested port, several
//! files merged (perfquery counters placed on ibnetdiscover's switch by LID).

use std::path::PathBuf;

use serde_json::Value;

use crate::common::{path_str, project_root, run};

fn sample(name: &str) -> PathBuf {
    crate::common::corpus::corpus("infiniband-diags").sample(name)
}

fn report(files: &[&str]) -> (i32, Value) {
    let mut args = vec!["ib-report", "--output", "json"];
    args.extend_from_slice(files);
    let (code, stdout, stderr) = run(&args);
    let json: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}"));
    assert_eq!(json["exit_code"], code, "{stdout}");
    (code, json)
}

fn len(v: &Value) -> usize {
    v.as_array().map_or(0, Vec::len)
}

#[test]
fn the_ddr_link_of_an_edr_fabric_is_degraded_naming_both_switches() {
    let file = sample("ibnetdiscover-switchib-edr-one-ddr-link.txt");
    let (code, json) = report(&[path_str(&file)]);
    assert_eq!(code, 1);
    assert_eq!(
        (json["switches"].as_u64(), json["hcas"].as_u64()),
        (Some(4), Some(48))
    );
    assert_eq!(json["links"], 72);
    assert_eq!(len(&json["degraded_links"]), 1, "{json:#}");
    let d = &json["degraded_links"][0];
    let mut ends = [
        (
            d["near"]["guid"].as_str().unwrap(),
            d["near"]["port"].as_u64(),
        ),
        (
            d["far"]["guid"].as_str().unwrap(),
            d["far"]["port"].as_u64(),
        ),
    ];
    ends.sort();
    assert_eq!(
        ends,
        [
            ("ec0d:9a03:00ec:8200", Some(11)),
            ("ec0d:9a03:00ec:8480", Some(11))
        ]
    );
    assert_eq!(
        (d["speed"].as_str(), d["expected_speed"].as_str()),
        (Some("DDR"), Some("EDR"))
    );
    assert_eq!(d["compared_with"], "fabric_common");
    assert_eq!(len(&json["error_ports"]), 0);

    let (code, text, _) = run(&["ib-report", path_str(&file)]);
    assert_eq!(code, 1);
    assert!(
        text.contains("0xec0d9a0300ec8200 port 11 <-> \"SwitchIB Mellanox Technologies\" 0xec0d9a0300ec8480 port 11: 4X DDR"),
        "{text}"
    );
}

#[test]
fn ibqueryerrors_gives_error_ports_and_saturated_xmit_wait_as_congestion() {
    let (code, json) = report(&[path_str(&sample(
        "ibqueryerrors-linux-rdma-2021-03-sx6036.txt",
    ))]);
    assert_eq!(code, 1);
    // 8 switch ports and the HCA with VL15Dropped; `port ALL` (a sum) and port 0 (the
    // management port) are not ports with a link.
    assert_eq!(len(&json["error_ports"]), 9, "{json:#}");
    let port5 = json["error_ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"]["guid"] == "0002:c903:006e:29b0" && p["port"]["port"] == 5)
        .unwrap();
    let symbol = port5["counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "SymbolErrorCounter")
        .unwrap();
    assert_eq!(
        (symbol["value"].as_u64(), symbol["saturated"].as_bool()),
        (Some(65535), Some(true))
    );
    // PortXmitWait pinned at 2^32-1 with no data counter: 7 ports (4 switch, 3 HCA).
    assert_eq!(len(&json["congested_ports"]), 7);
    assert!(json["congested_ports"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["xmit_wait_saturated"] == true && c["wait_per_word"].is_null()));
    // Both ports of the dual-port HCA (port GUIDs ...b31, ...b32) are one node.
    assert_eq!(json["hcas"], 3);
}

#[test]
fn healthy_outputs_exit_zero() {
    for name in [
        "iblinkinfo-qdr-is5030-down-polling.txt",
        "perfquery-x-treydock-edr-two-ports.out",
        "perfquery-x-infiniband-diags-16-rhel75.txt",
        "ibnetdiscover-p-treydock-edr-mixed.out",
    ] {
        let (code, json) = report(&[path_str(&sample(name))]);
        assert_eq!(code, 0, "{name}: {json:#}");
        assert!(
            len(&json["degraded_links"])
                + len(&json["error_ports"])
                + len(&json["congested_ports"])
                == 0
        );
    }
}

#[test]
fn perfquery_counters_land_on_the_switch_ibnetdiscover_gives_that_lid() {
    let topo = sample("ibnetdiscover-p-treydock-edr-mixed.out");
    let counters = sample("perfquery-x-treydock-edr-discards.out");
    // Alone, the counters are known by LID only.
    let (code, json) = report(&[path_str(&counters)]);
    assert_eq!(code, 1);
    assert_eq!(json["unplaced_counter_blocks"], 1);
    assert!(json["error_ports"][0]["port"]["guid"].is_null());
    assert_eq!(json["error_ports"][0]["port"]["lid"], 2052);
    // With the topology (LID 2052 = ib-i4l1s01), they name the switch.
    let (code, json) = report(&[path_str(&counters), path_str(&topo)]);
    assert_eq!(code, 1);
    assert_eq!(json["unplaced_counter_blocks"], 0);
    let e = &json["error_ports"][0];
    assert_eq!(e["port"]["description"], "ib-i4l1s01");
    assert_eq!(e["port"]["guid"], "506b:4b03:005c:2740");
    let names: Vec<&str> = e["counters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "LinkDownedCounter",
            "PortRcvSwitchRelayErrors",
            "PortXmitDiscards"
        ]
    );
    assert_eq!(
        json["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["tool"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["perfquery", "ibnetdiscover"]
    );
}

/// iblinkinfo `--line` as rdma-core's iblinkinfo.c prints it (`print_node_header` +
/// `print_port`, `( %s %s )` of `get_msg`'s `Could be` messages), and perfquery -x of a port
/// that waited more than it sent, both written here.
#[test]
fn built_outputs_a_1x_link_below_enabled_and_a_congested_spine_port() {
    let dir = tempfile::tempdir().unwrap();
    let links = dir.path().join("iblinkinfo-l.txt");
    std::fs::write(
        &links,
        "0xb83fd20300291a46 \"                 MF0;spine-01:MQM9700/U1\"      7    1[  ] ==( 4X       106.25 Gbps Active/  LinkUp)==>  0xb83fd20300291b00     12    1[  ] \"MF0;leaf-01:MQM9700/U1\" ( )\n\
         0xb83fd20300291a46 \"                 MF0;spine-01:MQM9700/U1\"      7    2[  ] ==( 1X       106.25 Gbps Active/  LinkUp)==>  0xb83fd20300291c00     13    1[  ] \"MF0;leaf-02:MQM9700/U1\" ( Could be 4X )\n\
         0xb83fd20300291a46 \"                 MF0;spine-01:MQM9700/U1\"      7    3[  ] ==(                Down/ Polling)==>             [  ] \"\" ( )\n",
    )
    .unwrap();
    let counters = dir.path().join("perfquery-x.txt");
    std::fs::write(
        &counters,
        "# Port extended counters: Lid 7 port 1 (CapMask: 0x5A00 CapMask2: 0x0000002)\n\
         PortSelect:......................1\nCounterSelect:...................0x0000\n\
         PortXmitData:....................1000000\nPortRcvData:.....................900000\n\
         SymbolErrorCounter:..............0\nPortXmitWait:....................250000\n",
    )
    .unwrap();
    let (code, json) = report(&[path_str(&links), path_str(&counters)]);
    assert_eq!(code, 1, "{json:#}");
    assert_eq!(len(&json["degraded_links"]), 1);
    let d = &json["degraded_links"][0];
    assert_eq!(d["near"]["description"], "MF0;spine-01:MQM9700/U1");
    assert_eq!(d["near"]["port"], 2);
    assert_eq!(d["far"]["description"], "MF0;leaf-02:MQM9700/U1");
    assert_eq!(
        (d["width"].as_str(), d["expected_width"].as_str()),
        (Some("1X"), Some("4X"))
    );
    assert_eq!(d["compared_with"], "enabled");
    assert_eq!(len(&json["congested_ports"]), 1);
    let c = &json["congested_ports"][0];
    assert_eq!(
        (c["port"]["port"].as_u64(), c["far"]["description"].as_str()),
        (Some(1), Some("MF0;leaf-01:MQM9700/U1"))
    );
    assert_eq!(c["wait_per_word"], 0.25);
    // Below the ratio asked for, the same port is not congested.
    let (code, _, _) = run(&[
        "ib-report",
        "--congestion-ratio",
        "0.5",
        path_str(&counters),
    ]);
    assert_eq!(code, 0);
}

/// `iblinkinfo -S <guid>` (one switch, default layout) as rdma-core's iblinkinfo.c prints it:
/// `print_node_header`'s `Switch: 0x%016x %s:` with the description unquoted, then
/// `print_port`'s `%6d %4d[%2s] ==(%3s %18s %6s/%8s)==>  %6d %4d[%2s] "%s" (%s %s)`, the far
/// ends by LID only (their nodes are not in the output) and `get_max_msg`'s speed hint last,
/// against the closing parenthesis. Four HDR-capable ports trained at EDR are degraded links.
#[test]
fn one_switch_of_iblinkinfo_with_could_be_hints_has_its_degraded_links() {
    let mut text = String::from("Switch: 0x7cfe900300a5a2c0 MF0;sw-leaf-07:MQM8700/U1:\n");
    for port in 1..=4 {
        let link = format!(
            "({:>3} {:>18} {:>6}/{:>8})",
            "4X", "25.78125 Gbps", "Active", "LinkUp"
        );
        let far = format!(
            "{:>6} {:>4}[{:>2}] \"gpu-{port:02} HCA-1\" ({} {})",
            100 + port,
            1,
            "",
            "",
            "Could be 53.125 Gbps"
        );
        text += &format!("      {:>6} {port:>4}[{:>2}] =={link}==>  {far}\n", 12, "");
    }
    let down = format!("({:14}{:>6}/{:>8})", "", "Down", "Polling");
    text += &format!(
        "      {:>6} {:>4}[{:>2}] =={down}==>             [  ] \"\" ( )\n",
        12, 5, ""
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("iblinkinfo-S.txt");
    std::fs::write(&file, &text).unwrap();

    let (code, json) = report(&[path_str(&file)]);
    assert_eq!(code, 1, "{text}{json:#}");
    assert_eq!(
        (json["switches"].as_u64(), json["links"].as_u64()),
        (Some(1), Some(4))
    );
    let degraded = json["degraded_links"].as_array().unwrap();
    assert_eq!(degraded.len(), 4, "{json:#}");
    for (i, d) in degraded.iter().enumerate() {
        assert_eq!(d["near"]["description"], "MF0;sw-leaf-07:MQM8700/U1");
        assert_eq!(d["near"]["port"], i + 1);
        assert_eq!(d["far"]["lid"], 101 + i);
        assert_eq!(d["far"]["description"], format!("gpu-{:02} HCA-1", i + 1));
        assert_eq!(
            (d["speed"].as_str(), d["expected_speed"].as_str()),
            (Some("EDR"), Some("HDR"))
        );
        assert_eq!(d["compared_with"], "enabled");
    }
    let (_, stdout, _) = run(&["ib-report", path_str(&file)]);
    assert!(
        stdout.contains("<-> \"gpu-01 HCA-1\" LID 101 port 1: 4X EDR, enabled 4X HDR"),
        "{stdout}"
    );
}

#[test]
fn unreadable_and_foreign_files_have_their_own_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.txt");
    let (code, _, stderr) = run(&["ib-report", path_str(&missing)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("missing.txt"), "{stderr}");
    let foreign = project_root().join("Cargo.toml");
    let (code, _, stderr) = run(&[
        "ib-report",
        path_str(&sample("perfquery-x-treydock-edr-two-ports.out")),
        path_str(&foreign),
    ]);
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("Cargo.toml") && stderr.contains("not the output of"),
        "{stderr}"
    );
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    assert_eq!(run(&["ib-report", path_str(&empty)]).0, 3);
}
