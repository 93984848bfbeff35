//! What the rounds leave for `/metrics`: the last verdicts and how the reading went. A scrape
//! takes a copy under the lock and never waits for a round.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::probe::localize::Localization;
use crate::prom_query::QueryError;

/// One cluster's outcome.
#[derive(Debug, Clone)]
pub struct ClusterVerdicts {
    pub live_ports: usize,
    pub localization: Localization,
}

/// The verdicts of one successful round, per `cluster` ("" where series carry none).
#[derive(Debug, Clone)]
pub struct Verdicts {
    /// When Prometheus was read (monotonic, for the age) ...
    pub at: Instant,
    /// ... and as Unix seconds.
    pub unix: f64,
    /// Samples Prometheus answered in that round.
    pub samples_read: usize,
    pub clusters: BTreeMap<String, ClusterVerdicts>,
}

/// Why a round could not read Prometheus: the `reason` label.
pub fn reason(e: &QueryError) -> &'static str {
    match e {
        QueryError::Url(_) => "request",
        QueryError::Unreachable { .. } => "unreachable",
        QueryError::Timeout { .. } => "timeout",
        QueryError::Api { .. } => "api_error",
        QueryError::NotPrometheus { .. } => "decode",
    }
}

/// Every value of `reason`, each served from the start (at 0) so that `increase()` sees the
/// first error.
pub const REASONS: [&str; 5] = ["request", "unreachable", "timeout", "api_error", "decode"];

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The last successful round's verdicts.
    pub last: Option<Arc<Verdicts>>,
    /// Whether the last round read every query.
    pub up: bool,
    pub rounds: u64,
    pub errors: BTreeMap<&'static str, u64>,
    /// The last round's duration and the vote's share of it, seconds.
    pub round_seconds: f64,
    pub vote_seconds: f64,
}

/// Shared between the round thread and the scrapes.
#[derive(Debug, Default)]
pub struct State(Mutex<Snapshot>);

impl State {
    pub fn snapshot(&self) -> Snapshot {
        self.lock().clone()
    }

    pub fn succeeded(&self, verdicts: Verdicts, round_seconds: f64, vote_seconds: f64) {
        let mut s = self.lock();
        s.last = Some(Arc::new(verdicts));
        s.up = true;
        s.rounds += 1;
        s.round_seconds = round_seconds;
        s.vote_seconds = vote_seconds;
    }

    pub fn failed(&self, e: &QueryError, round_seconds: f64) {
        let mut s = self.lock();
        s.up = false;
        s.rounds += 1;
        s.round_seconds = round_seconds;
        *s.errors.entry(reason(e)).or_default() += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
