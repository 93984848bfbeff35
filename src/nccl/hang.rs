//! A job that made no progress after NCCL's init. A hung collective writes nothing, so its
//! NCCL lines read as healthy; what shows the hang is around them:
//! - the log's timestamps (timestamp.rs): after `Init COMPLETE`, two adjacent lines further
//!   apart than the threshold, the log going on after the silence;
//! - PyTorch's watchdog (watchdog.rs): a collective timed out, or the watchdog got stuck.
//!
//! A log without timestamps and without those lines says nothing here: a log that simply
//! ends may be a hang or a job still running, and no line tells which.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

use super::process::Evidence;
use super::timestamp::line_time;
use super::watchdog::{self, TimedOutWork, WatchdogEvent};

/// Watchdog findings kept per input: each rank prints its own, and a traceback repeats them.
const MAX_WATCHDOG_PER_INPUT: usize = 16;
/// Longest evidence text kept, as process.rs keeps it.
const EVIDENCE_CHARS: usize = 240;

/// One piece of hang evidence in one input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hang {
    pub file: String,
    /// The line that shows it: the first after the silence, or the watchdog's.
    pub line: usize,
    #[serde(flatten)]
    pub signal: HangSignal,
    pub detail: String,
    /// The lines quoted: NCCL's init, the last line before the silence and the first after;
    /// or the watchdog's line.
    pub evidence: Vec<Evidence>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum HangSignal {
    /// No line for longer than the threshold after NCCL's init completed.
    SilenceAfterInit {
        /// The `Init COMPLETE` line the silence follows.
        init_line: usize,
        /// The last line before the silence.
        last_line: usize,
        silent_seconds: u64,
        threshold_seconds: u64,
    },
    /// PyTorch's watchdog timed out a collective.
    CollectiveTimeout(TimedOutWork),
    /// PyTorch's watchdog itself got stuck (in a CUDA or NCCL call).
    WatchdogStuck {
        rank: Option<u32>,
        stuck_seconds: Option<u64>,
    },
}

/// The longest silence after init seen so far.
struct Silence {
    init: usize,
    before: usize,
    after: usize,
    millis: i128,
}

/// The hang evidence of one input (`file` names it): the longest silence after NCCL's init
/// above `threshold`, and the watchdog's lines.
pub fn hangs(file: &str, text: &str, threshold: Duration) -> Vec<Hang> {
    let lines: Vec<&str> = text
        .split('\n')
        .map(|raw| raw.strip_suffix('\r').unwrap_or(raw))
        .collect();
    let threshold_millis = i128::try_from(threshold.as_millis()).unwrap_or(i128::MAX);
    let mut init: Option<usize> = None;
    // The previous non-blank line's time, if it had one: a silence is only known between two
    // adjacent lines that both carry a time (a line without one may have come at any moment).
    // Logs of several hosts concatenated go back in time at a seam: a negative gap, no silence.
    let mut previous_time: Option<(usize, Timestamp)> = None;
    let mut longest: Option<Silence> = None;
    let mut found = Vec::new();
    let mut watchdog_seen = BTreeSet::new();
    for (index, line) in lines.iter().enumerate() {
        // NCCL starts each WARN with a newline: blank lines carry nothing and break nothing.
        if line.trim().is_empty() {
            continue;
        }
        if let Some(event) = watchdog::classify(line) {
            if watchdog_seen.len() < MAX_WATCHDOG_PER_INPUT && watchdog_seen.insert(key(&event)) {
                found.push(watchdog_hang(file, index, line, event));
            }
        }
        let time = line_time(line);
        if let (Some(init), Some((before, then)), Some(now)) = (init, previous_time, time) {
            let millis = now.duration_since(then).as_millis();
            if millis > threshold_millis && longest.as_ref().is_none_or(|l| millis > l.millis) {
                longest = Some(Silence {
                    init,
                    before,
                    after: index,
                    millis,
                });
            }
        }
        if init.is_none() && is_init_complete(line) {
            init = Some(index);
        }
        previous_time = time.map(|t| (index, t));
    }
    if let Some(silence) = longest {
        found.insert(0, silence_hang(file, &lines, &silence, threshold));
    }
    found
}

/// `... - Init COMPLETE`: NCCL's communicator init finished (every release since v2.4; the
/// ncclCommInitRank and ncclCommSplit wordings alike).
fn is_init_complete(line: &str) -> bool {
    line.contains("NCCL INFO ") && line.contains("Init COMPLETE")
}

/// What makes two watchdog lines the same finding: the rank and its work item.
fn key(event: &WatchdogEvent) -> (u8, Option<u32>, Option<u64>) {
    match event {
        WatchdogEvent::CollectiveTimeout(work) => (0, work.rank, work.seq),
        WatchdogEvent::WatchdogStuck { rank, .. } => (1, *rank, None),
    }
}

fn evidence(file: &str, index: usize, line: &str) -> Evidence {
    let text = line.trim();
    let text = match text.char_indices().nth(EVIDENCE_CHARS) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
    };
    Evidence {
        file: file.to_string(),
        line: index + 1,
        text,
    }
}

fn silence_hang(file: &str, lines: &[&str], silence: &Silence, threshold: Duration) -> Hang {
    let seconds = u64::try_from(silence.millis / 1000).unwrap_or(u64::MAX);
    let detail = format!(
        "no log line for {} after NCCL's init completed (line {}), more than the {} threshold: the job hung in a collective, or was silent that long",
        human(seconds),
        silence.init + 1,
        human(threshold.as_secs())
    );
    let mut quoted = vec![evidence(file, silence.init, lines[silence.init])];
    if silence.before != silence.init {
        quoted.push(evidence(file, silence.before, lines[silence.before]));
    }
    quoted.push(evidence(file, silence.after, lines[silence.after]));
    Hang {
        file: file.to_string(),
        line: silence.after + 1,
        signal: HangSignal::SilenceAfterInit {
            init_line: silence.init + 1,
            last_line: silence.before + 1,
            silent_seconds: seconds,
            threshold_seconds: threshold.as_secs(),
        },
        detail,
        evidence: quoted,
    }
}

fn watchdog_hang(file: &str, index: usize, line: &str, event: WatchdogEvent) -> Hang {
    let rank = |rank: Option<u32>| rank.map(|r| format!("rank {r}: ")).unwrap_or_default();
    let (signal, detail) = match event {
        WatchdogEvent::CollectiveTimeout(work) => {
            let op = work.op_type.as_deref().unwrap_or("a collective");
            let seq = work.seq.map(|s| format!(" #{s}")).unwrap_or_default();
            let ran = work
                .ran_ms
                .map(|ms| format!(" after {}", human(ms / 1000)))
                .unwrap_or_default();
            let detail = format!(
                "{}PyTorch's NCCL watchdog timed out {op}{seq}{ran}: the collective never completed (a rank missing from it, or the network stuck)",
                rank(work.rank)
            );
            (HangSignal::CollectiveTimeout(work), detail)
        }
        WatchdogEvent::WatchdogStuck {
            rank: r,
            stuck_seconds,
        } => {
            let stuck = stuck_seconds
                .map(|s| format!(" for {}", human(s)))
                .unwrap_or_default();
            let detail = format!(
                "{}PyTorch's NCCL watchdog got stuck{stuck}: a CUDA or NCCL call hung",
                rank(r)
            );
            (
                HangSignal::WatchdogStuck {
                    rank: r,
                    stuck_seconds,
                },
                detail,
            )
        }
    };
    Hang {
        file: file.to_string(),
        line: index + 1,
        signal,
        detail,
        evidence: vec![evidence(file, index, line)],
    }
}

/// `1h2m3s`, `11m42s`, `40s`.
fn human(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s:02}s"),
        _ => format!("{h}h{m:02}m{s:02}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIVE_MINUTES: Duration = Duration::from_secs(300);

    /// A two-rank init in NCCL's own timestamp format (`[%F %T] `, all levels on).
    const INIT: &str = "\
[2026-05-01 10:00:00] gpu-a:100:110 [0] NCCL INFO NCCL version 2.27.5+cuda12.9
[2026-05-01 10:00:01] gpu-a:100:110 [0] NCCL INFO Using network IB
[2026-05-01 10:00:02] gpu-a:100:110 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0xabc - Init COMPLETE
";

    #[test]
    fn a_silence_after_init_is_a_hang_and_a_short_one_is_not() {
        let hung = format!("{INIT}[2026-05-01 10:00:03] step 1\n[2026-05-01 10:11:45] slurmstepd: error: *** STEP 7.0 CANCELLED ***\n");
        let found = hangs("job.log", &hung, FIVE_MINUTES);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 5);
        assert_eq!(
            found[0].signal,
            HangSignal::SilenceAfterInit {
                init_line: 3,
                last_line: 4,
                silent_seconds: 702,
                threshold_seconds: 300
            }
        );
        assert!(found[0].detail.contains("11m42s"), "{}", found[0].detail);
        let quoted: Vec<usize> = found[0].evidence.iter().map(|e| e.line).collect();
        assert_eq!(quoted, [3, 4, 5]);
        // The same run progressing every minute: nothing.
        let busy = format!("{INIT}[2026-05-01 10:01:00] step 1\n[2026-05-01 10:02:00] step 2\n[2026-05-01 10:06:00] step 3\n");
        assert!(hangs("job.log", &busy, FIVE_MINUTES).is_empty());
        // A larger threshold lets the long silence pass.
        assert!(hangs("job.log", &hung, Duration::from_secs(900)).is_empty());
    }

    #[test]
    fn the_longest_silence_is_reported_once() {
        let text = format!(
            "{INIT}[2026-05-01 10:06:00] a\n[2026-05-01 10:30:00] b\n[2026-05-01 10:36:00] c\n"
        );
        let found = hangs("job.log", &text, FIVE_MINUTES);
        assert_eq!(found.len(), 1);
        assert!(matches!(
            found[0].signal,
            HangSignal::SilenceAfterInit {
                silent_seconds: 1440,
                last_line: 4,
                ..
            }
        ));
    }

    #[test]
    fn no_guess_without_adjacent_timestamps_or_before_init() {
        // A silence before init (a slow rendezvous) is not after init.
        let before = format!("[2026-05-01 09:00:00] waiting for peers\n{INIT}");
        assert!(hangs("job.log", &before, FIVE_MINUTES).is_empty());
        // A line without a time between the two: it may have come at any moment.
        let untimed = format!("{INIT}gpu-a:100:110 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n[2026-05-01 10:30:00] step 1\n");
        assert!(hangs("job.log", &untimed, FIVE_MINUTES).is_empty());
        // No timestamps at all, the log ending after init: nothing to tell.
        let plain = INIT
            .replace("[2026-05-01 10:00:02] ", "")
            .replace("[2026-05-01 10:00:0", "[x");
        assert!(hangs("job.log", &plain, FIVE_MINUTES).is_empty());
        // Concatenated hosts: going back in time at the seam is no silence.
        let seam = format!("{INIT}[2026-05-01 10:20:00] gpu-b:200:210 [0] NCCL INFO Init COMPLETE\n[2026-05-01 10:21:00] b\n");
        let reversed = format!("[2026-05-01 10:30:00] end of host a\n{seam}");
        let found = hangs("job.log", &reversed, FIVE_MINUTES);
        assert_eq!(
            found.len(),
            1,
            "only the real silence after init: {found:?}"
        );
        assert_eq!(found[0].line, 5);
    }

    #[test]
    fn blank_lines_keep_adjacency_and_crlf_is_read() {
        // NCCL puts an empty line before each WARN.
        let text = format!("{INIT}\n[2026-05-01 10:20:00] gpu-a:100:110 [0] misc/socket.cc:1 NCCL WARN Net : Connection closed by remote peer\n")
            .replace('\n', "\r\n");
        let found = hangs("job.log", &text, FIVE_MINUTES);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].line, 5);
    }

    #[test]
    fn watchdog_lines_are_hangs_once_per_rank_and_work() {
        let timeout = "[rank1]:[E0501 10:10:00.0 ProcessGroupNCCL.cpp:632] [PG 0 Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLGATHER, NumelIn=4, NumelOut=8, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.";
        // The traceback repeats the message.
        let repeat = "torch.distributed.DistBackendError: [PG 0 Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLGATHER, NumelIn=4, NumelOut=8, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.";
        let stuck = "[rank0]:[F0501 10:20:00.0 ProcessGroupNCCL.cpp:1300] [PG 0 Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives.";
        let text = format!("{timeout}\n{repeat}\n{stuck}\n");
        let found = hangs("train.log", &text, FIVE_MINUTES);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].line, 1);
        let HangSignal::CollectiveTimeout(work) = &found[0].signal else {
            panic!("{found:?}")
        };
        assert_eq!(
            (work.rank, work.seq, work.op_type.as_deref()),
            (Some(1), Some(9), Some("ALLGATHER"))
        );
        assert!(
            found[0].detail.starts_with("rank 1: "),
            "{}",
            found[0].detail
        );
        assert!(
            found[0].detail.contains("ALLGATHER #9 after 10m00s"),
            "{}",
            found[0].detail
        );
        assert_eq!(
            found[1].signal,
            HangSignal::WatchdogStuck {
                rank: Some(0),
                stuck_seconds: Some(480)
            }
        );
        // In JSON the kind names the signal and its fields sit beside it.
        let json = serde_json::to_value(&found[0]).unwrap();
        assert_eq!(json["kind"], "collective_timeout");
        assert_eq!(json["seq"], 9);
        assert_eq!(json["timeout_ms"], 600000);
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(40), "40s");
        assert_eq!(human(702), "11m42s");
        assert_eq!(human(3723), "1h02m03s");
    }
}
