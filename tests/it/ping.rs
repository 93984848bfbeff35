//! `ping` end to end against the demo: the real binary asks one of the demo's hosts
//! (`/hosts/<host>/probe-ping`, as it would ask an agent's `/probe-ping`) for probes through
//! the simulated fabric, and prints the loss and the RTTs; a peer whose agent is stopped
//! (`demo --stop-agent`) gives a non-zero exit and says why.

use crate::common;

use common::*;

#[test]
fn ping_reports_a_peer_ports_loss_and_rtt_and_a_stopped_peer_fails() {
    let demo = Exporter::start_subcommand(
        "demo",
        &[
            "--scenario",
            "healthy",
            "--hosts",
            "3",
            "--nics-per-host",
            "2",
            "--stop-agent",
            "gpu-node-03",
        ],
    );
    let agent = demo.url("/hosts/gpu-node-01");
    let (status, _, body) = demo.get("/hosts/gpu-node-02/probe-address");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""device":"mlx5_1""#), "{body}");

    let (code, out, err) = run(&[
        "ping",
        "--agent",
        &agent,
        "gpu-node-02/mlx5_1",
        "-c",
        "5",
        "-i",
        "20ms",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.starts_with("PING gpu-node-02/mlx5_1 port 1 (GID ")
            && out.contains("from gpu-node-01/mlx5_1 port 1: peer rail path"),
        "{out}"
    );
    assert_eq!(out.matches("network RTT ").count(), 5, "{out}");
    assert!(
        out.contains("5 sent, 5 answered, 0 lost, 0.0 % loss"),
        "{out}"
    );
    assert!(out.contains("\nnetwork RTT: min "), "{out}");
    assert!(out.contains("\nresponder delay: min "), "{out}");

    // The figures, as JSON: the simulated leaf's two 3 µs legs are the least a round trip takes.
    let (code, out, err) = run(&[
        "ping",
        "--agent",
        &agent,
        "gpu-node-02",
        "--from",
        "mlx5_0",
        "-c",
        "3",
        "-i",
        "10ms",
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["report"]["to"]["device"], "mlx5_0", "{json}");
    assert_eq!(json["summary"]["lost"], 0, "{json}");
    let p50 = json["summary"]["network_rtt_ns"]["p50"].as_u64().unwrap();
    assert!(p50 >= 6_000, "{json}");

    // gpu-node-03's agent is stopped: its ports are still in the peer set, and answer nothing.
    let (code, out, err) = run(&[
        "ping",
        "--agent",
        &agent,
        "gpu-node-03",
        "-c",
        "3",
        "-i",
        "10ms",
    ]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains("3 sent, 0 answered, 3 lost, 100.0 % loss"),
        "{out}"
    );
    assert!(
        err.contains("error: no answer from gpu-node-03/mlx5_0 port 1")
            && err.contains("all 3 probes lost")
            && err.contains("agent may be stopped"),
        "{err}"
    );

    // A host outside the peer set is never probed: exit 2, and the agent says why.
    let (code, out, err) = run(&["ping", "--agent", &agent, "gpu-node-09"]);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(
        err.contains("HTTP 404: gpu-node-09 is not in this agent's peer set"),
        "{err}"
    );
}
