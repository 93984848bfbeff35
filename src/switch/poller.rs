//! Background polling: one task per switch, a bounded number polling at once, start times
//! spread over the interval. gNMI STREAM and POLL targets keep one subscription open instead,
//! reconnecting with backoff. A scrape never waits on the network: it reads the last snapshot,
//! and a snapshot older than two intervals is dropped rather than served as if fresh.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Semaphore;

use super::config::GnmiMode;
use super::gnmi::session::{self, SessionMode};
use super::gnmi::{fetch_once_capped, get_once_capped, GnmiTarget, GnmiUpdate};
use super::poll_error::{PollError, PollErrorReason};
use super::profile::{DecodeError, Profile, Sample};
use super::settings::{GnmiSettings, KeptSwitchSettings};
use super::shard::SwitchShard;
use super::snmp::{walk_columns, Columns, SnmpTarget, WalkResult};

/// Switches polled at the same time, whatever their number.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// One configured switch.
#[derive(Debug)]
pub struct Target {
    pub name: String,
    pub profile: Profile,
    pub source: Source,
    pub interval: Duration,
    /// The operator's statement of lossless priorities and queues (`switch::pfc`).
    pub pfc: super::pfc::PfcConfig,
    /// How often an SNMP switch's LLDP and PFC settings are walked, or a gNMI switch's settings
    /// paths read (`switch::settings`).
    pub settings_interval: Duration,
}

/// Where a target's data comes from.
#[derive(Debug)]
pub enum Source {
    Snmp(SnmpTarget),
    Gnmi { target: GnmiTarget, mode: GnmiMode },
}

/// Samples of one successful poll.
#[derive(Debug)]
pub struct Snapshot {
    pub taken: Instant,
    pub samples: Vec<Sample>,
    /// The port numbers were given by the exporter (gNMI names ports), not the switch's ifIndex.
    pub synthetic_ifindex: bool,
}

/// What the collector reads for one switch.
#[derive(Debug, Default)]
pub struct TargetState {
    pub snapshot: Option<Arc<Snapshot>>,
    pub last_success: Option<SystemTime>,
    pub last_error: Option<PollError>,
    pub last_duration: Option<Duration>,
    /// Failed polls and unreadable values, by reason.
    pub errors: BTreeMap<PollErrorReason, u64>,
    /// Polls started (SNMP walks, gNMI ONCE reads, gNMI sessions opened): replicas of a sharded
    /// poller show here that no switch is read by two of them.
    pub polls: u64,
    /// An SNMP switch's LLDP and PFC settings from its last walk of them (`switch::settings`).
    pub settings: Option<Arc<KeptSwitchSettings>>,
    /// A gNMI switch's settings leaves from its last read of its profile's `settings_paths`.
    pub gnmi_settings: Arc<GnmiSettings>,
}

impl TargetState {
    /// The snapshot if it is recent enough to serve.
    pub fn fresh_snapshot(&self, interval: Duration) -> Option<&Arc<Snapshot>> {
        self.snapshot
            .as_ref()
            .filter(|s| s.taken.elapsed() <= interval * 2)
    }
}

#[derive(Debug)]
pub struct Poller {
    pub targets: Vec<(Target, Mutex<TargetState>)>,
    concurrency: usize,
    /// Set once background tasks run; until then gNMI subscriptions are read with ONCE.
    background: std::sync::atomic::AtomicBool,
    /// The background tasks, aborted by [`Poller::stop`].
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// This replica's part of the configured switches, when the poller is sharded.
    pub shard: Option<SwitchShard>,
    /// Configured switches that other shards own: `/probe` names their owner instead of
    /// polling them (a scrape config that disagrees with the replicas would read them twice).
    pub foreign: Vec<String>,
}

impl Poller {
    pub fn new(targets: Vec<Target>, concurrency: usize) -> Self {
        Poller {
            targets: targets
                .into_iter()
                .map(|t| (t, Mutex::new(TargetState::default())))
                .collect(),
            concurrency: concurrency.max(1),
            background: std::sync::atomic::AtomicBool::new(false),
            tasks: Mutex::new(Vec::new()),
            shard: None,
            foreign: Vec::new(),
        }
    }

    /// The poller of one shard: only the targets `shard` holds are polled; the others are
    /// remembered by name as [`Poller::foreign`].
    pub fn sharded(targets: Vec<Target>, concurrency: usize, shard: SwitchShard) -> Self {
        let (own, foreign): (Vec<Target>, Vec<Target>) =
            targets.into_iter().partition(|t| shard.holds(&t.name));
        let mut poller = Poller::new(own, concurrency);
        poller.shard = Some(shard);
        poller.foreign = foreign.into_iter().map(|t| t.name).collect();
        poller
    }

    /// Ends the background tasks (a reload replaced this poller): polls in flight are dropped,
    /// their sockets closed.
    pub fn stop(&self) {
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }

    /// Starts one task per target on the current tokio runtime.
    pub fn spawn(self: &Arc<Self>) {
        self.background
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let permits = Arc::new(Semaphore::new(self.concurrency));
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        for index in 0..self.targets.len() {
            let poller = self.clone();
            let permits = permits.clone();
            let task = tokio::spawn(async move { poller.run(index, permits).await });
            tasks.push(task.abort_handle());
            // A subscribed switch's settings are read on their own schedule; a polled one
            // reads them in its poll.
            if self.session_mode(index).is_some() {
                let poller = self.clone();
                let task = tokio::spawn(async move { poller.run_gnmi_settings(index).await });
                tasks.push(task.abort_handle());
            }
        }
    }

    /// Reads a subscribed gNMI switch's settings paths every `settings_interval`.
    async fn run_gnmi_settings(&self, index: usize) {
        let (target, _) = &self.targets[index];
        if target.profile.gnmi.settings_path_texts.is_empty() {
            return;
        }
        loop {
            self.refresh_gnmi_settings(index).await;
            tokio::time::sleep(target.settings_interval.max(target.interval)).await;
        }
    }

    /// Reads a gNMI switch's settings paths when they are due, with a request of their own.
    /// A failed read keeps the last settings and counts under its reason (a refused path is
    /// `auth`): the counters are served either way, and the read is tried again after
    /// `settings_interval`.
    async fn refresh_gnmi_settings(&self, index: usize) {
        let (target, state) = &self.targets[index];
        let Source::Gnmi { target: gnmi, .. } = &target.source else {
            return;
        };
        let kept = self.kept_gnmi_settings(index);
        if target.profile.gnmi.settings_path_texts.is_empty()
            || !kept.due(Instant::now(), target.settings_interval)
        {
            return;
        }
        let paths = target.profile.gnmi.settings_paths();
        let asked_at = Some(Instant::now());
        let read = get_once_capped(gnmi, &paths, target.profile.gnmi.max_leaves()).await;
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        let (updates, failing) = match read {
            Ok(updates) => {
                let mapped = updates
                    .into_iter()
                    .filter(|u| target.profile.gnmi.maps(&u.path))
                    .collect();
                (mapped, false)
            }
            Err(error) => {
                *state.errors.entry(error.reason).or_default() += 1;
                if !kept.failing {
                    tracing::warn!(switch = %target.name, reason = error.reason.as_label(), "settings not read (counters are): {}", error.detail);
                }
                (kept.updates.clone(), true)
            }
        };
        state.gnmi_settings = Arc::new(GnmiSettings {
            asked_at,
            updates,
            failing,
        });
    }

    /// Decodes a view of a gNMI switch's counters with its kept settings leaves.
    fn decode_gnmi(&self, index: usize, mut view: Vec<GnmiUpdate>) -> super::gnmi_map::Decoded {
        let settings = self.kept_gnmi_settings(index);
        view.extend(settings.updates.iter().cloned());
        self.targets[index].0.profile.gnmi.decode(&view)
    }

    fn kept_gnmi_settings(&self, index: usize) -> Arc<GnmiSettings> {
        let (_, state) = &self.targets[index];
        state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .gnmi_settings
            .clone()
    }

    async fn run(&self, index: usize, permits: Arc<Semaphore>) {
        let (target, _) = &self.targets[index];
        // Spread the first polls so that many switches do not fire together.
        tokio::time::sleep(start_offset(&target.name, target.interval)).await;
        if let Some(mode) = self.session_mode(index) {
            return self.run_sessions(index, mode).await;
        }
        let mut ticker = tokio::time::interval(target.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Ok(_permit) = permits.acquire().await else {
                return;
            };
            self.poll_once(index).await;
        }
    }

    /// The subscription kind of a gNMI STREAM or POLL target; `None` for polled targets.
    fn session_mode(&self, index: usize) -> Option<SessionMode> {
        match &self.targets[index].0.source {
            Source::Gnmi {
                mode: GnmiMode::Stream,
                ..
            } => Some(SessionMode::Stream),
            Source::Gnmi {
                mode: GnmiMode::Poll,
                ..
            } => Some(SessionMode::Poll),
            _ => None,
        }
    }

    /// Keeps a subscription open: after a failure, reconnects after a backoff that doubles up
    /// to a minute (with jitter, so that a fleet does not reconnect in step) and starts over
    /// once a session has delivered data.
    async fn run_sessions(&self, index: usize, mode: SessionMode) {
        let (target, _) = &self.targets[index];
        let Source::Gnmi { target: gnmi, .. } = &target.source else {
            return;
        };
        let paths = target.profile.gnmi.paths();
        let first_backoff = (target.interval / 2).min(Duration::from_secs(1));
        let mut backoff = first_backoff;
        let mut attempt = 0u64;
        loop {
            self.count_poll(index);
            let (error, delivered) = session::run_capped(
                gnmi,
                &paths,
                mode,
                target.interval,
                target.profile.gnmi.max_leaves(),
                |view, at| {
                    let decoded = self.decode_gnmi(index, view);
                    self.record_success(
                        index,
                        decoded.samples,
                        messages(&decoded.errors),
                        at,
                        true,
                    );
                },
            )
            .await;
            // A target over its leaf cap would flood again at once: it keeps backing off even
            // when its first sync was delivered.
            if delivered && error.reason != PollErrorReason::TooManyLeaves {
                backoff = first_backoff;
            }
            self.record_error(index, error);
            attempt += 1;
            // 80-120% of the backoff, varying by target and attempt.
            let spread = start_offset(
                &format!("{}#{attempt}", target.name),
                Duration::from_secs(1),
            );
            tokio::time::sleep(backoff.mul_f64(0.8 + 0.4 * spread.as_secs_f64())).await;
            backoff = (backoff * 2).min(Duration::from_secs(60));
        }
    }

    /// Records a poll cut short by the caller's deadline (a `/probe` scrape timeout).
    pub fn record_timeout(&self, index: usize, after: Duration) {
        let (_, state) = &self.targets[index];
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        *state
            .errors
            .entry(PollErrorReason::ScrapeTimeout)
            .or_default() += 1;
        state.last_duration = Some(after);
        state.last_error = Some(PollError {
            reason: PollErrorReason::ScrapeTimeout,
            detail: format!("poll did not finish within the scrape timeout {after:?}"),
        });
    }

    /// For a switch another shard owns: which one, as `/probe` answers it.
    pub fn owner_of(&self, name: &str) -> Option<String> {
        let shard = self.shard?;
        self.foreign.iter().any(|f| f == name).then(|| {
            format!(
                "target {name:?} belongs to shard {}/{} (hashmod of the name); this replica serves shard {shard}: fix the scrape config's hashmod keep or --switch.shard\n",
                shard.bucket_of(name),
                shard.count
            )
        })
    }

    /// Index of the target configured under `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.targets.iter().position(|(t, _)| t.name == name)
    }

    /// Polls one target now and records the outcome. Subscribed targets (gNMI STREAM and POLL)
    /// are kept fresh by their session when background polling runs: nothing to do; without
    /// it (on-demand polling) they are read with Subscribe ONCE.
    pub async fn poll_once(&self, index: usize) {
        let (target, state) = &self.targets[index];
        if let Source::Gnmi { mode, .. } = &target.source {
            if *mode != GnmiMode::Once && self.background.load(std::sync::atomic::Ordering::Relaxed)
            {
                return;
            }
        }
        self.count_poll(index);
        let started = Instant::now();
        let poll = async {
            match &target.source {
                Source::Snmp(snmp) => self
                    .walk_snmp(index, snmp, &target.profile)
                    .await
                    .map(|result| (result.samples, result.decode_errors, false)),
                Source::Gnmi { target: gnmi, .. } => {
                    self.refresh_gnmi_settings(index).await;
                    fetch_once_capped(
                        gnmi,
                        &target.profile.gnmi.paths(),
                        target.profile.gnmi.max_leaves(),
                    )
                    .await
                    .map(|updates| {
                        let decoded = self.decode_gnmi(index, updates);
                        (decoded.samples, messages(&decoded.errors), true)
                    })
                }
            }
        };
        // Each request has its own timeout; this bounds the whole poll.
        let outcome = match tokio::time::timeout(target.interval, poll).await {
            Ok(outcome) => outcome,
            Err(_) => Err(PollError {
                reason: PollErrorReason::PollTimeout,
                detail: format!("poll took longer than the interval {:?}", target.interval),
            }),
        };
        match outcome {
            Ok((samples, errors, synthetic)) => {
                self.record_success(index, samples, errors, Instant::now(), synthetic)
            }
            Err(e) => self.record_error(index, e),
        }
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        state.last_duration = Some(started.elapsed());
    }

    /// Walks the counters, and the settings when they are due or no longer fit the ports; the
    /// polls in between serve the settings kept.
    async fn walk_snmp(
        &self,
        index: usize,
        snmp: &SnmpTarget,
        profile: &Profile,
    ) -> Result<WalkResult, PollError> {
        let (target, state) = &self.targets[index];
        let kept = state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .settings
            .clone();
        let keep = |result: &WalkResult| {
            state.lock().unwrap_or_else(|p| p.into_inner()).settings = Some(Arc::new(
                KeptSwitchSettings::of(&result.samples, Instant::now()),
            ));
        };
        let kept = match kept {
            Some(kept)
                if !KeptSwitchSettings::due(
                    Some(&kept),
                    Instant::now(),
                    target.settings_interval,
                ) =>
            {
                kept
            }
            _ => {
                let result = walk_columns(snmp, profile, Columns::All).await?;
                keep(&result);
                return Ok(result);
            }
        };
        let mut result = walk_columns(snmp, profile, Columns::Counters).await?;
        if kept.fits(&result.samples) {
            result.samples.extend_from_slice(kept.samples());
        } else {
            let settings = walk_columns(snmp, profile, Columns::Settings).await?;
            result.samples.extend(settings.samples);
            result.decode_errors.extend(settings.decode_errors);
            keep(&result);
        }
        Ok(result)
    }

    fn count_poll(&self, index: usize) {
        let (_, state) = &self.targets[index];
        state.lock().unwrap_or_else(|p| p.into_inner()).polls += 1;
    }

    fn record_success(
        &self,
        index: usize,
        samples: Vec<Sample>,
        decode_errors: Vec<String>,
        taken: Instant,
        synthetic_ifindex: bool,
    ) {
        let (target, state) = &self.targets[index];
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        if !decode_errors.is_empty() {
            *state.errors.entry(PollErrorReason::Value).or_default() += decode_errors.len() as u64;
            tracing::debug!(switch = %target.name, errors = ?decode_errors, "values skipped");
        }
        state.snapshot = Some(Arc::new(Snapshot {
            taken,
            samples,
            synthetic_ifindex,
        }));
        state.last_success = Some(SystemTime::now());
        if state.last_error.take().is_some() {
            tracing::info!(switch = %target.name, "switch answers again");
        }
    }

    fn record_error(&self, index: usize, error: PollError) {
        let (target, state) = &self.targets[index];
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        *state.errors.entry(error.reason).or_default() += 1;
        if state.last_error.as_ref().map(|l| l.reason) != Some(error.reason) {
            tracing::warn!(switch = %target.name, reason = error.reason.as_label(), "poll failed: {}", error.detail);
        }
        state.last_error = Some(error);
    }
}

fn messages(errors: &[DecodeError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// A stable offset in [0, interval) from the target name.
fn start_offset(name: &str, interval: Duration) -> Duration {
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let millis = interval.as_millis().max(1) as u64;
    Duration::from_millis(hash % millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_spread_and_stay_in_the_interval() {
        let interval = Duration::from_secs(30);
        let offsets: Vec<_> = (0..20)
            .map(|i| start_offset(&format!("leaf{i}"), interval))
            .collect();
        assert!(offsets.iter().all(|o| *o < interval));
        let mut distinct = offsets.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() > 15);
    }
}
