use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use rdma_fabric_exporter::app;
use rdma_fabric_exporter::cli::{Cli, Command, DemoArgs, LogArgs, ServeArgs};
use rdma_fabric_exporter::config;
use rdma_fabric_exporter::process_metrics::ProcessCollector;
use rdma_fabric_exporter::reload::Serving;
use rdma_fabric_exporter::web::LiveWebConfig;
use rdma_fabric_exporter::yaml::ConfigErrors;

/// Exit code for bad configuration or usage, as promtool and the Prometheus binaries use.
const EXIT_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli.log);
    let result = match cli.command {
        Some(Command::Serve(args)) => serve(*args),
        Some(Command::Demo(args)) => demo(&args),
        Some(Command::Localize(args)) => localize(&args),
        Some(Command::Doctor(args)) => Ok(rdma_fabric_exporter::diag::doctor::main(&args)),
        Some(Command::Nccl(args)) => Ok(rdma_fabric_exporter::nccl::main(&args)),
        Some(Command::EcnTune(args)) => Ok(rdma_fabric_exporter::diag::ecn_tune::main(&args)),
        Some(Command::NcclTests(args)) => Ok(rdma_fabric_exporter::diag::nccl_tests::main(&args)),
        Some(Command::IbReport(args)) => Ok(rdma_fabric_exporter::diag::ib_report::main(&args)),
        Some(Command::Ping(args)) => Ok(rdma_fabric_exporter::diag::ping::main(&args)),
        Some(Command::HwCounters(args)) => Ok(rdma_fabric_exporter::diag::hw_counters::main(&args)),
        Some(Command::CheckConfig { config_file }) => check_config(&config_file),
        None => serve(cli.serve),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(log: &LogArgs) {
    let filter = tracing_subscriber::EnvFilter::try_new(&log.level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if log.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Runs the validation `serve` runs (profiles and secrets included) without starting anything.
fn check_config(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    let loaded = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading config from standard input")?;
        let path = std::path::Path::new("<stdin>");
        config::parse(path, &text).map(|config| {
            let origin = config::Origin {
                path: path.to_path_buf(),
                text: Some(text),
            };
            (config, origin)
        })
    } else {
        config::load(path)
    };
    let (config, origin) = match loaded {
        Ok(loaded) => loaded,
        Err(e) => return Ok(config_error(&e.into())),
    };
    match app::check(&origin, &config) {
        Ok(_) => {
            println!("{}: OK", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(errors) => Ok(config_error(&errors)),
    }
}

/// Prints every error, one per line, and gives the config exit code.
fn config_error(errors: &ConfigErrors) -> ExitCode {
    for e in &errors.0 {
        eprintln!("error: {e}");
    }
    ExitCode::from(EXIT_CONFIG)
}

/// Loads `--web.config.file` when given; a bad file is a config error (exit 2).
fn web_config(path: Option<&std::path::Path>) -> Result<Option<Arc<LiveWebConfig>>, ExitCode> {
    let Some(path) = path else { return Ok(None) };
    match rdma_fabric_exporter::web::load(path) {
        Ok(config) => Ok(Some(LiveWebConfig::new(path.to_path_buf(), config))),
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(EXIT_CONFIG))
        }
    }
}

/// One server for plain HTTP and the web config (TLS, basic auth, headers): bounded
/// connections and header reads either way.
async fn serve_http(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    web: Option<Arc<LiveWebConfig>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    rdma_fabric_exporter::web::serve::serve(listener, app, web, shutdown)
        .await
        .context("serving HTTP")
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let (config, origin) = match args.resolve() {
        Ok(loaded) => loaded,
        Err(e) => return Ok(config_error(&e.into())),
    };
    let switches = match app::check(&origin, &config) {
        Ok(switches) => switches,
        Err(errors) => return Ok(config_error(&errors)),
    };
    let web = match web_config(args.web_config_file.as_deref()) {
        Ok(web) => web,
        Err(code) => return Ok(code),
    };
    raise_nofile_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(app::runtime_worker_threads(
            args.worker_threads,
            switches.is_some(),
        ))
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let listen_address = config
        .web
        .listen_address
        .clone()
        .unwrap_or_else(config::default_listen_address);
    let fixed = rdma_fabric_exporter::reload::Fixed {
        process: ProcessCollector {
            runtime: Some(runtime.handle().clone()),
        },
        coalesce_scrapes: !args.no_scrape_coalescing,
        listen_address: listen_address.clone(),
    };
    runtime.block_on(async move {
        let serving = Arc::new(Serving::start(&config, switches, fixed));
        spawn_reloader(serving.clone(), args.clone())?;
        let listener = rdma_fabric_exporter::server::bind(&listen_address)
            .await
            .with_context(|| format!("listening on {listen_address}"))?;
        let shutdown = serve_shutdown(serving.clone());
        tracing::info!(
            address = %listener.local_addr()?,
            telemetry_path = %serving.state().telemetry_path,
            sysfs = %config.node.sysfs_path.display(),
            "rdma-fabric-exporter listening"
        );
        if let Some(web) = &web {
            tracing::info!(tls = web.current().tls.is_some(), "web config loaded");
        }
        serve_http(listener, serving.router(), web, shutdown).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// SIGHUP re-reads the config file (and, in `web::serve`, the web config file).
fn spawn_reloader(serving: Arc<Serving>, args: ServeArgs) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            if args.config_file.is_none() {
                tracing::info!("SIGHUP: no --config.file to reload; still serving");
                continue;
            }
            serving.reload(args.config_file.as_deref(), || args.resolve());
        }
    });
    Ok(())
}

/// Raises the soft descriptor limit before the node collector sizes its kept trees from it
/// (see `fd_limit`). A refusal is logged, not fatal: the walk then keeps fewer descriptors.
fn raise_nofile_limit() {
    use rdma_fabric_exporter::fd_limit::raise_soft_limit;
    use rdma_fabric_exporter::node::tree_cache::WANTED_SOFT_NOFILE;
    match raise_soft_limit(WANTED_SOFT_NOFILE) {
        // Enough for most nodes: running out is warned about when it happens.
        Ok(limits) if limits.capped_by_hard(WANTED_SOFT_NOFILE) => tracing::info!(
            soft = limits.soft,
            hard = limits.hard,
            wanted = WANTED_SOFT_NOFILE,
            "the hard RLIMIT_NOFILE caps the soft one: the kept sysfs trees get half of it"
        ),
        Ok(limits) if limits.soft != limits.soft_before => tracing::debug!(
            from = limits.soft_before,
            to = limits.soft,
            hard = limits.hard,
            "raised the soft RLIMIT_NOFILE"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("could not raise the soft RLIMIT_NOFILE: {e}"),
    }
}

fn demo(args: &DemoArgs) -> anyhow::Result<ExitCode> {
    if let Err(e) = config::check_telemetry_path(&args.telemetry_path, config::DEMO_PATHS) {
        eprintln!("error: --web.telemetry-path: {e}");
        return Ok(ExitCode::from(EXIT_CONFIG));
    }
    let web = match web_config(args.web_config_file.as_deref()) {
        Ok(web) => web,
        Err(code) => return Ok(code),
    };
    raise_nofile_limit();
    let listen_address = args
        .listen_address
        .clone()
        .unwrap_or_else(config::default_listen_address);
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let options = args.options();
        let demo = Arc::new(
            rdma_fabric_exporter::sim::demo::Demo::start(options, &args.telemetry_path).await?,
        );
        demo.spawn_ticker();
        let listener = rdma_fabric_exporter::server::bind(&listen_address)
            .await
            .with_context(|| format!("listening on {listen_address}"))?;
        let shutdown = shutdown_signal(true);
        tracing::info!(
            address = %listener.local_addr()?,
            scenario = args.scenario.as_str(),
            speed = args.speed,
            hosts = demo.host_names.len(),
            fabric = %demo.dir().display(),
            "rdma-fabric-exporter demo listening: /hosts/<host>{} per host, {} for the switches, /ib{} for the InfiniBand subnet, /sd for Prometheus",
            args.telemetry_path,
            args.telemetry_path,
            args.telemetry_path,
        );
        tracing::info!("scenario {}: {}", args.scenario.as_str(), args.scenario.signature());
        let app = demo.router();
        serve_http(listener, app, web, shutdown).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The once-per-cluster localizer: rounds on their own thread, the verdicts on /metrics.
fn localize(args: &rdma_fabric_exporter::localizer::LocalizeArgs) -> anyhow::Result<ExitCode> {
    use rdma_fabric_exporter::localizer::{serve, Localizer};
    if let Err(e) = config::check_telemetry_path(&args.telemetry_path, &["/", "/healthz"]) {
        eprintln!("error: --web.telemetry-path: {e}");
        return Ok(ExitCode::from(EXIT_CONFIG));
    }
    let web = match web_config(args.web_config_file.as_deref()) {
        Ok(web) => web,
        Err(code) => return Ok(code),
    };
    let localizer = match Localizer::start(args) {
        Ok(localizer) => localizer,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let listen_address = args
        .listen_address
        .clone()
        .unwrap_or_else(config::default_listen_address);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let listener = rdma_fabric_exporter::server::bind(&listen_address)
            .await
            .with_context(|| format!("listening on {listen_address}"))?;
        let shutdown = shutdown_signal(true);
        tracing::info!(
            address = %listener.local_addr()?,
            prometheus = %localizer.prometheus,
            "rdma-fabric-exporter localize listening"
        );
        let app = serve::router(localizer, &args.telemetry_path);
        serve_http(listener, app, web, shutdown).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// Completes on SIGINT or SIGTERM. SIGHUP, whose default action would end the process (a
/// closed terminal, a reflexive `kill -HUP`), never ends it: `serve` reloads its config
/// (`spawn_reloader`), `demo` only says so (`note_hangup`); with a web config both reload it
/// (`web::serve`). Where a handler cannot be installed the process keeps serving and says so.
///
/// The handlers are installed when this is called, not when the future is first polled: it is
/// called before the exporter logs that it listens, so a SIGTERM sent the moment a supervisor
/// (or a test) reads that line never meets the default action, which would end a demo without
/// removing its fabric.
fn shutdown_signal(note_hangup: bool) -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = note_hangup
        .then(|| {
            signal(SignalKind::hangup())
                .inspect_err(|e| tracing::warn!("SIGHUP handler not installed: {e}"))
                .ok()
        })
        .flatten();
    let mut stop = StopSignals::install();
    async move {
        loop {
            tokio::select! {
                () = stop.next() => break,
                Some(()) = async {
                    match &mut hangup {
                        Some(hangup) => hangup.recv().await,
                        None => std::future::pending().await,
                    }
                } => tracing::info!("SIGHUP: nothing to reload but the web config; still serving"),
            }
        }
        tracing::info!("shutting down");
    }
}

/// `serve`'s [`shutdown_signal`]: at SIGTERM or SIGINT a probing agent first announces its
/// leave (`rdma_probe_leaving` 1) and keeps serving until a scrape has carried it, at most
/// `probe.leave_wait`, so that the localizer tells a restart from a dead host. A second signal
/// ends the wait. Handlers installed at the call, as there.
fn serve_shutdown(serving: Arc<Serving>) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut stop = StopSignals::install();
    async move {
        stop.next().await;
        // The collector in force now: a reload may have replaced the one of startup.
        let probe = serving.state().probe.clone();
        if let Some(probe) = probe.filter(|p| !p.leave_wait().is_zero()) {
            let wait = probe.leave_wait();
            tracing::info!(
                "leaving: serving rdma_probe_leaving until the next scrape (at most {wait:?})"
            );
            tokio::select! {
                carried = probe.leave_and_wait(wait) => if !carried {
                    tracing::warn!("leaving: no scrape within {wait:?}; stopping unannounced");
                },
                () = stop.next() => tracing::info!("leaving: a second signal; not waiting for a scrape"),
            }
        }
        tracing::info!("shutting down");
    }
}

/// The SIGTERM and SIGINT handlers, installed when made.
struct StopSignals {
    term: Option<tokio::signal::unix::Signal>,
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn install() -> StopSignals {
        use tokio::signal::unix::{signal, SignalKind};
        StopSignals {
            term: signal(SignalKind::terminate())
                .inspect_err(|e| tracing::warn!("SIGTERM handler not installed: {e}"))
                .ok(),
            interrupt: signal(SignalKind::interrupt())
                .inspect_err(|e| tracing::warn!("SIGINT handler not installed: {e}"))
                .ok(),
        }
    }

    /// Completes at the next SIGTERM or SIGINT; never without a handler. Cancel-safe: a signal
    /// that arrives while it is not awaited is seen at the next call.
    async fn next(&mut self) {
        tokio::select! {
            () = received(&mut self.term) => {}
            () = received(&mut self.interrupt) => {}
        }
    }
}

/// Completes at the next signal `sig` receives; never without a handler.
async fn received(sig: &mut Option<tokio::signal::unix::Signal>) {
    match sig {
        Some(sig) => {
            sig.recv().await;
        }
        None => std::future::pending().await,
    }
}
