//! Scrape-time reads of the node, each device bounded by a deadline. The devices are shared out
//! to a few lanes, threads of a pool of long-lived readers ([`super::reader_pool`]), each reading
//! the next device nobody has claimed. When a read hangs (a firmware reset; `mlx5_core` commands
//! time out after tens of seconds, a wedged one never), the other lanes go on; should every lane
//! hang, the devices behind them get lanes of their own. The walk stops waiting at the deadline,
//! serves the other devices and reports the late one as `timeout`. The hung thread is left to
//! finish, and no new read of that device starts before it has: at most one outstanding read per
//! device, so a device that stays stuck costs one thread, not one per scrape.
//!
//! Each device's read goes through the device's kept tree ([`super::tree_cache`]): open
//! directories, listings and attribute descriptors from the previous scrape, checked before use.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::counter_filter::CounterFilter;
use super::hw_netlink::NetlinkHwCounters;
use super::reader_pool::{Deliver, ReaderPool};
use super::reason::ReadErrorReason;
use super::sysfs::{self, ClassDir, ClassListing, DeviceFilter, DeviceRead, NodeSnapshot, Port};
use super::tree_cache::{DeviceTree, FdBudget, TreeCache};

/// Per-port work done by the device's own reader (the netdev's driver statistics).
pub(crate) type PortHook = dyn Fn(&str, &mut Port) + Send + Sync;

/// Devices whose read has not returned, with when that read started.
type Outstanding = Arc<Mutex<HashMap<String, Instant>>>;

/// Reads the node's devices, each within a deadline, and remembers the reads still out.
#[derive(Debug)]
pub(crate) struct DeviceReads {
    outstanding: Outstanding,
    pool: ReaderPool,
    trees: TreeCache,
    /// Where port `hw_counters` are asked first (`node.hw_counters_source`).
    hw_netlink: Option<Arc<NetlinkHwCounters>>,
    /// Walks that stalled and gave their unclaimed devices lanes of their own.
    stalled_walks: AtomicUsize,
}

impl Default for DeviceReads {
    /// Keeps descriptors within half the process's `RLIMIT_NOFILE`.
    fn default() -> Self {
        DeviceReads::with_budget(FdBudget::from_rlimit())
    }
}

impl DeviceReads {
    /// Keeps at most `budget`'s descriptors open between scrapes.
    pub(crate) fn with_budget(budget: Arc<FdBudget>) -> DeviceReads {
        DeviceReads {
            outstanding: Outstanding::default(),
            pool: ReaderPool::default(),
            trees: TreeCache::new(budget),
            hw_netlink: None,
            stalled_walks: AtomicUsize::new(0),
        }
    }

    /// Reads port `hw_counters` over RDMA netlink where `netlink` is given, inside each
    /// device's read (its deadline bounds the request too).
    pub(crate) fn with_hw_netlink(
        mut self,
        netlink: Option<Arc<NetlinkHwCounters>>,
    ) -> DeviceReads {
        self.hw_netlink = netlink;
        self
    }

    /// The kept trees (tests).
    #[cfg(test)]
    pub fn trees(&self) -> &TreeCache {
        &self.trees
    }

    /// Reads every device the filter allows, on a few reader threads (lanes), waiting at most
    /// `timeout` in all. A device not back by then, or whose previous read is still out, is
    /// left out of the snapshot and reported with [`ReadErrorReason::Timeout`]: stale values are
    /// never served as fresh ones. The snapshot is in device name order whatever the scheduling.
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
                Arc::new(
                    class_dir
                        .with_hw_counters(hw_counters.clone())
                        .with_hw_netlink(self.hw_netlink.clone()),
                ),
                names,
            ),
        };
        if let Some(netlink) = &self.hw_netlink {
            // Devices no longer listed close their sockets.
            netlink.retain(&names);
        }
        let deadline = Instant::now() + timeout;
        // Devices no longer listed lose their kept trees (and descriptors) here.
        let trees = self.trees.retain(&names);
        let gather = Arc::new(Gather::new(names.len()));
        let mut claims = VecDeque::with_capacity(names.len());
        for ((index, name), tree) in names.iter().enumerate().zip(trees) {
            match OutstandingRead::mark(&self.outstanding, name) {
                Some(marker) => claims.push_back(Claim {
                    index,
                    tree,
                    marker,
                }),
                None => gather.deliver(index, still_out(&class_dir, name, &self.outstanding)),
            }
        }
        let work = Arc::new(WalkWork {
            class_dir: class_dir.clone(),
            port_hook,
            gather: gather.clone(),
            budget: self.trees.budget().cloned(),
            timeout,
            claims: Mutex::new(claims),
            lanes: AtomicUsize::new(0),
        });
        self.start_lanes(&work, lanes());
        // Lanes that all hang (one wedged device each) would hold up the devices behind them:
        // past `stall` every device still unclaimed gets a lane of its own, as a walk with a
        // thread per device would have given it from the start.
        let stall = (timeout / 4).min(STALL_AFTER);
        let mut stalled = false;
        let reads = gather
            .wait_until(deadline, stall, || {
                let unclaimed = work.unclaimed();
                if unclaimed > 0 {
                    stalled = true;
                    self.start_lanes(&work, unclaimed);
                }
            })
            .into_iter()
            .zip(&names)
            .map(|(read, name)| read.unwrap_or_else(|| timed_out(&class_dir, name, timeout)));
        let snapshot = NodeSnapshot::of_reads(reads);
        if stalled {
            self.stalled_walks.fetch_add(1, Ordering::Relaxed);
        }
        // A device no lane reached (none could be started for it) is not out: its mark goes,
        // so the next walk reads it again. It is `timeout` in this snapshot.
        work.fail_unclaimed("not read: no lane reached it before the deadline");
        snapshot
    }

    /// Walks so far that stalled past `STALL_AFTER` and spread their unclaimed devices.
    #[cfg(test)]
    pub(crate) fn stalled_walks(&self) -> usize {
        self.stalled_walks.load(Ordering::Relaxed)
    }

    /// Starts up to `count` lanes on the walk's unclaimed devices. When no thread starts, the
    /// devices nobody will read are settled as failed at once.
    fn start_lanes(&self, work: &Arc<WalkWork>, count: usize) {
        for _ in 0..count.min(work.unclaimed()) {
            let lane = work.clone();
            if let Err(e) = self.pool.run(move || lane.run()) {
                if work.lanes_started() == 0 {
                    work.fail_unclaimed(&format!("no reader thread started: {e}"));
                }
                return;
            }
            work.lane_started();
        }
    }
}

/// How many lanes a walk starts: one per CPU, at least two so that one hung device still
/// leaves a lane for the others. One thread per device cost a wake-up and a context switch
/// per device per scrape (about a tenth of a scrape's CPU on a 10-device node).
fn lanes() -> usize {
    static LANES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LANES.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(2, usize::from)
            .clamp(2, 8)
    })
}

/// How long a walk waits for a read to come back before it gives every unclaimed device a
/// lane of its own (bounded by a quarter of the device read timeout).
const STALL_AFTER: Duration = Duration::from_millis(50);

/// One device's read, waiting for a lane.
struct Claim {
    /// The device's place in the snapshot.
    index: usize,
    tree: Arc<Mutex<DeviceTree>>,
    /// Held until the read returns: no other read of the device starts meanwhile.
    marker: OutstandingRead,
}

/// What a walk's lanes share: the devices still to read, and where their reads go.
struct WalkWork {
    class_dir: Arc<ClassDir>,
    port_hook: Arc<PortHook>,
    gather: Arc<Gather>,
    budget: Option<Arc<FdBudget>>,
    timeout: Duration,
    claims: Mutex<VecDeque<Claim>>,
    /// Lanes started so far.
    lanes: AtomicUsize,
}

impl WalkWork {
    fn claims(&self) -> std::sync::MutexGuard<'_, VecDeque<Claim>> {
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn unclaimed(&self) -> usize {
        self.claims().len()
    }

    fn lane_started(&self) {
        self.lanes.fetch_add(1, Ordering::Relaxed);
    }

    fn lanes_started(&self) -> usize {
        self.lanes.load(Ordering::Relaxed)
    }

    fn fail_unclaimed(&self, detail: &str) {
        let claims = std::mem::take(&mut *self.claims());
        for claim in claims {
            let device = claim.marker.device.clone();
            drop(claim.marker);
            self.gather
                .deliver(claim.index, failed(&self.class_dir, &device, detail.into()));
        }
    }

    /// A lane: reads devices until none is left. Each read is delivered as soon as it is
    /// done, the lane's last one only once its thread counts as idle again.
    fn run(self: Arc<Self>) -> Deliver {
        loop {
            let Some(claim) = self.claims().pop_front() else {
                return Box::new(|| {});
            };
            let index = claim.index;
            let read = self.read(claim);
            if self.unclaimed() == 0 {
                return Box::new(move || self.gather.deliver(index, read));
            }
            self.gather.deliver(index, read);
        }
    }

    fn read(&self, claim: Claim) -> DeviceRead {
        let Claim {
            tree,
            marker,
            index: _,
        } = claim;
        let device = marker.device.as_str();
        let started = Instant::now();
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // Only this read uses the tree: the mark keeps out any other of the device.
            let mut tree = tree.lock().unwrap_or_else(|p| p.into_inner());
            match &self.budget {
                Some(budget) => {
                    self.class_dir
                        .read_device_kept(device, &mut tree, budget, &*self.port_hook)
                }
                None => self.class_dir.read_device(device, &*self.port_hook),
            }
        }))
        .unwrap_or_else(|_| {
            // What a panicking read left in the tree is not trusted.
            *tree.lock().unwrap_or_else(|p| p.into_inner()) = DeviceTree::default();
            failed(&self.class_dir, device, "its reader thread panicked".into())
        });
        let took = started.elapsed();
        if took > self.timeout {
            tracing::warn!(device, ?took, "a read that outlived its scrape returned");
        }
        // The read is over: clear the mark, so that a scrape that follows at once reads the
        // device again. The walk may have stopped listening (the deadline passed): then the
        // result is dropped.
        drop(marker);
        read
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

    fn lock(&self) -> std::sync::MutexGuard<'_, GatherState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records device `index`'s read; the last one wakes the walk.
    fn deliver(&self, index: usize, read: DeviceRead) {
        let mut state = self.lock();
        let Some(slot) = state.reads.get_mut(index).filter(|slot| slot.is_none()) else {
            return;
        };
        *slot = Some(read);
        state.missing -= 1;
        if state.missing == 0 {
            self.all_in.notify_one();
        }
    }

    /// Every read in by `deadline`, in device order; `None` for those not in. `on_stall` runs
    /// whenever `stall` passes without a read coming in (checked every `stall`: the walk is
    /// not woken by every read).
    fn wait_until(
        &self,
        deadline: Instant,
        stall: Duration,
        mut on_stall: impl FnMut(),
    ) -> Vec<Option<DeviceRead>> {
        let mut state = self.lock();
        while state.missing > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let missing = state.missing;
            let (woken, waited) = self
                .all_in
                .wait_timeout_while(state, left.min(stall), |s| s.missing > 0)
                .unwrap_or_else(|p| p.into_inner());
            state = woken;
            if waited.timed_out() && state.missing == missing {
                drop(state);
                on_stall();
                state = self.lock();
            }
        }
        std::mem::take(&mut state.reads)
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
    use crate::node::hw_netlink::fake;
    use crate::node::tree_cache::FdBudget;
    use crate::testutil::wait_for;
    use regex::Regex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Condvar;

    const TIMEOUT: Duration = Duration::from_millis(300);

    /// A port hook that blocks on the `hung` devices' ports until released, counting its calls.
    #[derive(Default)]
    struct Gate {
        released: Mutex<bool>,
        opened: Condvar,
        calls: AtomicUsize,
    }

    impl Gate {
        fn hook(self: &Arc<Self>, hung: &'static str) -> Arc<PortHook> {
            self.hook_all(vec![hung.to_string()])
        }

        fn hook_all(self: &Arc<Self>, hung: Vec<String>) -> Arc<PortHook> {
            let gate = self.clone();
            Arc::new(move |device: &str, _: &mut Port| {
                if hung.iter().any(|h| h == device) {
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

    /// Releases `gate`'s hung `mlx5_1`, waits until its read has returned (it no longer counts
    /// as outstanding), and checks that the next `read` has every device and no error.
    fn released_mlx5_1_is_read_again(
        reads: &DeviceReads,
        gate: &Gate,
        read: impl Fn() -> NodeSnapshot,
    ) {
        gate.release();
        wait_for(
            "the returned read to unmark mlx5_1",
            Duration::from_secs(5),
            || !reads.outstanding.lock().unwrap().contains_key("mlx5_1"),
        );
        let third = read();
        assert_eq!(names(&third), ["mlx5_0", "mlx5_1", "mlx5_2"]);
        assert!(third.errors.is_empty(), "{:?}", third.errors);
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

        released_mlx5_1_is_read_again(&reads, &gate, || read().0);
    }

    /// Held by the lane-count test and by the netlink tests (whose fake kernel reads files and
    /// blocks threads): beside them on two busy cores, a walk can stall past `STALL_AFTER` and
    /// start more lanes than the test allows.
    static LANE_COUNT: Mutex<()> = Mutex::new(());

    fn lane_count_alone() -> std::sync::MutexGuard<'static, ()> {
        LANE_COUNT.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A walk that did not stall reads its ten devices on at most `lanes()` threads. A stall
    /// (a busy machine can hold a lane past `STALL_AFTER`) rightly spreads the devices: such a
    /// walk is counted by the reads and not judged, and the test needs one that did not.
    #[test]
    fn a_walk_reads_its_devices_on_a_few_lanes_not_a_thread_each() {
        let _alone = lane_count_alone();
        let reads = DeviceReads::default();
        let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let seen = threads.clone();
        let hook: Arc<PortHook> = Arc::new(move |_: &str, _: &mut Port| {
            seen.lock().unwrap().insert(std::thread::current().id());
        });
        let mut judged = 0;
        for _ in 0..20 {
            threads.lock().unwrap().clear();
            let stalled = reads.stalled_walks();
            let snapshot =
                reads.read_node(&sys(), &first(9), &Arc::default(), TIMEOUT, hook.clone());
            assert_eq!(snapshot.devices.len(), 10, "{:?}", snapshot.errors);
            if reads.stalled_walks() > stalled {
                continue;
            }
            let used = threads.lock().unwrap().len();
            assert!(
                (1..=lanes()).contains(&used),
                "10 devices read on {used} threads, more than {} lanes",
                lanes()
            );
            judged += 1;
            if judged == 3 {
                return;
            }
        }
        panic!("only {judged} of 20 walks ran without a stall");
    }

    #[test]
    fn devices_behind_hung_lanes_get_lanes_of_their_own() {
        let reads = DeviceReads::default();
        let gate = Arc::new(Gate::default());
        // One hung device more than there are lanes, first in device order: every lane the
        // walk starts with is stuck before it reaches the healthy devices.
        let hung: Vec<String> = (0..=lanes()).map(|i| format!("mlx5_{i}")).collect();
        let started = Instant::now();
        let snapshot = reads.read_node(
            &sys(),
            &first(9),
            &Arc::default(),
            TIMEOUT,
            gate.hook_all(hung.clone()),
        );
        let took = started.elapsed();
        gate.release();
        assert_eq!(timeouts(&snapshot), hung, "{took:?}");
        let healthy: Vec<String> = (lanes() + 1..10).map(|i| format!("mlx5_{i}")).collect();
        assert_eq!(names(&snapshot), healthy, "{:?}", snapshot.errors);
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

    /// A fake kernel answering each port's STAT_GET with what its `hw_counters` files hold
    /// (`lifespan` aside), plus `offset`: the served values say which path they came from.
    /// Devices in `hung` block in the request until the gate opens; those in `silent` never
    /// answer.
    fn netlink_kernel(
        offset: u64,
        hung: &'static str,
        silent: &'static str,
        gate: Arc<Gate>,
    ) -> Arc<fake::Kernel> {
        let devices: Vec<String> = (0..10).map(|i| format!("mlx5_{i}")).collect();
        let names: Vec<&str> = devices.iter().map(String::as_str).collect();
        fake::Kernel::new(
            &names,
            Box::new(move |device, port, seq| {
                if device == hung {
                    gate.calls.fetch_add(1, Ordering::SeqCst);
                    let released = gate.released.lock().unwrap();
                    drop(gate.opened.wait_while(released, |r| !*r).unwrap());
                }
                if device == silent {
                    return Vec::new();
                }
                let dir = sys().join(format!(
                    "class/infiniband/{device}/ports/{port}/hw_counters"
                ));
                let mut counters = Vec::new();
                for entry in std::fs::read_dir(dir).unwrap() {
                    let entry = entry.unwrap();
                    let name = entry.file_name().into_string().unwrap();
                    let text = std::fs::read_to_string(entry.path()).unwrap();
                    if name != "lifespan" {
                        counters.push((name, text.trim().parse::<u64>().unwrap() + offset));
                    }
                }
                let index = device.trim_start_matches("mlx5_").parse().unwrap();
                let pairs: Vec<(&str, u64)> =
                    counters.iter().map(|(n, v)| (n.as_str(), *v)).collect();
                vec![
                    fake::stat_answer(seq, index, device, port, &pairs),
                    fake::error(seq, 0),
                ]
            }),
        )
    }

    fn netlink_reads(kernel: &Arc<fake::Kernel>, timeout: Duration) -> DeviceReads {
        DeviceReads::default().with_hw_netlink(Some(Arc::new(NetlinkHwCounters::new(
            kernel.opener(),
            timeout,
        ))))
    }

    fn hw(snapshot: &NodeSnapshot, device: &str, counter: &str) -> Option<u64> {
        snapshot.devices.iter().find(|d| d.name == device)?.ports[0]
            .hw_counters
            .get(counter)
    }

    const NP_CNP_SENT_MLX5_0: u64 = 5_832_481;

    #[test]
    fn netlink_values_read_as_the_files_do() {
        let _alone = lane_count_alone();
        let kernel = netlink_kernel(0, "", "", Arc::default());
        let reads = netlink_reads(&kernel, Duration::from_secs(30));
        let all = DeviceFilter::default();
        let hook = || Arc::new(|_: &str, _: &mut Port| {});
        for _ in 0..2 {
            let bounded = reads.read_node(
                &sys(),
                &all,
                &Arc::default(),
                Duration::from_secs(30),
                hook(),
            );
            let plain = sysfs::read_node(&sys(), &all);
            assert_eq!(format!("{bounded:?}"), format!("{plain:?}"));
        }
        // One device lookup each, then one request a port a read: 10 + 2 x 10.
        assert_eq!(kernel.requests.load(Ordering::SeqCst), 30);
        assert_eq!(
            kernel.opened.load(Ordering::SeqCst),
            10,
            "one socket a device, kept"
        );
        // The filter applies as it does to the files.
        let filter = Arc::new(
            crate::node::counter_filter::CounterFilter::from_patterns(Some("np_.*|lifespan"), None)
                .unwrap(),
        );
        let snapshot = reads.read_node(&sys(), &all, &filter, Duration::from_secs(30), hook());
        let port = &snapshot.devices[0].ports[0];
        let names: Vec<&str> = port.hw_counters.iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["lifespan", "np_cnp_sent", "np_ecn_marked_roce_packets"]
        );
        assert_eq!(
            hw(&snapshot, "mlx5_0", "np_cnp_sent"),
            Some(NP_CNP_SENT_MLX5_0)
        );
    }

    #[test]
    fn a_device_whose_netlink_answer_fails_is_read_from_its_files() {
        let _alone = lane_count_alone();
        // Values from netlink are off by one: they show which path served each device.
        let kernel = netlink_kernel(1, "", "mlx5_1", Arc::default());
        let reads = netlink_reads(&kernel, Duration::from_millis(50));
        let snapshot = reads.read_node(
            &sys(),
            &first(2),
            &Arc::default(),
            Duration::from_secs(30),
            Arc::new(|_: &str, _: &mut Port| {}),
        );
        assert_eq!(names(&snapshot), ["mlx5_0", "mlx5_1", "mlx5_2"]);
        assert_eq!(
            hw(&snapshot, "mlx5_0", "np_cnp_sent"),
            Some(NP_CNP_SENT_MLX5_0 + 1)
        );
        let plain = sysfs::read_node(&sys(), &first(2));
        let files = hw(&plain, "mlx5_1", "np_cnp_sent");
        assert!(files.is_some());
        assert_eq!(hw(&snapshot, "mlx5_1", "np_cnp_sent"), files);
        let reasons: Vec<(&str, &str)> = snapshot
            .errors
            .iter()
            .map(|e| (e.device.as_str(), e.reason.as_label()))
            .collect();
        assert_eq!(reasons, [("mlx5_1", "netlink_timeout")]);
    }

    /// A request that never answers (the transport ignores every deadline) holds only its
    /// device: the walk's deadline cuts it off, the other devices are served from netlink, and
    /// no second read of it starts while the first is out.
    #[test]
    fn a_netlink_request_that_never_answers_costs_only_its_device() {
        let _alone = lane_count_alone();
        let gate = Arc::new(Gate::default());
        let kernel = netlink_kernel(1, "mlx5_1", "", gate.clone());
        let reads = netlink_reads(&kernel, Duration::from_secs(3600));
        let read = || {
            let started = Instant::now();
            let snapshot = reads.read_node(
                &sys(),
                &first(2),
                &Arc::default(),
                TIMEOUT,
                Arc::new(|_: &str, _: &mut Port| {}),
            );
            (snapshot, started.elapsed())
        };
        let (first_read, took) = read();
        assert!(took >= TIMEOUT && took < TIMEOUT * 3, "{took:?}");
        assert_eq!(names(&first_read), ["mlx5_0", "mlx5_2"]);
        assert_eq!(timeouts(&first_read), ["mlx5_1"]);
        assert_eq!(first_read.errors.len(), 1, "{:?}", first_read.errors);
        assert_eq!(
            hw(&first_read, "mlx5_2", "np_cnp_sent").map(|v| v > 0),
            Some(true)
        );
        let (second, took) = read();
        assert!(took < TIMEOUT, "{took:?}");
        assert_eq!(timeouts(&second), ["mlx5_1"]);
        assert_eq!(
            gate.calls.load(Ordering::SeqCst),
            1,
            "one request of mlx5_1 out"
        );
        released_mlx5_1_is_read_again(&reads, &gate, || read().0);
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

    /// A kept tree serves a device's PCIe link for `PCIE_REFRESH` (its ~15 files are not kept
    /// open): a link that retrains shows at the next refresh, not at the next scrape.
    #[test]
    fn a_kept_tree_serves_the_pcie_link_it_read_last() {
        let tree = settled_copy();
        let sys = tree.path().join("sys");
        let reads = DeviceReads::default();
        let width = |snapshot: &NodeSnapshot| {
            let pcie = device(snapshot, "mlx5_1").unwrap().pcie.as_ref();
            pcie.and_then(|link| link.function.current_width)
        };
        assert_eq!(width(&read_as_plain(&reads, &sys)), Some(16));
        let function = sys
            .join("class/infiniband/mlx5_1/device")
            .canonicalize()
            .unwrap();
        std::fs::write(function.join("current_link_width"), "8\n").unwrap();
        // The plain walk reads it at once; the kept tree still serves what it read.
        let plain = sysfs::read_node(&sys, &DeviceFilter::default());
        assert_eq!(width(&plain), Some(8));
        assert_eq!(width(&read(&reads, &sys)), Some(16));
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
        wait_for(
            "all 40 descriptors given back",
            Duration::from_secs(5),
            || budget.left() == 40,
        );
    }
}
