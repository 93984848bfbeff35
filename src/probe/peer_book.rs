//! The peers' answers kept from one refresh to the next, and whom a refresh asks.
//!
//! A peer's addresses change only when its agent restarts, and this host learns a restart from
//! the peer's own packets first (`restarts.rs`). So an agent asks each agent once for its ports
//! and rails, keeps the answer with its `ETag`, and afterwards asks again (conditionally: a 304
//! is a few hundred bytes) only
//! - the hosts its plan reaches over the next refresh period whose answer is older than the
//!   book's `stale_after`: checked just before they are probed, the others never;
//! - a host that went silent since the last refresh (probes lost, none answered), once per
//!   silence: a restart its packets did not say is found this way;
//! - an agent whose last ask failed, with a backoff doubling up to `stale_after`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::agent::Peer;
use super::peers::{Answer, Ask, PeerError, Published};
use super::stats::Stats;
use super::targets::{Port, Settings};

/// An answer older than this many refresh periods is checked again before its host is probed
/// (an hour at the default minute): a safety net. Restarts are learned sooner, from the
/// peer's packets or its silence, and a 304 costs a few hundred bytes.
pub const STALE_REFRESHES: u32 = 60;

/// The rounds a refresh looks ahead: the next refresh may come up to half a period late
/// (jitter), and rounds last `min_round` at least.
pub fn rounds_ahead(period: Duration, settings: &Settings) -> u64 {
    (period.as_secs_f64() * 1.5 / settings.min_round.as_secs_f64().max(1e-3)).ceil() as u64
}

/// One agent's last answer.
#[derive(Debug, Default)]
struct Entry {
    published: Option<Published>,
    etag: Option<String>,
    /// When it last answered (new or unchanged).
    confirmed: Option<Instant>,
    /// Asks that failed in a row, and when it may be asked again.
    failures: u32,
    retry_at: Option<Instant>,
    /// Asked already during its host's current silence.
    asked_while_silent: bool,
}

/// The agents' answers, by agent (`host:port`).
#[derive(Debug)]
pub struct PeerBook {
    entries: BTreeMap<String, Entry>,
    /// An answer older than this is checked again before its host is probed.
    stale_after: Duration,
    /// The first wait after a failed ask.
    retry_after: Duration,
}

/// Why an agent is asked, for the counts of a refresh.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Reasons {
    /// Never answered yet.
    pub first: usize,
    /// Reached by the plan soon, its answer stale.
    pub reached: usize,
    /// Its host went silent.
    pub silent: usize,
    /// Its last ask failed.
    pub retry: usize,
}

impl PeerBook {
    /// The book a refresh every `period` keeps: answers stale after [`STALE_REFRESHES`]
    /// periods, a failed ask retried after one.
    pub fn for_refresh_period(period: Duration) -> PeerBook {
        PeerBook::new(period.saturating_mul(STALE_REFRESHES), period)
    }

    pub fn new(stale_after: Duration, retry_after: Duration) -> PeerBook {
        PeerBook {
            entries: BTreeMap::new(),
            stale_after,
            retry_after,
        }
    }

    /// The agents the config names now: new ones are added, those no longer named forgotten.
    pub fn set_agents(&mut self, agents: &[String]) {
        let named: BTreeSet<&String> = agents.iter().collect();
        self.entries.retain(|agent, _| named.contains(agent));
        for agent in named {
            self.entries.entry(agent.clone()).or_default();
        }
    }

    /// Whom to ask now: agents never answered, hosts in `reached` with a stale answer, hosts in
    /// `silent` not asked yet during this silence; none whose retry is not due.
    pub fn asks(
        &mut self,
        now: Instant,
        reached: &BTreeSet<&str>,
        silent: &BTreeSet<String>,
    ) -> (Vec<Ask>, Reasons) {
        let mut asks = Vec::new();
        let mut reasons = Reasons::default();
        for (agent, entry) in &mut self.entries {
            let host = entry.published.as_ref().map(|p| p.host.as_str());
            let is_silent = host.is_some_and(|h| silent.contains(h));
            if !is_silent {
                entry.asked_while_silent = false;
            }
            if entry.retry_at.is_some_and(|at| now < at) {
                continue;
            }
            let stale = entry
                .confirmed
                .is_none_or(|at| now.saturating_duration_since(at) >= self.stale_after);
            let why = match host {
                None => &mut reasons.first,
                Some(_) if is_silent && !entry.asked_while_silent => {
                    entry.asked_while_silent = true;
                    &mut reasons.silent
                }
                Some(h) if stale && reached.contains(h) => &mut reasons.reached,
                // A failed ask is retried when due, whether or not the plan needs it soon.
                Some(_) if entry.failures > 0 => &mut reasons.retry,
                Some(_) => continue,
            };
            *why += 1;
            asks.push(Ask {
                agent: agent.clone(),
                etag: entry.etag.clone(),
            });
        }
        (asks, reasons)
    }

    /// What `agent` answered at `now`.
    pub fn record(&mut self, agent: &str, answer: Result<Answer, PeerError>, now: Instant) {
        let Some(entry) = self.entries.get_mut(agent) else {
            return;
        };
        match answer {
            Ok(Answer::New { published, etag }) => {
                entry.published = Some(published);
                entry.etag = etag;
            }
            Ok(Answer::Unchanged) => {}
            Err(_) => {
                entry.failures = entry.failures.saturating_add(1);
                let wait = self
                    .retry_after
                    .saturating_mul(1 << (entry.failures - 1).min(16))
                    .min(self.stale_after);
                entry.retry_at = Some(now + wait);
                return;
            }
        }
        entry.confirmed = Some(now);
        entry.failures = 0;
        entry.retry_at = None;
    }

    /// Every known port, this host's too: what the plan chooses its targets from.
    pub fn ports(&self) -> Vec<Port> {
        self.peers("").into_iter().map(|p| p.port).collect()
    }

    /// The ports of every other host with their addresses. Two agents naming one host (an
    /// address in `peers` and the same agent in DNS) give it once: the latest answer.
    pub fn peers(&self, own_host: &str) -> Vec<Peer> {
        let mut latest: BTreeMap<&str, (Option<Instant>, &Published)> = BTreeMap::new();
        for entry in self.entries.values() {
            let Some(published) = &entry.published else {
                continue;
            };
            if published.host == own_host {
                continue;
            }
            let slot = latest
                .entry(&published.host)
                .or_insert((entry.confirmed, published));
            if entry.confirmed > slot.0 {
                *slot = (entry.confirmed, published);
            }
        }
        latest.values().flat_map(|(_, p)| p.peers()).collect()
    }
}

/// Which peer hosts went silent between two looks at the loop's counts: probes to them lost,
/// none answered.
#[derive(Debug, Default)]
pub struct Silence {
    /// Each host's (answered, lost) summed over its paths at the last look.
    last: HashMap<String, (u64, u64)>,
}

impl Silence {
    pub fn look(&mut self, stats: &Stats) -> BTreeSet<String> {
        let mut now: HashMap<String, (u64, u64)> = HashMap::new();
        for (path, counts) in stats.all_targets() {
            let sums = now.entry(path.to.host.clone()).or_default();
            sums.0 += counts.answered;
            sums.1 += counts.lost;
        }
        let silent = now
            .iter()
            .filter(|(host, &(answered, lost))| {
                let (answered_before, lost_before) =
                    self.last.get(*host).copied().unwrap_or_default();
                // Counts aged out and back start again from zero.
                let grown = |now: u64, before: u64| if now >= before { now - before } else { now };
                grown(lost, lost_before) > 0 && grown(answered, answered_before) == 0
            })
            .map(|(host, _)| host.clone())
            .collect();
        self.last = now;
        silent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::peers::PublishedPort;
    use crate::probe::targets::{self, Settings};
    use crate::probe::transport::Address;

    /// Host `n` with one port per rail, its QPNs from `qpn`.
    fn published(n: usize, rails: u32, qpn: u32) -> Published {
        Published {
            host: format!("gpu-{n:03}"),
            ports: (0..rails)
                .map(|rail| PublishedPort {
                    device: format!("mlx5_{rail}"),
                    port: 1,
                    rail,
                    leaf: None,
                    address: Address {
                        gid: [
                            n as u8,
                            (n >> 8) as u8,
                            rail as u8,
                            1,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                        ],
                        qpn: qpn + rail,
                        qkey: 1,
                        lid: None,
                    },
                })
                .collect(),
        }
    }

    /// A fleet of agents behind a fake fetcher that counts the asks and answers 304 to a tag
    /// that is current.
    struct Fleet {
        agents: Vec<String>,
        published: Vec<Published>,
        asked: Vec<String>,
    }

    impl Fleet {
        fn new(hosts: usize, rails: u32) -> Fleet {
            Fleet {
                agents: (0..hosts)
                    .map(|n| format!("10.0.{}.{}:9866", n / 256, n % 256))
                    .collect(),
                published: (0..hosts).map(|n| published(n, rails, 100)).collect(),
                asked: Vec::new(),
            }
        }

        fn tag(published: &Published) -> String {
            format!("\"{}\"", published.ports[0].address.qpn)
        }

        fn refresh(
            &mut self,
            book: &mut PeerBook,
            now: Instant,
            reached: &BTreeSet<&str>,
            silent: &BTreeSet<String>,
        ) -> Reasons {
            book.set_agents(&self.agents);
            let (asks, reasons) = book.asks(now, reached, silent);
            for ask in asks {
                let n = self.agents.iter().position(|a| *a == ask.agent).unwrap();
                let tag = Fleet::tag(&self.published[n]);
                let answer = if ask.etag.as_deref() == Some(tag.as_str()) {
                    Answer::Unchanged
                } else {
                    Answer::New {
                        published: self.published[n].clone(),
                        etag: Some(tag),
                    }
                };
                self.asked.push(self.published[n].host.clone());
                book.record(&ask.agent, Ok(answer), now);
            }
            reasons
        }
    }

    const MINUTE: Duration = Duration::from_secs(60);

    /// After the first refresh (every agent once), an agent asks only for the hosts its plan
    /// probes next, and only once their answers are stale; the hosts it does not probe are
    /// never asked again.
    #[test]
    fn an_agent_asks_again_only_for_what_it_probes() {
        let mut fleet = Fleet::new(300, 8);
        let mut book = PeerBook::new(10 * MINUTE, MINUTE);
        let start = Instant::now();
        let none = BTreeSet::new();
        let quiet = BTreeSet::new();
        let first = fleet.refresh(&mut book, start, &none, &quiet);
        assert_eq!(first.first, 300);
        assert_eq!(book.peers("gpu-000").len(), 299 * 8);
        let all = book.ports();
        let local: Vec<Port> = all
            .iter()
            .filter(|p| p.host == "gpu-000")
            .cloned()
            .collect();
        let settings = Settings::default();
        // Within `stale_after`: nothing is asked, whatever the plan reaches.
        fleet.asked.clear();
        let reached = targets::hosts_reached(&local, &all, 60..62, &settings);
        fleet.refresh(&mut book, start + MINUTE, &reached, &quiet);
        assert!(fleet.asked.is_empty(), "{:?}", fleet.asked);
        // Stale: the hosts of the next two rounds' plan, each once, and no other.
        let later = start + 11 * MINUTE;
        let reached = targets::hosts_reached(&local, &all, 660..662, &settings);
        let reasons = fleet.refresh(&mut book, later, &reached, &quiet);
        let asked: BTreeSet<&str> = fleet.asked.iter().map(String::as_str).collect();
        assert_eq!(asked, reached);
        assert_eq!(fleet.asked.len(), reached.len());
        assert_eq!(reasons.reached, reached.len());
        assert!(reached.len() < 200, "{}", reached.len());
        // Asked again at once, they are fresh: nothing more.
        fleet.asked.clear();
        fleet.refresh(&mut book, later, &reached, &quiet);
        assert!(fleet.asked.is_empty());
    }

    /// A peer restarts (new QPNs, a new tag): its host goes silent, the next refresh asks it
    /// once, the new addresses come back; asked again during the same silence, it is not.
    #[test]
    fn a_silent_peer_is_asked_early_and_its_new_address_learned() {
        let mut fleet = Fleet::new(20, 2);
        let mut book = PeerBook::new(10 * MINUTE, MINUTE);
        let start = Instant::now();
        let none = BTreeSet::new();
        let quiet = BTreeSet::new();
        fleet.refresh(&mut book, start, &none, &quiet);
        fleet.published[7] = published(7, 2, 900);
        let silent: BTreeSet<String> = ["gpu-007".to_string()].into();
        fleet.asked.clear();
        let reasons = fleet.refresh(&mut book, start + MINUTE, &none, &silent);
        assert_eq!(fleet.asked, ["gpu-007"]);
        assert_eq!(reasons.silent, 1);
        let qpns: Vec<u32> = book
            .peers("gpu-000")
            .iter()
            .filter(|p| p.port.host == "gpu-007")
            .map(|p| p.address.qpn)
            .collect();
        assert_eq!(qpns, [900, 901]);
        fleet.asked.clear();
        fleet.refresh(&mut book, start + 2 * MINUTE, &none, &silent);
        assert!(fleet.asked.is_empty(), "{:?}", fleet.asked);
        // Heard again, then silent again: a new silence, asked again.
        fleet.refresh(&mut book, start + 3 * MINUTE, &none, &quiet);
        fleet.refresh(&mut book, start + 4 * MINUTE, &none, &silent);
        assert_eq!(fleet.asked, ["gpu-007"]);
    }

    /// A failed ask is retried later and later, up to `stale_after`; an agent no longer named
    /// is forgotten; one host named by two agents is one peer.
    #[test]
    fn failures_back_off_and_the_book_follows_the_named_agents() {
        let mut book = PeerBook::new(10 * MINUTE, MINUTE);
        let start = Instant::now();
        let none = BTreeSet::new();
        let quiet = BTreeSet::new();
        book.set_agents(&["a:1".into(), "b:1".into()]);
        let failed = || {
            Err(PeerError::Agent {
                agent: "a:1".into(),
                message: "refused".into(),
            })
        };
        let due = |book: &mut PeerBook, at: Duration| -> Vec<String> {
            book.asks(start + at, &none, &quiet)
                .0
                .into_iter()
                .map(|a| a.agent)
                .collect()
        };
        book.record("a:1", failed(), start);
        let answer = |n| {
            Ok(Answer::New {
                published: published(n, 1, 5),
                etag: None,
            })
        };
        book.record("b:1", answer(1), start);
        assert!(due(&mut book, Duration::from_secs(59)).is_empty());
        assert_eq!(due(&mut book, MINUTE), ["a:1"]);
        book.record("a:1", failed(), start + MINUTE);
        // Two minutes after the second failure, not one.
        assert!(due(&mut book, 2 * MINUTE).is_empty());
        assert_eq!(due(&mut book, 3 * MINUTE), ["a:1"]);
        for _ in 0..10 {
            book.record("a:1", failed(), start);
        }
        assert_eq!(due(&mut book, 10 * MINUTE), ["a:1"]);
        // The same host behind a second name: one peer, the latest answer's.
        book.set_agents(&["b:1".into(), "b-again:1".into()]);
        book.record("b-again:1", answer(1), start + MINUTE);
        assert_eq!(book.peers("gpu-999").len(), 1);
        assert_eq!(book.ports().len(), 1);
        book.set_agents(&[]);
        assert!(book.peers("gpu-999").is_empty());
    }
}
