//! Fast PFC storm detection. Storms last hundreds of milliseconds; a 15-30 s scrape sees them
//! only as a cumulative pause time. A sampler reads the NICs' per-priority pause-duration
//! counters every period (200 ms by default) and keeps, per port, priority and direction, the
//! peak paused share since the previous scrape and a count of storms by the PFC watchdog rule:
//! paused for at least the detection time (pfcwd: 200 ms by default).

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::direction::Direction;

use super::ethtool::EthtoolSource;
use super::sysfs::DeviceFilter;

/// How often the RDMA port list (device, port, netdev) is refreshed from sysfs.
const PORT_REFRESH: Duration = Duration::from_secs(10);

/// The sampler's settings: the `node.pfc_storm` section of the config file.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StormConfig {
    /// Whether the sampler runs (it needs the driver statistics).
    pub enabled: bool,
    /// Time between two reads of the pause counters.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub period: Duration,
    /// How long a priority must stay paused to count as a storm.
    #[serde(deserialize_with = "crate::yaml::duration")]
    pub detection_time: Duration,
    /// Share of the detection time that must be paused (1.0 = all of it). Sampling jitter makes
    /// a truly stuck queue read as slightly less or more than 1.
    #[serde(deserialize_with = "ratio")]
    pub min_paused_ratio: f64,
}

impl Default for StormConfig {
    fn default() -> Self {
        StormConfig {
            enabled: true,
            period: Duration::from_millis(200),
            detection_time: Duration::from_millis(400),
            min_paused_ratio: 0.9,
        }
    }
}

/// `min_paused_ratio`: a share in (0, 1].
fn ratio<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let value = <f64 as serde::Deserialize>::deserialize(d)?;
    if value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err(serde::de::Error::custom(format!(
            "min_paused_ratio {value} must be in (0, 1]"
        )))
    }
}

/// One pause counter: a port's priority in one direction.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PauseKey {
    pub device: String,
    pub port: String,
    pub netdev: String,
    pub priority: u8,
    pub direction: Direction,
}

#[derive(Debug, Default)]
struct Track {
    /// Last reading: when, and the counter in µs.
    last: Option<(Instant, u64)>,
    /// Recent intervals (wall time, paused time), covering at least the detection time.
    window: VecDeque<(Duration, Duration)>,
    /// Highest paused share of one interval since the previous scrape.
    peak: f64,
    last_ratio: f64,
    in_storm: bool,
    storms: u64,
}

/// The sampler's latest view of one counter, read without disturbing the scrapes' peaks.
#[derive(Debug, Clone, PartialEq)]
pub struct PauseNow {
    pub key: PauseKey,
    /// Paused share of the latest sampling interval.
    pub paused_ratio: f64,
    /// Paused for the detection time by the watchdog rule, now.
    pub in_storm: bool,
    pub storms: u64,
}

/// What a scrape reports for one counter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PauseReport {
    pub key: PauseKey,
    pub peak_paused_ratio: f64,
    pub storms: u64,
}

#[derive(Debug)]
pub struct StormDetector {
    config: StormConfig,
    tracks: Mutex<BTreeMap<PauseKey, Track>>,
    /// Duration and outcome of the last sampling round.
    last_round: Mutex<Option<(Duration, bool)>>,
    stop: AtomicBool,
}

impl StormDetector {
    pub fn new(config: StormConfig) -> StormDetector {
        StormDetector {
            config,
            tracks: Mutex::default(),
            last_round: Mutex::default(),
            stop: AtomicBool::new(false),
        }
    }

    pub fn config(&self) -> StormConfig {
        self.config
    }

    /// Records one reading of a pause-duration counter (µs) taken at `at`.
    pub fn observe(&self, key: PauseKey, at: Instant, paused_us: u64) {
        let mut tracks = self.tracks.lock().unwrap_or_else(|p| p.into_inner());
        let track = tracks.entry(key).or_default();
        let previous = track.last.replace((at, paused_us));
        let Some((before, before_us)) = previous else {
            return;
        };
        let wall = at.saturating_duration_since(before);
        if wall.is_zero() {
            return;
        }
        let Some(paused_us) = paused_us.checked_sub(before_us) else {
            // The counter went back (driver reloaded): start over.
            track.window.clear();
            track.in_storm = false;
            return;
        };
        let paused = Duration::from_micros(paused_us);
        let ratio = (paused.as_secs_f64() / wall.as_secs_f64()).clamp(0.0, 1.0);
        track.peak = track.peak.max(ratio);
        track.last_ratio = ratio;
        track.window.push_back((wall, paused));
        // Keep just enough intervals to cover the detection time.
        while track.window.len() > 1
            && track.window.iter().skip(1).map(|w| w.0).sum::<Duration>()
                >= self.config.detection_time
        {
            track.window.pop_front();
        }
        let (window_wall, window_paused) = track
            .window
            .iter()
            .fold((Duration::ZERO, Duration::ZERO), |(w, p), (dw, dp)| {
                (w + *dw, p + *dp)
            });
        let stormy = window_wall >= self.config.detection_time
            && window_paused.as_secs_f64()
                >= self.config.min_paused_ratio * window_wall.as_secs_f64();
        if stormy && !track.in_storm {
            track.storms += 1;
        }
        track.in_storm = stormy;
    }

    /// Every counter's peak since the previous call, and its storm count. The peak then starts
    /// again from the latest interval's share, so that a scrape between two samples is not 0.
    pub(crate) fn take_reports(&self) -> Vec<PauseReport> {
        let mut tracks = self.tracks.lock().unwrap_or_else(|p| p.into_inner());
        tracks
            .iter_mut()
            .filter(|(_, t)| t.window.back().is_some())
            .map(|(key, track)| {
                let report = PauseReport {
                    key: key.clone(),
                    peak_paused_ratio: track.peak,
                    storms: track.storms,
                };
                track.peak = track.last_ratio;
                report
            })
            .collect()
    }

    /// Every counter's latest interval (the landing page's verdict): unlike `take_reports`, this
    /// leaves the peaks that the next scrape reports untouched.
    pub fn current(&self) -> Vec<PauseNow> {
        let tracks = self.tracks.lock().unwrap_or_else(|p| p.into_inner());
        tracks
            .iter()
            .filter(|(_, t)| t.window.back().is_some())
            .map(|(key, track)| PauseNow {
                key: key.clone(),
                paused_ratio: track.last_ratio,
                in_storm: track.in_storm,
                storms: track.storms,
            })
            .collect()
    }

    /// Duration and success of the last sampling round, if one ran.
    pub(crate) fn last_round(&self) -> Option<(Duration, bool)> {
        *self.last_round.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the sampler thread to end after its current round.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Starts the sampler thread: every period, reads the pause-duration counters of each RoCE
    /// port's netdev through `source` (the same source the scrape uses).
    pub fn spawn(
        self: &Arc<Self>,
        sysfs_root: PathBuf,
        filter: DeviceFilter,
        source: Arc<dyn EthtoolSource>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let detector = self.clone();
        std::thread::Builder::new()
            .name("pfc-storm-sampler".into())
            .spawn(move || detector.run(&sysfs_root, &filter, source.as_ref()))
    }

    fn run(&self, sysfs_root: &std::path::Path, filter: &DeviceFilter, source: &dyn EthtoolSource) {
        let mut ports: Vec<(String, String, String)> = Vec::new();
        let class_net = sysfs_root.join("class/net");
        let mut refreshed: Option<Instant> = None;
        let mut next = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            if refreshed.is_none_or(|at| at.elapsed() >= PORT_REFRESH) {
                ports = roce_ports(sysfs_root, filter);
                refreshed = Some(Instant::now());
            }
            let started = Instant::now();
            let mut ok = true;
            let mut elsewhere = Vec::new();
            for (device, port, netdev) in &ports {
                match source.stats(netdev) {
                    Ok(stats) => {
                        let at = Instant::now();
                        for (name, value) in stats {
                            if let Some((direction, priority)) = pause_duration(&name) {
                                let key = PauseKey {
                                    device: device.clone(),
                                    port: port.clone(),
                                    netdev: netdev.clone(),
                                    priority,
                                    direction,
                                };
                                self.observe(key, at, value);
                            }
                        }
                    }
                    // An SR-IOV VF's netdev in a pod: the pod's to sample, no failure here.
                    Err(super::ethtool::EthtoolError::NoDevice { .. })
                        if super::netdev_in_other_namespace(&class_net, netdev) =>
                    {
                        elsewhere.push(netdev.clone());
                    }
                    // A netdev that went away is dropped at the next port refresh.
                    Err(_) => ok = false,
                }
            }
            // Not asked again until the next port refresh.
            ports.retain(|(_, _, netdev)| !elsewhere.contains(netdev));
            *self.last_round.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((started.elapsed(), ok));
            next += self.config.period;
            let now = Instant::now();
            if next <= now {
                // Fell behind (a slow read): skip the missed periods rather than burst.
                next = now + self.config.period;
            }
            std::thread::sleep(next - now);
        }
    }
}

/// The `pfc_storm` collector: the sampler's findings since the previous scrape. Its success and
/// duration are those of the sampler's last round, not of this call.
impl crate::collector::Collector for StormDetector {
    fn name(&self) -> &'static str {
        "pfc_storm"
    }

    fn retire(&self) {
        self.stop();
    }

    fn collect(
        &self,
        out: &mut crate::collector::Output<'_>,
    ) -> Result<crate::collector::Outcome, std::fmt::Error> {
        let reports = self.take_reports();
        let mut families = crate::exposition::Families::default();
        super::metrics::add_storm_metrics(&mut families, &reports);
        out.encode(&families)?;
        Ok(match self.last_round() {
            Some((duration, ok)) => crate::collector::Outcome {
                ok,
                duration: Some(duration),
            },
            // No round finished yet: nothing failed.
            None => crate::collector::Outcome::ok(true),
        })
    }
}

/// The RoCE ports with a netdev: (device, port number, netdev).
fn roce_ports(
    sysfs_root: &std::path::Path,
    filter: &DeviceFilter,
) -> Vec<(String, String, String)> {
    super::sysfs::port_netdevs(sysfs_root, filter, true)
        .into_iter()
        .map(|p| (p.device, p.port, p.netdev))
        .collect()
}

/// `rx_prio3_pause_duration` -> (Rx, 3).
fn pause_duration(name: &str) -> Option<(Direction, u8)> {
    // Any driver with a per-priority pause time (mlx5, bnxt_en, ionic): see `ethtool_map`.
    match super::ethtool_map::classify(name)? {
        super::ethtool_map::TypedStat::PfcPauseDurationMicros {
            priority,
            direction,
        } => Some((direction, priority)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PauseKey {
        PauseKey {
            device: "mlx5_2".into(),
            port: "1".into(),
            netdev: "ens3f0np0".into(),
            priority: 3,
            direction: Direction::Tx,
        }
    }

    /// Feeds readings every 200 ms: `paused_ms[i]` is the pause time of interval i.
    fn feed(detector: &StormDetector, paused_ms: &[u64]) {
        let start = Instant::now();
        let mut counter_us = 5_000_000;
        detector.observe(key(), start, counter_us);
        for (i, ms) in paused_ms.iter().enumerate() {
            counter_us += ms * 1000;
            detector.observe(
                key(),
                start + Duration::from_millis(200 * (i as u64 + 1)),
                counter_us,
            );
        }
    }

    #[test]
    fn a_storm_is_paused_for_the_detection_time() {
        let detector = StormDetector::new(StormConfig::default());
        // Congestion: paused half the time. Then one interval fully paused: not yet a storm.
        feed(&detector, &[100, 100, 100, 200]);
        let report = &detector.take_reports()[0];
        assert_eq!(report.storms, 0);
        assert!((report.peak_paused_ratio - 1.0).abs() < 1e-9);
    }

    #[test]
    fn storms_count_once_each_and_peaks_reset_per_scrape() {
        let detector = StormDetector::new(StormConfig::default());
        // 600 ms paused: one storm; a pause; 1 s paused: a second storm.
        feed(
            &detector,
            &[0, 200, 200, 200, 0, 0, 200, 200, 200, 200, 200, 20],
        );
        let reports = detector.take_reports();
        assert_eq!(reports[0].storms, 2);
        assert_eq!(reports[0].peak_paused_ratio, 1.0);
        // The next scrape starts from the latest interval (20 ms of 200).
        let again = detector.take_reports();
        assert!((again[0].peak_paused_ratio - 0.1).abs() < 1e-9, "{again:?}");
        assert_eq!(again[0].storms, 2);
    }

    #[test]
    fn counter_resets_and_names() {
        let detector = StormDetector::new(StormConfig::default());
        let t = Instant::now();
        detector.observe(key(), t, 9_000_000);
        detector.observe(key(), t + Duration::from_millis(200), 100);
        detector.observe(key(), t + Duration::from_millis(400), 200_100);
        let report = &detector.take_reports()[0];
        assert_eq!((report.storms, report.peak_paused_ratio), (0, 1.0));
        assert_eq!(
            pause_duration("rx_prio3_pause_duration"),
            Some((Direction::Rx, 3))
        );
        assert_eq!(
            pause_duration("tx_prio7_pause_duration"),
            Some((Direction::Tx, 7))
        );
        assert_eq!(pause_duration("tx_prio8_pause_duration"), None);
        assert_eq!(pause_duration("rx_prio3_pause"), None);
        assert_eq!(pause_duration("rx_global_pause_duration"), None);
        // Other drivers' per-priority pause time feeds the sampler too.
        assert_eq!(
            pause_duration("pfc_pri3_tx_duration_us"),
            Some((Direction::Tx, 3))
        );
        assert_eq!(
            pause_duration("rx_pripause_5_1us_count"),
            Some((Direction::Rx, 5))
        );
    }
}
