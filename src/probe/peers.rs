//! Peers without a central service: every agent publishes its ports' probe addresses on its own
//! HTTP endpoint (`/probe-address`, [`Published`]), and every agent reads its peers' from a list
//! it already has: agents named in the config, a file of them (one `host:port` a line, or a
//! Prometheus file-SD document), or a DNS name whose addresses are the agents (a Kubernetes
//! headless Service).

use std::net::ToSocketAddrs;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::agent::Peer;
use super::targets::Port;
use super::transport::Address;

/// The path every agent publishes its addresses on.
pub const PATH: &str = "/probe-address";

/// The largest answer read from a peer.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// What `/probe-address` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    pub host: String,
    pub ports: Vec<PublishedPort>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedPort {
    pub device: String,
    pub port: u32,
    pub rail: u32,
    pub address: Address,
}

impl Published {
    pub fn new(peers: &[Peer], host: &str) -> Published {
        Published {
            host: host.to_string(),
            ports: peers
                .iter()
                .map(|p| PublishedPort {
                    device: p.port.device.clone(),
                    port: p.port.port,
                    rail: p.port.rail,
                    address: p.address,
                })
                .collect(),
        }
    }

    pub fn peers(&self) -> Vec<Peer> {
        self.ports
            .iter()
            .map(|p| Peer {
                port: Port {
                    host: self.host.clone(),
                    device: p.device.clone(),
                    port: p.port,
                    rail: p.rail,
                },
                address: p.address,
            })
            .collect()
    }
}

#[derive(Debug, Error)]
pub enum PeerError {
    #[error("{0}: {1}")]
    File(String, std::io::Error),
    #[error("resolving {0}: {1}")]
    Dns(String, std::io::Error),
    #[error("{agent}: {message}")]
    Agent { agent: String, message: String },
}

/// The agents of a peers file: `host:port` lines (blank lines and `#` comments skipped), or a
/// Prometheus file-SD document (YAML or JSON: a list of `{targets: [...]}`).
pub fn read_agents_file(path: &Path) -> Result<Vec<String>, PeerError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| PeerError::File(path.display().to_string(), e))?;
    #[derive(Deserialize)]
    struct Group {
        targets: Vec<String>,
    }
    if let Ok(groups) = serde_yaml::from_str::<Vec<Group>>(&text) {
        return Ok(groups.into_iter().flat_map(|g| g.targets).collect());
    }
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect())
}

/// The agents behind a DNS name, `name:port`: one `ip:port` per address.
pub fn resolve_agents(name: &str) -> Result<Vec<String>, PeerError> {
    let addresses = name
        .to_socket_addrs()
        .map_err(|e| PeerError::Dns(name.to_string(), e))?;
    let mut agents: Vec<String> = addresses.map(|a| a.to_string()).collect();
    agents.sort();
    agents.dedup();
    Ok(agents)
}

/// Agents asked at once.
const CONCURRENT_ASKS: usize = 32;

/// Asks each agent for its addresses, at most `timeout` each, up to 32 at once; the addresses
/// of those that answered, and an error for each that did not.
pub fn fetch(agents: &[String], timeout: Duration) -> (Vec<Published>, Vec<PeerError>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let error = PeerError::Agent {
                agent: "*".into(),
                message: format!("no runtime: {e}"),
            };
            return (Vec::new(), vec![error]);
        }
    };
    runtime.block_on(async {
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(CONCURRENT_ASKS));
        let mut asks = tokio::task::JoinSet::new();
        for agent in agents {
            // Owned: the task outlives this borrow.
            let (agent, slots) = (agent.clone(), slots.clone());
            asks.spawn(async move {
                let _slot = slots.acquire_owned().await;
                get(&agent, timeout).await
            });
        }
        let mut published = Vec::new();
        let mut errors = Vec::new();
        while let Some(joined) = asks.join_next().await {
            match joined {
                Ok(Ok(p)) => published.push(p),
                Ok(Err(e)) => errors.push(e),
                Err(e) => errors.push(PeerError::Agent {
                    agent: "*".into(),
                    message: e.to_string(),
                }),
            }
        }
        published.sort_by(|a, b| a.host.cmp(&b.host));
        (published, errors)
    })
}

/// `GET http://<agent>/probe-address`, its answer bounded.
async fn get(agent: &str, timeout: Duration) -> Result<Published, PeerError> {
    let failed = |message: String| PeerError::Agent {
        agent: agent.to_string(),
        message,
    };
    let request = crate::bounded_get::Get {
        path: PATH,
        host: agent,
        accept: "application/json",
        headers: &[],
        max_bytes: MAX_ANSWER_BYTES,
        timeout,
    };
    let (status, bytes) = crate::bounded_get::get(agent, &request)
        .await
        .map_err(|e| failed(e.to_string()))?;
    if !status.is_success() {
        return Err(failed(format!("{PATH} answered {status}")));
    }
    serde_json::from_slice(&bytes).map_err(|e| failed(format!("{PATH}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_files_are_lines_or_file_sd() {
        let dir = tempfile::tempdir().unwrap();
        let lines = dir.path().join("agents");
        std::fs::write(&lines, "# agents\n10.0.0.1:9866\n\n gpu-02:9866 \n").unwrap();
        assert_eq!(
            read_agents_file(&lines).unwrap(),
            ["10.0.0.1:9866", "gpu-02:9866"]
        );
        let sd = dir.path().join("sd.yml");
        std::fs::write(
            &sd,
            "- targets: [a:1, b:2]\n  labels: {rack: r1}\n- targets: [c:3]\n",
        )
        .unwrap();
        assert_eq!(read_agents_file(&sd).unwrap(), ["a:1", "b:2", "c:3"]);
        let missing = read_agents_file(&dir.path().join("none")).unwrap_err();
        assert!(missing.to_string().contains("none"), "{missing}");
    }

    #[test]
    fn an_agent_that_is_not_there_is_an_error_and_the_others_answer_nothing_wrong() {
        // A port nothing listens on: refused at once.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = listener.local_addr().unwrap().to_string();
        drop(listener);
        let (published, errors) = fetch(std::slice::from_ref(&closed), Duration::from_secs(2));
        assert!(published.is_empty());
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().starts_with(&closed), "{}", errors[0]);
    }

    /// A RoCE port and an InfiniBand one: the IB port's LID goes out at `/probe-address` and
    /// comes back into its peer's address, where its address handles are built from it.
    #[test]
    fn published_addresses_round_trip() {
        let port = |device: &str, lid: Option<u16>| PublishedPort {
            device: device.into(),
            port: 1,
            rail: 0,
            address: Address {
                gid: [1; 16],
                qpn: 7,
                qkey: 9,
                lid,
            },
        };
        let published = Published {
            host: "gpu-02".into(),
            ports: vec![port("mlx5_0", None), port("mlx5_1", Some(0x2a))],
        };
        let json = serde_json::to_string(&published).unwrap();
        assert_eq!(json.matches("\"lid\":42").count(), 1, "{json}");
        let back: Published = serde_json::from_str(&json).unwrap();
        assert_eq!(back, published);
        let peers = back.peers();
        assert_eq!(peers[0].port.host, "gpu-02");
        assert_eq!(peers[0].address.lid, None);
        assert_eq!(peers[1].address.lid, Some(0x2a));
    }
}
