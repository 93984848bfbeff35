//! Judges a run: data errors, a run that did not finish, and the busbw of its largest messages
//! against the NIC line rate one GPU has.
//!
//! nccl-tests normalises busbw so that, for every collective, it approaches the bandwidth of
//! the slowest link a rank uses (its doc/PERFORMANCE.md: allreduce busbw = algbw * 2(n-1)/n,
//! allgather and reduce-scatter (n-1)/n, broadcast and sendrecv 1). Across nodes that link is
//! the GPU's NIC, so a healthy fabric reaches close to the NIC's line rate: the maintainers
//! count 24 GB/s as the peak of a 200 Gb/s NIC (96 %, nccl-tests issue #119). The check is a
//! floor, `min_fraction` (default 0.8) of the per-GPU line rate in GB/s (Gb/s / 8): the tree
//! algorithm on two nodes, NVLink SHARP and CollNet report more than the NIC carries
//! (nccl-tests issue #22), which passes, while less than the floor means the fabric, the
//! NIC-GPU pairing or GPUDirect RDMA is not doing its part. One node's run goes over
//! NVLink/PCIe and says nothing of the NICs, and small messages never reach line rate: neither
//! is judged.

use serde::Serialize;

use super::line_rate::LineRate;
use super::parse::Run;

/// Exit codes shared with `nccl`: 0 healthy (or not judged), 1 a problem found.
pub(crate) const EXIT_HEALTHY: u8 = 0;
pub(crate) const EXIT_PROBLEM: u8 = 1;

/// Below this largest message the bandwidth has not reached its plateau (latency dominates):
/// the line-rate check needs at least one row this large.
pub(crate) const MIN_JUDGED_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Multi-node, large messages at or above the floor, no data error.
    Healthy,
    /// The largest messages' busbw is under the floor (or nccl-tests' own `-G` check FAILED).
    BelowExpectation,
    /// `#wrong` elements or out-of-bounds values: the data arrived corrupted.
    DataErrors,
    /// The run ended before its footer: it crashed, hung, or the output was cut.
    Incomplete,
    /// Nothing wrong found, but the bandwidth could not be judged (one node, no line rate,
    /// small messages only).
    NotJudged,
}

impl Verdict {
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Healthy | Verdict::NotJudged => EXIT_HEALTHY,
            Verdict::BelowExpectation | Verdict::DataErrors | Verdict::Incomplete => EXIT_PROBLEM,
        }
    }

    pub fn as_label(self) -> &'static str {
        match self {
            Verdict::Healthy => "healthy",
            Verdict::BelowExpectation => "below_expectation",
            Verdict::DataErrors => "data_errors",
            Verdict::Incomplete => "incomplete",
            Verdict::NotJudged => "not_judged",
        }
    }
}

/// The line-rate comparison, with every figure it used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Expectation {
    pub line_rate_gbit_per_s: f64,
    /// The same in GB/s, nccl-tests' unit.
    pub line_rate_gbyte_per_s: f64,
    pub min_fraction: f64,
    /// `min_fraction` of the line rate, GB/s.
    pub expected_min_busbw_gbps: f64,
    pub largest_message_bytes: u64,
    /// The better of out-of-place and in-place at the largest message, GB/s.
    pub largest_busbw_gbps: f64,
    /// `largest_busbw_gbps` / `line_rate_gbyte_per_s`.
    pub of_line_rate: f64,
    /// How far below the line rate, percent (0 when at or above it).
    pub short_of_line_rate_percent: f64,
    pub met: bool,
    pub how: String,
}

/// The whole judgement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgement {
    pub verdict: Verdict,
    /// One sentence saying why.
    pub summary: String,
    /// The line-rate check when it could be made.
    pub expectation: Option<Expectation>,
    /// Why the line rate was not checked, when it was not.
    pub not_judged_because: Option<String>,
    /// What limits the judgement (unchecked data, a lenient two-node figure).
    pub notes: Vec<String>,
}

pub fn judge(run: &Run, line_rate: Option<&LineRate>, min_fraction: f64) -> Judgement {
    let (expectation, not_judged_because) = match rate_check(run, line_rate, min_fraction) {
        Ok(e) => (Some(e), None),
        Err(reason) => (None, Some(reason)),
    };
    let wrong = run.wrong_total();
    let out_of_bounds = run.footer.out_of_bounds.unwrap_or(0);
    let (verdict, summary) = if wrong > 0 || out_of_bounds > 0 {
        (
            Verdict::DataErrors,
            format!(
                "data errors: {wrong} wrong element(s), {out_of_bounds} out-of-bounds value(s); the data arrived corrupted (check GPUDirect RDMA, PCIe ACS/IOMMU, the NCCL version)"
            ),
        )
    } else if !run.is_complete() {
        let cut = if run.last_row_cut {
            " (its last row is cut short)"
        } else {
            ""
        };
        (
            Verdict::Incomplete,
            format!(
                "incomplete: the run ended before its `# Avg bus bandwidth` footer{cut}: it crashed, hung or the output was cut; {} row(s) read",
                run.rows.len()
            ),
        )
    } else if run.footer.avg_busbw_check.as_deref() == Some("FAILED") {
        (
            Verdict::BelowExpectation,
            "below expectation: nccl-tests' own average bus bandwidth check printed FAILED"
                .to_string(),
        )
    } else {
        match &expectation {
            Some(e) if e.met => (
                Verdict::Healthy,
                format!(
                    "healthy: the largest messages' busbw reaches {:.0}% of the per-GPU NIC line rate (floor {:.0}%)",
                    e.of_line_rate * 100.0,
                    e.min_fraction * 100.0
                ),
            ),
            Some(e) => (
                Verdict::BelowExpectation,
                format!(
                    "below expectation: the largest messages' busbw reaches only {:.0}% of the per-GPU NIC line rate (floor {:.0}%), {:.0}% short of it",
                    e.of_line_rate * 100.0,
                    e.min_fraction * 100.0,
                    e.short_of_line_rate_percent
                ),
            ),
            None => (
                Verdict::NotJudged,
                "no data errors; bandwidth not judged".to_string(),
            ),
        }
    };
    Judgement {
        verdict,
        summary,
        expectation,
        not_judged_because,
        notes: notes(run),
    }
}

fn notes(run: &Run) -> Vec<String> {
    let mut notes = Vec::new();
    let unchecked = run.rows.iter().any(|r| {
        [&r.out_of_place, &r.in_place]
            .iter()
            .any(|m| m.wrong.is_none() && m.max_error.is_none())
    });
    if run.parameters.validation == Some(0) {
        notes.push(
            "the data was not checked (validation 0): run without -c 0 to find data errors".into(),
        );
    } else if unchecked {
        notes.push("some results were not checked (`N/A`): their data errors are unknown".into());
    }
    if run.rows.iter().any(|r| r.out_of_place.max_error.is_some()) {
        notes.push(
            "this nccl-tests version prints the largest deviation (`error`), not a count: data errors are the footer's out-of-bounds values".into(),
        );
    }
    let reduces = run
        .collective
        .as_deref()
        .is_none_or(|c| c.contains("reduce"));
    if run.hosts().len() == 2 && reduces {
        notes.push(
            "two nodes: NCCL's tree algorithm reports busbw above what the NICs carry (nccl-tests issue #22), so the floor is lenient here; run with NCCL_ALGO=Ring for a strict check".into(),
        );
    }
    notes
}

/// The line-rate check, or why it cannot be made.
fn rate_check(
    run: &Run,
    line_rate: Option<&LineRate>,
    min_fraction: f64,
) -> Result<Expectation, String> {
    let hosts = run.hosts().len();
    match hosts {
        0 => return Err(
            "node count unknown (no `# Rank ... on HOST` lines): a single-node run (NVLink/PCIe) cannot be told from a multi-node one".into(),
        ),
        1 => return Err(
            "a single-node run: its traffic goes over NVLink/PCIe, no NIC is involved, so it cannot be judged against the NIC line rate".into(),
        ),
        _ => {}
    }
    let Some(largest) = run.rows.iter().map(|r| r.size_bytes).max() else {
        return Err("no result rows".into());
    };
    if largest < MIN_JUDGED_BYTES {
        return Err(format!(
            "the largest message is {largest} bytes; busbw only nears line rate from {MIN_JUDGED_BYTES} bytes (run with -e 1G or more)"
        ));
    }
    let Some(rate) = line_rate else {
        return Err(
            "no line rate: give --line-rate GBPS (the NIC bandwidth per GPU) or run on a node of the job, whose RDMA ports are read from sysfs".into(),
        );
    };
    let busbw = run
        .rows
        .iter()
        .filter(|r| r.size_bytes == largest)
        .map(|r| r.best_busbw_gbps())
        .fold(0.0_f64, f64::max);
    let line = rate.per_gpu_gbyte_per_s();
    let expected = line * min_fraction;
    let of_line_rate = if line > 0.0 { busbw / line } else { 0.0 };
    let met = busbw >= expected;
    let how = format!(
        "busbw {busbw:.2} GB/s at the largest message ({largest} bytes) is {:.0}% of the per-GPU NIC line rate {line:.2} GB/s ({}; {hosts} nodes); the floor is {:.0}% = {expected:.2} GB/s",
        of_line_rate * 100.0,
        rate.how,
        min_fraction * 100.0,
    );
    Ok(Expectation {
        line_rate_gbit_per_s: rate.per_gpu_gbit_per_s,
        line_rate_gbyte_per_s: line,
        min_fraction,
        expected_min_busbw_gbps: expected,
        largest_message_bytes: largest,
        largest_busbw_gbps: busbw,
        of_line_rate,
        short_of_line_rate_percent: ((1.0 - of_line_rate) * 100.0).max(0.0),
        met,
        how,
    })
}

#[cfg(test)]
mod tests {
    use super::super::parse::{Device, Footer, Measure, Row};
    use super::*;

    fn run(hosts: &[&str], rows: &[(u64, f64)], footer: bool) -> Run {
        let devices = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| Device {
                rank: i as u64,
                group: Some(0),
                pid: Some(1),
                host: h.to_string(),
                device: Some(0),
                bus_id: None,
                name: "GPU".into(),
            })
            .collect();
        let measure = |busbw| Measure {
            time_us: 1.0,
            algbw_gbps: busbw,
            busbw_gbps: busbw,
            wrong: Some(0),
            max_error: None,
        };
        let rows = rows
            .iter()
            .map(|(size, busbw)| Row {
                line: 1,
                size_bytes: *size,
                count: size / 4,
                data_type: "float".into(),
                redop: Some("sum".into()),
                root: Some(-1),
                out_of_place: measure(*busbw),
                in_place: measure(busbw - 1.0),
            })
            .collect();
        Run {
            devices,
            rows,
            footer: Footer {
                out_of_bounds: footer.then_some(0),
                avg_busbw_gbps: footer.then_some(1.0),
                avg_busbw_check: None,
            },
            ..Run::default()
        }
    }

    const GB: u64 = 1 << 30;

    #[test]
    fn healthy_and_below_against_a_400g_nic() {
        let rate = LineRate::from_flag(400.0);
        let good = run(&["a", "b"], &[(8, 0.0), (GB, 46.0)], true);
        let j = judge(&good, Some(&rate), 0.8);
        assert_eq!(j.verdict, Verdict::Healthy);
        let e = j.expectation.unwrap();
        assert_eq!(e.line_rate_gbyte_per_s, 50.0);
        assert_eq!(e.expected_min_busbw_gbps, 40.0);
        assert_eq!(e.largest_busbw_gbps, 46.0);
        assert!((e.short_of_line_rate_percent - 8.0).abs() < 1e-9);
        let slow = run(&["a", "b"], &[(GB, 20.0)], true);
        let j = judge(&slow, Some(&rate), 0.8);
        assert_eq!(j.verdict, Verdict::BelowExpectation);
        assert_eq!(j.verdict.exit_code(), EXIT_PROBLEM);
        assert!(
            j.summary.contains("40% of the per-GPU NIC line rate"),
            "{}",
            j.summary
        );
        // A stricter floor turns the first into a failure too.
        assert_eq!(
            judge(&good, Some(&rate), 0.95).verdict,
            Verdict::BelowExpectation
        );
    }

    #[test]
    fn not_judged_cases() {
        let rate = LineRate::from_flag(400.0);
        let one_node = run(&["a", "a"], &[(GB, 5.0)], true);
        let j = judge(&one_node, Some(&rate), 0.8);
        assert_eq!(j.verdict, Verdict::NotJudged);
        assert!(j.not_judged_because.unwrap().contains("single-node"));
        let small = run(&["a", "b"], &[(1 << 20, 5.0)], true);
        assert!(judge(&small, Some(&rate), 0.8)
            .not_judged_because
            .unwrap()
            .contains("largest message"));
        let no_hosts = run(&[], &[(GB, 5.0)], true);
        assert!(judge(&no_hosts, Some(&rate), 0.8)
            .not_judged_because
            .unwrap()
            .contains("node count unknown"));
        let no_rate = run(&["a", "b"], &[(GB, 5.0)], true);
        let j = judge(&no_rate, None, 0.8);
        assert_eq!(j.verdict, Verdict::NotJudged);
        assert_eq!(j.verdict.exit_code(), EXIT_HEALTHY);
        assert!(j.not_judged_because.unwrap().contains("--line-rate"));
    }

    #[test]
    fn data_errors_and_incomplete_come_first() {
        let rate = LineRate::from_flag(400.0);
        let mut wrong = run(&["a", "b"], &[(GB, 46.0)], true);
        wrong.rows[0].in_place.wrong = Some(7);
        let j = judge(&wrong, Some(&rate), 0.8);
        assert_eq!(j.verdict, Verdict::DataErrors);
        assert!(j.expectation.unwrap().met);
        assert!(
            j.notes.iter().any(|n| n.contains("NCCL_ALGO=Ring")),
            "{:?}",
            j.notes
        );
        let mut oob = run(&["a", "b"], &[(GB, 46.0)], true);
        oob.footer.out_of_bounds = Some(2);
        assert_eq!(judge(&oob, Some(&rate), 0.8).verdict, Verdict::DataErrors);
        let cut = run(&["a", "b"], &[(GB, 46.0)], false);
        let j = judge(&cut, Some(&rate), 0.8);
        assert_eq!(j.verdict, Verdict::Incomplete);
        assert_eq!(j.verdict.exit_code(), EXIT_PROBLEM);
        let mut failed_check = run(&["a", "b"], &[(GB, 46.0)], true);
        failed_check.footer.avg_busbw_check = Some("FAILED".into());
        assert_eq!(
            judge(&failed_check, Some(&rate), 0.8).verdict,
            Verdict::BelowExpectation
        );
    }
}
