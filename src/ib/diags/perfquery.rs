//! `perfquery` output: blocks of `Name:.....value` lines, each under a header such as
//! `# Port counters: Lid 936 port 1`, `# Port extended counters: Lid 1719 port 1 (CapMask: …)`
//! (`-x`) or `# Port counters: Lid 214 all ports` (`-a`); ibsim and some wrappers print the
//! fields without the header, from `PortSelect`. Values are decimal, or `0x` hex.

use super::{canonical_counter, words, NotThisTool};
use crate::ib::counters::CounterValues;

/// One block: the counters of one port (or of all ports summed, `-a`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortCounters {
    pub lid: Option<u16>,
    /// `None` when the header said `all ports` or PortSelect was 255.
    pub port: Option<u8>,
    /// A `# Port extended counters` block (`-x`): PortXmitData and friends are 64-bit.
    pub extended: bool,
    /// IBTA names (see [`canonical_counter`]); PortSelect and CounterSelect are not counters.
    pub counters: CounterValues,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerfQuery {
    pub blocks: Vec<PortCounters>,
    /// Field lines whose value was not a number (cut or garbled).
    pub skipped_lines: usize,
}

/// Header kinds other than the two counter sets (`PortRcvErrorDetails`, `PortXmitDiscardDetails`
/// ...) are read too: their fields are counters of the same port.
pub fn parse(text: &str) -> Result<PerfQuery, NotThisTool> {
    let mut out = PerfQuery::default();
    let mut current: Option<PortCounters> = None;
    for raw in text.lines() {
        let line = words::unquoted(raw);
        if let Some(header) = header(line) {
            if let Some(block) = current.take() {
                out.blocks.push(block);
            }
            current = Some(header);
            continue;
        }
        let Some((name, value)) = field(line) else {
            continue;
        };
        let Some(value) = value else {
            out.skipped_lines += 1;
            continue;
        };
        if name == "PortSelect" {
            // A block without a header starts at its PortSelect.
            let block = match current.as_mut() {
                Some(b) if b.counters.is_empty() => b,
                _ => {
                    if let Some(block) = current.take() {
                        out.blocks.push(block);
                    }
                    current.insert(PortCounters::default())
                }
            };
            if block.port.is_none() && value < 255 {
                block.port = u8::try_from(value).ok();
            }
            continue;
        }
        if name.starts_with("CounterSelect") {
            continue;
        }
        current
            .get_or_insert_with(PortCounters::default)
            .counters
            .insert(canonical_counter(name), value);
    }
    if let Some(block) = current.take() {
        out.blocks.push(block);
    }
    out.blocks.retain(|b| !b.counters.is_empty());
    if out.blocks.is_empty() {
        return Err(NotThisTool("perfquery"));
    }
    Ok(out)
}

/// `# <kind> counters: Lid <lid> port <port>` or `... Lid <lid> all ports`.
fn header(line: &str) -> Option<PortCounters> {
    let rest = line.strip_prefix('#')?.trim_start();
    let (kind, rest) = rest.split_once(" counters: Lid ")?;
    let mut words = rest.split_whitespace();
    let lid = words.next()?.parse::<u16>().ok();
    let port = match (words.next(), words.next()) {
        (Some("port"), Some(p)) => p.parse::<u8>().ok().filter(|&p| p < 255),
        _ => None,
    };
    Some(PortCounters {
        lid,
        port,
        extended: kind.trim() == "Port extended",
        counters: CounterValues::default(),
    })
}

/// `Name:.....value`: the name, and the value when it is a number.
fn field(line: &str) -> Option<(&str, Option<u64>)> {
    let (name, rest) = line.split_once(':')?;
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let value = rest.trim_start_matches('.').trim();
    if !rest.starts_with('.') {
        return None;
    }
    let parsed = if let Some(hex) = value.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()
    } else {
        value.parse::<u64>().ok()
    };
    Some((name, parsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_fields_and_old_names_are_read() {
        let text = "# Port counters: Lid 936 port 1\nPortSelect:......................1\n\
                    CounterSelect:...................0x0000\nSymbolErrors:....................3\n\
                    XmtData:.........................905972985\nXmtWait:.........0x10\n\
                    # Port extended counters: Lid 936 all ports (CapMask: 0x5300)\n\
                    PortXmitData:....................7\nVL15Dro";
        let pq = parse(text).unwrap();
        assert_eq!(pq.blocks.len(), 2);
        let a = &pq.blocks[0];
        assert_eq!((a.lid, a.port, a.extended), (Some(936), Some(1), false));
        assert_eq!(a.counters["SymbolErrorCounter"], 3);
        assert_eq!(a.counters["PortXmitData"], 905_972_985);
        assert_eq!(a.counters["PortXmitWait"], 16);
        assert!(!a.counters.contains("CounterSelect"));
        let b = &pq.blocks[1];
        assert_eq!((b.port, b.extended), (None, true));
        assert_eq!(
            parse("hello\n# Port info: Lid 2\n"),
            Err(NotThisTool("perfquery"))
        );
    }

    #[test]
    fn a_block_without_header_starts_at_port_select() {
        let text = "$ perfquery 5 1\nPortSelect:......................1\n\
                    SymbolErrorCounter:..............0\nPortXmitWait:....................123\n";
        let pq = parse(text).unwrap();
        assert_eq!(pq.blocks.len(), 1);
        assert_eq!(pq.blocks[0].port, Some(1));
        assert_eq!(pq.blocks[0].lid, None);
        assert_eq!(pq.blocks[0].counters["PortXmitWait"], 123);
    }
}
