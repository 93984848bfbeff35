//! Scrape-time reads of the node, each device bounded by a deadline. A device's read runs on a
//! detached thread of its own: when the read hangs (a firmware reset; `mlx5_core` commands time
//! out after tens of seconds, a wedged one never), the walk stops waiting at the deadline, serves
//! the other devices and reports the late one as `timeout`. The hung thread is left to finish,
//! and no new read of that device starts before it has: at most one outstanding read per device,
//! so a device that stays stuck costs one thread, not one per scrape.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::counter_filter::CounterFilter;
use super::reason::ReadErrorReason;
use super::sysfs::{self, ClassDir, ClassListing, DeviceFilter, DeviceRead, NodeSnapshot, Port};

/// Per-port work done by the device's own reader (the netdev's driver statistics).
pub type PortHook = dyn Fn(&str, &mut Port) + Send + Sync;

/// The name of every device reader thread (`/proc/<pid>/task/*/comm`).
pub const READER_THREAD_NAME: &str = "sysfs-read";

/// Devices whose read has not returned, with when that read started.
type Outstanding = Arc<Mutex<HashMap<String, Instant>>>;

/// Reads the node's devices, each within a deadline, and remembers the reads still out.
#[derive(Debug, Default)]
pub struct DeviceReads {
    outstanding: Outstanding,
}

impl DeviceReads {
    /// Reads every device the filter allows, each on its own thread, waiting at most `timeout`
    /// in all. A device not back by then, or whose previous read is still out, is left out of
    /// the snapshot and reported with [`ReadErrorReason::Timeout`]: stale values are never
    /// served as fresh ones. The snapshot is in device name order whatever the scheduling.
    pub fn read_node(
        &self,
        sysfs_root: &Path,
        filter: &DeviceFilter,
        hw_counters: &Arc<CounterFilter>,
        timeout: Duration,
        port_hook: Arc<PortHook>,
    ) -> NodeSnapshot {
        let (class_dir, names) = match sysfs::list_devices(sysfs_root, filter) {
            ClassListing::Absent => return NodeSnapshot::default(),
            ClassListing::Failed(error) => return NodeSnapshot::failed(error),
            ClassListing::Listed(class_dir, names) => (
                Arc::new(class_dir.with_hw_counters(hw_counters.clone())),
                names,
            ),
        };
        let deadline = Instant::now() + timeout;
        let (results, arrivals) = mpsc::channel();
        let mut reads: Vec<Option<DeviceRead>> = Vec::with_capacity(names.len());
        let mut waiting = 0;
        for (index, name) in names.iter().enumerate() {
            let settled = self.start(&class_dir, (index, name), timeout, &port_hook, &results);
            waiting += usize::from(settled.is_none());
            reads.push(settled);
        }
        // Only the readers hold senders now: the channel disconnects when the last one is done.
        drop(results);
        while waiting > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            match arrivals.recv_timeout(left) {
                Ok((index, read)) => {
                    reads[index] = Some(read);
                    waiting -= 1;
                }
                Err(_) => break,
            }
        }
        let reads = reads
            .into_iter()
            .zip(&names)
            .map(|(read, name)| read.unwrap_or_else(|| timed_out(&class_dir, name, timeout)));
        NodeSnapshot::of_reads(reads)
    }

    /// Starts the read of device `name` on its own thread, which sends `(index, read)` when it
    /// returns. When none starts (an earlier read of the device is still out, or no thread could
    /// be started), returns the device's outcome at once.
    fn start(
        &self,
        class_dir: &Arc<ClassDir>,
        (index, name): (usize, &str),
        timeout: Duration,
        port_hook: &Arc<PortHook>,
        results: &mpsc::Sender<(usize, DeviceRead)>,
    ) -> Option<DeviceRead> {
        let Some(marker) = OutstandingRead::mark(&self.outstanding, name) else {
            return Some(still_out(class_dir, name, &self.outstanding));
        };
        let dir = class_dir.clone();
        let port_hook = port_hook.clone();
        let results = results.clone();
        let device = name.to_string();
        std::thread::Builder::new()
            .name(READER_THREAD_NAME.into())
            .spawn(move || {
                let started = Instant::now();
                let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    dir.read_device(&device, &*port_hook)
                }))
                .unwrap_or_else(|_| failed(&dir, &device, "its reader thread panicked".into()));
                // The read is over: clear the mark first, so that a scrape that follows at once
                // reads the device again. The walk may have stopped listening (the deadline
                // passed): then the result is dropped.
                drop(marker);
                let took = started.elapsed();
                if took > timeout {
                    tracing::warn!(device, ?took, "a read that outlived its scrape returned");
                }
                let _ = results.send((index, read));
            })
            // Without a thread the closure, and with it the mark, is dropped at once.
            .err()
            .map(|e| failed(class_dir, name, format!("no reader thread started: {e}")))
    }
}

/// Marks a device's read as outstanding for as long as it lives; it lives on the reader thread
/// and is dropped when the read returns, however it ends.
struct OutstandingRead {
    outstanding: Outstanding,
    device: String,
}

impl OutstandingRead {
    /// `None` when a read of `device` is already out.
    fn mark(outstanding: &Outstanding, device: &str) -> Option<OutstandingRead> {
        let mut out = outstanding.lock().unwrap_or_else(|p| p.into_inner());
        if out.contains_key(device) {
            return None;
        }
        out.insert(device.to_string(), Instant::now());
        Some(OutstandingRead {
            outstanding: outstanding.clone(),
            device: device.to_string(),
        })
    }
}

impl Drop for OutstandingRead {
    fn drop(&mut self) {
        self.outstanding
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.device);
    }
}

fn timed_out(class_dir: &ClassDir, device: &str, timeout: Duration) -> DeviceRead {
    error(
        class_dir,
        device,
        ReadErrorReason::Timeout,
        format!(
            "not read within {timeout:?}; left out of this scrape, and not read again before \
             this read returns"
        ),
    )
}

fn still_out(class_dir: &ClassDir, device: &str, outstanding: &Outstanding) -> DeviceRead {
    let started = outstanding
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(device)
        .map(Instant::elapsed)
        .unwrap_or_default();
    error(
        class_dir,
        device,
        ReadErrorReason::Timeout,
        format!(
            "a read started {:.1}s ago has not returned; left out of this scrape",
            started.as_secs_f64()
        ),
    )
}

fn failed(class_dir: &ClassDir, device: &str, detail: String) -> DeviceRead {
    error(class_dir, device, ReadErrorReason::Internal, detail)
}

fn error(
    class_dir: &ClassDir,
    device: &str,
    reason: ReadErrorReason,
    detail: String,
) -> DeviceRead {
    DeviceRead {
        device: None,
        errors: vec![sysfs::ReadError {
            device: device.to_string(),
            reason,
            path: class_dir.path().join(device),
            detail,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Condvar;

    const TIMEOUT: Duration = Duration::from_millis(300);

    /// A port hook that blocks on device `hung`'s ports until released, counting its calls.
    #[derive(Default)]
    struct Gate {
        released: Mutex<bool>,
        opened: Condvar,
        calls: AtomicUsize,
    }

    impl Gate {
        fn hook(self: &Arc<Self>, hung: &'static str) -> Arc<PortHook> {
            let gate = self.clone();
            Arc::new(move |device: &str, _: &mut Port| {
                if device == hung {
                    gate.calls.fetch_add(1, Ordering::SeqCst);
                    let released = gate.released.lock().unwrap();
                    drop(gate.opened.wait_while(released, |r| !*r).unwrap());
                }
            })
        }

        fn release(&self) {
            *self.released.lock().unwrap() = true;
            self.opened.notify_all();
        }
    }

    /// The bundled ConnectX-7 fixture node (`mlx5_0` to `mlx5_9`).
    fn sys() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cx7-roce/sys")
    }

    /// Devices `mlx5_0` to `mlx5_{last}`.
    fn first(last: u8) -> DeviceFilter {
        DeviceFilter {
            include: Some(Regex::new(&format!("^mlx5_[0-{last}]$")).unwrap()),
            exclude: None,
        }
    }

    fn names(snapshot: &NodeSnapshot) -> Vec<&str> {
        snapshot.devices.iter().map(|d| d.name.as_str()).collect()
    }

    fn timeouts(snapshot: &NodeSnapshot) -> Vec<&str> {
        snapshot
            .errors
            .iter()
            .filter(|e| e.reason == ReadErrorReason::Timeout)
            .map(|e| e.device.as_str())
            .collect()
    }

    #[test]
    fn a_hung_device_is_cut_off_read_once_at_a_time_and_read_again_once_it_returns() {
        let reads = DeviceReads::default();
        let gate = Arc::new(Gate::default());
        let read = || {
            let started = Instant::now();
            let snapshot = reads.read_node(
                &sys(),
                &first(2),
                &Arc::default(),
                TIMEOUT,
                gate.hook("mlx5_1"),
            );
            (snapshot, started.elapsed())
        };

        let (first, took) = read();
        assert!(took >= TIMEOUT && took < TIMEOUT * 3, "{took:?}");
        assert_eq!(names(&first), ["mlx5_0", "mlx5_2"]);
        assert_eq!(timeouts(&first), ["mlx5_1"]);
        assert_eq!(first.errors.len(), 1, "{:?}", first.errors);

        // The first read is still out: the device is reported at once, no second reader.
        let (second, took) = read();
        assert!(took < TIMEOUT, "{took:?}");
        assert_eq!(names(&second), ["mlx5_0", "mlx5_2"]);
        assert_eq!(timeouts(&second), ["mlx5_1"]);
        assert!(second.errors[0].detail.contains("has not returned"));
        assert_eq!(gate.calls.load(Ordering::SeqCst), 1);

        gate.release();
        let cleared = Instant::now() + Duration::from_secs(5);
        while reads.outstanding.lock().unwrap().contains_key("mlx5_1") {
            assert!(
                Instant::now() < cleared,
                "the returned read still marks mlx5_1"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let (third, _) = read();
        assert_eq!(names(&third), ["mlx5_0", "mlx5_1", "mlx5_2"]);
        assert!(third.errors.is_empty(), "{:?}", third.errors);
    }

    #[test]
    fn a_panicking_reader_costs_its_device_only() {
        let hook: Arc<PortHook> = Arc::new(|device: &str, _: &mut Port| {
            assert_ne!(device, "mlx5_0", "a bug in a port hook");
        });
        // Generous: printing the panic's backtrace can take longer than `TIMEOUT`.
        let generous = Duration::from_secs(30);
        let snapshot =
            DeviceReads::default().read_node(&sys(), &first(1), &Arc::default(), generous, hook);
        assert_eq!(names(&snapshot), ["mlx5_1"]);
        assert_eq!(snapshot.errors.len(), 1);
        assert_eq!(snapshot.errors[0].reason, ReadErrorReason::Internal);
        assert_eq!(snapshot.errors[0].device, "mlx5_0");
    }

    #[test]
    fn a_healthy_node_reads_as_the_plain_walk_does() {
        let all = DeviceFilter::default();
        let bounded = DeviceReads::default().read_node(
            &sys(),
            &all,
            &Arc::default(),
            Duration::from_secs(30),
            Arc::new(|_: &str, _: &mut Port| {}),
        );
        let plain = sysfs::read_node(&sys(), &all);
        assert_eq!(format!("{bounded:?}"), format!("{plain:?}"));
        assert_eq!(names(&bounded).len(), 10);
    }
}
