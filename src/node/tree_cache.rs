//! What the scrape-time walk keeps between scrapes, per device: the device's directory tree
//! with its listings, open descriptors and static attributes (see [`super::sys_dir`]).
//!
//! Invalidation, from the cheapest check to the last resort:
//! - the `class/infiniband` listing is read at every scrape: a device no longer listed (or no
//!   longer allowed by the device filter) loses its entry and its descriptors at once;
//! - a listed device's kept tree is used only while `class/infiniband/<name>` still resolves to
//!   the same directory inode with the same change times (a device removed and re-created under
//!   the same name is a new kernfs node with a new inode), and every kept directory below it is
//!   checked the same way with `fstat` before use;
//! - a read through a kept descriptor that fails with ENODEV or ENOENT (the kernel removed the
//!   attribute) marks the tree stale: the device is read again from scratch in the same scrape,
//!   and that read's tree replaces the old one.
//!
//! Kept descriptors are charged to a budget of at most half the process's `RLIMIT_NOFILE` soft
//! limit (and at most [`MAX_KEPT_FDS`]); past it, files are opened, read and closed as in a
//! plain walk.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::pcie::PcieLink;
use super::sys_dir::SysDir;

/// The most descriptors kept, whatever the limit: a 10-NIC node keeps about 750.
pub(crate) const MAX_KEPT_FDS: usize = 8192;

/// The soft `RLIMIT_NOFILE` whose half is [`MAX_KEPT_FDS`]: what `serve` raises its own to
/// ([`crate::fd_limit`]).
pub const WANTED_SOFT_NOFILE: u64 = 2 * MAX_KEPT_FDS as u64;

/// How many descriptors the kept trees may hold.
#[derive(Debug)]
pub struct FdBudget {
    left: AtomicUsize,
    /// The whole budget, for the warning when it runs out.
    size: usize,
    /// Running out is logged once: it is a setting to change, not an event of each scrape.
    ran_out: AtomicBool,
}

impl FdBudget {
    pub fn new(limit: usize) -> Arc<FdBudget> {
        Arc::new(FdBudget {
            left: AtomicUsize::new(limit),
            size: limit,
            ran_out: AtomicBool::new(false),
        })
    }

    /// Half the soft `RLIMIT_NOFILE` (sockets, switch sessions and files read once need the
    /// rest), capped at [`MAX_KEPT_FDS`].
    pub(crate) fn from_rlimit() -> Arc<FdBudget> {
        let half = usize::try_from(soft_nofile_limit() / 2).unwrap_or(usize::MAX);
        FdBudget::new(half.min(MAX_KEPT_FDS))
    }

    /// One descriptor's charge, if the budget has room.
    pub fn charge(self: &Arc<Self>) -> Option<Charge> {
        let charged = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .ok()
            .map(|_| Charge(self.clone()));
        if charged.is_none() && !self.ran_out.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                kept = self.size,
                "the kept sysfs trees hold all the descriptors they may (half the soft \
                 RLIMIT_NOFILE, at most {MAX_KEPT_FDS}): the attributes past them are opened, \
                 read and closed at every scrape (raise LimitNOFILE= or the container's nofile \
                 limit)"
            );
        }
        charged
    }

    /// True once a charge was refused.
    #[cfg(test)]
    pub(crate) fn ran_out(&self) -> bool {
        self.ran_out.load(Ordering::Relaxed)
    }

    /// Descriptors still available.
    pub fn left(&self) -> usize {
        self.left.load(Ordering::Relaxed)
    }
}

/// The soft `RLIMIT_NOFILE` (`u64::MAX` when unlimited or unknown).
fn soft_nofile_limit() -> u64 {
    crate::fd_limit::current().map_or(u64::MAX, |(soft, _)| soft)
}

/// One kept descriptor's share of the budget, given back when dropped (with the descriptor).
#[derive(Debug)]
pub struct Charge(Arc<FdBudget>);

impl Drop for Charge {
    fn drop(&mut self) {
        self.0.left.fetch_add(1, Ordering::Relaxed);
    }
}

/// What every directory of one device's kept tree shares.
#[derive(Debug)]
pub(crate) struct TreeShared {
    pub budget: Arc<FdBudget>,
    stale: AtomicBool,
    /// The driver found for each netdev name seen on the device's ports.
    netdev_drivers: Mutex<HashMap<String, Option<String>>>,
    /// The device's last PCIe link reading without errors, and when it was made.
    pcie: Mutex<Option<(Instant, Option<PcieLink>)>>,
}

impl TreeShared {
    pub fn new(budget: Arc<FdBudget>) -> Arc<TreeShared> {
        Arc::new(TreeShared {
            budget,
            stale: AtomicBool::new(false),
            netdev_drivers: Mutex::default(),
            pcie: Mutex::default(),
        })
    }

    /// The PCIe link reading remembered less than `max_age` ago.
    pub(crate) fn recent_pcie(&self, max_age: Duration) -> Option<Option<PcieLink>> {
        let pcie = self.pcie.lock().unwrap_or_else(|p| p.into_inner());
        pcie.as_ref()
            .filter(|(at, _)| at.elapsed() < max_age)
            .map(|(_, link)| link.clone())
    }

    pub(crate) fn remember_pcie(&self, link: Option<PcieLink>) {
        let mut pcie = self.pcie.lock().unwrap_or_else(|p| p.into_inner());
        *pcie = Some((Instant::now(), link));
    }

    /// The driver remembered for `netdev`: `None` when not looked up yet.
    pub fn netdev_driver(&self, netdev: &str) -> Option<Option<String>> {
        let drivers = self
            .netdev_drivers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        drivers.get(netdev).cloned()
    }

    pub(crate) fn remember_netdev_driver(&self, netdev: &str, driver: Option<String>) {
        let mut drivers = self
            .netdev_drivers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        drivers.insert(netdev.to_string(), driver);
    }

    pub(crate) fn mark_stale(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    pub(crate) fn is_stale(&self) -> bool {
        self.stale.load(Ordering::Relaxed)
    }
}

/// One device's kept tree: the root is the device's directory. Empty until the first read and
/// after an invalidation.
#[derive(Default)]
pub(crate) struct DeviceTree {
    pub root: Option<SysDir>,
    /// Reads served through a kept tree, and reads that (re)built it.
    pub kept_reads: u64,
    pub fresh_reads: u64,
}

/// The kept trees of every listed device, by name.
#[derive(Default)]
pub(crate) struct TreeCache {
    budget: Option<Arc<FdBudget>>,
    devices: Mutex<HashMap<String, Arc<Mutex<DeviceTree>>>>,
}

impl std::fmt::Debug for TreeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let devices = self.devices.lock().map(|d| d.len()).unwrap_or(0);
        f.debug_struct("TreeCache")
            .field("devices", &devices)
            .field("fds_left", &self.budget.as_ref().map(|b| b.left()))
            .finish()
    }
}

impl TreeCache {
    pub fn new(budget: Arc<FdBudget>) -> TreeCache {
        TreeCache {
            budget: Some(budget),
            devices: Mutex::default(),
        }
    }

    /// The budget kept trees are charged to (`None`: nothing is kept).
    pub fn budget(&self) -> Option<&Arc<FdBudget>> {
        self.budget.as_ref()
    }

    /// Keeps the entries of the devices in `listed` (creating those missing) and drops the
    /// others with their descriptors. Returns the entries in `listed`'s order.
    pub fn retain(&self, listed: &[String]) -> Vec<Arc<Mutex<DeviceTree>>> {
        let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        devices.retain(|name, _| listed.contains(name));
        listed
            .iter()
            .map(|name| devices.entry(name.clone()).or_default().clone())
            .collect()
    }

    /// Reads through kept trees and reads from scratch, summed over the devices with an entry.
    #[cfg(test)]
    pub fn reads(&self) -> (u64, u64) {
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        devices.values().fold((0, 0), |(kept, fresh), tree| {
            let tree = tree.lock().unwrap_or_else(|p| p.into_inner());
            (kept + tree.kept_reads, fresh + tree.fresh_reads)
        })
    }

    /// Names of the devices with an entry (tests).
    #[cfg(test)]
    pub fn devices(&self) -> Vec<String> {
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<String> = devices.keys().cloned().collect();
        names.sort_unstable();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_given_back_when_a_charge_drops() {
        let budget = FdBudget::new(2);
        let a = budget.charge().unwrap();
        let _b = budget.charge().unwrap();
        assert!(!budget.ran_out());
        assert!(budget.charge().is_none(), "over budget");
        assert!(
            budget.ran_out(),
            "a refused charge is remembered (and logged once)"
        );
        drop(a);
        assert_eq!(budget.left(), 1);
        assert!(budget.charge().is_some());
    }

    #[test]
    fn the_rlimit_budget_is_at_most_half_the_soft_limit() {
        let soft = soft_nofile_limit();
        let left = FdBudget::from_rlimit().left() as u64;
        assert!(
            left <= soft / 2 && left <= MAX_KEPT_FDS as u64,
            "{left} of {soft}"
        );
    }

    #[test]
    fn entries_of_devices_no_longer_listed_are_dropped() {
        let cache = TreeCache::new(FdBudget::new(10));
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(cache.retain(&names(&["a", "b"])).len(), 2);
        let kept = cache.retain(&names(&["b", "c"]));
        assert_eq!(kept.len(), 2);
        assert_eq!(cache.devices(), ["b", "c"]);
    }
}
