//! RDMA resource use per device (`rdma resource show -j`, iproute2) against the RDMA cgroup's
//! `rdma.max` when the container has one: a pod at its hca_object limit cannot create QPs.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::report::{Finding, Severity};

/// A wedged tool (netlink hang) must not hang the report.
const TOOL_TIMEOUT: Duration = Duration::from_secs(5);

/// Share of a cgroup limit from which the use is reported.
const NEAR_LIMIT: f64 = 0.9;

/// Resource types the RDMA cgroup charges as `hca_object`.
const OBJECT_TYPES: [&str; 5] = ["pd", "cq", "qp", "mr", "srq"];

/// Counts per device and resource type (`qp`, `cq`, `mr`, ...).
pub(crate) type Usage = BTreeMap<String, BTreeMap<String, u64>>;

pub fn check(tool: &Path, sysfs: &Path) -> Vec<Finding> {
    let usage = match run_tool(tool) {
        Ok(usage) => usage,
        Err(reason) => {
            return vec![Finding::host(
                "resources",
                Severity::Info,
                format!("QP/resource use not available: {reason}"),
            )]
        }
    };
    let limits = cgroup_object_limits(sysfs);
    usage
        .iter()
        .map(|(device, counts)| {
            let listing: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let objects: u64 = OBJECT_TYPES.iter().filter_map(|t| counts.get(*t)).sum();
            match limits.get(device) {
                Some(&limit) if objects as f64 >= limit as f64 * NEAR_LIMIT => Finding::device(
                    "resources",
                    device,
                    Severity::Warn,
                    format!(
                        "{}; {objects} objects of the RDMA cgroup's hca_object limit {limit}",
                        listing.join(", ")
                    ),
                )
                .with_fix("raise rdma.max for this cgroup, or look for a QP/MR leak"),
                Some(&limit) => Finding::device(
                    "resources",
                    device,
                    Severity::Ok,
                    format!("{}; cgroup hca_object limit {limit}", listing.join(", ")),
                ),
                None => Finding::device("resources", device, Severity::Ok, listing.join(", ")),
            }
        })
        .collect()
}

fn run_tool(tool: &Path) -> Result<Usage, String> {
    let mut child = Command::new(tool)
        .args(["-j", "resource", "show"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", tool.display()))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < TOOL_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} did not answer within 5 s", tool.display()));
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    // The output is small (one object per device); it fits the pipe while we wait.
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    if !status.success() {
        let first = stderr.lines().next().unwrap_or("no message");
        return Err(format!("{} failed: {first}", tool.display()));
    }
    parse_usage(&stdout)
}

/// `[{"ifindex":0,"ifname":"mlx5_0","pd":4,"cq":5,"qp":3,...}]`.
fn parse_usage(json: &str) -> Result<Usage, String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("unexpected output: {e}"))?;
    let devices = value
        .as_array()
        .ok_or("unexpected output: not a JSON array")?;
    let mut usage = Usage::new();
    for device in devices {
        let Some(object) = device.as_object() else {
            continue;
        };
        let Some(name) = object.get("ifname").and_then(|n| n.as_str()) else {
            continue;
        };
        let counts = object
            .iter()
            .filter(|(key, _)| *key != "ifindex")
            .filter_map(|(key, v)| Some((key.clone(), v.as_u64()?)))
            .collect();
        usage.insert(name.to_string(), counts);
    }
    Ok(usage)
}

/// `hca_object` limits per device from the cgroup v2 `rdma.max` of this namespace's root.
fn cgroup_object_limits(sysfs: &Path) -> BTreeMap<String, u64> {
    let Ok(text) = std::fs::read_to_string(sysfs.join("fs/cgroup/rdma.max")) else {
        return BTreeMap::new();
    };
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let device = words.next()?;
            let limit = words
                .find_map(|w| w.strip_prefix("hca_object="))?
                .parse()
                .ok()?;
            Some((device.to_string(), limit))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rdma_resource_json() {
        let usage = parse_usage(
            r#"[{"ifindex":0,"ifname":"mlx5_0","pd":4,"cq":5,"qp":3,"cm_id":0,"mr":2,"ctx":1,"srq":0}]"#,
        )
        .unwrap();
        assert_eq!(usage["mlx5_0"]["qp"], 3);
        assert!(!usage["mlx5_0"].contains_key("ifindex"));
    }
}
