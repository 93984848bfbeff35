//! `demo`: a simulated fabric served through the real exporter. Each host's NICs are written as
//! a sysfs tree and `ethtool -S` files that a per-host node agent reads through the same code as
//! `/sys`; each leaf switch is an SNMP agent on loopback that the real switch poller walks.
//!
//! One listener serves it all: `/hosts/<host>/metrics` is one host's node agent (what a
//! DaemonSet pod would serve), `/metrics` the switches (what the switch poller would serve),
//! `/ib/metrics` the InfiniBand subnet (what the `ib_fabric` collector of a scanner host would
//! serve, over the simulated subnet of `ib_fabric.rs`) and `/ib/switch?target=` one of its
//! switches, `/sd` lists them all for Prometheus' HTTP service discovery.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::config::{Config, SwitchPolling};
use crate::node::config::EthtoolSourceKind;
use crate::probe::agent::LocalPort;
use crate::probe::memory::MemoryFabric;
use crate::process_metrics::ProcessCollector;
use crate::server::AppState;
use crate::switch::pfc::{PfcConfig, PfcPriorities};
use crate::switch::poller::{Poller, Source, Target, DEFAULT_CONCURRENCY};
use crate::switch::profile::{Profile, Profiles};
use crate::switch::secret::Secret;
use crate::switch::snmp::{Credentials, SnmpTarget};

use super::fabric::{Fabric, Shape, PFC_PRIORITY};
use super::pod_resources_server::PodResourcesServer;
use super::scenario::{Scenario, ScenarioName};
use super::snmp_agent::{self, LiveTable};
use super::switch_mib::leaf_rows;
use super::sysfs_tree::{update_tree, write_ethtool_files, write_tree, NicSpec};
use super::workload::{self, SimNetlink};

/// The SNMP profile the simulated leaves speak.
pub const SWITCH_PROFILE: &str = "arista_eos";
pub const COMMUNITY: &str = "demo";

/// At most this much wall time is caught up in one advance: after the process was stopped (a
/// debugger, SIGSTOP, a suspended laptop), the fabric resumes rather than replaying the gap.
const MAX_CATCH_UP: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub scenario: ScenarioName,
    /// Simulated seconds per wall-clock second.
    pub speed: f64,
    pub shape: Shape,
    /// Wall time between two steps of the model.
    pub tick: Duration,
    /// How often the switch poller walks the simulated leaves.
    pub switch_interval: Duration,
    /// Simulated time to start at (seconds into the scenario's cycle).
    pub start_at_s: f64,
    /// Hosts whose probe agent is stopped from the start: their ports stay in the others' peer
    /// sets (as a stopped agent's do until the next peer refresh) and answer nothing.
    pub stopped_agents: Vec<String>,
    /// The chance that any probe or answer is lost on any path, besides the scenario's faults
    /// (`--probe-background-loss`; 0: none).
    pub probe_background_loss: f64,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            scenario: ScenarioName::PfcStorm,
            speed: 1.0,
            shape: Shape::default(),
            // Short enough for the PFC storm sampler (200 ms) to see pauses as they happen.
            tick: Duration::from_millis(100),
            switch_interval: Duration::from_secs(5),
            start_at_s: 0.0,
            stopped_agents: Vec::new(),
            probe_background_loss: 0.0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("writing the simulated fabric to {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting a simulated switch: {0}")]
    Agent(std::io::Error),
    #[error("{0}")]
    Profile(String),
    #[error("--stop-agent {0}: no such simulated host (they are {1})")]
    UnknownHost(String, String),
}

/// A running simulated fabric and the exporter state that serves it.
pub struct Demo {
    /// Removed when the demo is dropped.
    dir: tempfile::TempDir,
    /// Each host's NICs as last written, so that a step rewrites only what changed.
    written: Mutex<Vec<Vec<NicSpec>>>,
    fabric: Arc<Mutex<Fabric>>,
    /// Each host's kubelet pod-resources API, on a socket in its tree: held, not read.
    _kubelets: Vec<PodResourcesServer>,
    /// Per host, the `workload::host_files_key` its workload files were last written for.
    host_files: Mutex<Vec<String>>,
    tables: Vec<Arc<LiveTable>>,
    profile: Profile,
    options: DemoOptions,
    /// The switches' state, served at the telemetry path.
    pub state: Arc<AppState>,
    /// The InfiniBand subnet's scanner, served at `/ib<telemetry path>`.
    pub ib: Arc<AppState>,
    /// Each host's node agent, served at `/hosts/<host><telemetry path>`.
    pub hosts: BTreeMap<String, Arc<AppState>>,
    pub host_names: Vec<String>,
    /// Each leaf's SNMP agent (community `demo`), for benches that poll them from outside.
    pub leaf_addresses: Vec<std::net::SocketAddr>,
}

impl Demo {
    /// Builds the fabric, writes every host's tree, starts the switch agents and the poller.
    pub async fn start(options: DemoOptions, telemetry_path: &str) -> Result<Demo, DemoError> {
        let dir = fabric_dir()?;
        let mut fabric = Fabric::new(options.shape, Scenario::new(options.scenario));
        fabric.time_s = options.start_at_s;
        let profile = leaf_profile()?;
        write_hosts(dir.path(), &fabric)?;
        let written = fabric.hosts.iter().map(specs).collect();
        let leaves = Leaves::start(&fabric, &profile, options.switch_interval).await?;
        let host_names: Vec<String> = fabric.hosts.iter().map(|h| h.name.clone()).collect();
        let fabric = Arc::new(Mutex::new(fabric));
        let agents = HostAgents::start(dir.path(), &fabric, &host_names, &options, telemetry_path)?;
        introduce_peers(&agents.states);
        stop_agents(&agents.states, &options.stopped_agents, &host_names)?;
        let ib = ib_state(&fabric, &options, telemetry_path);
        let state = switches_state(leaves.poller, &ib, telemetry_path);
        Ok(Demo {
            dir,
            written: Mutex::new(written),
            fabric,
            _kubelets: agents.kubelets,
            host_files: Mutex::new(vec![String::new(); host_names.len()]),
            tables: leaves.tables,
            profile,
            options,
            state: Arc::new(state),
            ib: Arc::new(ib),
            hosts: agents.states,
            host_names,
            leaf_addresses: leaves.addresses,
        })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The switches' routes (metrics, probe, health), each host's metrics, `/sd` and the demo's
    /// landing page.
    pub fn router(self: &Arc<Self>) -> Router {
        let path = &self.state.telemetry_path;
        let demo_routes = Router::new()
            .route(&format!("/hosts/{{host}}{path}"), get(host_metrics))
            .route(
                &format!("/hosts/{{host}}{}", crate::probe::peers::PATH),
                get(host_probe_address),
            )
            .route(
                &format!("/hosts/{{host}}{}", crate::web::probe_ping::PATH),
                get(host_probe_ping),
            )
            .route(&format!("{IB_PREFIX}{path}"), get(ib_metrics))
            .route("/sd", get(service_discovery_route))
            .route("/", get(super::demo_page::landing_page))
            .route(
                crate::web::fabric_json::PATH,
                get(super::demo_page::fabric_json),
            )
            .with_state(self.clone());
        crate::server::routes(self.state.clone()).merge(demo_routes)
    }

    /// Advances the model by `wall` (the real time since the last advance) and publishes it:
    /// trees rewritten, switch tables replaced. The model moves in steps of at most one tick,
    /// however late this call comes, so simulated time keeps pace with the wall clock on a
    /// loaded machine (a late tick used to lose its time: rates read by a scraper fell behind
    /// the speed it was promised), and the files are written once per call.
    pub fn advance(&self, wall: Duration) -> Result<(), DemoError> {
        let mut fabric = self.fabric.lock().unwrap_or_else(|p| p.into_inner());
        let step = self.options.tick.as_secs_f64() * self.options.speed;
        let mut left = wall.min(MAX_CATCH_UP).as_secs_f64() * self.options.speed;
        while left > 1e-9 {
            let dt = left.min(step);
            fabric.step(dt);
            left -= dt;
        }
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let mut host_files = self.host_files.lock().unwrap_or_else(|p| p.into_inner());
        for (index, (host, before)) in fabric.hosts.iter().zip(written.iter_mut()).enumerate() {
            let root = self.dir.path().join("hosts").join(&host.name);
            let after = specs(host);
            let error = |path: PathBuf| move |source| DemoError::Write { path, source };
            update_tree(&root.join("sys"), before, &after).map_err(error(root.join("sys")))?;
            write_ethtool_files(&root.join("ethtool"), &after)
                .map_err(error(root.join("ethtool")))?;
            super::optics::write_modules(&root.join("modules"), &fabric, index, false)
                .map_err(error(root.join("modules")))?;
            let key = workload::host_files_key(&fabric, index);
            if host_files[index] != key {
                workload::write_host_files(&root, &fabric, index).map_err(error(root.clone()))?;
                host_files[index] = key;
            }
            *before = after;
        }
        for (index, table) in self.tables.iter().enumerate() {
            table.replace(&leaf_rows(&self.profile, &fabric, index));
        }
        Ok(())
    }

    /// The scenario and the simulated seconds since the start, for the landing page.
    pub fn scenario_now(&self) -> (ScenarioName, f64) {
        let fabric = self.fabric.lock().unwrap_or_else(|p| p.into_inner());
        (fabric.scenario.name, fabric.time_s)
    }

    /// Simulated seconds since the start.
    pub fn time_s(&self) -> f64 {
        self.fabric.lock().unwrap_or_else(|p| p.into_inner()).time_s
    }

    /// Steps the model every tick until the runtime stops; a failed write is logged once per
    /// kind and retried on the next tick.
    pub fn spawn_ticker(self: &Arc<Self>) {
        let demo = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(demo.options.tick);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = ticker.tick().await;
            let mut failing = false;
            loop {
                let now = ticker.tick().await;
                let wall = now.duration_since(last);
                last = now;
                let step = demo.clone();
                match tokio::task::spawn_blocking(move || step.advance(wall)).await {
                    Ok(Ok(())) => failing = false,
                    Ok(Err(e)) if !failing => {
                        failing = true;
                        tracing::error!("simulated fabric: {e}");
                    }
                    Ok(Err(_)) => {}
                    Err(e) => tracing::error!("simulated fabric step panicked: {e}"),
                }
            }
        });
    }
}

/// The directory the fabric is written to, removed with the demo: on tmpfs where there is one
/// (the fabric is rewritten ten times a second), after removing those of demos that died.
fn fabric_dir() -> Result<tempfile::TempDir, DemoError> {
    let shm = Path::new("/dev/shm");
    let parent = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    remove_orphaned_fabrics(&parent);
    tempfile::Builder::new()
        .prefix(&format!("{FABRIC_PREFIX}{}-", std::process::id()))
        .tempdir_in(&parent)
        .map_err(|source| DemoError::Write {
            path: std::env::temp_dir(),
            source,
        })
}

/// The built-in profile the simulated leaves answer as.
fn leaf_profile() -> Result<Profile, DemoError> {
    Profiles::builtin()
        .map_err(|e| DemoError::Profile(e.to_string()))?
        .get(SWITCH_PROFILE)
        .cloned()
        .ok_or_else(|| DemoError::Profile(format!("no built-in profile {SWITCH_PROFILE}")))
}

/// The leaves' SNMP agents and the poller that walks them.
struct Leaves {
    /// Each leaf's table, rewritten as the fabric moves.
    tables: Vec<Arc<LiveTable>>,
    addresses: Vec<std::net::SocketAddr>,
    poller: Arc<Poller>,
}

impl Leaves {
    async fn start(
        fabric: &Fabric,
        profile: &Profile,
        interval: Duration,
    ) -> Result<Leaves, DemoError> {
        let mut tables = Vec::new();
        let mut targets = Vec::new();
        let mut addresses = Vec::new();
        for (index, leaf) in fabric.leaves.iter().enumerate() {
            let table = Arc::new(LiveTable::default());
            table.replace(&leaf_rows(profile, fabric, index));
            let address = snmp_agent::start(table.clone(), COMMUNITY)
                .await
                .map_err(DemoError::Agent)?;
            tables.push(table);
            addresses.push(address);
            targets.push(leaf_target(&leaf.name, profile, address, interval));
        }
        let poller = Arc::new(Poller::new(targets, DEFAULT_CONCURRENCY));
        poller.spawn();
        Ok(Leaves {
            tables,
            addresses,
            poller,
        })
    }
}

/// Every host's node agent, by host name, and the kubelets they ask.
struct HostAgents {
    states: BTreeMap<String, Arc<AppState>>,
    /// Each host's kubelet pod-resources API, on a socket in its tree.
    kubelets: Vec<PodResourcesServer>,
}

impl HostAgents {
    /// The agents of the hosts `names`, in the fabric's order, each reading its tree in `dir`.
    fn start(
        dir: &Path,
        fabric: &Arc<Mutex<Fabric>>,
        names: &[String],
        options: &DemoOptions,
        telemetry_path: &str,
    ) -> Result<HostAgents, DemoError> {
        let probes = super::probing::memory_fabric(
            fabric.clone(),
            super::probing::BackgroundLoss {
                chance: options.probe_background_loss,
                seed: options.shape.seed,
            },
        );
        let mut agents = HostAgents {
            states: BTreeMap::new(),
            kubelets: Vec::new(),
        };
        for (index, name) in names.iter().enumerate() {
            let root = dir.join("hosts").join(name);
            let config = host_config(&root, name, options, telemetry_path);
            agents.kubelets.push(start_kubelet(&config, fabric, index)?);
            let simulated = crate::app::Simulated {
                netlink: Some(Arc::new(SimNetlink {
                    fabric: fabric.clone(),
                    host: index,
                })),
                probe_ports: Some(probe_ports(&config, fabric, &probes, index)),
                ..crate::app::Simulated::default()
            };
            let state = crate::app::app_state_with(&config, None, None, simulated);
            agents.states.insert(name.clone(), Arc::new(state));
        }
        Ok(agents)
    }
}

/// The config of host `name`'s node agent, which reads the tree at `root`.
fn host_config(root: &Path, name: &str, options: &DemoOptions, telemetry_path: &str) -> Config {
    let mut config = Config::default();
    config.node.sysfs_path = root.join("sys");
    config.node.ethtool.source = EthtoolSourceKind::Files;
    config.node.ethtool.stats_dir = Some(root.join("ethtool"));
    // Simulated counters move in tick-sized steps: judge storms over ten of them.
    config.node.pfc_storm.detection_time = options.tick * 10;
    config.node.pfc_storm.min_paused_ratio = 0.8;
    config.node.proc_path = root.join("proc");
    config.pods.enabled = true;
    config.pods.pod_resources_socket = root.join("pod-resources/kubelet.sock");
    config.pods.pod_logs_dir = root.join("var/log/pods");
    config.pods.interval = options.tick.max(Duration::from_secs(5));
    // Often enough for the QP panels, seldom enough not to slow the simulation down.
    config.node.netlink.interval = options.tick.max(Duration::from_secs(1));
    // FEC answers are written beside the statistics (`fec.rs`); read as often.
    config.node.fec.interval = options.tick.max(Duration::from_secs(1));
    // Every NIC has a 400G module (`optics.rs`); the opt-in collector reads their pages.
    config.node.transceiver.enabled = true;
    config.node.transceiver.source = crate::node::optics::collector::TransceiverSourceKind::Files;
    config.node.transceiver.modules_dir = Some(root.join("modules"));
    config.node.transceiver.interval = options.tick.max(Duration::from_secs(1));
    config.web.telemetry_path = Some(telemetry_path.to_string());
    // Every host probes its peers through the simulated fabric (`probing.rs`).
    config.probe.enabled = true;
    config.probe.host = Some(name.to_string());
    config
}

/// Host `index`'s kubelet pod-resources API, on the socket `config` names.
fn start_kubelet(
    config: &Config,
    fabric: &Mutex<Fabric>,
    index: usize,
) -> Result<PodResourcesServer, DemoError> {
    let fabric = fabric.lock().unwrap_or_else(|p| p.into_inner());
    let socket = &config.pods.pod_resources_socket;
    if let Some(socket_dir) = socket.parent() {
        std::fs::create_dir_all(socket_dir).map_err(|source| DemoError::Write {
            path: socket_dir.to_path_buf(),
            source,
        })?;
    }
    PodResourcesServer::start(socket, workload::pod_resources(&fabric, index)).map_err(|source| {
        DemoError::Write {
            path: socket.clone(),
            source,
        }
    })
}

/// Host `index`'s ports on the simulated probe fabric.
fn probe_ports(
    config: &Config,
    fabric: &Mutex<Fabric>,
    probes: &MemoryFabric,
    index: usize,
) -> Vec<LocalPort> {
    let fabric = fabric.lock().unwrap_or_else(|p| p.into_inner());
    // No DCB in the simulation: the class a host without one probes on.
    let class = crate::probe::class::choose(config.probe.traffic_class, None, None);
    super::probing::local_ports(
        probes,
        &fabric,
        index,
        config.probe.qkey,
        class.traffic_class,
    )
}

/// Each host's peers are the others' ports, as their /probe-address would say.
fn introduce_peers(hosts: &BTreeMap<String, Arc<AppState>>) {
    let published: Vec<_> = hosts
        .values()
        .filter_map(|state| state.probe.as_ref())
        .map(|probe| probe.published())
        .collect();
    for state in hosts.values() {
        if let Some(probe) = &state.probe {
            let own = probe.published().host;
            probe.set_peers(
                published
                    .iter()
                    .filter(|p| p.host != own)
                    .flat_map(|p| p.peers())
                    .collect(),
            );
        }
    }
}

/// Retires the probe agents of the hosts `--stop-agent` names.
fn stop_agents(
    hosts: &BTreeMap<String, Arc<AppState>>,
    stopped: &[String],
    host_names: &[String],
) -> Result<(), DemoError> {
    for name in stopped {
        let state = hosts
            .get(name)
            .ok_or_else(|| DemoError::UnknownHost(name.clone(), host_names.join(", ")))?;
        if let Some(probe) = &state.probe {
            crate::collector::Collector::retire(probe.as_ref());
        }
    }
    Ok(())
}

/// The state served at the telemetry path: the switches `poller` walks, the demo process's own
/// figures, and `/ib/switch` of the subnet's scanner `ib`.
fn switches_state(poller: Arc<Poller>, ib: &AppState, telemetry_path: &str) -> AppState {
    let mut config = Config::default();
    config.node.enabled = false;
    config.node.netlink.enabled = false;
    config.switch_polling = SwitchPolling::Background;
    config.web.telemetry_path = Some(telemetry_path.to_string());
    // The demo process's own figures go with the switches' endpoint, not with each host.
    let process = ProcessCollector {
        runtime: tokio::runtime::Handle::try_current().ok(),
    };
    let mut state = crate::app::app_state(&config, Some(poller), Some(process));
    // `/ib/switch` is routed with the switches' state (`server::routes`): it serves the
    // simulated subnet's scanner, whose `/metrics` is `/ib<telemetry path>`.
    state.ib_fabric = ib.ib_fabric.clone();
    state
}

fn specs(host: &super::fabric::Host) -> Vec<NicSpec> {
    host.nics.iter().map(|n| n.spec.clone()).collect()
}

/// `<dir>/hosts/<host>/sys` and `<dir>/hosts/<host>/ethtool` for every host.
fn write_hosts(dir: &Path, fabric: &Fabric) -> Result<(), DemoError> {
    for (index, host) in fabric.hosts.iter().enumerate() {
        let root = dir.join("hosts").join(&host.name);
        let specs = specs(host);
        let error = |path: PathBuf| move |source| DemoError::Write { path, source };
        write_tree(&root.join("sys"), &specs).map_err(error(root.join("sys")))?;
        write_ethtool_files(&root.join("ethtool"), &specs).map_err(error(root.join("ethtool")))?;
        super::optics::write_modules(&root.join("modules"), fabric, index, true)
            .map_err(error(root.join("modules")))?;
        workload::write_host_files(&root, fabric, index).map_err(error(root.clone()))?;
    }
    Ok(())
}

/// Where the InfiniBand subnet's scanner is served: `/ib/metrics`.
pub const IB_PREFIX: &str = "/ib";

/// The scanner of the simulated InfiniBand subnet: the `ib_fabric` collector alone, over
/// [`SimIbFabric`](super::ib_fabric::SimIbFabric) with the RoCE hosts' names and GUIDs, so
/// that `rdma_ib_link_info{remote_guid}` joins each host's `rdma_port_info{node_guid}`.
fn ib_state(fabric: &Arc<Mutex<Fabric>>, options: &DemoOptions, telemetry_path: &str) -> AppState {
    use super::ib_fabric::{IbShape, SimIbFabric};
    let (names, guids): (Vec<String>, Vec<Vec<crate::ib::model::Guid>>) = {
        let fabric = fabric.lock().unwrap_or_else(|p| p.into_inner());
        fabric
            .hosts
            .iter()
            .map(|h| {
                let guids = h
                    .nics
                    .iter()
                    .filter_map(|n| n.spec.node_guid.parse().ok())
                    .collect();
                (h.name.clone(), guids)
            })
            .unzip()
    };
    let clock_fabric = fabric.clone();
    let clock = Arc::new(move || {
        clock_fabric
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .time_s
    });
    let shape = IbShape {
        hosts: names.len(),
        hcas_per_host: options.shape.nics_per_host,
        ..IbShape::default()
    };
    let source = SimIbFabric::new(shape, options.scenario, clock, &guids, &names);
    let mut config = Config::default();
    config.node.enabled = false;
    config.node.netlink.enabled = false;
    config.process.enabled = false;
    config.ib_fabric.enabled = true;
    config.ib_fabric.interval = options.switch_interval;
    config.ib_fabric.timeout = options.switch_interval;
    config.web.telemetry_path = Some(telemetry_path.to_string());
    let simulated = crate::app::Simulated {
        ib_fabric: Some(Arc::new(source)),
        ..crate::app::Simulated::default()
    };
    crate::app::app_state_with(&config, None, None, simulated)
}

/// The simulated InfiniBand subnet's scanner.
async fn ib_metrics(
    State(demo): State<Arc<Demo>>,
    Query(params): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    crate::server::serve_metrics(demo.ib.clone(), &params, &headers).await
}

/// One simulated host's node agent.
async fn host_metrics(
    State(demo): State<Arc<Demo>>,
    UrlPath(host): UrlPath<String>,
    Query(params): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    match demo.hosts.get(&host) {
        Some(state) => crate::server::serve_metrics(state.clone(), &params, &headers).await,
        None => (
            StatusCode::NOT_FOUND,
            format!("no simulated host {host:?}\n"),
        )
            .into_response(),
    }
}

/// One simulated host's `/probe-address`: where its ports answer, as its agent would publish.
async fn host_probe_address(
    State(demo): State<Arc<Demo>>,
    UrlPath(host): UrlPath<String>,
) -> Response {
    let Some(state) = demo.hosts.get(&host) else {
        return no_host(&host);
    };
    let Some(published) = state.probe.as_ref().map(|probe| probe.published()) else {
        return (StatusCode::NOT_FOUND, "probing is off\n").into_response();
    };
    match serde_json::to_string(&published) {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// One simulated host's `/probe-ping`: an on-demand ping from its ports through the simulated
/// fabric (`rdma-fabric-exporter ping --agent http://<demo>/hosts/<host>`).
async fn host_probe_ping(
    State(demo): State<Arc<Demo>>,
    UrlPath(host): UrlPath<String>,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    match demo.hosts.get(&host) {
        Some(state) => crate::web::probe_ping::answer(state.probe.clone(), &params).await,
        None => no_host(&host),
    }
}

fn no_host(host: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        format!("no simulated host {host:?}\n"),
    )
        .into_response()
}

/// `/sd`: the hosts for Prometheus HTTP service discovery, addressed the way the caller
/// reached us.
async fn service_discovery_route(State(demo): State<Arc<Demo>>, headers: HeaderMap) -> Response {
    let Some(address) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return (StatusCode::BAD_REQUEST, "a Host header is needed\n").into_response();
    };
    let body = service_discovery(address, &demo.state.telemetry_path, &demo.host_names);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Prometheus HTTP service discovery for the demo: one target per host, each with its own
/// metrics path and `instance` label, one for the switches and one for the InfiniBand subnet.
pub fn service_discovery(address: &str, telemetry_path: &str, hosts: &[String]) -> String {
    let mut groups: Vec<serde_json::Value> = hosts
        .iter()
        .map(|host| {
            serde_json::json!({
                "targets": [address],
                "labels": {
                    "__metrics_path__": format!("/hosts/{host}{telemetry_path}"),
                    "instance": host,
                    "job": "rdma-node",
                }
            })
        })
        .collect();
    groups.push(serde_json::json!({
        "targets": [address],
        "labels": {"__metrics_path__": telemetry_path, "instance": "switch-poller", "job": "rdma-switches"}
    }));
    groups.push(serde_json::json!({
        "targets": [address],
        "labels": {"__metrics_path__": format!("{IB_PREFIX}{telemetry_path}"), "instance": "ib-fabric", "job": "rdma-ib-fabric"}
    }));
    serde_json::Value::Array(groups).to_string()
}

/// A demo's fabric is `<parent>/rfe-demo-<pid>-<random>`: the process id tells whether its
/// owner still runs.
const FABRIC_PREFIX: &str = "rfe-demo-";

/// Removes the fabrics of demo processes that are gone without removing theirs (SIGKILL, the
/// OOM killer, a crash): every other exit path removes its own. Only this user's trees, only
/// of processes that no longer exist; a tree whose process id was reused is left for later.
fn remove_orphaned_fabrics(parent: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(FABRIC_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
            .filter(|pid| *pid > 0)
        else {
            continue;
        };
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid || process_exists(pid) {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => tracing::info!(
                orphan = %entry.path().display(),
                "removed the fabric of a demo that is gone"
            ),
            Err(e) => tracing::warn!(
                orphan = %entry.path().display(),
                "the fabric of a demo that is gone could not be removed: {e}"
            ),
        }
    }
}

/// Signal 0 probes a process without signalling it: ESRCH means there is none.
fn process_exists(pid: i32) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks the process id.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The poller's target for a simulated leaf's in-process agent. The request timeout does not
/// shrink with the interval: a poll is already bounded by its interval (`Poller`), and a short
/// timeout (it was `min(2 s, interval / 2)`) failed polls whenever the machine was busy.
fn leaf_target(
    name: &str,
    profile: &Profile,
    address: std::net::SocketAddr,
    interval: Duration,
) -> Target {
    Target {
        name: name.to_string(),
        profile: profile.clone(),
        source: Source::Snmp(SnmpTarget {
            address: address.to_string(),
            credentials: Credentials::V2c(Secret::new(COMMUNITY)),
            timeout: LEAF_REQUEST_TIMEOUT,
            retries: 1,
            max_repetitions: 25,
        }),
        interval,
        pfc: leaf_pfc(),
        settings_interval: crate::switch::settings::DEFAULT_SETTINGS_INTERVAL,
    }
}

/// The fabric's lossless priority, stated as an operator states it for switches that do not
/// serve the DCBX tables: the leaves' `rdma_switch_port_pfc_enabled` come from the config
/// (`source="config"`), at no cost to the walk.
fn leaf_pfc() -> PfcConfig {
    let lossless = u8::try_from(PFC_PRIORITY).expect("a priority fits in u8");
    PfcConfig {
        priorities: Some(PfcPriorities::from_priorities([lossless]).expect("priority 0-7")),
        queues: Default::default(),
    }
}

/// An SNMP request to a simulated leaf: the answer comes from this process over loopback, so
/// only a starved scheduler makes it late.
const LEAF_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_demo_keeps_the_full_request_timeout() {
        let profile = Profiles::builtin()
            .unwrap()
            .get(SWITCH_PROFILE)
            .cloned()
            .unwrap();
        let address = "127.0.0.1:161".parse().unwrap();
        for interval in [Duration::from_millis(200), Duration::from_secs(5)] {
            let target = leaf_target("leaf-1", &profile, address, interval);
            let Source::Snmp(snmp) = &target.source else {
                panic!("{:?}", target.source)
            };
            assert_eq!(
                snmp.timeout,
                Duration::from_secs(2),
                "interval {interval:?}"
            );
            assert_eq!(target.interval, interval);
            let lossless = target.pfc.priorities.unwrap();
            assert!((0..8).all(|p| lossless.enabled(p) == (p == 3)));
        }
    }
}
