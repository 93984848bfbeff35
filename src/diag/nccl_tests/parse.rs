//! The text of one nccl-tests run (`all_reduce_perf`, `alltoall_perf`, ..., rccl-tests alike)
//! as plain values: the parameters line, the devices, the column header, every row and the
//! footer. Pure functions over text, no I/O.
//!
//! The layout of a row is read from the run's own column header, never assumed, because it
//! changed across versions: the oldest print `size count type [redop|root] time algbw busbw
//! error` (a float, `N/A` without validation), later ones `#wrong` (an integer or `N/A`) and a
//! `root` column for every collective, the newest optional per-iteration columns (`i_min` ...)
//! and a timestamp. Old `alltoall_perf` prints a `redop` header over an empty cell, so the
//! cells between `type` and the first time are matched by what they hold. Lines of anything
//! else (NCCL INFO/WARN lines, shell prompts, MPI noise, markdown around a pasted output) are
//! skipped; `srun --label` and `mpirun --tag-output` prefixes are removed first.

use serde::Serialize;

/// At most this many unreadable table lines are kept for the report (the count is exact).
const MAX_SKIPPED_KEPT: usize = 20;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// Nothing nccl-tests prints is in the input.
    #[error("no nccl-tests output: no parameters line (`# nThread ...`), column header (`size count type ... busbw`) or `# Avg bus bandwidth` footer")]
    NotNcclTests,
    /// A second run starts after the first one's rows: one input, one run.
    #[error("line {second_line}: a second nccl-tests run starts here (the first starts at line {first_line}); give one run per input (split the file, e.g. with csplit), or build nccl-tests with MPI=1 if every process printed its own run")]
    SeveralRuns {
        first_line: usize,
        second_line: usize,
    },
}

/// The `# nThread 1 nGpus 1 minBytes ...` line; every field as printed, absent when not.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Parameters {
    pub threads: Option<u64>,
    pub gpus_per_thread: Option<u64>,
    pub min_bytes: Option<u64>,
    pub max_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_factor: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_bytes: Option<u64>,
    pub warmup_iters: Option<u64>,
    pub iters: Option<u64>,
    pub agg_iters: Option<u64>,
    /// `-c`: 0 means nothing was checked and `#wrong` reads `N/A`.
    pub validation: Option<u64>,
    pub graph: Option<u64>,
    pub unalign: Option<u64>,
}

/// One `#  Rank  0 Group  0 Pid 123 on host device  0 [0000:0f:00] NVIDIA ...` line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Device {
    pub rank: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<u64>,
    pub pid: Option<u64>,
    pub host: String,
    pub device: Option<u64>,
    pub bus_id: Option<String>,
    pub name: String,
}

/// One half of a row: out-of-place or in-place.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Measure {
    pub time_us: f64,
    /// GB/s (10^9 bytes per second), as nccl-tests prints it.
    pub algbw_gbps: f64,
    pub busbw_gbps: f64,
    /// `#wrong`: elements that failed validation; `None` for `N/A` (validation off) and for the
    /// old `error` column, which gives the largest deviation instead of a count.
    pub wrong: Option<u64>,
    /// The old `error` column: the largest deviation found (0e+00 when exact).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_error: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// 1-based line of the input.
    pub line: usize,
    pub size_bytes: u64,
    pub count: u64,
    #[serde(rename = "type")]
    pub data_type: String,
    /// `sum`, `none` (alltoall, sendrecv, gathers), ...; absent where the version printed none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redop: Option<String>,
    /// `-1` for collectives without a root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<i64>,
    pub out_of_place: Measure,
    pub in_place: Measure,
}

impl Row {
    /// The better busbw of the two halves.
    pub(crate) fn best_busbw_gbps(&self) -> f64 {
        self.out_of_place.busbw_gbps.max(self.in_place.busbw_gbps)
    }
}

/// A line inside the table that is not a row (cut, or unexpected cells).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SkippedLine {
    pub line: usize,
    pub reason: String,
}

/// The footer lines.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Footer {
    /// `# Out of bounds values : N OK|FAILED`: measurements whose data check failed.
    pub out_of_bounds: Option<u64>,
    /// `# Avg bus bandwidth : X`, GB/s.
    pub avg_busbw_gbps: Option<f64>,
    /// `OK`/`FAILED` after the average when the run was given an expected value (`-G`/check).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg_busbw_check: Option<String>,
}

/// One run as read.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Run {
    /// The binary (`all_reduce_perf`), from `# Collective test starting/concluded:`.
    pub collective: Option<String>,
    /// `# nccl-tests version 2.18.3 ...`
    pub nccl_tests_version: Option<String>,
    /// `rccl-tests: Version develop:0a1b2c3`
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rccl_tests_version: Option<String>,
    /// `NCCL version 2.21.5+cuda12.4` (an interleaved NCCL line) or `nccl-library=22809`.
    pub nccl_version: Option<String>,
    pub parameters: Parameters,
    pub devices: Vec<Device>,
    /// The column header as printed.
    pub columns: Vec<String>,
    pub rows: Vec<Row>,
    pub footer: Footer,
    /// Lines inside the table that were not rows; at most `MAX_SKIPPED_KEPT` kept.
    pub skipped_lines: Vec<SkippedLine>,
    pub skipped_total: usize,
    /// The last table line was a row cut short (a partial last line).
    pub last_row_cut: bool,
}

impl Run {
    /// The footer's average was printed: the run reached its end.
    pub fn is_complete(&self) -> bool {
        self.footer.avg_busbw_gbps.is_some()
    }

    /// Distinct hosts of the device lines, in order of appearance.
    pub fn hosts(&self) -> Vec<&str> {
        let mut hosts: Vec<&str> = Vec::new();
        for d in &self.devices {
            if !hosts.contains(&d.host.as_str()) {
                hosts.push(&d.host);
            }
        }
        hosts
    }

    /// The most ranks on one host (the GPUs per node the run used).
    pub(crate) fn ranks_per_host(&self) -> Option<usize> {
        self.hosts()
            .iter()
            .map(|h| self.devices.iter().filter(|d| d.host == *h).count())
            .max()
    }

    /// Sum of every `#wrong` figure (saturating).
    pub(crate) fn wrong_total(&self) -> u64 {
        self.rows
            .iter()
            .flat_map(|r| [r.out_of_place.wrong, r.in_place.wrong])
            .flatten()
            .fold(0u64, u64::saturating_add)
    }

    /// Some row printed `N/A` or an old `error` figure instead of a `#wrong` count.
    pub fn wrong_unknown(&self) -> bool {
        self.rows
            .iter()
            .any(|r| r.out_of_place.wrong.is_none() || r.in_place.wrong.is_none())
    }
}

/// Where a cell between `type` and the first time goes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Middle {
    Redop,
    Root,
    Other,
}

/// One column of the out-of-place (and in-place) group.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Cell {
    Time,
    AlgBw,
    BusBw,
    Wrong,
    Error,
    /// Per-iteration statistics and anything newer: read past, not kept.
    Other,
}

#[derive(Debug, Clone, PartialEq)]
struct Layout {
    middle: Vec<Middle>,
    group: Vec<Cell>,
    timestamp: bool,
}

/// Parses one run. Errors when the text holds no nccl-tests output or more than one run.
pub fn parse(text: &str) -> Result<Run, ParseError> {
    let mut state = State::default();
    for (index, raw) in text.lines().enumerate() {
        state.line(index + 1, strip_label(raw))?;
    }
    state.finish()
}

/// Every run of the text with the line it starts at, in order. A file may hold several: the
/// same test run with a setting off and then on, one after the other, or the whole output of
/// each process of a build without MPI=1. A run ends where the next one starts (the line
/// [`parse`] refuses as a second run), and each is read on its own.
pub fn parse_runs(text: &str) -> Result<Vec<(usize, Run)>, ParseError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut runs = Vec::new();
    let mut from = 0;
    loop {
        let mut state = State::default();
        let mut next = None;
        for (index, raw) in lines.iter().enumerate().skip(from) {
            match state.line(index + 1, strip_label(raw)) {
                Ok(()) => {}
                // A fresh state never refuses its first line, so `from` always moves on.
                Err(ParseError::SeveralRuns { second_line, .. }) => {
                    next = Some(second_line - 1);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        let first_line = state.first_line.unwrap_or(from + 1);
        runs.push((first_line, state.finish()?));
        match next {
            Some(line) => from = line,
            None => return Ok(runs),
        }
    }
}

#[derive(Default)]
struct State {
    run: Run,
    layout: Option<Layout>,
    /// Something only nccl-tests prints was seen.
    recognised: bool,
    first_line: Option<usize>,
    /// Rows or footer seen: a new parameters line or header now starts a second run.
    past_table: bool,
    /// The last table line that was not a row, when it was cut short.
    pending_cut: bool,
}

impl State {
    fn line(&mut self, number: usize, line: &str) -> Result<(), ParseError> {
        let trimmed = line.trim();
        let (comment, body) = match trimmed.strip_prefix('#') {
            Some(rest) => (true, rest.trim()),
            None => (false, trimmed),
        };
        if body.is_empty() {
            return Ok(());
        }
        if let Some(rest) = body.strip_prefix("nccl-tests version ") {
            self.start(number)?;
            self.run.nccl_tests_version = rest.split_whitespace().next().map(str::to_string);
            if let Some(library) = rest
                .split_whitespace()
                .find_map(|t| t.strip_prefix("nccl-library="))
            {
                self.run
                    .nccl_version
                    .get_or_insert_with(|| library.to_string());
            }
            return Ok(());
        }
        if let Some(rest) = body.strip_prefix("Collective test starting:") {
            self.start(number)?;
            self.run.collective = first_word(rest);
            return Ok(());
        }
        if let Some(rest) = body.strip_prefix("Collective test concluded:") {
            self.recognised = true;
            self.run
                .collective
                .get_or_insert_with(|| first_word(rest).unwrap_or_default());
            return Ok(());
        }
        if body.starts_with("nThread") {
            if self.run.parameters != Parameters::default() {
                return Err(self.second_run(number));
            }
            self.start(number)?;
            self.run.parameters = parameters(body);
            return Ok(());
        }
        if let Some(rest) = body.strip_prefix("Out of bounds values") {
            self.end_table(number);
            self.run.footer.out_of_bounds = after_colon(rest)
                .and_then(|v| v.split_whitespace().next())
                .and_then(|n| n.parse().ok());
            return Ok(());
        }
        if let Some(rest) = body.strip_prefix("Avg bus bandwidth") {
            self.end_table(number);
            let mut words = after_colon(rest).unwrap_or_default().split_whitespace();
            self.run.footer.avg_busbw_gbps = words.next().and_then(finite);
            self.run.footer.avg_busbw_check = words.next().map(str::to_string);
            return Ok(());
        }
        if let Some(device) = device_line(body) {
            self.recognised = true;
            self.run.devices.push(device);
            return Ok(());
        }
        if let Some(layout) = header(body) {
            if self.past_table || self.layout.is_some() && !self.run.rows.is_empty() {
                return Err(self.second_run(number));
            }
            self.start(number)?;
            self.layout = Some(layout);
            self.run.columns = body.split_whitespace().map(str::to_string).collect();
            return Ok(());
        }
        if comment {
            return Ok(());
        }
        if let Some(version) = body.strip_prefix("rccl-tests: Version ") {
            self.run.rccl_tests_version = Some(version.trim().to_string());
            return Ok(());
        }
        if let Some(version) = body.strip_prefix("NCCL version ") {
            self.run.nccl_version = first_word(version);
            return Ok(());
        }
        self.table_line(number, body);
        Ok(())
    }

    /// A line that belongs to the start of a run.
    fn start(&mut self, number: usize) -> Result<(), ParseError> {
        if self.past_table {
            return Err(self.second_run(number));
        }
        self.recognised = true;
        self.first_line.get_or_insert(number);
        Ok(())
    }

    fn second_run(&self, number: usize) -> ParseError {
        ParseError::SeveralRuns {
            first_line: self.first_line.unwrap_or(1),
            second_line: number,
        }
    }

    fn end_table(&mut self, number: usize) {
        self.recognised = true;
        self.first_line.get_or_insert(number);
        self.past_table = true;
        self.pending_cut = false;
    }

    /// A plain line after the column header: a row, or noise (NCCL lines, prompts).
    fn table_line(&mut self, number: usize, body: &str) {
        let Some(layout) = &self.layout else { return };
        if self.past_table {
            return;
        }
        let tokens: Vec<&str> = body.split_whitespace().collect();
        // Only lines that start like a row (a byte count, then an element count) are rows
        // or broken rows; NCCL's `host:pid:tid [dev] NCCL INFO ...` lines never do.
        let row_like = tokens.first().is_some_and(|t| t.parse::<u64>().is_ok())
            && tokens.get(1).is_none_or(|t| t.parse::<u64>().is_ok());
        if !row_like {
            return;
        }
        match row(number, &tokens, layout) {
            Ok(row) => {
                self.run.rows.push(row);
                self.pending_cut = false;
            }
            Err(reason) => {
                self.pending_cut = reason.cut;
                self.run.skipped_total += 1;
                if self.run.skipped_lines.len() < MAX_SKIPPED_KEPT {
                    self.run.skipped_lines.push(SkippedLine {
                        line: number,
                        reason: reason.message,
                    });
                }
            }
        }
    }

    fn finish(mut self) -> Result<Run, ParseError> {
        if !self.recognised {
            return Err(ParseError::NotNcclTests);
        }
        self.run.last_row_cut = self.pending_cut;
        Ok(self.run)
    }
}

/// Removes a launcher's per-line label: `mpirun --tag-output` (`[1,0]<stdout>:`) and
/// `srun --label` (`0: `).
fn strip_label(line: &str) -> &str {
    let start = line.trim_start();
    if start.starts_with('[') {
        for tag in ["]<stdout>:", "]<stderr>:"] {
            if let Some(at) = start.find(tag) {
                return &start[at + tag.len()..];
            }
        }
    }
    let digits = start.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0
        && start[digits..].starts_with(':')
        && start[digits + 1..].starts_with([' ', '\t'])
    {
        return &start[digits + 1..];
    }
    line
}

fn first_word(text: &str) -> Option<String> {
    text.split_whitespace().next().map(str::to_string)
}

fn after_colon(text: &str) -> Option<&str> {
    text.split_once(':').map(|(_, value)| value)
}

fn finite(text: &str) -> Option<f64> {
    text.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// `nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 ...`, with
/// or without colons after the keys (older versions print `nThread: 1`, `warmupIters: 5`).
fn parameters(body: &str) -> Parameters {
    let mut p = Parameters::default();
    let mut key: Vec<&str> = Vec::new();
    for token in body.split_whitespace() {
        if key.is_empty() || !token.starts_with(|c: char| c.is_ascii_digit()) {
            key.push(token);
            continue;
        }
        let name = key.join(" ").replace(':', "").to_ascii_lowercase();
        key.clear();
        let digits = token.bytes().take_while(u8::is_ascii_digit).count();
        let Ok(value) = token[..digits].parse::<u64>() else {
            continue;
        };
        let unit = &token[digits..];
        let slot = match name.as_str() {
            "nthread" => &mut p.threads,
            "ngpus" => &mut p.gpus_per_thread,
            "minbytes" => &mut p.min_bytes,
            "maxbytes" => &mut p.max_bytes,
            "step" if unit.contains("bytes") => &mut p.step_bytes,
            "step" => &mut p.step_factor,
            "warmup iters" | "warmupiters" => &mut p.warmup_iters,
            "iters" => &mut p.iters,
            "agg iters" => &mut p.agg_iters,
            "validation" => &mut p.validation,
            "graph" => &mut p.graph,
            "unalign" => &mut p.unalign,
            _ => continue,
        };
        *slot = Some(value);
    }
    p
}

/// `Rank  0 Group  0 Pid 305376 on host device  0 [0000:0f:00] NVIDIA A100-SXM4-40GB` (older:
/// no `Group`).
fn device_line(body: &str) -> Option<Device> {
    let mut words = body.split_whitespace().peekable();
    if words.next()? != "Rank" {
        return None;
    }
    let rank = words.next()?.parse().ok()?;
    let mut device = Device {
        rank,
        group: None,
        pid: None,
        host: String::new(),
        device: None,
        bus_id: None,
        name: String::new(),
    };
    while let Some(word) = words.next() {
        match word {
            "Group" => device.group = words.next().and_then(|v| v.parse().ok()),
            "Pid" => device.pid = words.next().and_then(|v| v.parse().ok()),
            "on" => device.host = words.next()?.to_string(),
            "device" => {
                device.device = words.next().and_then(|v| v.parse().ok());
                if let Some(bus) = words.next_if(|w| w.starts_with('[')) {
                    device.bus_id = Some(bus.trim_matches(['[', ']']).to_string());
                }
                device.name = words.by_ref().collect::<Vec<_>>().join(" ");
            }
            _ => {}
        }
    }
    (!device.host.is_empty()).then_some(device)
}

/// The column header: `size count type redop root time algbw busbw #wrong time ...`.
fn header(body: &str) -> Option<Layout> {
    let names: Vec<String> = body
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    let is_time = |n: &String| n == "time" || n == "cputime";
    let first_time = names.iter().position(is_time)?;
    let lead = &names[..first_time];
    if lead.len() < 3
        || !matches!(lead[0].as_str(), "size" | "bytes")
        || !matches!(lead[1].as_str(), "count" | "n")
        || lead[2] != "type"
    {
        return None;
    }
    let middle = lead[3..]
        .iter()
        .map(|n| match n.as_str() {
            "redop" | "op" => Middle::Redop,
            "root" => Middle::Root,
            _ => Middle::Other,
        })
        .collect();
    let mut rest = &names[first_time..];
    let timestamp = rest.last().is_some_and(|n| n == "timestamp");
    if timestamp {
        rest = &rest[..rest.len() - 1];
    }
    let second_time = rest.iter().skip(1).position(is_time)? + 1;
    let (first, second) = rest.split_at(second_time);
    let group: Vec<Cell> = first
        .iter()
        .map(|n| match n.as_str() {
            "time" | "cputime" => Cell::Time,
            "algbw" => Cell::AlgBw,
            "busbw" => Cell::BusBw,
            "#wrong" | "wrong" => Cell::Wrong,
            "error" | "res" => Cell::Error,
            _ => Cell::Other,
        })
        .collect();
    let same_shape = first == second;
    let has_bandwidths = group.contains(&Cell::AlgBw) && group.contains(&Cell::BusBw);
    (same_shape && has_bandwidths).then_some(Layout {
        middle,
        group,
        timestamp,
    })
}

struct RowError {
    message: String,
    /// Fewer cells than a row has: a line cut short.
    cut: bool,
}

fn row_error(message: impl Into<String>, cut: bool) -> RowError {
    RowError {
        message: message.into(),
        cut,
    }
}

fn row(line: usize, tokens: &[&str], layout: &Layout) -> Result<Row, RowError> {
    let g = layout.group.len();
    let n = tokens.len();
    let stamped = layout.timestamp && n >= 2 && is_date(tokens[n - 2]) && is_clock(tokens[n - 1]);
    let stamp = if stamped { 2 } else { 0 };
    let Some(lead) = n.checked_sub(2 * g + stamp).filter(|lead| *lead >= 3) else {
        return Err(row_error(
            format!("{n} cells, fewer than a row of this header has (cut short?)"),
            true,
        ));
    };
    if lead > 3 + layout.middle.len() {
        return Err(row_error(
            format!("{n} cells, more than a row of this header has"),
            false,
        ));
    }
    let size_bytes = tokens[0]
        .parse()
        .map_err(|_| row_error("size is not a byte count", false))?;
    let count = tokens[1]
        .parse()
        .map_err(|_| row_error("count is not an element count", false))?;
    let data_type = tokens[2];
    if !data_type.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(row_error(
            format!("type {data_type:?} is not a type"),
            false,
        ));
    }
    let (redop, root) = middle_cells(&tokens[3..lead], &layout.middle);
    let out_of_place = measure(&tokens[lead..lead + g], &layout.group)?;
    let in_place = measure(&tokens[lead + g..lead + 2 * g], &layout.group)?;
    Ok(Row {
        line,
        size_bytes,
        count,
        data_type: data_type.to_string(),
        redop,
        root,
        out_of_place,
        in_place,
    })
}

/// The cells between `type` and the first time. When fewer are printed than the header names
/// (old alltoall leaves `redop` blank), a number is the root and a word the reduction.
fn middle_cells(cells: &[&str], names: &[Middle]) -> (Option<String>, Option<i64>) {
    let mut redop = None;
    let mut root = None;
    if cells.len() == names.len() {
        for (cell, name) in cells.iter().zip(names) {
            match name {
                Middle::Redop => redop = Some(cell.to_string()),
                Middle::Root => root = cell.parse().ok(),
                Middle::Other => {}
            }
        }
        return (redop, root);
    }
    for cell in cells {
        match cell.parse::<i64>() {
            Ok(value) if names.contains(&Middle::Root) => root = Some(value),
            Ok(_) => {}
            Err(_) if names.contains(&Middle::Redop) => redop = Some(cell.to_string()),
            Err(_) => {}
        }
    }
    (redop, root)
}

fn measure(cells: &[&str], group: &[Cell]) -> Result<Measure, RowError> {
    let mut m = Measure::default();
    for (cell, kind) in cells.iter().zip(group) {
        let number =
            || finite(cell).ok_or_else(|| row_error(format!("{cell:?} is not a number"), false));
        match kind {
            Cell::Time => m.time_us = number()?,
            Cell::AlgBw => m.algbw_gbps = number()?,
            Cell::BusBw => m.busbw_gbps = number()?,
            Cell::Wrong if *cell == "N/A" => m.wrong = None,
            Cell::Wrong => {
                // `%6g`: large counts print as 1.2e+06.
                let value = number()?;
                if value < 0.0 {
                    return Err(row_error(format!("#wrong {cell:?} is negative"), false));
                }
                // Saturating float-to-int conversion; the value is finite and non-negative.
                m.wrong = Some(value.round() as u64);
            }
            Cell::Error if *cell == "N/A" => m.max_error = None,
            Cell::Error => {
                m.max_error =
                    Some(finite(cell.trim_end_matches('*')).ok_or_else(|| {
                        row_error(format!("error {cell:?} is not a number"), false)
                    })?)
            }
            Cell::Other => {}
        }
    }
    Ok(m)
}

/// `2025-01-31` (nccl-tests' `%Y-%m-%d`).
fn is_date(token: &str) -> bool {
    let b = token.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
}

/// `12:34:56`.
fn is_clock(token: &str) -> bool {
    let b = token.as_bytes();
    b.len() == 8
        && b[2] == b':'
        && b[5] == b':'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 2 || i == 5 || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Header and rows as nccl-tests' util.cu formats them (`writeResultHeader`,
    // `writeBenchmarkLinePreamble`, `writeBenchmarkLineBody`, `writeResultFooter`).
    const CURRENT: &str = "\
# nccl-tests version 2.17.1 nccl-headers=22602 nccl-library=22602
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1001 on     node-a device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   2002 on     node-b device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
node-a:1001:1010 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA
           8             2     float     sum      -1    20.31    0.00    0.00       0    19.88    0.00    0.00       0
   134217728      33554432     float     sum      -1   2995.1   44.81   44.81       0   2990.6   44.88   44.88       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 22.4225 
#
# Collective test concluded: all_reduce_perf
";

    #[test]
    fn current_format_every_part() {
        let run = parse(CURRENT).unwrap();
        assert_eq!(run.collective.as_deref(), Some("all_reduce_perf"));
        assert_eq!(run.nccl_tests_version.as_deref(), Some("2.17.1"));
        assert_eq!(run.nccl_version.as_deref(), Some("22602"));
        let p = &run.parameters;
        assert_eq!((p.threads, p.gpus_per_thread), (Some(1), Some(1)));
        assert_eq!((p.min_bytes, p.max_bytes), (Some(8), Some(134217728)));
        assert_eq!((p.step_factor, p.step_bytes), (Some(2), None));
        assert_eq!(
            (p.warmup_iters, p.iters, p.agg_iters),
            (Some(5), Some(20), Some(1))
        );
        assert_eq!(
            (p.validation, p.graph, p.unalign),
            (Some(1), Some(0), Some(0))
        );
        assert_eq!(run.hosts(), ["node-a", "node-b"]);
        assert_eq!(run.devices[1].pid, Some(2002));
        assert_eq!(run.devices[1].bus_id.as_deref(), Some("0000:18:00"));
        assert_eq!(run.devices[1].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(run.rows.len(), 2);
        let last = &run.rows[1];
        assert_eq!((last.size_bytes, last.count), (134217728, 33554432));
        assert_eq!(last.data_type, "float");
        assert_eq!((last.redop.as_deref(), last.root), (Some("sum"), Some(-1)));
        assert_eq!(last.out_of_place.time_us, 2995.1);
        assert_eq!(last.out_of_place.busbw_gbps, 44.81);
        assert_eq!(last.in_place.algbw_gbps, 44.88);
        assert_eq!(last.in_place.wrong, Some(0));
        assert_eq!(last.line, 14);
        assert_eq!(run.footer.out_of_bounds, Some(0));
        assert_eq!(run.footer.avg_busbw_gbps, Some(22.4225));
        assert!(run.is_complete());
        assert_eq!(run.skipped_total, 0);
    }

    #[test]
    fn wrong_counts_are_summed_and_na_is_unknown() {
        let text = CURRENT
            .replace("44.81       0   2990.6", "44.81     512   2990.6")
            .replace("44.88       0\n", "44.88  1e+06\n");
        let run = parse(&text).unwrap();
        assert_eq!(run.rows[1].out_of_place.wrong, Some(512));
        assert_eq!(run.rows[1].in_place.wrong, Some(1_000_000));
        assert_eq!(run.wrong_total(), 1_000_512);
        assert!(!run.wrong_unknown());
        let na = CURRENT.replace(
            "19.88    0.00    0.00       0",
            "19.88    0.00    0.00     N/A",
        );
        let run = parse(&na).unwrap();
        assert_eq!(run.rows[0].in_place.wrong, None);
        assert!(run.wrong_unknown());
    }

    #[test]
    fn truncated_run_has_no_footer_and_a_cut_last_row() {
        let cut = CURRENT.split("   134217728").next().unwrap().to_string()
            + "   134217728      33554432     float     sum      -1   2995.1";
        let run = parse(&cut).unwrap();
        assert_eq!(run.rows.len(), 1);
        assert!(!run.is_complete());
        assert!(run.last_row_cut);
        assert_eq!(run.skipped_total, 1);
    }

    #[test]
    fn a_second_run_is_refused() {
        let twice = format!("{CURRENT}{CURRENT}");
        assert_eq!(
            parse(&twice),
            Err(ParseError::SeveralRuns {
                first_line: 1,
                second_line: 19
            })
        );
        // Every MPI process of a build without MPI=1 prints its own run.
        let table = CURRENT
            .lines()
            .skip(8)
            .take(6)
            .collect::<Vec<_>>()
            .join("\n");
        assert!(matches!(
            parse(&format!("{table}\n{table}\n")),
            Err(ParseError::SeveralRuns { .. })
        ));
    }

    #[test]
    fn each_run_of_a_file_of_several_is_read_on_its_own() {
        let runs = parse_runs(&format!("{CURRENT}echo next\n{CURRENT}")).unwrap();
        let starts: Vec<usize> = runs.iter().map(|(line, _)| *line).collect();
        assert_eq!(starts, [1, 20]);
        let alone = parse(CURRENT).unwrap();
        for (_, run) in &runs {
            assert_eq!(
                (run.rows.len(), &run.footer, &run.devices),
                (alone.rows.len(), &alone.footer, &alone.devices)
            );
        }
        // One run is one run; no run is no nccl-tests output.
        assert_eq!(parse_runs(CURRENT).unwrap().len(), 1);
        assert_eq!(parse_runs("hello\n"), Err(ParseError::NotNcclTests));
    }

    #[test]
    fn not_nccl_tests() {
        for text in [
            "",
            "hello\nworld\n",
            "gpu01:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>\n",
            "# a comment\n# size of things\n",
            "\u{0}\u{1}binary\u{ff}",
        ] {
            assert_eq!(parse(text), Err(ParseError::NotNcclTests), "{text:?}");
        }
    }

    #[test]
    fn launcher_labels_are_removed() {
        let tagged: String = CURRENT
            .lines()
            .map(|l| format!("[1,0]<stdout>:{l}\n"))
            .collect();
        assert_eq!(parse(&tagged).unwrap().rows.len(), 2);
        let labelled: String = CURRENT.lines().map(|l| format!("0: {l}\n")).collect();
        let run = parse(&labelled).unwrap();
        assert_eq!(run.rows.len(), 2);
        assert_eq!(run.footer.avg_busbw_gbps, Some(22.4225));
    }

    #[test]
    fn per_iteration_columns_and_timestamps() {
        // `writeResultHeader` with per-iteration timing and timestamps (`-T`).
        let text = "\
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 1 iters: 5 agg iters: 1 validation: 1 graph: 0 unalign: 0
#                                         out-of-place (+ per-iteration)                                in-place (+ per-iteration)
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%           timestamp
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%) %Y-%m-%d %H:%M:%S
     1048576        262144     float     sum      -1    40.12   26.14   49.01       0    39.50    41.02    41.02     1.20    40.55   25.86   48.49       3    39.90    41.40    41.40     1.31  2025-06-01 10:11:12
# Out of bounds values : 1 FAILED
# Avg bus bandwidth    : 48.75 
";
        let run = parse(text).unwrap();
        assert_eq!(run.rows.len(), 1, "{:?}", run.skipped_lines);
        let row = &run.rows[0];
        assert_eq!(row.out_of_place.busbw_gbps, 49.01);
        assert_eq!(row.in_place.time_us, 40.55);
        assert_eq!(row.in_place.wrong, Some(3));
        assert_eq!(run.footer.out_of_bounds, Some(1));
    }

    #[test]
    fn old_formats_error_column_and_blank_redop() {
        // nccl-tests before `#wrong`: `error` column, no `root`; alltoall left redop blank.
        let text = "\
# nThread 1 nGpus 8 minBytes 1 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
        1024            32   float            88.17    0.01    0.01  5e-07    88.98    0.01    0.01  2e+00*
# Out of bounds values : 1 FAILED
# Avg bus bandwidth    : 0.01
";
        let run = parse(text).unwrap();
        let row = &run.rows[0];
        assert_eq!((row.redop.as_deref(), row.root), (None, None));
        assert_eq!(row.out_of_place.max_error, Some(5e-7));
        assert_eq!(row.in_place.max_error, Some(2.0));
        assert_eq!(row.out_of_place.wrong, None);
        assert!(run.wrong_unknown());
        // The oldest spelled the keys with colons and warmupIters.
        let colons = parameters("nThread: 1 nGpus: 1 minBytes: 8 maxBytes: 134217728 step: 2(factor) warmupIters: 5 iters: 20 validation: 1");
        assert_eq!(colons.warmup_iters, Some(5));
        assert_eq!(colons.max_bytes, Some(134217728));
        let bytes_step = parameters(
            "nThread 1 nGpus 1 minBytes 9 maxBytes 33554432 step: 1048576(bytes) warmup iters: 5",
        );
        assert_eq!(
            (bytes_step.step_bytes, bytes_step.step_factor),
            (Some(1048576), None)
        );
    }

    #[test]
    fn rccl_tests_lines_and_a_failed_average_check() {
        // rccl-tests prints its version as a plain line and an asterisk legend before the
        // footer; `-G`/check runs append OK or FAILED to the average.
        let text = "\
# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
rccl-tests: Version develop:0a1b2c3
# Using devices
#   Rank  0 Pid   5150 on mi-node-1 device  0 [0000:c1:00.0] AMD Instinct MI100
#   Rank  1 Pid   5150 on mi-node-1 device  1 [0000:c5:00.0] AMD Instinct MI100
mi-node-1:5150:5150 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.11<0>
NCCL version 2.18.3+hip6.0
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
   134217728      33554432     float     sum      -1    12500   10.74   10.74      0    12600   10.65   10.65      0
# Errors with asterisks indicate errors that have exceeded the maximum threshold.
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 10.74 FAILED
";
        let run = parse(text).unwrap();
        assert_eq!(run.rccl_tests_version.as_deref(), Some("develop:0a1b2c3"));
        assert_eq!(run.nccl_version.as_deref(), Some("2.18.3+hip6.0"));
        assert_eq!(run.devices[1].bus_id.as_deref(), Some("0000:c5:00.0"));
        assert_eq!(run.devices[1].group, None);
        assert_eq!(run.ranks_per_host(), Some(2));
        assert_eq!(run.rows.len(), 1);
        assert_eq!(run.footer.avg_busbw_gbps, Some(10.74));
        assert_eq!(run.footer.avg_busbw_check.as_deref(), Some("FAILED"));
    }

    #[test]
    fn every_prefix_and_garbled_line_parses_without_panic() {
        let text = CURRENT;
        for end in (0..=text.len()).filter(|i| text.is_char_boundary(*i)) {
            let _ = parse(&text[..end]);
        }
        for garbage in [
            "# size count type time algbw busbw",
            "# size count type time algbw busbw time algbw",
            "# size count type redop time algbw busbw #wrong time algbw busbw #wrong\n1 2 float sum nan 0 0 0 1 0 0 0\n8 2 float sum 1 1 1 -5 1 1 1 0\n8 x\n99999999999999999999999 2 float sum 1 1 1 0 1 1 1 0",
            "# Rank\n# Rank x\n# Rank 1 on\n# Avg bus bandwidth\n# Out of bounds values : x",
            "[\n0:\n12:x\n[1,0]<stdout>:",
        ] {
            let _ = parse(garbage);
        }
    }
}
