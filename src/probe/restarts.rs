//! Peers that restart: where each peer port answers now, and whether a probe that got no answer
//! was lost on its path or went to an agent that was restarting.
//!
//! A restarted agent answers on new queue pairs, and the peer set (refreshed from
//! `/probe-address` every minute) still names the old ones. Its packets say where it answers
//! and which start it is (`packet.rs`: `answers_on`, `epoch`), so its first probe or answer
//! moves this host's probes to its new address ([`Restarts::heard_probe`],
//! [`Restarts::heard_answer`]). A probe that timed out while nothing at all came from its
//! target's agent is held ([`Restarts::expired`]): if that agent turns out to have restarted
//! (a new start, a new address) the probe is counted as a restart's and feeds no loss nor
//! localization; if the agent was alive all along (it answered or sent a probe later), or
//! nothing is said within the grace, it was lost. A port that fails while its host's other
//! ports answer is lost at once: a restart silences the whole agent, not one port.
//!
//! Times are the host's monotonic clock, not a NIC's: one clock for every local port.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use super::agent::Peer;
use super::stats::PathKey;
use super::transport::Address;

/// Probes held at most; past it the oldest are counted lost (a host sends a few hundred a
/// second, and a restart takes seconds).
const MAX_HELD: usize = 16_384;

/// What became of a probe that got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Lost on its path: counted lost.
    Lost,
    /// Sent to an agent that was restarting (or left the peer set): not a path's loss.
    Restart,
}

/// A peer port, by GID.
#[derive(Debug)]
struct PeerPort {
    host: String,
    /// As the peer set last published it.
    published: Address,
    /// As the port's own probes said since, where that differs (newer than `published` until
    /// the peer set publishes something new).
    learned: Option<Address>,
    /// Its host's agent restarted and this port has not said its new address yet.
    stale: bool,
}

impl PeerPort {
    fn current(&self) -> Address {
        self.learned.unwrap_or(self.published)
    }
}

/// A peer host's agent.
#[derive(Debug, Default)]
struct PeerHost {
    /// Its start, as its packets last said (0: not said yet, or a build that does not say).
    epoch: u32,
    /// The latest instant it is known to have been up: a probe it answered was sent then, or
    /// a probe of its own left about then.
    alive: Option<Instant>,
}

/// A probe that timed out while its target's agent said nothing.
#[derive(Debug)]
struct Held {
    path: PathKey,
    to: Address,
    sent: Instant,
    /// Its target's agent's start when it was sent.
    epoch: u32,
}

/// The peer ports' addresses and the probes held for their agents. Owned by the probe loop.
#[derive(Debug)]
pub(crate) struct Restarts {
    grace: Duration,
    ports: HashMap<[u8; 16], PeerPort>,
    hosts: HashMap<String, PeerHost>,
    held: VecDeque<Held>,
}

impl Restarts {
    /// `grace`: how long a probe is held for its silent target's agent at most.
    pub fn new(grace: Duration) -> Restarts {
        Restarts {
            grace,
            ports: HashMap::new(),
            hosts: HashMap::new(),
            held: VecDeque::new(),
        }
    }

    /// The peer set as published (this host's own ports left out). An address that differs
    /// from the one published before is news and wins over what was learned; one published
    /// again unchanged leaves a newer learned one in place.
    ///
    /// A GID two peer ports share (two agents on one device) is left out: a probe from it
    /// could not say which of them it speaks for, so their probes are timed as before.
    pub fn set_peers(&mut self, peers: &[Peer]) {
        let mut seen: HashMap<[u8; 16], usize> = HashMap::with_capacity(peers.len());
        for peer in peers {
            *seen.entry(peer.address.gid).or_default() += 1;
        }
        let mut ports = HashMap::with_capacity(peers.len());
        for peer in peers {
            let gid = peer.address.gid;
            if seen[&gid] > 1 {
                continue;
            }
            let port = match self.ports.remove(&gid) {
                Some(old) if old.published == peer.address && old.host == peer.port.host => old,
                _ => PeerPort {
                    host: peer.port.host.clone(),
                    published: peer.address,
                    learned: None,
                    stale: false,
                },
            };
            ports.insert(gid, port);
        }
        self.ports = ports;
        let hosts: HashSet<&String> = self.ports.values().map(|p| &p.host).collect();
        self.hosts.retain(|host, _| hosts.contains(host));
    }

    /// Where to send a probe planned for `planned`: where its port answers now.
    pub fn address(&self, planned: Address) -> Address {
        self.ports
            .get(&planned.gid)
            .map_or(planned, PeerPort::current)
    }

    /// The start of the agent `to` belongs to, as known now (0: unknown or not a peer).
    pub fn epoch(&self, to: &Address) -> u32 {
        self.ports
            .get(&to.gid)
            .and_then(|p| self.hosts.get(&p.host))
            .map_or(0, |h| h.epoch)
    }

    /// A probe from peer GID `gid` arrived: its port answers on `answers_on` (0: unsaid), its
    /// agent is start `epoch` (0: unsaid) and was up at `alive` (the arrival less the probe
    /// timeout: the probe left at most that long ago). Sources outside the peer set teach
    /// nothing: they are not probed.
    pub(crate) fn heard_probe(
        &mut self,
        gid: [u8; 16],
        answers_on: u32,
        epoch: u32,
        alive: Instant,
    ) {
        let Some(host) = self.ports.get(&gid).map(|p| p.host.clone()) else {
            return;
        };
        self.started(&host, epoch, gid);
        let port = self.ports.get_mut(&gid).expect("looked up above");
        if answers_on != 0 {
            let address = Address {
                qpn: answers_on,
                ..port.published
            };
            port.learned = (address != port.published).then_some(address);
            port.stale = false;
        }
        self.alive(&host, alive);
    }

    /// An answer from peer GID `gid` (the address probed) to a probe sent at `sent`, from its
    /// agent's start `epoch` (0: unsaid).
    pub(crate) fn heard_answer(&mut self, gid: [u8; 16], epoch: u32, sent: Instant) {
        let Some(host) = self.ports.get(&gid).map(|p| p.host.clone()) else {
            return;
        };
        self.started(&host, epoch, gid);
        if let Some(port) = self.ports.get_mut(&gid) {
            port.stale = false;
        }
        self.alive(&host, sent);
    }

    /// `host`'s agent says it is start `epoch`; if it was another before, it restarted, and
    /// every port of it but `speaker` answers somewhere not known yet.
    fn started(&mut self, host: &str, epoch: u32, speaker: [u8; 16]) {
        if epoch == 0 {
            return;
        }
        let entry = self.hosts.entry(host.to_string()).or_default();
        let restarted = entry.epoch != 0 && entry.epoch != epoch;
        entry.epoch = epoch;
        if restarted {
            // The old start's life says nothing of the new one's.
            entry.alive = None;
            for (gid, port) in self.ports.iter_mut() {
                if port.host == host && *gid != speaker {
                    port.stale = true;
                }
            }
        }
    }

    fn alive(&mut self, host: &str, at: Instant) {
        let entry = self.hosts.entry(host.to_string()).or_default();
        entry.alive = Some(entry.alive.map_or(at, |a| a.max(at)));
    }

    /// What became of a probe on `path` to `to`, sent at `sent` when its agent was start
    /// `epoch`, that timed out: `None` while it is held (its agent said nothing since), to be
    /// settled by [`Restarts::settle`].
    pub fn expired(
        &mut self,
        path: PathKey,
        to: Address,
        sent: Instant,
        epoch: u32,
    ) -> Option<(PathKey, Fate)> {
        let held = Held {
            path,
            to,
            sent,
            epoch,
        };
        // Not a peer's: this host's own port (its state is known), or one the peer set
        // dropped while the probe flew.
        if !self.ports.contains_key(&to.gid) {
            return Some((held.path, Fate::Lost));
        }
        match self.fate(&held, None) {
            Some(fate) => Some((held.path, fate)),
            None => {
                self.held.push_back(held);
                None
            }
        }
    }

    /// The held probes settled by now, with their fates; the oldest are lost past the bound.
    pub fn settle(&mut self, now: Instant, settled: &mut Vec<(PathKey, Fate)>) {
        if self.held.is_empty() {
            return;
        }
        while self.held.len() > MAX_HELD {
            let held = self.held.pop_front().expect("not empty");
            settled.push((held.path, Fate::Lost));
        }
        let mut kept = VecDeque::with_capacity(self.held.len());
        for held in std::mem::take(&mut self.held) {
            // The peer set dropped its port: the agent left, or did not answer the refresh.
            let fate = if self.ports.contains_key(&held.to.gid) {
                self.fate(&held, Some(now))
            } else {
                Some(Fate::Restart)
            };
            match fate {
                Some(fate) => settled.push((held.path, fate)),
                None => kept.push_back(held),
            }
        }
        self.held = kept;
    }

    /// A probe's fate as known now (`now`: also lost once past the grace); `None`: not yet.
    fn fate(&self, held: &Held, now: Option<Instant>) -> Option<Fate> {
        let port = &self.ports[&held.to.gid];
        let host = self.hosts.get(&port.host);
        let epoch = host.map_or(0, |h| h.epoch);
        let restarted = port.stale
            || port.current() != held.to
            || (epoch != 0 && held.epoch != 0 && epoch != held.epoch);
        if restarted {
            return Some(Fate::Restart);
        }
        if host.and_then(|h| h.alive).is_some_and(|at| at > held.sent) {
            return Some(Fate::Lost);
        }
        if now.is_some_and(|now| now.saturating_duration_since(held.sent) >= self.grace) {
            return Some(Fate::Lost);
        }
        None
    }

    /// Probes held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::targets::{PathKind, Port};

    const GRACE: Duration = Duration::from_secs(30);

    fn port(host: &str, n: u8) -> Port {
        Port {
            host: host.into(),
            device: format!("mlx5_{n}"),
            port: 1,
            rail: u32::from(n),
            leaf: None,
        }
    }

    fn address(host: u8, n: u8, qpn: u32) -> Address {
        let mut gid = [0u8; 16];
        gid[14] = host;
        gid[15] = n;
        Address {
            gid,
            qpn,
            qkey: 1,
            lid: None,
        }
    }

    fn peer(host: u8, n: u8, qpn: u32) -> Peer {
        Peer {
            port: port(&format!("gpu-{host}"), n),
            address: address(host, n, qpn),
        }
    }

    fn path(to: &Peer) -> PathKey {
        PathKey {
            from: 0,
            kind: PathKind::Rail,
            to: to.port.clone(),
        }
    }

    fn ms(at: Instant, ms: u64) -> Instant {
        at + Duration::from_millis(ms)
    }

    /// Host 2's two ports at QPN 10 and 11, their agent start 7, heard at `t0`.
    fn watched(t0: Instant) -> (Restarts, Peer, Peer) {
        let (a, b) = (peer(2, 0, 10), peer(2, 1, 11));
        let mut restarts = Restarts::new(GRACE);
        restarts.set_peers(&[a.clone(), b.clone()]);
        restarts.heard_answer(a.address.gid, 7, t0);
        (restarts, a, b)
    }

    fn settled(restarts: &mut Restarts, now: Instant) -> Vec<Fate> {
        let mut out = Vec::new();
        restarts.settle(now, &mut out);
        out.into_iter().map(|(_, fate)| fate).collect()
    }

    /// A whole agent silent, then back as a new start at new QPNs: what was held, what was sent
    /// to the old QPNs before they were learned, all are the restart's; the first probe of each
    /// port moves the probes to its new address.
    #[test]
    fn a_restarted_agent_costs_no_loss_and_is_probed_at_its_new_address() {
        let t0 = Instant::now();
        let (mut restarts, a, b) = watched(t0);
        // Probes to both ports from 100 ms on, unanswered: the agent went away.
        for to in [&a, &b] {
            let fate = restarts.expired(path(to), to.address, ms(t0, 100), 7);
            assert_eq!(fate, None);
        }
        assert_eq!(restarts.held(), 2);
        assert!(settled(&mut restarts, ms(t0, 2_000)).is_empty());
        // Back as start 8: port a probes us from its new QPN 20.
        restarts.heard_probe(a.address.gid, 20, 8, ms(t0, 3_000));
        assert_eq!(restarts.address(a.address).qpn, 20);
        assert_eq!(restarts.address(b.address).qpn, 11, "not said yet");
        assert_eq!(
            settled(&mut restarts, ms(t0, 3_000)),
            [Fate::Restart, Fate::Restart]
        );
        // A probe to b's old QPN, sent before b spoke, is the restart's too.
        let fate = restarts.expired(path(&b), b.address, ms(t0, 3_100), 8);
        assert_eq!(fate.map(|f| f.1), Some(Fate::Restart));
        restarts.heard_probe(b.address.gid, 21, 8, ms(t0, 3_200));
        assert_eq!(restarts.address(b.address).qpn, 21);
        // From then on, a probe to the new address that times out while the agent answers
        // others is lost.
        let new_b = restarts.address(b.address);
        assert_eq!(restarts.expired(path(&b), new_b, ms(t0, 4_000), 8), None);
        restarts.heard_answer(a.address.gid, 8, ms(t0, 4_100));
        assert_eq!(settled(&mut restarts, ms(t0, 4_600)), [Fate::Lost]);
    }

    /// One port silent while its host's agent answers on the others: lost, at once when the
    /// agent was heard after the probe left, else as soon as it is.
    #[test]
    fn a_silent_port_of_a_live_agent_is_lost() {
        let t0 = Instant::now();
        let (mut restarts, a, b) = watched(t0);
        restarts.heard_answer(a.address.gid, 7, ms(t0, 600));
        let fate = restarts.expired(path(&b), b.address, ms(t0, 500), 7);
        assert_eq!(fate.map(|f| f.1), Some(Fate::Lost));
        assert_eq!(restarts.expired(path(&b), b.address, ms(t0, 700), 7), None);
        // A probe of the agent's own, same start, same address: it is up.
        restarts.heard_probe(a.address.gid, 10, 7, ms(t0, 800));
        assert_eq!(settled(&mut restarts, ms(t0, 1_300)), [Fate::Lost]);
    }

    /// An agent that says nothing for the whole grace is lost (a host down, a cut cable):
    /// held only that long.
    #[test]
    fn silence_past_the_grace_is_loss() {
        let t0 = Instant::now();
        let (mut restarts, a, _) = watched(t0);
        assert_eq!(restarts.expired(path(&a), a.address, ms(t0, 100), 7), None);
        assert!(settled(
            &mut restarts,
            ms(t0, 100) + GRACE - Duration::from_millis(1)
        )
        .is_empty());
        assert_eq!(settled(&mut restarts, ms(t0, 100) + GRACE), [Fate::Lost]);
        assert_eq!(restarts.held(), 0);
    }

    /// A restart that keeps its QPN is told by its start alone; a build that says no start
    /// is told by its new QPN, from the peer set.
    #[test]
    fn a_new_start_at_the_same_qpn_or_a_new_published_qpn_is_a_restart() {
        let t0 = Instant::now();
        let (mut restarts, a, b) = watched(t0);
        assert_eq!(restarts.expired(path(&a), a.address, ms(t0, 100), 7), None);
        restarts.heard_answer(a.address.gid, 9, ms(t0, 2_000));
        assert_eq!(settled(&mut restarts, ms(t0, 2_000)), [Fate::Restart]);
        // Host 3 says no start (an older build); its peer set entry moves to QPN 40.
        let old = peer(3, 0, 30);
        restarts.set_peers(&[a.clone(), b.clone(), old.clone()]);
        assert_eq!(
            restarts.expired(path(&old), old.address, ms(t0, 3_000), 0),
            None
        );
        let moved = peer(3, 0, 40);
        restarts.set_peers(&[a, b, moved.clone()]);
        assert_eq!(restarts.address(old.address), moved.address);
        assert_eq!(settled(&mut restarts, ms(t0, 3_100)), [Fate::Restart]);
    }

    /// What a port's probes taught stays until the peer set publishes something new; a port the
    /// peer set drops settles its held probes as not the path's; strangers teach nothing.
    #[test]
    fn learned_addresses_last_until_the_peer_set_says_something_new() {
        let t0 = Instant::now();
        let (mut restarts, a, b) = watched(t0);
        restarts.heard_probe(a.address.gid, 50, 7, t0);
        // The same stale list again (a refresh taken before the change): the learned stays.
        restarts.set_peers(&[a.clone(), b.clone()]);
        assert_eq!(restarts.address(a.address).qpn, 50);
        // A new list: it wins.
        restarts.set_peers(&[peer(2, 0, 60), b.clone()]);
        assert_eq!(restarts.address(a.address).qpn, 60);
        // A stranger's probe changes nothing.
        let stranger = address(9, 9, 1);
        restarts.heard_probe(stranger.gid, 99, 1, t0);
        assert_eq!(restarts.address(stranger), stranger);
        // b held, then dropped from the peer set.
        assert_eq!(restarts.expired(path(&b), b.address, ms(t0, 100), 7), None);
        restarts.set_peers(&[peer(2, 0, 60)]);
        assert_eq!(settled(&mut restarts, ms(t0, 200)), [Fate::Restart]);
        // This host's own ports are no peers: their probes are lost at once.
        let own = address(1, 0, 5);
        let own_path = PathKey {
            from: 0,
            kind: PathKind::Host,
            to: port("gpu-1", 0),
        };
        let fate = restarts.expired(own_path, own, ms(t0, 300), 0);
        assert_eq!(fate.map(|f| f.1), Some(Fate::Lost));
    }

    /// Two agents answering on one GID (one device shared by two pods): neither is learned
    /// nor held, as before restarts were told apart.
    #[test]
    fn a_gid_two_peers_share_is_left_alone() {
        let t0 = Instant::now();
        let first = peer(4, 0, 10);
        let second = Peer {
            port: port("gpu-5", 0),
            address: address(4, 0, 20),
        };
        let mut restarts = Restarts::new(GRACE);
        restarts.set_peers(&[first.clone(), second.clone()]);
        restarts.heard_probe(first.address.gid, 30, 7, t0);
        assert_eq!(restarts.address(first.address), first.address);
        assert_eq!(restarts.address(second.address), second.address);
        let fate = restarts.expired(path(&second), second.address, t0, 0);
        assert_eq!(fate.map(|f| f.1), Some(Fate::Lost));
    }

    #[test]
    fn held_probes_are_bounded() {
        let t0 = Instant::now();
        let (mut restarts, a, _) = watched(t0);
        for n in 0..MAX_HELD as u64 + 5 {
            assert_eq!(
                restarts.expired(path(&a), a.address, ms(t0, 100 + n), 7),
                None
            );
        }
        let fates = settled(&mut restarts, ms(t0, 200));
        assert_eq!(fates, [Fate::Lost; 5]);
        assert_eq!(restarts.held(), MAX_HELD);
    }
}
