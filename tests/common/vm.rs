//! The real-kernel VM of `tests/it/real_kernel.rs` and `tests/it/real_kernel_probe.rs`:
//! Debian's stock kernel booted under QEMU by `scripts/vm/boot`, running a guest script that
//! writes what it saw to a shared directory. A VM that cannot boot here (no QEMU, no kernel
//! package) is a skip, or a failure under CI; a guest that booted and then did not finish its
//! script (it failed, or hung until the timeout) is always a failure.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{ChildGuard, Sample};

/// Why there is no run.
#[derive(Debug)]
pub enum NoRun {
    /// The VM cannot boot here.
    CannotBoot(String),
    /// The guest booted and then did not finish its script.
    Failed(String),
}

/// What the guest wrote, by file name, with the serial console (kernel messages included) as
/// `console`.
pub struct GuestFiles {
    pub files: BTreeMap<String, String>,
}

impl GuestFiles {
    #[track_caller]
    pub fn file(&self, name: &str) -> &str {
        self.files.get(name).unwrap_or_else(|| {
            panic!(
                "the guest wrote no {name}; it wrote {:?}",
                self.files.keys()
            )
        })
    }

    /// The exposition the guest saved as `<name>.prom`.
    #[track_caller]
    pub fn scrape(&self, name: &str) -> Vec<Sample> {
        super::parse_exposition(self.file(&format!("{name}.prom")))
    }
}

/// The run, or `None` after saying why it was skipped; panics where the guest booted and then
/// failed, or where CI wants every component to run.
#[track_caller]
pub fn ran<T>(run: &Result<T, NoRun>) -> Option<&T> {
    match run {
        Ok(run) => Some(run),
        Err(NoRun::Failed(reason)) => panic!("{reason}"),
        Err(NoRun::CannotBoot(reason)) => {
            super::skip_or_fail(reason);
            None
        }
    }
}

/// Checks that `tools` (besides QEMU, busybox, apt-get and dpkg) are here and builds the
/// kernel and initramfs cache (`scripts/vm/boot --prepare`). `packages` names the Debian
/// packages that bring the tools.
pub fn prepare(tools: &[&str], packages: &str) -> Result<(), NoRun> {
    let base = ["qemu-system-x86_64", "busybox", "apt-get", "dpkg"];
    for tool in base.iter().chain(tools) {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map_or(true, |o| !o.status.success())
        {
            return Err(NoRun::CannotBoot(format!(
                "the real-kernel VM needs {tool} (scripts/test installs qemu-system-x86, \
                 busybox-static, {packages})"
            )));
        }
    }
    let prepared = Command::new(boot())
        .arg("--prepare")
        .output()
        .map_err(|e| NoRun::CannotBoot(format!("scripts/vm/boot: {e}")))?;
    if !prepared.status.success() {
        return Err(NoRun::CannotBoot(format!(
            "scripts/vm/boot --prepare failed (no Debian 12 kernel package to download?): {}",
            String::from_utf8_lossy(&prepared.stderr)
        )));
    }
    Ok(())
}

fn boot() -> PathBuf {
    super::project_root().join("scripts/vm/boot")
}

/// What the console showed: when the guest's script started and ended, and all of it.
struct Console {
    booted: Option<Duration>,
    done: Option<Duration>,
    text: String,
}

/// A running guest.
pub struct Guest {
    /// Named in the progress lines.
    name: &'static str,
    vm: ChildGuard,
    out: tempfile::TempDir,
    started: Instant,
    console: JoinHandle<Console>,
}

impl Guest {
    /// Boots `scripts/vm/boot [OPTIONS] tests/real_kernel/SCRIPT ARGS...` with a fresh shared
    /// directory; `options` go before the script (`--timeout`, `--port`, `--pcie`).
    pub fn start(
        name: &'static str,
        options: &[&str],
        script: &str,
        args: &[&OsStr],
    ) -> Result<Guest, NoRun> {
        Guest::start_with(name, options, script, args, |_| Ok(()))
    }

    /// [`Guest::start`], with `place` putting what the script needs into the shared directory
    /// (given as its argument) before the VM boots.
    pub fn start_with(
        name: &'static str,
        options: &[&str],
        script: &str,
        args: &[&OsStr],
        place: impl FnOnce(&Path) -> Result<(), NoRun>,
    ) -> Result<Guest, NoRun> {
        let out = tempfile::tempdir().unwrap();
        place(out.path())?;
        let started = Instant::now();
        let mut vm = Command::new(boot());
        vm.args(["--out", super::path_str(out.path())])
            .args(options)
            .arg(super::project_root().join("tests/real_kernel").join(script))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // Its own process group: a test that fails below still kills QEMU with it.
            .process_group(0);
        let mut vm = ChildGuard(
            vm.spawn()
                .map_err(|e| NoRun::CannotBoot(format!("scripts/vm/boot: {e}")))?,
        );
        let console = BufReader::new(vm.0.stdout.take().unwrap());
        let console = std::thread::spawn(move || {
            let mut seen = Console {
                booted: None,
                done: None,
                text: String::new(),
            };
            for line in console.lines().map_while(Result::ok) {
                if line.contains("guest: ") {
                    let at = started.elapsed();
                    eprintln!("{name}: {at:>5.1?} {line}");
                    if line.contains("guest: booted") {
                        seen.booted.get_or_insert(at);
                    }
                    seen.done = line.contains("guest: done").then_some(at);
                }
                seen.text.push_str(&line);
                seen.text.push('\n');
            }
            seen
        });
        Ok(Guest {
            name,
            vm,
            out,
            started,
            console,
        })
    }

    /// The directory the guest writes to.
    pub fn out(&self) -> &Path {
        self.out.path()
    }

    pub fn running(&mut self) -> bool {
        self.vm.0.try_wait().ok().flatten().is_none()
    }

    /// Waits for the VM to end: what the guest wrote.
    pub fn finish(mut self) -> Result<GuestFiles, NoRun> {
        let status = self.vm.0.wait().unwrap();
        let console = self.console.join().unwrap();
        let (name, ended) = (self.name, self.started.elapsed());
        eprintln!(
            "{name}: the guest reached its script after {:?}; the VM ran for {ended:?}",
            console.booted
        );
        // The guest powers off about a second after its script; one that does not is killed
        // at the timeout. Its console says where it stopped.
        if let Some(done) = console
            .done
            .filter(|d| ended > *d + Duration::from_secs(30))
        {
            eprintln!(
                "{name}: the guest did not power off after its script ({done:?}); the \
                 console's last lines:\n{}",
                last_lines(&console.text, 40)
            );
        }
        check(status, console.booted.is_some(), &console.text)?;
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(self.out.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                files.insert(name, std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
        files.insert("console".into(), console.text);
        Ok(GuestFiles { files })
    }
}

/// The script's exit status (125: it never reported one, as when the guest hung) judged:
/// a guest that booted and then failed is a failure, one that never booted cannot run here.
fn check(status: ExitStatus, booted: bool, console: &str) -> Result<(), NoRun> {
    if status.success() {
        return Ok(());
    }
    let reason = format!("the real-kernel VM did not run its script ({status}): {console}");
    Err(if booted {
        NoRun::Failed(reason)
    } else {
        NoRun::CannotBoot(reason)
    })
}

fn last_lines(text: &str, count: usize) -> String {
    let tail: Vec<&str> = text.lines().rev().take(count).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn a_guest_that_booted_and_did_not_finish_fails_and_one_that_never_booted_skips() {
        // scripts/vm/boot's 125: the guest never reported a status (killed at the timeout).
        let hung = ExitStatus::from_raw(125 << 8);
        assert!(matches!(check(hung, true, ""), Err(NoRun::Failed(_))));
        assert!(matches!(check(hung, false, ""), Err(NoRun::CannotBoot(_))));
        assert!(check(ExitStatus::from_raw(0), true, "").is_ok());
    }
}
