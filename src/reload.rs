//! `serve` re-reads its config file on SIGHUP, as Prometheus and its exporters do. The new
//! config goes through the same validation as at startup (`app::check`); a broken one keeps
//! the running config and logs every error. A good one builds new collectors and a new switch
//! poller, swaps the router that answers requests, and retires the old collectors (threads and
//! tasks end; scrapes already running on them finish).

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use axum::extract::Request;
use axum::Router;
use tower::ServiceExt;

use crate::app;
use crate::config::{self, Config, Origin};
use crate::process_metrics::ProcessCollector;
use crate::server::AppState;
use crate::switch::poller::Poller;
use crate::yaml::ConfigError;

/// What a reload keeps from startup.
#[derive(Debug, Clone)]
pub struct Fixed {
    /// The process's own figures (one collector stands for the process).
    pub process: ProcessCollector,
    /// `--debug.no-scrape-coalescing`.
    pub coalesce_scrapes: bool,
    /// The address bound at startup: a reload cannot move the listener.
    pub listen_address: String,
}

/// The configuration in force and the router that serves it.
pub struct Serving {
    fixed: Fixed,
    router: Arc<RwLock<Router>>,
    running: Mutex<Arc<AppState>>,
}

impl Serving {
    /// Builds and starts everything a checked config asks for. Call inside the runtime: the
    /// switch poller's tasks start here.
    pub fn start(config: &Config, switches: Option<Arc<Poller>>, fixed: Fixed) -> Serving {
        let state = build(config, switches, &fixed);
        Serving {
            router: Arc::new(RwLock::new(crate::server::router(state.clone()))),
            running: Mutex::new(state),
            fixed,
        }
    }

    /// The state in force.
    pub fn state(&self) -> Arc<AppState> {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A router that hands each request to the router in force at its arrival: keep-alive
    /// connections (Prometheus keeps them for good) see a reload too.
    pub fn router(&self) -> Router {
        let router = self.router.clone();
        Router::new().fallback_service(tower::service_fn(move |request: Request| {
            let current = router.read().unwrap_or_else(|p| p.into_inner()).clone();
            current.oneshot(request)
        }))
    }

    /// Re-reads the config (`load`), checks it, and on success swaps in what it asks for.
    /// Returns whether the new config is in force.
    pub fn reload(
        &self,
        config_file: Option<&Path>,
        load: impl FnOnce() -> Result<(Config, Origin), ConfigError>,
    ) -> bool {
        // `--config.file <(...)` is a pipe read once at startup: read again it would be empty,
        // and an empty file is the all-defaults config.
        if let Some(path) = config_file {
            if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
                tracing::error!(
                    file = %path.display(),
                    "SIGHUP: the config file is not a regular file (a pipe is read once); the running config stays"
                );
                return false;
            }
        }
        let checked = load()
            .map_err(|e| crate::yaml::ConfigErrors(vec![e]))
            .and_then(|(config, origin)| {
                app::check(&origin, &config).map(|switches| (config, switches))
            });
        let (config, switches) = match checked {
            Ok(checked) => checked,
            Err(errors) => {
                for e in &errors.0 {
                    tracing::error!("SIGHUP: {e}");
                }
                tracing::error!("SIGHUP: the config was not reloaded; the running config stays");
                return false;
            }
        };
        let wanted = config
            .web
            .listen_address
            .clone()
            .unwrap_or_else(config::default_listen_address);
        if wanted != self.fixed.listen_address {
            tracing::warn!(
                listening = %self.fixed.listen_address,
                configured = %wanted,
                "SIGHUP: web.listen_address changed; it takes a restart to move the listener"
            );
        }
        let state = build(&config, switches, &self.fixed);
        let router = crate::server::router(state.clone());
        *self.router.write().unwrap_or_else(|p| p.into_inner()) = router;
        let old = std::mem::replace(
            &mut *self.running.lock().unwrap_or_else(|p| p.into_inner()),
            state,
        );
        old.collectors.retire();
        if let Some(switches) = &old.switches {
            switches.stop();
        }
        tracing::info!("SIGHUP: config reloaded");
        true
    }
}

/// The state for a checked config, its switch poller started when it polls in the background.
fn build(config: &Config, switches: Option<Arc<Poller>>, fixed: &Fixed) -> Arc<AppState> {
    match &switches {
        Some(switches) if config.switch_polling == config::SwitchPolling::Background => {
            switches.spawn();
            tracing::info!(switches = switches.targets.len(), "polling switches");
        }
        Some(switches) => tracing::info!(
            switches = switches.targets.len(),
            "switches are read on demand, through /probe"
        ),
        None => {}
    }
    let mut state = app::app_state(config, switches, Some(fixed.process.clone()));
    state.coalesce_scrapes = fixed.coalesce_scrapes;
    Arc::new(state)
}
