//! Scrape-time reads of the node, each device bounded by a deadline. Reads run on a pool of
//! long-lived readers ([`super::reader_pool`]): when a read hangs (a firmware reset;
//! `mlx5_core` commands time out after tens of seconds, a wedged one never), the walk stops
//! waiting at the deadline, serves the other devices and reports the late one as `timeout`. The
//! hung thread is left to finish, and no new read of that device starts before it has: at most
//! one outstanding read per device, so a device that stays stuck costs one thread, not one per
//! scrape.
//!
//! Which thread reads a device depends on how its last read went. A read that slept in the
//! kernel (a firmware command, a driver lock) gets a thread of its own, so that such waits
//! overlap. Reads that only computed (a tmpfs, a fast driver) share one reader per core: more
//! threads would not make them faster, and each costs a wake-up and a context switch per scrape.
//! A shared reader that hangs holds up the devices queued behind it for at most [`STALL`]: the
//! walk then starts another reader for them.
//!
//! Each device's read goes through the device's kept tree ([`super::tree_cache`]): open
//! directories, listings and attribute descriptors from the previous scrape, checked before use.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::counter_filter::CounterFilter;
use super::reader_pool::{Deliver, ReaderPool};
use super::reason::ReadErrorReason;
use super::sysfs::{self, ClassDir, ClassListing, DeviceFilter, DeviceRead, NodeSnapshot, Port};
use super::tree_cache::{DeviceTree, FdBudget, TreeCache};

/// Per-port work done by the device's own reader (the netdev's driver statistics).
pub type PortHook = dyn Fn(&str, &mut Port) + Send + Sync;

/// The name of a device reader thread while it reads (`/proc/<pid>/task/*/comm`).
pub use super::reader_pool::READER_THREAD_NAME;

/// How long the shared readers may go without taking a queued device before the walk starts
/// another: a fast read takes well under a millisecond, so this means they are stuck.
pub const STALL: Duration = Duration::from_millis(10);

/// Devices whose read has not returned, with when that read started.
type Outstanding = Arc<Mutex<HashMap<String, Instant>>>;

/// Devices whose last read did not sleep in the kernel: they share readers.
type Quick = Arc<Mutex<HashSet<String>>>;

/// Reads the node's devices, each within a deadline, and remembers the reads still out.
#[derive(Debug)]
pub struct DeviceReads {
    outstanding: Outstanding,
    pool: ReaderPool,
    trees: TreeCache,
    quick: Quick,
    /// How many readers the quick devices share at first: the cores this process may use.
    shared_readers: usize,
}

impl Default for DeviceReads {
    /// Keeps descriptors within half the process's `RLIMIT_NOFILE`.
    fn default() -> Self {
        DeviceReads::with_budget(FdBudget::from_rlimit())
    }
}

impl DeviceReads {
    /// Keeps at most `budget`'s descriptors open between scrapes.
    pub fn with_budget(budget: Arc<FdBudget>) -> DeviceReads {
        // Read once: std looks at the cgroup's CPU quota, several files, on every call.
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        DeviceReads {
            outstanding: Outstanding::default(),
            pool: ReaderPool::default(),
            trees: TreeCache::new(budget),
            quick: Quick::default(),
            shared_readers: cores,
        }
    }

    /// The kept trees (tests).
    pub fn trees(&self) -> &TreeCache {
        &self.trees
    }

    /// The devices the next walk reads on shared readers (tests), in name order.
    pub fn quick_devices(&self) -> Vec<String> {
        let mut quick: Vec<String> = lock(&self.quick).iter().cloned().collect();
        quick.sort();
        quick
    }

    /// Reads every device the filter allows, waiting at most `timeout` in all. A device not back
    /// by then, or whose previous read is still out, is left out of the snapshot and reported
    /// with [`ReadErrorReason::Timeout`]: stale values are never served as fresh ones. The
    /// snapshot is in device name order whatever the scheduling.
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
        // Devices no longer listed lose their kept trees (and descriptors) here.
        let trees = self.trees.retain(&names);
        lock(&self.quick).retain(|device| names.contains(device));
        let gather = Arc::new(Gather::new(names.len()));
        let shared = Arc::new(SharedQueue::default());
        for ((index, name), tree) in names.iter().enumerate().zip(trees) {
            let Some(marker) = OutstandingRead::mark(&self.outstanding, name) else {
                gather.deliver(index, still_out(&class_dir, name, &self.outstanding));
                continue;
            };
            let job = DeviceJob {
                class_dir: class_dir.clone(),
                device: name.clone(),
                index,
                tree,
                marker,
                port_hook: port_hook.clone(),
                budget: self.trees.budget().cloned(),
                quick: self.quick.clone(),
                timeout,
            };
            if lock(&self.quick).contains(name) {
                shared.push(job);
            } else if let Err(e) = self.pool.run(job.alone(gather.clone())) {
                // Without a thread the job, and with it the mark, is dropped at once.
                gather.deliver(index, no_thread(&class_dir, name, &e));
            }
        }
        self.start_shared_readers(&shared, &gather, &class_dir);
        let mut taken = shared.taken();
        loop {
            let until = match shared.is_empty() {
                true => deadline,
                false => deadline.min(Instant::now() + STALL),
            };
            if gather.wait_until(until) || Instant::now() >= deadline {
                break;
            }
            // Every shared reader is stuck in a read: the devices still queued get another.
            if shared.taken() == taken && !shared.is_empty() {
                let _ = self.pool.run(shared.reader(gather.clone()));
            }
            taken = shared.taken();
        }
        // Devices never started are dropped, marks and all: the next walk reads them.
        drop(shared.abandon());
        let reads = gather
            .take()
            .into_iter()
            .zip(&names)
            .map(|(read, name)| read.unwrap_or_else(|| timed_out(&class_dir, name, timeout)));
        NodeSnapshot::of_reads(reads)
    }

    /// One shared reader per core, at most one per queued device. When not even one starts,
    /// the queued devices fail at once.
    fn start_shared_readers(
        &self,
        shared: &Arc<SharedQueue>,
        gather: &Arc<Gather>,
        dir: &ClassDir,
    ) {
        let wanted = self.shared_readers.min(shared.len());
        let mut started = 0;
        for _ in 0..wanted {
            match self.pool.run(shared.reader(gather.clone())) {
                Ok(()) => started += 1,
                Err(e) if started == 0 => {
                    for job in shared.abandon() {
                        gather.deliver(job.index, no_thread(dir, &job.device, &e));
                    }
                    return;
                }
                Err(_) => return,
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// One device's read, ready for any reader thread.
struct DeviceJob {
    class_dir: Arc<ClassDir>,
    device: String,
    /// The device's place in the snapshot.
    index: usize,
    tree: Arc<Mutex<DeviceTree>>,
    /// Held until the read returns, however it ends.
    marker: OutstandingRead,
    port_hook: Arc<PortHook>,
    budget: Option<Arc<FdBudget>>,
    quick: Quick,
    timeout: Duration,
}

impl DeviceJob {
    /// Reads the device, and notes whether the read slept for the next walk's plan.
    fn run(self) -> (usize, DeviceRead) {
        let DeviceJob {
            class_dir: dir,
            device,
            index,
            tree,
            marker,
            port_hook,
            budget,
            quick,
            timeout,
        } = self;
        let started = Instant::now();
        let sleeps_before = voluntary_switches();
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // Only this read uses the tree: the mark keeps out any other of the device.
            let mut tree = lock(&tree);
            match &budget {
                Some(budget) => dir.read_device_kept(&device, &mut tree, budget, &*port_hook),
                None => dir.read_device(&device, &*port_hook),
            }
        }));
        // Unknown counts as slept: such a device keeps a thread of its own.
        let slept = match (sleeps_before, voluntary_switches()) {
            (Some(before), Some(after)) => after != before,
            _ => true,
        };
        let read = read.unwrap_or_else(|_| {
            // What a panicking read left in the tree is not trusted.
            *lock(&tree) = DeviceTree::default();
            failed(&dir, &device, "its reader thread panicked".into())
        });
        match slept {
            true => lock(&quick).remove(&device),
            false => lock(&quick).insert(device.clone()),
        };
        // The read is over: clear the mark first, so that a scrape that follows at once reads
        // the device again. The walk may have stopped listening (the deadline passed): then
        // the result is dropped.
        drop(marker);
        let took = started.elapsed();
        if took > timeout {
            tracing::warn!(device, ?took, "a read that outlived its scrape returned");
        }
        (index, read)
    }

    /// The job for a thread of its own.
    fn alone(self, gather: Arc<Gather>) -> impl FnOnce() -> Deliver + Send + 'static {
        move || {
            let (index, read) = self.run();
            Box::new(move || gather.deliver(index, read))
        }
    }
}

/// The calling thread's voluntary context switches so far: a read that changed them slept.
fn voluntary_switches() -> Option<libc::c_long> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a whole `rusage` for the calling thread when it returns 0.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
    // SAFETY: filled, as above.
    (rc == 0).then(|| unsafe { usage.assume_init() }.ru_nvcsw)
}

/// The quick devices of one walk, taken in turn by its shared readers.
#[derive(Default)]
struct SharedQueue {
    state: Mutex<SharedState>,
}

#[derive(Default)]
struct SharedState {
    jobs: VecDeque<DeviceJob>,
    /// Jobs taken by a reader so far: the walk's measure of progress.
    taken: usize,
}

impl SharedQueue {
    fn push(&self, job: DeviceJob) {
        lock(&self.state).jobs.push_back(job);
    }

    fn take(&self) -> Option<DeviceJob> {
        let mut state = lock(&self.state);
        let job = state.jobs.pop_front()?;
        state.taken += 1;
        Some(job)
    }

    fn taken(&self) -> usize {
        lock(&self.state).taken
    }

    fn len(&self) -> usize {
        lock(&self.state).jobs.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The jobs no reader took; none is taken after this.
    fn abandon(&self) -> VecDeque<DeviceJob> {
        std::mem::take(&mut lock(&self.state).jobs)
    }

    /// A reader that reads queued devices until none is left. Its last read is delivered once
    /// the thread counts as idle, so that the next walk finds it available.
    fn reader(self: &Arc<Self>, gather: Arc<Gather>) -> impl FnOnce() -> Deliver + Send + 'static {
        let queue = self.clone();
        move || {
            let mut last: Option<(usize, DeviceRead)> = None;
            while let Some(job) = queue.take() {
                if let Some((index, read)) = last.take() {
                    gather.deliver(index, read);
                }
                last = Some(job.run());
            }
            Box::new(move || {
                if let Some((index, read)) = last {
                    gather.deliver(index, read);
                }
            })
        }
    }
}

/// Where a walk's device reads land. The walk wakes once, when the last read is in or at its
/// deadline, instead of once per device (a wake-up costs a context switch of the walk's thread).
struct Gather {
    state: Mutex<GatherState>,
    all_in: Condvar,
}

struct GatherState {
    /// Emptied when the walk stops waiting: a read that returns later finds no slot and is
    /// dropped.
    reads: Vec<Option<DeviceRead>>,
    missing: usize,
}

impl Gather {
    fn new(devices: usize) -> Gather {
        Gather {
            state: Mutex::new(GatherState {
                reads: (0..devices).map(|_| None).collect(),
                missing: devices,
            }),
            all_in: Condvar::new(),
        }
    }

    /// Records device `index`'s read; the last one wakes the walk.
    fn deliver(&self, index: usize, read: DeviceRead) {
        let mut state = lock(&self.state);
        let Some(slot) = state.reads.get_mut(index).filter(|slot| slot.is_none()) else {
            return;
        };
        *slot = Some(read);
        state.missing -= 1;
        if state.missing == 0 {
            self.all_in.notify_one();
        }
    }

    /// Waits until every read is in (true) or `until` passes (false).
    fn wait_until(&self, until: Instant) -> bool {
        let mut state = lock(&self.state);
        while state.missing > 0 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .all_in
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Every read in so far, in device order; `None` for those not in.
    fn take(&self) -> Vec<Option<DeviceRead>> {
        std::mem::take(&mut lock(&self.state).reads)
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

fn no_thread(class_dir: &ClassDir, device: &str, e: &std::io::Error) -> DeviceRead {
    failed(class_dir, device, format!("no reader thread started: {e}"))
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
    use crate::node::tree_cache::FdBudget;
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

    /// A port hook that blocks device `hung`'s reads while the gate is shut.
    #[derive(Default)]
    struct Switchable {
        shut: Mutex<bool>,
        opened: Condvar,
    }

    impl Switchable {
        fn hook(self: &Arc<Self>, hung: &'static str) -> Arc<PortHook> {
            let gate = self.clone();
            Arc::new(move |device: &str, _: &mut Port| {
                if device == hung {
                    let shut = gate.shut.lock().unwrap();
                    drop(gate.opened.wait_while(shut, |s| *s).unwrap());
                }
            })
        }

        fn set(&self, shut: bool) {
            *self.shut.lock().unwrap() = shut;
            self.opened.notify_all();
        }
    }

    /// Devices mlx5_0 to mlx5_2 on one shared reader, with mlx5_1's reads gated.
    fn one_shared_reader() -> (DeviceReads, Arc<Switchable>) {
        let reads = DeviceReads {
            shared_readers: 1,
            ..DeviceReads::default()
        };
        (reads, Arc::new(Switchable::default()))
    }

    fn wait_until_returned(reads: &DeviceReads, device: &str) {
        let until = Instant::now() + Duration::from_secs(5);
        while reads.outstanding.lock().unwrap().contains_key(device) {
            assert!(Instant::now() < until, "{device}'s read has not returned");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Reads until no read of mlx5_0 to mlx5_2 sleeps. A first read may (the threads of its
    /// own contend for locks); on one shared reader nothing contends.
    fn all_quick(reads: &DeviceReads, read: impl Fn() -> NodeSnapshot) {
        for _ in 0..20 {
            if reads.quick_devices() == ["mlx5_0", "mlx5_1", "mlx5_2"] {
                return;
            }
            assert_eq!(names(&read()).len(), 3);
        }
        panic!("still sleeping: {:?} quick", reads.quick_devices());
    }

    #[test]
    fn quick_devices_share_a_reader_and_one_that_hangs_there_holds_up_the_rest_one_stall() {
        let (reads, gate) = one_shared_reader();
        let hook = gate.hook("mlx5_1");
        let read =
            |timeout| reads.read_node(&sys(), &first(2), &Arc::default(), timeout, hook.clone());
        // A first read of each device is on a thread of its own.
        assert_eq!(names(&read(TIMEOUT)), ["mlx5_0", "mlx5_1", "mlx5_2"]);
        all_quick(&reads, || read(TIMEOUT));

        // Now all three queue for one reader, and mlx5_1 hangs in it: mlx5_2, behind it, is
        // read by the reader the walk starts when the first stops taking devices.
        gate.set(true);
        let started = Instant::now();
        let second = read(TIMEOUT);
        assert!(started.elapsed() < TIMEOUT * 3, "{:?}", started.elapsed());
        assert_eq!(names(&second), ["mlx5_0", "mlx5_2"]);
        assert_eq!(timeouts(&second), ["mlx5_1"]);

        // The hung read slept: once back, mlx5_1 gets a thread of its own, until a read of
        // it runs through without sleeping.
        gate.set(false);
        wait_until_returned(&reads, "mlx5_1");
        assert_eq!(reads.quick_devices(), ["mlx5_0", "mlx5_2"]);
        assert_eq!(names(&read(TIMEOUT)).len(), 3);
        assert_eq!(reads.quick_devices(), ["mlx5_0", "mlx5_1", "mlx5_2"]);
    }

    #[test]
    fn a_device_still_queued_at_the_deadline_is_read_by_the_next_walk() {
        let (reads, gate) = one_shared_reader();
        let hook = gate.hook("mlx5_1");
        let read =
            |timeout| reads.read_node(&sys(), &first(2), &Arc::default(), timeout, hook.clone());
        all_quick(&reads, || read(TIMEOUT));
        gate.set(true);
        // A deadline shorter than a stall: mlx5_2 never leaves the queue.
        let short = read(STALL / 2);
        assert!(!names(&short).contains(&"mlx5_2"), "{:?}", names(&short));
        assert!(timeouts(&short).contains(&"mlx5_2"));
        // It is not left marked as out: the next walk reads it, while mlx5_1 still hangs.
        let next = read(Duration::from_secs(30));
        assert_eq!(names(&next), ["mlx5_0", "mlx5_2"]);
        assert!(
            next.errors[0].detail.contains("has not returned"),
            "{:?}",
            next.errors
        );
        gate.set(false);
        wait_until_returned(&reads, "mlx5_1");
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

    /// A copy of the bundled node in a temporary directory, old enough for its directories to be
    /// kept between reads.
    fn settled_copy() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(sys())
            .arg(dir.path().join("sys"))
            .status()
            .unwrap();
        assert!(status.success());
        settle();
        dir
    }

    fn settle() {
        std::thread::sleep(crate::node::sys_dir::SETTLE + Duration::from_millis(100));
    }

    fn read(reads: &DeviceReads, sys: &Path) -> NodeSnapshot {
        reads.read_node(
            sys,
            &DeviceFilter::default(),
            &Arc::default(),
            Duration::from_secs(30),
            Arc::new(|_: &str, _: &mut Port| {}),
        )
    }

    /// Reads through the kept trees, checks the result against a plain walk of the same tree.
    fn read_as_plain(reads: &DeviceReads, sys: &Path) -> NodeSnapshot {
        let kept = read(reads, sys);
        let plain = sysfs::read_node(sys, &DeviceFilter::default());
        assert_eq!(format!("{kept:?}"), format!("{plain:?}"));
        kept
    }

    fn device<'a>(snapshot: &'a NodeSnapshot, name: &str) -> Option<&'a sysfs::Device> {
        snapshot.devices.iter().find(|d| d.name == name)
    }

    #[test]
    fn kept_trees_read_as_the_plain_walk_does_and_are_used() {
        let tree = settled_copy();
        let sys = tree.path().join("sys");
        let reads = DeviceReads::default();
        for _ in 0..3 {
            assert_eq!(names(&read_as_plain(&reads, &sys)).len(), 10);
        }
        assert_eq!(reads.trees().reads(), (20, 10), "(kept, fresh)");
        // An in-place write (what a counter does) is seen through the kept descriptor.
        let counter = sys.join("class/infiniband/mlx5_1/ports/1/hw_counters/np_cnp_sent");
        std::fs::write(&counter, "987654321\n").unwrap();
        let snapshot = read_as_plain(&reads, &sys);
        let port = &device(&snapshot, "mlx5_1").unwrap().ports[0];
        assert!(port.hw_counters.get("np_cnp_sent") == Some(987_654_321));
        assert_eq!(reads.trees().reads(), (30, 10));
    }

    #[test]
    fn a_device_recreated_under_its_name_is_read_afresh() {
        let tree = settled_copy();
        let sys = tree.path().join("sys");
        let reads = DeviceReads::default();
        read_as_plain(&reads, &sys);
        read_as_plain(&reads, &sys);
        // Gone, and back as another device object: other GUID, other counters.
        let link = sys.join("class/infiniband/mlx5_2");
        let target = link
            .parent()
            .unwrap()
            .join(std::fs::read_link(&link).unwrap());
        let parked = tree.path().join("parked");
        std::fs::rename(&target, &parked).unwrap();
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(&parked)
            .arg(&target)
            .status()
            .unwrap();
        assert!(copied.success());
        std::fs::write(target.join("node_guid"), "dead:beef:0000:0001\n").unwrap();
        std::fs::write(target.join("ports/1/counters/port_xmit_packets"), "42\n").unwrap();
        std::fs::remove_file(target.join("ports/1/hw_counters/out_of_sequence")).unwrap();
        for _ in 0..2 {
            let snapshot = read_as_plain(&reads, &sys);
            let recreated = device(&snapshot, "mlx5_2").unwrap();
            assert_eq!(recreated.node_guid.as_deref(), Some("dead:beef:0000:0001"));
            let port = &recreated.ports[0];
            assert!(port.counters.get("port_xmit_packets") == Some(42));
            assert!(!port.hw_counters.iter().any(|(n, _)| n == "out_of_sequence"));
            assert!(snapshot.errors.is_empty(), "{:?}", snapshot.errors);
        }
    }

    #[test]
    fn removed_counters_and_devices_are_not_served_and_added_ones_are() {
        let tree = settled_copy();
        let sys = tree.path().join("sys");
        let class = sys.join("class/infiniband");
        let reads = DeviceReads::default();
        read_as_plain(&reads, &sys);
        read_as_plain(&reads, &sys);
        // A counter file and a whole device go; a device (a second name for mlx5_4's
        // directory) comes.
        let hw = class.join("mlx5_0/ports/1/hw_counters");
        std::fs::remove_file(hw.join("rx_write_requests")).unwrap();
        std::fs::remove_file(class.join("mlx5_3")).unwrap();
        let target = std::fs::read_link(class.join("mlx5_4")).unwrap();
        std::os::unix::fs::symlink(&target, class.join("mlx5_44")).unwrap();
        let snapshot = read_as_plain(&reads, &sys);
        let port = &device(&snapshot, "mlx5_0").unwrap().ports[0];
        assert!(!port
            .hw_counters
            .iter()
            .any(|(n, _)| n == "rx_write_requests"));
        assert!(device(&snapshot, "mlx5_3").is_none());
        assert!(device(&snapshot, "mlx5_44").is_some());
        assert!(snapshot.errors.is_empty(), "{:?}", snapshot.errors);
        assert!(!reads.trees().devices().contains(&"mlx5_3".to_string()));
        // Settled again: the changed directories are kept once more.
        settle();
        read_as_plain(&reads, &sys);
        let (kept, _) = reads.trees().reads();
        read_as_plain(&reads, &sys);
        assert_eq!(reads.trees().reads().0, kept + 10);
    }

    #[test]
    fn an_optional_directory_found_absent_is_read_once_it_appears() {
        let tree = settled_copy();
        let sys = tree.path().join("sys");
        let reads = DeviceReads::default();
        let ext = |snapshot: &NodeSnapshot| {
            device(snapshot, "mlx5_1").unwrap().ports[0]
                .counters_ext
                .get("port_rcv_data_64")
        };
        for _ in 0..3 {
            assert_eq!(ext(&read_as_plain(&reads, &sys)), None);
        }
        // A pre-4.5 kernel's directory, added under the kept port directory.
        let port = sys.join("class/infiniband/mlx5_1/ports/1");
        std::fs::create_dir(port.join("counters_ext")).unwrap();
        std::fs::write(port.join("counters_ext/port_rcv_data_64"), "123\n").unwrap();
        assert_eq!(ext(&read_as_plain(&reads, &sys)), Some(123));
        settle();
        assert_eq!(ext(&read_as_plain(&reads, &sys)), Some(123));
    }

    #[test]
    fn a_small_descriptor_budget_is_respected_and_given_back() {
        let tree = settled_copy();
        let sys = tree.path().join("sys");
        let budget = FdBudget::new(40);
        let reads = DeviceReads::with_budget(budget.clone());
        for _ in 0..3 {
            assert_eq!(names(&read_as_plain(&reads, &sys)).len(), 10);
        }
        assert_eq!(budget.left(), 0, "every descriptor of the budget is in use");
        drop(reads);
        // The readers drop their jobs, and the trees with them, right after answering.
        let until = Instant::now() + Duration::from_secs(5);
        while budget.left() != 40 {
            assert!(Instant::now() < until, "{} of 40 given back", budget.left());
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
