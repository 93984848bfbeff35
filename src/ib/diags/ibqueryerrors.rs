//! `ibqueryerrors` output: `Errors for 0x<guid> "<desc>"` (a switch: ibqueryerrors prints the
//! GUID only for switches) or `Errors for "<desc>"` (a CA), then one line per port with errors,
//! `   GUID 0x<port guid> port <n>: [Name == value] ...` (`port ALL` for a switch's summed
//! counters), `[Name == value (human)]` with `--data`, an optional `Link info:` line in
//! iblinkinfo's format (`--details`), and a `## Summary:` at the end.

use super::{canonical_counter, iblinkinfo, words, NotThisTool};
use crate::ib::counters::CounterValues;
use crate::ib::model::Guid;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryErrors {
    pub nodes: Vec<ErrorNode>,
    /// From `## Summary: N nodes checked, M bad nodes found`.
    pub nodes_checked: Option<u64>,
    /// From `##          N ports checked, M ports have errors beyond threshold`.
    pub ports_checked: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorNode {
    /// Printed for switches only.
    pub switch_guid: Option<Guid>,
    pub description: String,
    pub ports: Vec<ErrorPort>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ErrorPort {
    /// The port GUID as printed (a switch's ports all carry the switch GUID).
    pub guid: Guid,
    /// `None` for `port ALL`.
    pub port: Option<u8>,
    pub counters: CounterValues,
    /// The `Link info:` line of `--details`.
    pub link: Option<iblinkinfo::LinkRow>,
}

pub fn parse(text: &str) -> Result<QueryErrors, NotThisTool> {
    let mut out = QueryErrors::default();
    let mut seen = false;
    for raw in text.lines() {
        let line = words::unquoted(raw);
        if let Some(rest) = line.strip_prefix("Errors for ") {
            let rest = rest.trim();
            let (guid, desc) = match rest.split_once(' ') {
                Some((g, d)) if g.starts_with("0x") => (words::guid_hex(g), d.trim()),
                _ if rest.starts_with("0x") => (words::guid_hex(rest), ""),
                _ => (None, rest),
            };
            out.nodes.push(ErrorNode {
                switch_guid: guid,
                description: desc.trim_matches('"').to_owned(),
                ports: Vec::new(),
            });
            seen = true;
        } else if let Some(rest) = line.strip_prefix("GUID ") {
            if let (Some(port), Some(node)) = (port_line(rest), out.nodes.last_mut()) {
                node.ports.push(port);
                seen = true;
            }
        } else if let Some(rest) = line.strip_prefix("Link info:") {
            let row = iblinkinfo::parse_row(rest);
            if let Some(port) = out.nodes.last_mut().and_then(|n| n.ports.last_mut()) {
                port.link = row;
            }
        } else if let Some(rest) = line.strip_prefix("## Summary:") {
            out.nodes_checked = leading_number(rest);
            seen = true;
        } else if let Some(rest) = line.strip_prefix("##") {
            if rest.contains("ports checked") {
                out.ports_checked = leading_number(rest);
            }
        }
    }
    if !seen {
        return Err(NotThisTool("ibqueryerrors"));
    }
    Ok(out)
}

fn leading_number(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// `0x<guid> port <n|ALL>: [Name == value] ...`
fn port_line(rest: &str) -> Option<ErrorPort> {
    let (head, fields) = rest.split_once(':')?;
    let mut head = head.split_whitespace();
    let guid = words::guid_hex(head.next()?)?;
    if head.next()? != "port" {
        return None;
    }
    let port = match head.next()? {
        "ALL" => None,
        n => Some(n.parse::<u8>().ok()?),
    };
    let mut counters = CounterValues::default();
    for item in fields.split('[').skip(1) {
        let item = item.split(']').next().unwrap_or(item);
        let Some((name, value)) = item.split_once("==") else {
            continue;
        };
        let value = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok());
        if let Some(value) = value {
            counters.insert(canonical_counter(name.trim()), value);
        }
    }
    Some(ErrorPort {
        guid,
        port,
        counters,
        link: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_and_ca_headers_ports_all_and_data_values() {
        let text = "Errors for 0x7cfe900300aa0010 \"MF0;leaf-07:MQM8700/U1\"\n\
           GUID 0x7cfe900300aa0010 port ALL: [LinkDownedCounter == 12]\n\
           GUID 0x7cfe900300aa0010 port 9: [SymbolErrorCounter == 65535] [PortXmitData == 31415926535897 (  infPB)]\n\
        Errors for \"gpu-node-03 mlx5_2\"\n   GUID 0x946dae0300bb0203 port 1: [PortXmitWait == 4294967295]\n\
        ## Summary: 6 nodes checked, 2 bad nodes found\n##          51 ports checked, 3 ports have errors\n";
        let q = parse(text).unwrap();
        assert_eq!(q.nodes.len(), 2);
        assert_eq!(q.nodes[0].switch_guid, Some(Guid(0x7cfe_9003_00aa_0010)));
        assert_eq!(q.nodes[0].description, "MF0;leaf-07:MQM8700/U1");
        assert_eq!(q.nodes[0].ports[0].port, None);
        assert_eq!(
            q.nodes[0].ports[1].counters["PortXmitData"],
            31_415_926_535_897
        );
        assert_eq!(q.nodes[1].switch_guid, None);
        assert_eq!(q.nodes[1].ports[0].counters["PortXmitWait"], 4_294_967_295);
        assert_eq!((q.nodes_checked, q.ports_checked), (Some(6), Some(51)));
        assert!(parse("GUID 0x1 port 1: [X == 1]\n").is_err());
    }
}
