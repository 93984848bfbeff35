//! Which ports went silent, for how long, and whether their agent said it was leaving: the
//! localizer's memory between rounds.
//!
//! Prometheus answers "live now" (`rdma_probe_up == 1`); "silent since when" would cost a
//! subquery over every port's history each round. A round is seconds apart, so the localizer
//! keeps the last round it saw each port live instead. An agent that is asked to stop serves
//! `rdma_probe_leaving 1` to one last scrape (`serve` on SIGTERM): its silence is a restart,
//! not a host down, until [`vote::LEFT_DOWN_SECONDS`](crate::probe::vote).
//!
//! A localizer that starts while a host is already silent has not seen it: that host is not
//! named down (`RdmaExporterDown` still warns of its exporter).

use std::collections::HashMap;

use crate::probe::localize::{PortId, Silence};
use crate::prom_query::Sample;

use super::input::keyed;

/// A port silent this long (seconds) is forgotten: decommissioned, renamed, or down so long
/// that `RdmaExporterDown` has long said so.
pub(crate) const FORGET_SECONDS: f64 = 3600.0;

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The round it was last live at, Unix seconds (Prometheus' clock: the round's query time).
    live_at: f64,
    /// Its last word was that it is leaving.
    left: bool,
}

/// Per (cluster, port): when it was last live.
#[derive(Debug, Default)]
pub struct Liveness {
    seen: HashMap<(String, PortId), Seen>,
}

impl Liveness {
    /// Takes in a round at `now`: `live` (the live query's answer) and `leaving` (ports whose
    /// agent said it is leaving lately). Returns the ports seen live before and silent now.
    pub fn update(
        &mut self,
        live: &[Sample],
        leaving: &[Sample],
        now: f64,
    ) -> HashMap<(String, PortId), Silence> {
        let leaving: std::collections::HashSet<(String, PortId)> =
            keyed(leaving).into_iter().map(|(key, _)| key).collect();
        for (key, _) in keyed(live) {
            let left = leaving.contains(&key);
            self.seen.insert(key, Seen { live_at: now, left });
        }
        // An answer after the port's last live round (the leaving query looks back a minute).
        for key in &leaving {
            if let Some(seen) = self.seen.get_mut(key) {
                seen.left = true;
            }
        }
        self.seen
            .retain(|_, seen| now - seen.live_at < FORGET_SECONDS);
        self.seen
            .iter()
            .filter(|(_, seen)| seen.live_at < now)
            .map(|(key, seen)| {
                let silence = Silence {
                    seconds: now - seen.live_at,
                    left: seen.left,
                };
                (key.clone(), silence)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(host: &str) -> Sample {
        Sample {
            labels: [
                ("cluster", "c"),
                ("host", host),
                ("device", "mlx5_0"),
                ("port", "1"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            value: Some(1.0),
        }
    }

    fn silent(
        l: &mut Liveness,
        live: &[&str],
        leaving: &[&str],
        now: f64,
    ) -> Vec<(String, f64, bool)> {
        let live: Vec<Sample> = live.iter().map(|h| port(h)).collect();
        let leaving: Vec<Sample> = leaving.iter().map(|h| port(h)).collect();
        let mut out: Vec<(String, f64, bool)> = l
            .update(&live, &leaving, now)
            .into_iter()
            .map(|((_, id), s)| (id.host, s.seconds, s.left))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    #[test]
    fn a_port_is_silent_from_the_last_round_it_was_live() {
        let mut l = Liveness::default();
        assert!(silent(&mut l, &["a", "b", "c"], &[], 100.0).is_empty());
        // b says it is leaving at its last scrape, then both b and c fall silent.
        assert!(silent(&mut l, &["a", "b", "c"], &["b"], 105.0).is_empty());
        assert_eq!(
            silent(&mut l, &["a"], &["b"], 110.0),
            [("b".into(), 5.0, true), ("c".into(), 5.0, false)]
        );
        // The leaving query no longer answers for b a minute on: the memory does.
        assert_eq!(
            silent(&mut l, &["a"], &[], 200.0),
            [("b".into(), 95.0, true), ("c".into(), 95.0, false)]
        );
        // b is back (its new agent no longer leaving), c is forgotten after an hour.
        assert!(silent(&mut l, &["a", "b"], &[], 105.0 + FORGET_SECONDS).is_empty());
        // Its next silence is not a leave.
        assert_eq!(
            silent(&mut l, &["a"], &[], 115.0 + FORGET_SECONDS),
            [("b".into(), 10.0, false)]
        );
    }

    #[test]
    fn a_port_never_seen_live_is_not_silent() {
        let mut l = Liveness::default();
        assert!(silent(&mut l, &[], &["x"], 100.0).is_empty());
        assert!(silent(&mut l, &["a"], &[], 105.0).is_empty());
    }
}
