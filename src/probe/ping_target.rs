//! Which ports an on-demand ping means: the operator names the target by host, `host/device`,
//! `host/device/port` or GID, and the local port by device, `device/port` or GID (or not at
//! all). Only ports this agent already probes can be named, so `/probe-ping` reaches the
//! configured targets and nothing else (the project's rule for on-demand endpoints, as
//! `/probe` polls only configured switches); a GID outside the peer set, with its QPN, only
//! where the agent's operator allowed it (`probe.ping_unlisted`).

use super::agent::Peer;
use super::ping::PingError;
use super::targets::Port;
use super::transport::{gid_text, Address};

/// What the agent knows: its own ports (each with its index in the loop) and its peers'.
pub struct Known<'a> {
    pub local: &'a [(usize, Peer)],
    pub peers: &'a [Peer],
    /// The Q_Key of this agent's endpoints (a target outside the peer set is assumed to share it).
    pub qkey: u32,
    /// `probe.ping_unlisted`.
    pub unlisted_allowed: bool,
}

/// The resolved path: the local port (index and port), the target, and whether the target is
/// in the peer set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path {
    pub from: usize,
    pub from_port: Port,
    pub to: Peer,
    pub listed: bool,
}

/// `to` and `from` (as the operator wrote them) as ports of `known`; `qpn` only for a GID
/// outside the peer set.
pub fn resolve(
    known: &Known<'_>,
    to: &str,
    from: Option<&str>,
    qpn: Option<u32>,
) -> Result<Path, PingError> {
    if known.local.is_empty() {
        return Err(PingError::Off);
    }
    let chosen_from = from.map(|f| local_port(known, f)).transpose()?;
    let (target, listed) = target(known, to, qpn, chosen_from.as_ref())?;
    let (from, from_peer) = match chosen_from {
        Some(chosen) => chosen,
        // The local port on the target's rail: the path a rail-optimized fabric keeps in one
        // leaf; else the first.
        None => known
            .local
            .iter()
            .find(|(_, p)| p.port.rail == target.port.rail && p != &target)
            .or_else(|| known.local.iter().find(|(_, p)| p != &target))
            .cloned()
            .ok_or_else(|| {
                PingError::BadRequest("a port does not probe itself: name another".into())
            })?,
    };
    if from_peer == target {
        return Err(PingError::BadRequest(format!(
            "{} is the local port itself: a port does not probe itself",
            name(&target.port)
        )));
    }
    Ok(Path {
        from,
        from_port: from_peer.port,
        to: target,
        listed,
    })
}

fn name(port: &Port) -> String {
    format!("{}/{} port {}", port.host, port.device, port.port)
}

/// `DEVICE`, `DEVICE/PORT` or a GID of this host.
fn local_port(known: &Known<'_>, text: &str) -> Result<(usize, Peer), PingError> {
    let found = match gid_text::parse(text) {
        Some(gid) => known.local.iter().find(|(_, p)| p.address.gid == gid),
        None => {
            let (device, port) = split_port(text)?;
            let mut matching: Vec<&(usize, Peer)> = known
                .local
                .iter()
                .filter(|(_, p)| p.port.device == device && port.is_none_or(|n| p.port.port == n))
                .collect();
            matching.sort_by_key(|(_, p)| p.port.port);
            matching.first().copied()
        }
    };
    found.cloned().ok_or_else(|| {
        let ports: Vec<String> = known
            .local
            .iter()
            .map(|(_, p)| format!("{}/{}", p.port.device, p.port.port))
            .collect();
        PingError::BadRequest(format!(
            "no local probing port {text:?}; this agent probes from {}",
            ports.join(", ")
        ))
    })
}

/// `DEVICE` or `DEVICE/PORT`.
fn split_port(text: &str) -> Result<(&str, Option<u32>), PingError> {
    match text.split_once('/') {
        None => Ok((text, None)),
        Some((device, port)) => port
            .parse()
            .map(|n| (device, Some(n)))
            .map_err(|_| PingError::BadRequest(format!("{text:?}: the port is a number"))),
    }
}

/// The target: a GID, or `HOST[/DEVICE[/PORT]]`; several ports of a host: the one on the
/// local port's rail, else the first by device and port.
fn target(
    known: &Known<'_>,
    text: &str,
    qpn: Option<u32>,
    from: Option<&(usize, Peer)>,
) -> Result<(Peer, bool), PingError> {
    let all = || known.local.iter().map(|(_, p)| p).chain(known.peers);
    if let Some(gid) = gid_text::parse(text) {
        if let Some(peer) = all().find(|p| p.address.gid == gid) {
            return Ok((peer.clone(), true));
        }
        return match qpn {
            Some(qpn) if known.unlisted_allowed => Ok((
                Peer {
                    port: Port {
                        host: String::new(),
                        device: String::new(),
                        port: 0,
                        rail: u32::MAX,
                        leaf: None,
                    },
                    address: Address {
                        gid,
                        qpn,
                        qkey: known.qkey,
                        lid: None,
                    },
                },
                false,
            )),
            Some(_) => Err(PingError::Unlisted(format!(
                "GID {text} is not in this agent's peer set, and on-demand probes go only to \
                 its peers (probe.ping_unlisted: true on the agent lets them go anywhere)"
            ))),
            None => Err(PingError::UnknownTarget(format!(
                "GID {text} is not in this agent's peer set ({}); a GID outside it also needs \
                 its QPN, and probe.ping_unlisted on the agent",
                hosts(known)
            ))),
        };
    }
    let mut parts = text.splitn(3, '/');
    let host = parts.next().unwrap_or_default();
    let device = parts.next();
    let port = parts
        .next()
        .map(|p| {
            p.parse::<u32>()
                .map_err(|_| PingError::BadRequest(format!("{text:?}: the port is a number")))
        })
        .transpose()?;
    let mut matching: Vec<&Peer> = all()
        .filter(|p| p.port.host == host)
        .filter(|p| device.is_none_or(|d| p.port.device == d))
        .filter(|p| port.is_none_or(|n| p.port.port == n))
        .collect();
    matching.sort_by(|a, b| (&a.port.device, a.port.port).cmp(&(&b.port.device, b.port.port)));
    if matching.is_empty() {
        let of_host: Vec<String> = all()
            .filter(|p| p.port.host == host)
            .map(|p| format!("{}/{}", p.port.device, p.port.port))
            .collect();
        return Err(PingError::UnknownTarget(if of_host.is_empty() {
            format!(
                "{host} is not in this agent's peer set ({}): on-demand probes go only to its \
                 peers; an agent that did not answer the last peer refresh is left out",
                hosts(known)
            )
        } else {
            format!(
                "{host} has no probing port {text:?}; its ports: {}",
                of_host.join(", ")
            )
        }));
    }
    let rail = from
        .or_else(|| known.local.first())
        .map(|(_, p)| p.port.rail);
    let chosen = matching
        .iter()
        .find(|p| Some(p.port.rail) == rail)
        .unwrap_or(&matching[0]);
    Ok(((*chosen).clone(), true))
}

/// The hosts of the peer set, for a message: how many, and the first few.
fn hosts(known: &Known<'_>) -> String {
    let mut hosts: Vec<&str> = known.peers.iter().map(|p| p.port.host.as_str()).collect();
    hosts.sort();
    hosts.dedup();
    const SHOWN: usize = 8;
    let more = hosts.len().saturating_sub(SHOWN);
    let shown = hosts[..hosts.len().min(SHOWN)].join(", ");
    match (hosts.len(), more) {
        (0, _) => "it has no peers yet".to_string(),
        (n, 0) => format!("{n} hosts: {shown}"),
        (n, more) => format!("{n} hosts: {shown} and {more} more"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(host: &str, device: u32, rail: u32) -> Peer {
        let mut gid = [0u8; 16];
        gid[0] = host.len() as u8;
        gid[14] = host.as_bytes()[host.len() - 1];
        gid[15] = device as u8;
        Peer {
            port: Port {
                host: host.into(),
                device: format!("mlx5_{device}"),
                port: 1,
                rail,
                leaf: None,
            },
            address: Address {
                gid,
                qpn: 100 + device,
                qkey: 9,
                lid: None,
            },
        }
    }

    struct Fixture {
        local: Vec<(usize, Peer)>,
        peers: Vec<Peer>,
    }

    fn fixture() -> Fixture {
        Fixture {
            local: (0..4).map(|n| (n as usize, peer("gpu-1", n, n))).collect(),
            peers: (0..4)
                .flat_map(|n| [peer("gpu-2", n, n), peer("gpu-3", n, n)])
                .collect(),
        }
    }

    fn known(f: &Fixture, unlisted_allowed: bool) -> Known<'_> {
        Known {
            local: &f.local,
            peers: &f.peers,
            qkey: 9,
            unlisted_allowed,
        }
    }

    #[test]
    fn a_target_is_named_by_host_device_port_or_gid() {
        let f = fixture();
        let k = known(&f, false);
        // A host alone: the port on the local port's rail (the first local port's).
        let path = resolve(&k, "gpu-2", None, None).unwrap();
        assert_eq!((path.from, path.to.port.device.as_str()), (0, "mlx5_0"));
        let path = resolve(&k, "gpu-2", Some("mlx5_2"), None).unwrap();
        assert_eq!((path.from, path.to.port.device.as_str()), (2, "mlx5_2"));
        // A device: from the local port on its rail.
        let path = resolve(&k, "gpu-3/mlx5_3", None, None).unwrap();
        assert_eq!((path.from, path.to.port.host.as_str()), (3, "gpu-3"));
        let path = resolve(&k, "gpu-3/mlx5_3/1", Some("mlx5_1/1"), None).unwrap();
        assert_eq!((path.from, path.to.port.rail), (1, 3));
        assert!(path.listed);
        // By GID, this host's own ports included.
        let gid = gid_text::format(&f.peers[5].address.gid);
        let path = resolve(&k, &gid, None, None).unwrap();
        assert_eq!(path.to, f.peers[5]);
        let own = gid_text::format(&f.local[1].1.address.gid);
        let path = resolve(&k, &own, None, None).unwrap();
        assert_eq!((path.from, path.to.port.device.as_str()), (0, "mlx5_1"));
        // ... but not from itself.
        let itself = resolve(&k, &own, Some("mlx5_1"), None).unwrap_err();
        assert!(matches!(itself, PingError::BadRequest(_)), "{itself}");
    }

    #[test]
    fn only_the_peer_set_is_reached_unless_the_operator_allows_more() {
        let f = fixture();
        let k = known(&f, false);
        let unknown = resolve(&k, "gpu-9", None, None).unwrap_err();
        assert!(
            matches!(&unknown, PingError::UnknownTarget(m) if m.contains("gpu-9 is not in this agent's peer set (2 hosts: gpu-2, gpu-3)")),
            "{unknown}"
        );
        let no_port = resolve(&k, "gpu-2/mlx5_7", None, None).unwrap_err();
        assert!(
            matches!(&no_port, PingError::UnknownTarget(m) if m.contains("mlx5_0/1")),
            "{no_port}"
        );
        let stranger = "fe80:0000:0000:0000:0000:0000:0000:0042";
        assert!(matches!(
            resolve(&k, stranger, None, Some(5)),
            Err(PingError::Unlisted(_))
        ));
        assert!(matches!(
            resolve(&k, stranger, None, None),
            Err(PingError::UnknownTarget(_))
        ));
        let allowed = known(&f, true);
        let path = resolve(&allowed, stranger, None, Some(5)).unwrap();
        assert!(!path.listed);
        assert_eq!((path.to.address.qpn, path.to.address.qkey), (5, 9));
        let bad_from = resolve(&k, "gpu-2", Some("mlx5_9"), None).unwrap_err();
        assert!(
            matches!(&bad_from, PingError::BadRequest(m) if m.contains("mlx5_0/1, mlx5_1/1")),
            "{bad_from}"
        );
    }
}
