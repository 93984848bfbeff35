//! The command name of a user QP's process. The kernel sends only `RES_PID` for user objects
//! ("the user is supposed to read /proc/PID/comm", `fill_res_name_pid` in
//! drivers/infiniband/core/nldev.c), so it is read here, as `rdma resource show qp` does.

use std::collections::HashMap;
use std::path::Path;

use crate::bounded_read;

/// `comm` is at most TASK_COMM_LEN (16) bytes and a newline; anything larger is not a comm.
const MAX_COMM_BYTES: u64 = 64;

/// Fills `owner` of the QPs that have a pid and no kernel owner name, from
/// `<proc_root>/<pid>/comm` (each pid read once). A process gone meanwhile leaves it empty.
pub(crate) fn fill_owners(qps: &mut [super::QueuePair], proc_root: &Path) {
    let mut names: HashMap<u32, String> = HashMap::new();
    for qp in qps.iter_mut().filter(|q| q.owner.is_empty()) {
        let Some(pid) = qp.pid else { continue };
        let name = names.entry(pid).or_insert_with(|| comm(proc_root, pid));
        qp.owner.clone_from(name);
    }
}

fn comm(proc_root: &Path, pid: u32) -> String {
    let path = proc_root.join(pid.to_string()).join("comm");
    bounded_read::read_to_string(&path, MAX_COMM_BYTES)
        .map(|s| s.trim_end_matches('\n').to_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::{QpState, QpType, QueuePair};
    use super::*;

    fn qp(pid: Option<u32>, owner: &str) -> QueuePair {
        QueuePair {
            device: "mlx5_0".into(),
            port: Some(1),
            lqpn: 7,
            qp_type: QpType::Rc,
            state: QpState::Rts,
            pid,
            owner: owner.into(),
        }
    }

    #[test]
    fn owners_come_from_comm_and_kernel_names_stay() {
        let proc = tempfile::tempdir().unwrap();
        std::fs::create_dir(proc.path().join("4242")).unwrap();
        std::fs::write(proc.path().join("4242/comm"), "ib_write_bw\n").unwrap();
        std::fs::create_dir(proc.path().join("4243")).unwrap();
        std::fs::write(proc.path().join("4243/comm"), "x".repeat(100)).unwrap();
        let mut qps = vec![
            qp(Some(4242), ""),
            qp(None, "ib_core"),
            qp(Some(4242), ""),
            qp(Some(4243), ""), // comm too large: refused, left empty
            qp(Some(9999), ""), // process gone
            qp(None, ""),       // owner outside our pid namespace
        ];
        fill_owners(&mut qps, proc.path());
        let owners: Vec<_> = qps.iter().map(|q| q.owner.as_str()).collect();
        assert_eq!(
            owners,
            ["ib_write_bw", "ib_core", "ib_write_bw", "", "", ""]
        );
    }
}
