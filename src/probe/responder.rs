//! What a responder answers. It replies to probes only, and no faster than a bound per source
//! and a bound in total, so a broken or hostile peer that floods the Q_Key costs the NIC at most
//! the configured answers a second and the agent a bounded table. Sources outside the peer set
//! (a GID no agent publishes: a forged source, or a host not yet in the list) share one small
//! bucket, so the responders of a fleet cannot be turned into a reflector aimed at them. Time is given in nanoseconds
//! of a monotonic clock, so the policy is tested without sleeping.

use std::collections::{HashMap, HashSet};

use super::packet::{Kind, Packet, PacketError};
use super::transport::Address;

/// Where a packet came from, as its receive completion says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source {
    /// The sender's GID, from the GRH; all zeros when the packet had none (InfiniBand within
    /// a subnet), or once [`KnownSources::identify`] named its peer, that peer's GID.
    pub gid: [u8; 16],
    pub qpn: u32,
    /// The source LID of the completion on InfiniBand (the sender's, or the router's for a
    /// packet from another subnet), where the answer goes; `None` on RoCE.
    pub lid: Option<u16>,
}

impl Source {
    /// A source named by its GRH (RoCE, memory endpoints).
    pub fn from_gid(gid: [u8; 16], qpn: u32) -> Source {
        Source {
            gid,
            qpn,
            lid: None,
        }
    }

    /// Whether this is `to` answering: its QPN and GID, or without a GRH (InfiniBand, one
    /// subnet) its LID.
    pub fn is(&self, to: &Address) -> bool {
        if self.qpn != to.qpn {
            return false;
        }
        if self.gid != [0; 16] {
            return self.gid == to.gid;
        }
        self.lid.is_some() && self.lid == to.lid
    }

    /// Where an answer to it goes.
    pub fn address(&self, qkey: u32) -> Address {
        Address {
            gid: self.gid,
            qpn: self.qpn,
            qkey,
            lid: self.lid,
        }
    }
}

/// The peer set's addresses as sources are matched against them: by GID, and for packets
/// without a GRH (InfiniBand within a subnet) by LID within the receiving port's subnet.
#[derive(Debug, Default)]
pub(crate) struct KnownSources {
    gids: HashSet<[u8; 16]>,
    /// (subnet prefix, LID) -> the peer's GID; `None` where two peers claim it (a source that
    /// could be either is not named).
    lids: HashMap<([u8; 8], u16), Option<[u8; 16]>>,
}

impl KnownSources {
    pub fn new<'a>(addresses: impl IntoIterator<Item = &'a Address>) -> KnownSources {
        let mut known = KnownSources::default();
        for address in addresses {
            known.gids.insert(address.gid);
            if let Some(lid) = address.lid {
                let key = (subnet_prefix(&address.gid), lid);
                known
                    .lids
                    .entry(key)
                    .and_modify(|gid| {
                        if *gid != Some(address.gid) {
                            *gid = None;
                        }
                    })
                    .or_insert(Some(address.gid));
            }
        }
        known
    }

    /// `source` as the peer set knows it, received on a port whose GID is `local_gid`: with a
    /// GRH, known when its GID is a peer's; without one, the peer with its LID in the local
    /// subnet (a packet from another subnet carries a GRH), its GID filled in. `None`: not a
    /// peer's.
    pub(crate) fn identify(&self, source: Source, local_gid: &[u8; 16]) -> Option<Source> {
        if source.gid != [0; 16] {
            return self.gids.contains(&source.gid).then_some(source);
        }
        let lid = source.lid?;
        let gid = (*self.lids.get(&(subnet_prefix(local_gid), lid))?)?;
        Some(Source { gid, ..source })
    }
}

/// A GID's subnet prefix, its first 8 bytes.
pub(crate) fn subnet_prefix(gid: &[u8; 16]) -> [u8; 8] {
    let mut prefix = [0u8; 8];
    prefix.copy_from_slice(&gid[..8]);
    prefix
}

/// The bounds of a responder.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Answers a second to one source (a source's sustained probe rate is far below this).
    pub per_source: u32,
    /// Answers a second over all sources.
    pub total: u32,
    /// Sources tracked one by one; past it, new sources share one bucket.
    pub sources: usize,
    /// Answers a second, in all, to sources outside the peer set.
    pub unknown: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_source: 200,
            total: 2_000,
            sources: 4_096,
            unknown: 10,
        }
    }
}

/// What to do with one received payload.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Answer probe `seq` (an `Ack` now, a `Delay` once the `Ack` completed).
    Answer(u64),
    /// Drop it; the reason is a label of the dropped-packets counter.
    Drop(&'static str),
}

/// A token bucket holding up to one second of answers.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_ns: u64,
}

impl Bucket {
    fn full(rate: u32, now_ns: u64) -> Bucket {
        Bucket {
            tokens: f64::from(rate),
            at_ns: now_ns,
        }
    }

    /// Refills for the time since the last take and takes one token if there is one.
    fn take(&mut self, rate: u32, now_ns: u64) -> bool {
        let elapsed_s = now_ns.saturating_sub(self.at_ns) as f64 / 1e9;
        self.tokens = (self.tokens + elapsed_s * f64::from(rate)).min(f64::from(rate));
        self.at_ns = self.at_ns.max(now_ns);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The responder's state: one bucket per known source, one for the rest, one in total.
#[derive(Debug)]
pub struct Responder {
    limits: Limits,
    sources: HashMap<Source, Bucket>,
    others: Bucket,
    unknown: Bucket,
    total: Bucket,
}

impl Responder {
    pub fn new(limits: Limits, now_ns: u64) -> Responder {
        Responder {
            limits,
            sources: HashMap::new(),
            others: Bucket::full(limits.per_source, now_ns),
            unknown: Bucket::full(limits.unknown, now_ns),
            total: Bucket::full(limits.total, now_ns),
        }
    }

    /// Decides on one payload from `source`, received at `now_ns`; `known`: the source's GID
    /// is one of the peer set's.
    pub fn receive(&mut self, payload: &[u8], source: Source, now_ns: u64, known: bool) -> Verdict {
        let packet = match Packet::decode(payload) {
            Ok(packet) => packet,
            Err(error) => return Verdict::Drop(PacketError::reason(&error)),
        };
        if packet.kind != Kind::Probe {
            // Answers are the prober's; answering them would let two responders loop.
            return Verdict::Drop("not_a_probe");
        }
        let limits = self.limits;
        if !known {
            if !self.unknown.take(limits.unknown, now_ns) || !self.total.take(limits.total, now_ns)
            {
                return Verdict::Drop("unknown_source");
            }
            return Verdict::Answer(packet.seq);
        }
        let tracked = self.sources.contains_key(&source) || self.sources.len() < limits.sources;
        let bucket = if tracked {
            self.sources
                .entry(source)
                .or_insert_with(|| Bucket::full(limits.per_source, now_ns))
        } else {
            &mut self.others
        };
        // The source's bucket first: a flooding source does not drain the total for the rest.
        if !bucket.take(limits.per_source, now_ns) || !self.total.take(limits.total, now_ns) {
            return Verdict::Drop("rate_limited");
        }
        Verdict::Answer(packet.seq)
    }

    /// Forgets sources silent for `idle_ns`, so the table tracks the current peers.
    pub(crate) fn forget_idle(&mut self, now_ns: u64, idle_ns: u64) {
        self.sources
            .retain(|_, bucket| now_ns.saturating_sub(bucket.at_ns) < idle_ns);
    }

    pub fn tracked_sources(&self) -> usize {
        self.sources.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn source(n: u32) -> Source {
        Source::from_gid([n as u8; 16], n)
    }

    fn probe(seq: u64) -> [u8; 32] {
        Packet::probe(seq).encode()
    }

    fn answered(responder: &mut Responder, from: Source, count: u64, now_ns: u64) -> u64 {
        (0..count)
            .filter(|seq| {
                responder.receive(&probe(*seq), from, now_ns, true) == Verdict::Answer(*seq)
            })
            .count() as u64
    }

    fn ib_gid(prefix: u8, guid: u8) -> [u8; 16] {
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, prefix]);
        gid[15] = guid;
        gid
    }

    fn ib_address(gid: [u8; 16], qpn: u32, lid: u16) -> Address {
        Address {
            gid,
            qpn,
            qkey: 1,
            lid: Some(lid),
        }
    }

    /// InfiniBand within a subnet sends no GRH: a probe is known by its source LID, in the
    /// receiving port's subnet, and takes its peer's GID; a LID two peers of that subnet claim,
    /// or one of another subnet, is nobody's. With a GRH the GID decides, as on RoCE.
    #[test]
    fn sources_without_a_grh_are_known_by_their_lid_in_the_subnet() {
        let local = ib_gid(0x80, 1);
        let peer = ib_gid(0x80, 2);
        let far = ib_gid(0x81, 3);
        let known = KnownSources::new(&[
            ib_address(peer, 100, 7),
            ib_address(far, 100, 9),
            ib_address(ib_gid(0x80, 4), 100, 11),
            ib_address(ib_gid(0x80, 5), 100, 11),
        ]);
        let lid_only = |lid| Source {
            gid: [0; 16],
            qpn: 555,
            lid: Some(lid),
        };
        assert_eq!(
            known.identify(lid_only(7), &local),
            Some(Source {
                gid: peer,
                qpn: 555,
                lid: Some(7)
            })
        );
        assert_eq!(
            known.identify(lid_only(9), &local),
            None,
            "another subnet's LID"
        );
        assert_eq!(known.identify(lid_only(11), &local), None, "claimed twice");
        assert_eq!(known.identify(lid_only(12), &local), None, "nobody's");
        let no_lid = Source::from_gid([0; 16], 555);
        assert_eq!(known.identify(no_lid, &local), None);
        // A GRH names its GID; the router's LID beside it is where the answer goes.
        let routed = Source {
            gid: far,
            qpn: 555,
            lid: Some(1),
        };
        assert_eq!(known.identify(routed, &local), Some(routed));
        assert_eq!(
            known.identify(Source::from_gid(ib_gid(0x81, 9), 5), &local),
            None
        );
    }

    /// An answer is the target's when its QPN is, and its GID, or without a GRH its LID.
    #[test]
    fn answers_are_matched_by_gid_or_without_a_grh_by_lid() {
        let target = ib_address(ib_gid(0x80, 2), 300, 7);
        let by_lid = Source {
            gid: [0; 16],
            qpn: 300,
            lid: Some(7),
        };
        assert!(by_lid.is(&target));
        assert!(!Source {
            lid: Some(8),
            ..by_lid
        }
        .is(&target));
        assert!(!Source { qpn: 301, ..by_lid }.is(&target));
        assert!(Source::from_gid(target.gid, 300).is(&target));
        assert!(!Source::from_gid(ib_gid(0x80, 3), 300).is(&target));
        let roce = Address {
            lid: None,
            ..target
        };
        assert!(!Source::from_gid([0; 16], 300).is(&roce), "no GRH, no LID");
        assert_eq!(by_lid.address(9).lid, Some(7));
    }

    #[test]
    fn probes_are_answered_and_everything_else_dropped_with_its_reason() {
        let mut responder = Responder::new(Limits::default(), 0);
        assert_eq!(
            responder.receive(&probe(5), source(1), 0, true),
            Verdict::Answer(5)
        );
        let ack = Packet::answer(Kind::Ack, 5, 0, Default::default(), 0);
        assert_eq!(
            responder.receive(&ack.encode(), source(1), 0, true),
            Verdict::Drop("not_a_probe")
        );
        assert_eq!(
            responder.receive(b"garbage", source(1), 0, true),
            Verdict::Drop("length")
        );
        assert_eq!(
            responder.receive(&[0; 32], source(1), 0, true),
            Verdict::Drop("magic")
        );
    }

    #[test]
    fn a_flooding_source_gets_its_bound_and_the_others_still_theirs() {
        let limits = Limits {
            per_source: 100,
            total: 1_000,
            sources: 16,
            unknown: 10,
        };
        let mut responder = Responder::new(limits, 0);
        assert_eq!(answered(&mut responder, source(1), 10_000, 0), 100);
        assert_eq!(answered(&mut responder, source(2), 50, 0), 50);
        // Half a second later, half a second of tokens.
        assert_eq!(answered(&mut responder, source(1), 10_000, SECOND / 2), 50);
    }

    #[test]
    fn the_total_bounds_many_sources() {
        let limits = Limits {
            per_source: 100,
            total: 250,
            sources: 1_000,
            unknown: 10,
        };
        let mut responder = Responder::new(limits, 0);
        let total: u64 = (0..10)
            .map(|n| answered(&mut responder, source(n), 100, 0))
            .sum();
        assert_eq!(total, 250);
    }

    /// A peer that forges a new source for every packet fills the table once, then shares one
    /// bucket: the table and the answers stay bounded.
    #[test]
    fn forged_sources_share_one_bucket_past_the_table() {
        let limits = Limits {
            per_source: 10,
            total: 100_000,
            sources: 4,
            unknown: 10,
        };
        let mut responder = Responder::new(limits, 0);
        let answers: u64 = (0..1_000)
            .map(|n| answered(&mut responder, source(n), 1, 0))
            .sum();
        assert_eq!(responder.tracked_sources(), 4);
        assert_eq!(answers, 4 + 10);
        responder.forget_idle(10 * SECOND, SECOND);
        assert_eq!(responder.tracked_sources(), 0);
    }

    /// Sources outside the peer set (forged, or not published by any agent) share one small
    /// bucket whatever their number, and are never tracked: a responder cannot be turned into
    /// a reflector aimed at them, and known peers keep their own bounds meanwhile.
    #[test]
    fn sources_outside_the_peer_set_share_a_small_bucket() {
        let limits = Limits {
            per_source: 100,
            total: 10_000,
            sources: 64,
            unknown: 10,
        };
        let mut responder = Responder::new(limits, 0);
        let unknown: u64 = (0..1_000)
            .filter(|n| {
                let from = source(*n);
                responder.receive(&probe(1), from, 0, false) == Verdict::Answer(1)
            })
            .count() as u64;
        assert_eq!(unknown, 10);
        assert_eq!(
            responder.receive(&probe(2), source(7), 0, false),
            Verdict::Drop("unknown_source")
        );
        assert_eq!(responder.tracked_sources(), 0);
        // A known peer is answered as before.
        assert_eq!(answered(&mut responder, source(1), 50, 0), 50);
        // A second later, the shared bucket is full again: ten more.
        let later = (0..100)
            .filter(|n| {
                responder.receive(&probe(1), source(*n), SECOND, false) == Verdict::Answer(1)
            })
            .count();
        assert_eq!(later, 10);
    }
}
