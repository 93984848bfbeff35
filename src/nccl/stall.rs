//! A benchmark in the log that made no progress after NCCL's init: nccl-tests (or rccl-tests)
//! printed its parameters and devices (and its column header once its communicators were up),
//! and no result row followed. A job that hung in its first collective looks like that, and its NCCL lines
//! alone read as healthy (a hang writes nothing). The nccl-tests output is read with the
//! `nccl-tests` command's parser (`diag::nccl_tests::parse`).

use serde::Serialize;

use crate::diag::nccl_tests::parse_runs;

/// One run without a result row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stall {
    pub file: String,
    /// The line its output starts at.
    pub line: usize,
    /// The benchmark, where its output names it (`all_reduce_perf`).
    pub collective: Option<String>,
    pub detail: &'static str,
}

const DETAIL: &str = "nccl-tests started but printed no result row: the run made no progress after NCCL's init (it hung in its first collective), or the log ends there";

/// The runs of nccl-tests output in `text` (its parameters, devices or column header) that have
/// no result row and no footer. A log without nccl-tests output has none.
pub fn stalls(file: &str, text: &str) -> Vec<Stall> {
    let Ok(runs) = parse_runs(text) else {
        return Vec::new();
    };
    runs.into_iter()
        .filter(|(_, run)| run.rows.is_empty() && !run.is_complete())
        .map(|(line, run)| Stall {
            file: file.to_owned(),
            line,
            collective: run.collective,
            detail: DETAIL,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "\
# nThread 1 nGpus 2 minBytes 1048576 maxBytes 1073741824 step: 4(factor) warmup iters: 3 iters: 10 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4321 on    node-a device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   4321 on    node-a device  1 [0x29] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
";

    #[test]
    fn a_header_without_rows_is_a_stall_and_a_row_is_progress() {
        let channels = "node-a:4321:4400 [1] NCCL INFO Channel 03/0 : 1[1] -> 0[0] [send] via NET/IB/1/GDRDMA\n";
        let hung = format!("{HEADER}{channels}");
        let found = stalls("run.log", &hung);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 1);
        let row = "     1048576        262144     float     sum      -1    101.5   10.33   10.33      0    100.9   10.39   10.39      0\n";
        assert!(stalls("run.log", &format!("{hung}{row}")).is_empty());
        // NCCL lines alone: no benchmark, nothing to say.
        assert!(stalls("run.log", channels).is_empty());
        // Cut during NCCL's init, before the column header: no row either.
        let init = HEADER.lines().take(5).collect::<Vec<_>>().join("\n");
        assert_eq!(stalls("run.log", &format!("{init}\n{channels}")).len(), 1);
    }
}
