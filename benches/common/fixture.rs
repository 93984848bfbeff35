//! The fixture node the benches serve: an 8-GPU node's sysfs tree and `ethtool -S` files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use rdma_fabric_exporter::node::sys_dir::SETTLE;
use rdma_fabric_exporter::sim::sysfs_tree::{connectx7_node, write_ethtool_files, write_tree};

/// Debian's node_exporter (1.5.0 in bookworm).
pub const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";

/// A fixture node on tmpfs (or in a temporary directory), removed on drop.
pub struct Fixture {
    dir: tempfile::TempDir,
    /// Where it lives, for the report.
    pub medium: &'static str,
}

impl Fixture {
    /// `devices` ConnectX-7 ports from the crate's own generator, under a `prefix`ed directory.
    pub fn create(prefix: &str, devices: usize, seed: u64) -> anyhow::Result<Fixture> {
        let builder = {
            let mut b = tempfile::Builder::new();
            b.prefix(prefix);
            b
        };
        let (dir, medium) = match builder.tempdir_in("/dev/shm") {
            Ok(dir) => (dir, "tmpfs /dev/shm"),
            Err(_) => (
                builder
                    .tempdir()
                    .context("creating the fixture directory")?,
                "temporary directory: /dev/shm unavailable, file system caches matter",
            ),
        };
        let fixture = Fixture { dir, medium };
        let nics = connectx7_node(devices, seed);
        write_tree(&fixture.sys(), &nics).context("writing the sysfs tree")?;
        write_ethtool_files(&fixture.ethtool(), &nics).context("writing ethtool files")?;
        // The same node without hw_counters, for an equal-work run against node_exporter 1.5.
        let counters_only: Vec<_> = nics
            .into_iter()
            .map(|mut nic| {
                nic.hw_counters.clear();
                nic.device_hw_counters.clear();
                nic
            })
            .collect();
        write_tree(&fixture.sys_counters_only(), &counters_only)
            .context("writing the counters-only tree")?;
        for sys in [fixture.sys(), fixture.sys_counters_only()] {
            fill_gid_tables(&sys).context("filling the GID tables")?;
        }
        // A node's sysfs directories date from boot. The exporter trusts a directory's kept
        // listing only once its change times are SETTLE old; measured right after writing, a
        // bench would measure a node whose every directory was just re-created.
        std::thread::sleep(SETTLE + Duration::from_millis(100));
        Ok(fixture)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn sys(&self) -> PathBuf {
        self.root().join("sys")
    }

    pub fn ethtool(&self) -> PathBuf {
        self.root().join("ethtool")
    }

    /// Our agent's flags for the whole node: sysfs and the `ethtool -S` files.
    pub fn agent_args(&self) -> Vec<std::ffi::OsString> {
        vec![
            "--path.sysfs".into(),
            self.sys().into(),
            "--collector.ethtool.source".into(),
            "files".into(),
            "--collector.ethtool.stats-dir".into(),
            self.ethtool().into(),
        ]
    }

    pub fn sys_counters_only(&self) -> PathBuf {
        self.root().join("sys-counters-only")
    }
}

/// The GID table slots each port lists: sysfs lists every slot of the hardware's table, used or
/// not (1 024 on rxe, `tests/fixtures/real-kernel`), where the simulated tree writes only the
/// used ones. node_exporter does not read them; the exporter looks a RoCE port's netdev up there.
const GID_TABLE_SLOTS: usize = 128;

/// Lists [`GID_TABLE_SLOTS`] slots in every port's `gid_attrs/ndevs` and `gid_attrs/types`:
/// each unused one a directory, which opens and then fails to read, as an unused slot (and
/// every slot of an InfiniBand port) does on sysfs.
fn fill_gid_tables(sys: &Path) -> anyhow::Result<()> {
    for device in std::fs::read_dir(sys.join("class/infiniband"))? {
        for port in std::fs::read_dir(device?.path().join("ports"))? {
            let gid_attrs = port?.path().join("gid_attrs");
            for table in ["ndevs", "types"] {
                let table = gid_attrs.join(table);
                for slot in 0..GID_TABLE_SLOTS {
                    let slot = table.join(slot.to_string());
                    if !slot.exists() {
                        std::fs::create_dir(&slot)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// node_exporter at $NODE_EXPORTER or Debian's path, if installed.
pub fn node_exporter_binary() -> Option<PathBuf> {
    let path = std::env::var_os("NODE_EXPORTER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(NODE_EXPORTER));
    path.is_file().then_some(path)
}
