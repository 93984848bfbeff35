//! The simulated NIC's congestion-control settings, written as MLNX_OFED's mlx5 lays them out
//! below its netdev: `ecn/roce_rp/` and `ecn/roce_np/`, each with `enable/0`..`enable/7` and the
//! DCQCN parameter files beside it (sources in `src/node/ecn_settings.rs`). Values are NVIDIA's
//! documented defaults; which priorities are enabled is the scenario's business.

use std::io;
use std::path::Path;

/// Which priorities have DCQCN's reaction and notification points on, a flag per priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EcnSpec {
    pub reaction: [bool; 8],
    pub notification: [bool; 8],
}

impl EcnSpec {
    /// Both points on for `priority` (the lossless RoCE priority), off elsewhere: how a RoCE
    /// fabric is usually set up with `mlnx_qos` and the `ecn/` files.
    pub fn on_priority(priority: usize) -> EcnSpec {
        let mut spec = EcnSpec::default();
        if let (Some(rp), Some(np)) = (
            spec.reaction.get_mut(priority),
            spec.notification.get_mut(priority),
        ) {
            *rp = true;
            *np = true;
        }
        spec
    }
}

/// NVIDIA's documented defaults of the reaction point parameters (DCQCN parameters page).
const REACTION_PARAMETERS: [(&str, u64); 16] = [
    ("clamp_tgt_rate", 0),
    ("clamp_tgt_rate_after_time_inc", 1),
    ("rpg_time_reset", 300),
    ("rpg_byte_reset", 32767),
    ("rpg_threshold", 1),
    ("rpg_max_rate", 0),
    ("rpg_ai_rate", 5),
    ("rpg_hai_rate", 50),
    ("rpg_gd", 11),
    ("rpg_min_dec_fac", 50),
    ("rpg_min_rate", 1),
    ("rate_to_set_on_first_cnp", 0),
    ("dce_tcp_g", 1019),
    ("dce_tcp_rtt", 1),
    ("rate_reduce_monitor_period", 4),
    ("initial_alpha_value", 1023),
];

/// The notification point's, with CNPs on DSCP 48, priority 6.
const NOTIFICATION_PARAMETERS: [(&str, u64); 3] = [
    ("min_time_between_cnps", 4),
    ("cnp_dscp", 48),
    ("cnp_802p_prio", 6),
];

/// Writes `<netdev_dir>/ecn/` for `spec` through `write(path, text)` (the tree writer's
/// replace-if-changed), creating the directories.
pub fn write_ecn(
    netdev_dir: &Path,
    spec: &EcnSpec,
    write: &dyn Fn(&Path, &str) -> io::Result<()>,
) -> io::Result<()> {
    let ecn = netdev_dir.join("ecn");
    for (dir, enabled, parameters) in [
        ("roce_rp", &spec.reaction, &REACTION_PARAMETERS[..]),
        ("roce_np", &spec.notification, &NOTIFICATION_PARAMETERS[..]),
    ] {
        let point = ecn.join(dir);
        std::fs::create_dir_all(point.join("enable"))?;
        for (priority, on) in enabled.iter().enumerate() {
            let text = if *on { "1\n" } else { "0\n" };
            write(&point.join("enable").join(priority.to_string()), text)?;
        }
        for (name, value) in parameters {
            write(&point.join(name), &format!("{value}\n"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::ecn_settings::{self, Point, Request, PARAMETERS};

    /// What the simulator writes, the node's reader reads back: every parameter file it knows,
    /// and the enables as set.
    #[test]
    fn the_node_reader_reads_what_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let netdev = dir.path().join("ens1f0np0");
        let mut spec = EcnSpec::on_priority(3);
        spec.reaction[3] = false;
        write_ecn(&netdev, &spec, &|path, text| std::fs::write(path, text)).unwrap();
        let request = Request {
            priorities: 0xff,
            parameters: true,
        };
        let read = ecn_settings::read(dir.path(), "ens1f0np0", request);
        assert_eq!(read.errors, vec![]);
        let settings = read.settings.unwrap();
        assert_eq!(settings.enabled(Point::Reaction, 3), Some(false));
        assert_eq!(settings.enabled(Point::Notification, 3), Some(true));
        assert_eq!(settings.enabled(Point::Notification, 0), Some(false));
        assert_eq!(settings.parameters.len(), PARAMETERS.len());
        assert_eq!(
            settings.parameter(Point::Notification, "cnp_dscp"),
            Some(48)
        );
    }

    /// A scenario that turns a point off mid-run reaches the tree through `update_tree`.
    #[test]
    fn an_updated_tree_follows_a_changed_setting() {
        use crate::sim::sysfs_tree::{connectx7_node, update_tree, write_tree};
        let dir = tempfile::tempdir().unwrap();
        let mut before = connectx7_node(1, 7);
        before[0].ecn = Some(EcnSpec::on_priority(3));
        write_tree(dir.path(), &before).unwrap();
        let netdev = before[0].netdev.clone().unwrap();
        let enable = dir
            .path()
            .join("class/net")
            .join(&netdev)
            .join("ecn/roce_rp/enable/3");
        assert_eq!(std::fs::read_to_string(&enable).unwrap(), "1\n");
        let mut after = before.clone();
        if let Some(ecn) = &mut after[0].ecn {
            ecn.reaction[3] = false;
        }
        update_tree(dir.path(), &before, &after).unwrap();
        assert_eq!(std::fs::read_to_string(&enable).unwrap(), "0\n");
    }

    #[test]
    fn on_priority_sets_both_points_of_that_priority_only() {
        let spec = EcnSpec::on_priority(3);
        for p in 0..8 {
            assert_eq!(spec.reaction[p], p == 3);
            assert_eq!(spec.notification[p], p == 3);
        }
        assert_eq!(EcnSpec::on_priority(9), EcnSpec::default());
    }
}
