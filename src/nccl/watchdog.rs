//! PyTorch's ProcessGroupNCCL says when a collective hung: its watchdog thread times out a
//! work item that never completed, and its heartbeat monitor kills a process whose watchdog
//! itself got stuck. NCCL prints nothing in either case (a hung collective writes nothing), so
//! these lines are the hang's evidence in a training job's log.
//!
//! Wordings (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, PyTorch 1.x-2.x):
//! - `<prefix>Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7,
//!   OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600029 milliseconds
//!   before timing out.`; the blocking-wait path says `Caught collective operation timeout`,
//!   older releases print `TensorShape=` for the numels and no `SeqNum`. The prefix is
//!   `[Rank 1] `, `[PG 0 Rank 1] `, `[PG ID 2 PG GUID 3 Rank 3] ` by release.
//! - `<prefix>Heartbeat monitor timed out! Process will be terminated after dumping debug
//!   info.` and `ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress
//!   in monitoring enqueued collectives.`

use std::sync::LazyLock;

use regex::Regex;

/// What one line says about a hang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchdogEvent {
    /// A collective ran past its timeout.
    CollectiveTimeout(TimedOutWork),
    /// The watchdog thread made no progress itself (stuck in a CUDA or NCCL call).
    WatchdogStuck {
        rank: Option<u32>,
        stuck_seconds: Option<u64>,
    },
}

/// The work item the watchdog timed out, as far as the line names it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TimedOutWork {
    pub rank: Option<u32>,
    /// The collective's sequence number in its process group: ranks stuck at different
    /// numbers waited for each other.
    pub seq: Option<u64>,
    pub op_type: Option<String>,
    pub timeout_ms: Option<u64>,
    pub ran_ms: Option<u64>,
}

static RANK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bRank (\d{1,9})\]").expect("static regex"));
static SEQ: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bSeqNum=(\d{1,19})").expect("static regex"));
static OP_TYPE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bOpType=([A-Za-z_0-9]+)").expect("static regex"));
static TIMEOUT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bTimeout\(ms\)=(\d{1,19})").expect("static regex"));
static RAN_FOR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bran for (\d{1,19}) milliseconds before timing out").expect("static regex")
});
static STUCK_FOR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"watchdog got stuck for (\d{1,19}) seconds").expect("static regex")
});

/// Classifies one line; `None` for every line that is not one of the watchdog's.
pub fn classify(line: &str) -> Option<WatchdogEvent> {
    if let Some(at) = line.find("aught collective operation timeout") {
        // The rank of the prefix right before the phrase (a traceback may quote another).
        let rank = RANK
            .captures_iter(&line[..at])
            .last()
            .and_then(|c| c[1].parse().ok());
        let tail = &line[at..];
        let number = |re: &Regex| re.captures(tail).and_then(|c| c[1].parse().ok());
        return Some(WatchdogEvent::CollectiveTimeout(TimedOutWork {
            rank,
            seq: number(&SEQ),
            op_type: OP_TYPE.captures(tail).map(|c| c[1].to_string()),
            timeout_ms: number(&TIMEOUT),
            ran_ms: number(&RAN_FOR),
        }));
    }
    let heartbeat = line.find("Heartbeat monitor timed out");
    // The regex only on the rare line that can match: this runs on every line of a log.
    let stuck = line
        .contains("watchdog got stuck for")
        .then(|| STUCK_FOR.captures(line))
        .flatten();
    if heartbeat.is_none() && stuck.is_none() {
        return None;
    }
    let before = heartbeat.map_or(line, |at| &line[..at]);
    Some(WatchdogEvent::WatchdogStuck {
        rank: RANK
            .captures_iter(before)
            .last()
            .and_then(|c| c[1].parse().ok()),
        stuck_seconds: stuck.and_then(|c| c[1].parse().ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_out_collective_of_each_release() {
        // PyTorch 2.x, glog prefix and torchrun's rank tag in front.
        let line = "[rank3]:[E0501 10:20:00.000000000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600417 milliseconds before timing out.";
        assert_eq!(
            classify(line),
            Some(WatchdogEvent::CollectiveTimeout(TimedOutWork {
                rank: Some(3),
                seq: Some(42),
                op_type: Some("ALLREDUCE".into()),
                timeout_ms: Some(600000),
                ran_ms: Some(600417),
            }))
        );
        // PyTorch 1.x: no SeqNum, a tensor shape; blocking wait's wording.
        let old = "[Rank 1] Caught collective operation timeout: WorkNCCL(OpType=BROADCAST, TensorShape=[64], Timeout(ms)=1800000) ran for 1800123 milliseconds before timing out.";
        let Some(WatchdogEvent::CollectiveTimeout(work)) = classify(old) else {
            panic!("{old}")
        };
        assert_eq!(
            (work.rank, work.seq, work.op_type.as_deref(), work.ran_ms),
            (Some(1), None, Some("BROADCAST"), Some(1800123))
        );
    }

    #[test]
    fn a_stuck_watchdog() {
        assert_eq!(
            classify("[rank0]:[E0501 10:30:00.1 ProcessGroupNCCL.cpp:1200] [PG 0 Rank 0] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=2"),
            Some(WatchdogEvent::WatchdogStuck { rank: Some(0), stuck_seconds: None })
        );
        assert_eq!(
            classify("[rank0]:[F0501 10:30:00.2 ProcessGroupNCCL.cpp:1300] [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives."),
            Some(WatchdogEvent::WatchdogStuck { rank: Some(0), stuck_seconds: Some(480) })
        );
    }

    #[test]
    fn other_lines_say_nothing() {
        for line in [
            "gpu-a:7:9 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE",
            "[Rank 0] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
            "epoch 3 step 100 loss 1.92",
            "",
        ] {
            assert_eq!(classify(line), None, "{line}");
        }
    }
}
