//! Server processes under measurement: ours or a reference tool, killed with the bench.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::proc::free_port;

/// The soft `RLIMIT_NOFILE` systemd starts a service at (`DefaultLimitNOFILE=1024:524288`).
const SERVICE_SOFT_NOFILE: libc::rlim_t = 1024;

/// The binary `cargo bench` has just built, or another build of ours at $RFE_BINARY.
pub fn rfe_binary() -> PathBuf {
    std::env::var_os("RFE_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rdma-fabric-exporter")))
}

/// A server process, killed on drop (also when unwinding from a panic).
pub struct Server {
    pub name: &'static str,
    pub program: PathBuf,
    child: Child,
    pub address: String,
    /// Everything it logged, for error messages.
    log: Arc<Mutex<String>>,
    /// When it logged its address: a demo's simulated clock starts then (its ticker starts
    /// just before it binds).
    pub listening_at: Instant,
}

impl Drop for Server {
    /// SIGTERM first, so that a demo removes its fabric tree (SIGCONT before it, in case it
    /// was paused); SIGKILL after 5 s.
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child, which has not been reaped yet.
            unsafe {
                libc::kill(pid, libc::SIGCONT);
                libc::kill(pid, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Stops (SIGSTOP) or resumes (SIGCONT) the process: a bench takes its CPU share away to
    /// time what shares the machine with it.
    pub fn set_paused(&self, paused: bool) -> anyhow::Result<()> {
        let pid = i32::try_from(self.child.id())?;
        let signal = if paused { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) on our own child, which has not been reaped yet.
        if unsafe { libc::kill(pid, signal) } != 0 {
            anyhow::bail!("{}: kill: {}", self.name, std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Our binary (or $RFE_BINARY) with `args` after `serve --web.listen-address 127.0.0.1:0`.
    pub fn start_rfe(name: &'static str, args: &[OsString]) -> anyhow::Result<Server> {
        Server::start_rfe_subcommand(name, "serve", args)
    }

    /// Our binary with `args` after `SUBCOMMAND --web.listen-address 127.0.0.1:0` (`serve` or
    /// `demo`).
    pub fn start_rfe_subcommand(
        name: &'static str,
        subcommand: &str,
        args: &[OsString],
    ) -> anyhow::Result<Server> {
        Server::start_rfe_build(name, &rfe_binary(), subcommand, args)
    }

    /// [`Server::start_rfe_subcommand`] with another build of ours, `binary`.
    pub fn start_rfe_build(
        name: &'static str,
        binary: &Path,
        subcommand: &str,
        args: &[OsString],
    ) -> anyhow::Result<Server> {
        let mut command = Command::new(binary);
        command
            .arg(subcommand)
            .args(["--web.listen-address", "127.0.0.1:0"])
            .args(["--log.format", "text"])
            .args(args);
        let (mut server, addresses) = Server::spawn(name, command)?;
        // With port 0 the bound address is only known from the log line.
        match addresses.recv_timeout(Duration::from_secs(30)) {
            Ok(address) => {
                server.listening_at = Instant::now();
                server.address = address;
            }
            Err(_) => {
                server.check_alive()?;
                bail!(
                    "{} did not log its address within 30 s:\n{}",
                    binary.display(),
                    server.log()
                );
            }
        }
        server.wait_ready()?;
        Ok(server)
    }

    pub fn start_node_exporter(
        binary: &Path,
        sys: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Server> {
        let port = free_port()?;
        let mut command = Command::new(binary);
        command
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg(format!("--path.sysfs={}", sys.display()))
            .args(["--collector.disable-defaults", "--collector.infiniband"])
            .args(extra);
        let (mut server, _) = Server::spawn("node_exporter", command)?;
        server.address = format!("127.0.0.1:{port}");
        server.wait_ready()?;
        Ok(server)
    }

    fn spawn(
        name: &'static str,
        mut command: Command,
    ) -> anyhow::Result<(Server, mpsc::Receiver<String>)> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // If the bench itself is killed (SIGKILL, no unwinding), take the server down with it.
        // Each server starts at the soft descriptor limit systemd and container runtimes give
        // (1 024, the hard limit unchanged): a server that needs more raises it itself, as Go
        // programs do, and a shell's higher limit would hide one that does not.
        // SAFETY: prctl, getrlimit and setrlimit are async-signal-safe; nothing else runs
        // between fork and exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                limit.rlim_cur = limit.rlim_cur.min(SERVICE_SOFT_NOFILE);
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {name}: {command:?}"))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Arc::new(Mutex::new(String::new()));
        let (sender, receiver) = mpsc::channel();
        let thread_log = Arc::clone(&log);
        // Keep draining stderr so that the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(address) = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("address="))
                {
                    let _ = sender.send(address.trim_matches('"').to_string());
                }
                let mut log = thread_log.lock().unwrap_or_else(|p| p.into_inner());
                log.push_str(&line);
                log.push('\n');
            }
        });
        let server = Server {
            name,
            program: PathBuf::from(command.get_program()),
            child,
            address: String::new(),
            log,
            listening_at: Instant::now(),
        };
        Ok((server, receiver))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => {
                // Let the stderr thread catch the last lines.
                std::thread::sleep(Duration::from_millis(100));
                bail!("{} died ({status}); its log:\n{}", self.name, self.log())
            }
        }
    }

    /// After a failed request: a dying server resets the connection slightly before it can be
    /// reaped, so give it a moment to report its exit.
    pub fn check_alive_after_error(&mut self) -> anyhow::Result<()> {
        for _ in 0..20 {
            self.check_alive()?;
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Polls `/` until the server answers 200 (node_exporter binds after it starts).
    pub fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = format!("http://{}/", self.address);
        loop {
            self.check_alive()?;
            if let Ok(response) = client.get(&url).send() {
                if response.status().is_success() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "{} not ready at {url} after 30 s:\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
