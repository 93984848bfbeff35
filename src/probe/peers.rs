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
    /// The leaf switch, where the config names it; left out of the JSON when unknown, so an
    /// older agent's JSON still parses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf: Option<String>,
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
                    leaf: p.port.leaf.clone(),
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
                    leaf: p.leaf.clone(),
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
pub(crate) fn read_agents_file(path: &Path) -> Result<Vec<String>, PeerError> {
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
pub(crate) fn resolve_agents(name: &str) -> Result<Vec<String>, PeerError> {
    let addresses = name
        .to_socket_addrs()
        .map_err(|e| PeerError::Dns(name.to_string(), e))?;
    let mut agents: Vec<String> = addresses.map(|a| a.to_string()).collect();
    agents.sort();
    agents.dedup();
    Ok(agents)
}

/// `/probe-address`'s answer: the JSON with its `ETag`, or `304 Not Modified` without a body
/// when the asker holds that answer already (`If-None-Match`), so that a peer checking whether
/// this agent restarted costs a few hundred bytes.
pub fn answer(published: &Published, if_none_match: Option<&[u8]>) -> axum::response::Response {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse;
    let json = match serde_json::to_string(published) {
        Ok(json) => json,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    };
    let tag = etag(json.as_bytes());
    if if_none_match.is_some_and(|held| matches(held, &tag)) {
        return (StatusCode::NOT_MODIFIED, [(header::ETAG, tag)]).into_response();
    }
    (
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::ETAG, tag),
        ],
        json,
    )
        .into_response()
}

/// A strong validator of an answer: its SHA-256, cut to 128 bits (a collision would only delay
/// learning a restart to the peer's own packets), quoted as HTTP spells it.
fn etag(body: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, body);
    let hex: String = digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("\"{hex}\"")
}

/// Whether `If-None-Match` (a list of tags, weak ones compared weakly, or `*`) names `tag`.
fn matches(if_none_match: &[u8], tag: &str) -> bool {
    let Ok(list) = std::str::from_utf8(if_none_match) else {
        return false;
    };
    list.split(',')
        .map(str::trim)
        .any(|held| held == "*" || held.strip_prefix("W/").unwrap_or(held) == tag)
}

/// One agent to ask, with the `ETag` of its last answer when there was one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub agent: String,
    pub etag: Option<String>,
}

/// What an agent answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Its addresses, and the tag to ask with next time.
    New {
        published: Published,
        etag: Option<String>,
    },
    /// The same as the tag asked with: nothing changed.
    Unchanged,
}

/// Agents asked at once.
const CONCURRENT_ASKS: usize = 32;

/// Asks each agent for its addresses (conditionally where a tag is known), at most `timeout`
/// each, up to 32 at once: each agent's answer or error, in the order of `asks`.
pub fn fetch(asks: &[Ask], timeout: Duration) -> Vec<(String, Result<Answer, PeerError>)> {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let failed = |ask: &Ask| {
                let error = PeerError::Agent {
                    agent: ask.agent.clone(),
                    message: format!("no runtime: {e}"),
                };
                (ask.agent.clone(), Err(error))
            };
            return asks.iter().map(failed).collect();
        }
    };
    runtime.block_on(async {
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(CONCURRENT_ASKS));
        let mut running = tokio::task::JoinSet::new();
        for (index, ask) in asks.iter().enumerate() {
            // Owned: the task outlives this borrow.
            let (ask, slots) = (ask.clone(), slots.clone());
            running.spawn(async move {
                let _slot = slots.acquire_owned().await;
                (index, get(&ask, timeout).await)
            });
        }
        let mut answers: Vec<Option<Result<Answer, PeerError>>> =
            asks.iter().map(|_| None).collect();
        while let Some(joined) = running.join_next().await {
            // A task only ends by returning (nothing in it panics, nothing aborts it).
            if let Ok((index, answer)) = joined {
                answers[index] = Some(answer);
            }
        }
        asks.iter()
            .zip(answers)
            .map(|(ask, answer)| {
                let answer = answer.unwrap_or_else(|| {
                    Err(PeerError::Agent {
                        agent: ask.agent.clone(),
                        message: "the ask ended without an answer".into(),
                    })
                });
                (ask.agent.clone(), answer)
            })
            .collect()
    })
}

/// `GET http://<agent>/probe-address`, its answer bounded; `If-None-Match` with the tag held.
async fn get(ask: &Ask, timeout: Duration) -> Result<Answer, PeerError> {
    let agent = ask.agent.as_str();
    let failed = |message: String| PeerError::Agent {
        agent: agent.to_string(),
        message,
    };
    let conditional;
    let headers: &[(hyper::header::HeaderName, &str)] = match &ask.etag {
        Some(tag) => {
            conditional = [(hyper::header::IF_NONE_MATCH, tag.as_str())];
            &conditional
        }
        None => &[],
    };
    let request = crate::bounded_get::Get {
        path: PATH,
        host: agent,
        accept: "application/json",
        headers,
        max_bytes: MAX_ANSWER_BYTES,
        timeout,
    };
    let answer = crate::bounded_get::get_answer(agent, &request)
        .await
        .map_err(|e| failed(e.to_string()))?;
    if answer.status == hyper::StatusCode::NOT_MODIFIED && ask.etag.is_some() {
        return Ok(Answer::Unchanged);
    }
    if !answer.status.is_success() {
        return Err(failed(format!("{PATH} answered {}", answer.status)));
    }
    let published =
        serde_json::from_slice(&answer.body).map_err(|e| failed(format!("{PATH}: {e}")))?;
    let etag = answer
        .headers
        .get(hyper::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok(Answer::New { published, etag })
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
        let ask = Ask {
            agent: closed.clone(),
            etag: None,
        };
        let answers = fetch(&[ask], Duration::from_secs(2));
        assert_eq!(answers.len(), 1);
        let error = answers[0].1.as_ref().unwrap_err();
        assert!(error.to_string().starts_with(&closed), "{error}");
    }

    /// Over real HTTP: the first ask gets the addresses and a tag; asked with that tag, the
    /// agent says 304 and nothing else; after its restart (new QPNs) the same tag gets the new
    /// addresses and a new tag. `If-None-Match` lists and weak tags are understood.
    #[test]
    fn a_peer_held_already_answers_not_modified_until_it_changes() {
        use std::sync::{Arc, Mutex};
        let port = |qpn| PublishedPort {
            device: "mlx5_0".into(),
            port: 1,
            rail: 0,
            leaf: None,
            address: Address {
                gid: [3; 16],
                qpn,
                qkey: 9,
                lid: None,
            },
        };
        let current = Arc::new(Mutex::new(Published {
            host: "gpu-05".into(),
            ports: vec![port(17)],
        }));
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let agent = listener.local_addr().unwrap().to_string();
        let served = current.clone();
        let app = axum::Router::new().route(
            PATH,
            axum::routing::get(move |headers: axum::http::HeaderMap| {
                let published = served.lock().unwrap().clone();
                async move {
                    let held = headers.get(axum::http::header::IF_NONE_MATCH);
                    answer(&published, held.map(|v| v.as_bytes()))
                }
            }),
        );
        runtime.spawn(async move { axum::serve(listener, app).await });
        let ask = |etag: Option<String>| {
            let asks = [Ask {
                agent: agent.clone(),
                etag,
            }];
            fetch(&asks, Duration::from_secs(5)).remove(0).1.unwrap()
        };
        let Answer::New { published, etag } = ask(None) else {
            panic!("the first ask is answered in full");
        };
        assert_eq!(published.ports[0].address.qpn, 17);
        let tag = etag.expect("an ETag");
        assert_eq!(ask(Some(tag.clone())), Answer::Unchanged);
        assert_eq!(ask(Some(format!("\"other\", W/{tag}"))), Answer::Unchanged);
        current.lock().unwrap().ports = vec![port(99)];
        let Answer::New { published, etag } = ask(Some(tag.clone())) else {
            panic!("a restarted peer answers its new addresses");
        };
        assert_eq!(published.ports[0].address.qpn, 99);
        assert_ne!(etag.as_deref(), Some(tag.as_str()));
        runtime.shutdown_background();
    }

    /// A RoCE port and an InfiniBand one: the IB port's LID goes out at `/probe-address` and
    /// comes back into its peer's address, where its address handles are built from it.
    #[test]
    fn published_addresses_round_trip() {
        let port = |device: &str, lid: Option<u16>| PublishedPort {
            device: device.into(),
            port: 1,
            rail: 0,
            leaf: None,
            address: Address {
                gid: [1; 16],
                qpn: 7,
                qkey: 9,
                lid,
            },
        };
        let mut published = Published {
            host: "gpu-02".into(),
            ports: vec![port("mlx5_0", None), port("mlx5_1", Some(0x2a))],
        };
        published.ports[0].leaf = Some("su1-leaf0".into());
        let json = serde_json::to_string(&published).unwrap();
        assert_eq!(json.matches("\"lid\":42").count(), 1, "{json}");
        // Only a known leaf is written: an older agent's JSON has none and still parses.
        assert_eq!(json.matches("\"leaf\"").count(), 1, "{json}");
        let back: Published = serde_json::from_str(&json).unwrap();
        assert_eq!(back, published);
        let peers = back.peers();
        assert_eq!(peers[0].port.host, "gpu-02");
        assert_eq!(peers[0].address.lid, None);
        assert_eq!(peers[1].address.lid, Some(0x2a));
        assert_eq!(peers[0].port.leaf.as_deref(), Some("su1-leaf0"));
        assert_eq!(peers[1].port.leaf, None);
    }
}
