//! `rdma-fabric-exporter localize`: the cluster's localization, run once per cluster
//! (docs/localization.md, ARCHITECTURE.md "Localization"). Each round reads every agent's probe
//! counts and the LLDP wiring back from the cluster's Prometheus ([`input`]), runs the vote
//! (`probe::localize`, the only one) per `cluster`, and keeps the verdicts ([`state`]) that
//! `/metrics` serves ([`metrics`], [`serve`]) for the alerts, the boards and the page.
//!
//! Prometheus slow or away never blocks a scrape: rounds run on their own thread, each query
//! with a deadline, and a scrape serves the last verdicts with their age (none past
//! `--max-age`) and `rdma_localization_up 0`.

pub mod input;
pub mod liveness;
pub mod metrics;
pub mod serve;
pub mod state;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::probe::localize;
use crate::prom_query::{self, Client, Endpoint, QueryError};

use input::{KeptLabels, Queries, Source};
use liveness::Liveness;
use state::{ClusterVerdicts, State, Verdicts};

#[derive(Debug, Clone, clap::Args)]
pub struct LocalizeArgs {
    /// The cluster's Prometheus, which scrapes the node agents and the switch pollers and
    /// evaluates alerts/rdma-rules.yml (http://host:9090; user:password@ for basic auth).
    #[arg(long, value_name = "URL")]
    pub prometheus: String,
    /// Label matchers every query gets, e.g. '{cluster="a"}'. Without, every `cluster` found
    /// is voted on apart.
    #[arg(long, value_name = "MATCHERS")]
    pub selector: Option<String>,
    /// Time between rounds. Each round is a hop between a lost probe and its page, so rounds
    /// come more often than scrapes; Prometheus should scrape the localizer as often.
    #[arg(long, default_value = "5s", value_parser = crate::yaml::parse_duration)]
    pub interval: Duration,
    /// Deadline of each query (a round asks 8; a slow Prometheus makes rounds longer, never
    /// overlapping).
    #[arg(long = "query-timeout", default_value = "10s", value_parser = crate::yaml::parse_duration)]
    pub query_timeout: Duration,
    /// Verdicts older than this (Prometheus unreadable since) are no longer served.
    #[arg(long = "max-age", default_value = "2m", value_parser = crate::yaml::parse_duration)]
    pub max_age: Duration,
    /// Address to listen on [default: :9866].
    #[arg(long = "web.listen-address", value_name = "ADDRESS")]
    pub listen_address: Option<String>,
    #[arg(long = "web.telemetry-path", value_name = "PATH", default_value = crate::config::DEFAULT_TELEMETRY_PATH)]
    pub telemetry_path: String,
    /// Exporter-toolkit web config (TLS, basic auth, headers); re-read on change and SIGHUP.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config_file: Option<std::path::PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum LocalizeError {
    #[error(transparent)]
    Url(#[from] QueryError),
    #[error("{0}")]
    Selector(String),
    #[error("--interval and --query-timeout must be more than 0")]
    Zero,
    #[error("starting the localizer's thread: {0}")]
    Spawn(#[from] std::io::Error),
}

/// A running localizer: its state, and what its pages need.
#[derive(Debug)]
pub struct Localizer {
    pub state: Arc<State>,
    pub max_age: Duration,
    pub prometheus: String,
}

impl Localizer {
    /// Checks the arguments and starts the rounds on their own thread.
    pub fn start(args: &LocalizeArgs) -> Result<Arc<Localizer>, LocalizeError> {
        if args.interval.is_zero() || args.query_timeout.is_zero() {
            return Err(LocalizeError::Zero);
        }
        let endpoint = Endpoint::parse(&args.prometheus)?;
        let matchers = prom_query::user_matchers(args.selector.as_deref().unwrap_or(""))
            .map_err(LocalizeError::Selector)?;
        let localizer = Arc::new(Localizer {
            state: Arc::default(),
            max_age: args.max_age,
            prometheus: endpoint.display.clone(),
        });
        let state = localizer.state.clone();
        let (interval, timeout) = (args.interval, args.query_timeout);
        std::thread::Builder::new()
            .name("localizer".into())
            .spawn(move || {
                // The client's runtime lives on this thread: a round blocks only it.
                let client = match Client::new(endpoint, timeout) {
                    Ok(client) => client.with_tool("localize"),
                    Err(e) => {
                        tracing::error!("localizer: {e}");
                        state.failed(&e, 0.0);
                        return;
                    }
                };
                let queries = Queries::new(&matchers);
                let mut memory = Memory::default();
                loop {
                    let started = Instant::now();
                    round(&client, &queries, &mut memory, &state);
                    std::thread::sleep(interval.saturating_sub(started.elapsed()));
                }
            })?;
        Ok(localizer)
    }
}

/// What rounds keep between them: the labels read less often, and when each port was last live.
#[derive(Debug, Default)]
pub struct Memory {
    pub labels: KeptLabels,
    pub liveness: Liveness,
}

/// One round: read, vote per cluster, keep.
pub fn round(source: &dyn Source, queries: &Queries, memory: &mut Memory, state: &State) {
    let started = Instant::now();
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let answers = match queries.read(source, unix, &mut memory.labels) {
        Ok(answers) => answers,
        Err(e) => {
            tracing::warn!("localizer: {e}");
            state.failed(&e, started.elapsed().as_secs_f64());
            return;
        }
    };
    let voting = Instant::now();
    let silent = memory
        .liveness
        .update(&answers.live, &answers.leaving, unix);
    let clusters = input::assemble(&answers, &silent)
        .into_iter()
        .map(|(name, input)| {
            let verdicts = ClusterVerdicts {
                live_ports: input.ports.len(),
                localization: localize::localize_among(&input.ports, &input.silent, &input.paths),
            };
            (name, verdicts)
        })
        .collect();
    let vote_seconds = voting.elapsed().as_secs_f64();
    state.succeeded(
        Verdicts {
            at: started,
            unix,
            samples_read: answers.samples(),
            clusters,
        },
        started.elapsed().as_secs_f64(),
        vote_seconds,
    );
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::prom_query::Sample;

    /// Answers every query with nothing, or fails each with a timeout.
    struct Fixture {
        fail: Cell<bool>,
    }

    impl Source for Fixture {
        fn query(&self, expr: &str, _time: f64) -> Result<Vec<Sample>, QueryError> {
            if self.fail.get() {
                return Err(QueryError::Timeout {
                    url: "http://prometheus".into(),
                    query: expr.into(),
                    timeout: Duration::from_secs(1),
                });
            }
            Ok(Vec::new())
        }
    }

    #[test]
    fn a_failed_round_keeps_the_last_verdicts_and_counts_why() {
        let state = State::default();
        let source = Fixture {
            fail: Cell::new(false),
        };
        let queries = Queries::new("");
        let mut memory = Memory::default();
        round(&source, &queries, &mut memory, &state);
        let first = state.snapshot();
        assert!(first.up);
        let kept = first.last.clone().unwrap();
        source.fail.set(true);
        round(&source, &queries, &mut memory, &state);
        let after = state.snapshot();
        assert!(!after.up);
        assert_eq!(after.rounds, 2);
        assert_eq!(after.errors.get("timeout"), Some(&1));
        assert!(Arc::ptr_eq(after.last.as_ref().unwrap(), &kept));
    }
}
