//! Which switches one collector instance reads: all of them, those whose description matches an
//! include/exclude pattern, and/or one shard of the fabric by switch GUID, so that several
//! instances split a large fabric without overlap. Discovery still covers the whole subnet (the
//! links need both ends); only the per-switch counter queries are skipped.

use regex::Regex;

use super::model::Guid;

/// One of `count` disjoint parts of the fabric; every switch GUID falls in exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// A shard that is not `i/N` with `0 <= i < N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a shard: expected INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/4")]
pub struct ShardParseError(pub String);

impl std::str::FromStr for Shard {
    type Err = ShardParseError;

    fn from_str(text: &str) -> Result<Shard, ShardParseError> {
        let err = || ShardParseError(text.chars().take(40).collect());
        let (index, count) = text.split_once('/').ok_or_else(err)?;
        let index: u32 = index.trim().parse().map_err(|_| err())?;
        let count: u32 = count.trim().parse().map_err(|_| err())?;
        if count == 0 || index >= count {
            return Err(err());
        }
        Ok(Shard { index, count })
    }
}

impl Shard {
    /// The GUID is mixed first (splitmix64's finalizer): GUIDs of one vendor differ mostly in
    /// their low bits and are often allocated in steps, which a plain modulo would not spread.
    pub fn holds(&self, guid: Guid) -> bool {
        let mut z = guid.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        z % u64::from(self.count) == u64::from(self.index)
    }
}

/// The switches an instance reads. The default reads every switch.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Anchored pattern over the switch's NodeDescription; `None` keeps all.
    pub include: Option<Regex>,
    /// Anchored pattern over the NodeDescription; a match drops the switch.
    pub exclude: Option<Regex>,
    pub shard: Option<Shard>,
}

impl Selection {
    pub fn keeps_switch(&self, guid: Guid, description: &str) -> bool {
        self.include
            .as_ref()
            .is_none_or(|r| r.is_match(description))
            && !self
                .exclude
                .as_ref()
                .is_some_and(|r| r.is_match(description))
            && self.shard.is_none_or(|s| s.holds(guid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_every_guid_exactly_once_and_roughly_evenly() {
        let shards: Vec<Shard> = (0..4).map(|i| Shard { index: i, count: 4 }).collect();
        let mut per_shard = [0usize; 4];
        // Sequential GUIDs, as one vendor allocates them.
        for g in 0..4000u64 {
            let guid = Guid(0x0002_c903_0000_0000 + g);
            let owners: Vec<usize> = (0..4).filter(|&i| shards[i].holds(guid)).collect();
            assert_eq!(owners.len(), 1, "{guid}");
            per_shard[owners[0]] += 1;
        }
        assert!(
            per_shard.iter().all(|&n| (800..1200).contains(&n)),
            "{per_shard:?}"
        );
    }

    #[test]
    fn shard_text_is_checked() {
        assert_eq!("1/3".parse::<Shard>(), Ok(Shard { index: 1, count: 3 }));
        for bad in ["3/3", "1/0", "x/2", "1", "-1/2", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn include_exclude_and_shard_combine() {
        let sel = Selection {
            include: Some(Regex::new("^(?:leaf-.*)$").unwrap()),
            exclude: Some(Regex::new("^(?:leaf-9.*)$").unwrap()),
            shard: None,
        };
        assert!(sel.keeps_switch(Guid(1), "leaf-01"));
        assert!(!sel.keeps_switch(Guid(1), "leaf-90"));
        assert!(!sel.keeps_switch(Guid(1), "spine-01"));
        assert!(Selection::default().keeps_switch(Guid(7), "anything"));
    }
}
