//! Which switches one replica of a sharded switch poller owns: `--switch.shard INDEX/COUNT`
//! keeps the switches whose name Prometheus' `hashmod` relabel action puts in bucket INDEX of
//! COUNT. The hash is Prometheus' own (the last 8 bytes of the MD5 of the value, big-endian,
//! modulo COUNT), so a replica and the scrape job that keeps
//! `hashmod(__param_target, COUNT) == INDEX` agree on every switch without a list to maintain.

use md5::{Digest, Md5};

/// One of `count` disjoint parts of the configured switches; every name falls in exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchShard {
    pub index: u64,
    pub count: u64,
}

/// A shard that is not `INDEX/COUNT` with `0 <= INDEX < COUNT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a shard: expected INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/2")]
pub struct ShardParseError(pub String);

impl std::str::FromStr for SwitchShard {
    type Err = ShardParseError;

    fn from_str(text: &str) -> Result<SwitchShard, ShardParseError> {
        let err = || ShardParseError(text.chars().take(40).collect());
        let (index, count) = text.split_once('/').ok_or_else(err)?;
        let index: u64 = index.trim().parse().map_err(|_| err())?;
        let count: u64 = count.trim().parse().map_err(|_| err())?;
        if count == 0 || index >= count {
            return Err(err());
        }
        Ok(SwitchShard { index, count })
    }
}

impl std::fmt::Display for SwitchShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl<'de> serde::Deserialize<'de> for SwitchShard {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::yaml::converted(deserializer, "INDEX/COUNT", |text| {
            text.parse().map_err(|e| format!("switch_shard: {e}"))
        })
    }
}

/// Prometheus' `hashmod` of `value` (relabel.go: `binary.BigEndian.Uint64(md5[8:]) % modulus`).
pub fn hashmod(value: &str, modulus: u64) -> u64 {
    let digest = Md5::digest(value.as_bytes());
    let mut low = [0u8; 8];
    low.copy_from_slice(&digest[8..16]);
    u64::from_be_bytes(low) % modulus.max(1)
}

impl SwitchShard {
    /// The bucket `name` falls in (the replica that owns it).
    pub(crate) fn bucket_of(&self, name: &str) -> u64 {
        hashmod(name, self.count)
    }

    pub fn holds(&self, name: &str) -> bool {
        self.bucket_of(name) == self.index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_prometheus_hashmod() {
        // RFC 1321's test suite: md5("abc") = 900150983cd24fb0 d6963f7d28e17f72; Prometheus
        // takes the second half, big-endian. (tests/it/switch_shard.rs checks the split against
        // a real Prometheus.)
        assert_eq!(hashmod("abc", u64::MAX), 0xd696_3f7d_28e1_7f72);
        assert_eq!(hashmod("abc", 10), 0xd696_3f7d_28e1_7f72 % 10);
        assert_eq!(hashmod("abc", 0), 0, "a zero modulus is never divided by");
    }

    #[test]
    fn shards_split_every_name_exactly_once() {
        let shards: Vec<SwitchShard> = (0..3)
            .map(|index| SwitchShard { index, count: 3 })
            .collect();
        let mut per_shard = [0usize; 3];
        for i in 0..3000 {
            let name = format!("leaf{i}");
            let owners: Vec<usize> = (0..3).filter(|&s| shards[s].holds(&name)).collect();
            assert_eq!(owners.len(), 1, "{name}");
            per_shard[owners[0]] += 1;
        }
        assert!(
            per_shard.iter().all(|&n| (800..1200).contains(&n)),
            "{per_shard:?}"
        );
    }

    #[test]
    fn shard_text_is_checked() {
        assert_eq!(
            "1/3".parse::<SwitchShard>(),
            Ok(SwitchShard { index: 1, count: 3 })
        );
        assert_eq!(SwitchShard { index: 1, count: 3 }.to_string(), "1/3");
        for bad in ["3/3", "1/0", "x/2", "1", "-1/2", "", "1/2/3"] {
            assert!(bad.parse::<SwitchShard>().is_err(), "{bad:?}");
        }
    }
}
