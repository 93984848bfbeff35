//! `iblinkinfo` output, both layouts:
//!
//! - default: a header per node (`CA: <desc>:`, `Switch: 0x<guid> <desc>:`) then one line per
//!   port, `[0x<port guid>] <lid> <port>[  ] ==( 4X 25.78125 Gbps Active/  LinkUp)==>  <rlid>
//!   <rport>[  ] "<remote desc>" ( )`, the remote named by LID only;
//! - `--line` (`-l`): `0x<guid> "<desc>" <lid> <port>[  ] ==(…)==>  0x<rguid> <rlid> <rport>[  ]
//!   "<remote desc>" ( )`.
//!
//! A port not linked reads `==(                Down/ Polling)==>             [  ] "" ( )`. The
//! closing `( … )` holds iblinkinfo's `Could be 4X` / `Could be 25.78125 Gbps` when the link
//! trained below what both ends support (rdma-core infiniband-diags/iblinkinfo.c, `get_msg`):
//! that is the "enabled" width or speed of the model; without it the link is at its best.

use std::collections::BTreeMap;

use super::nodes::Nodes;
use super::{words, NotThisTool};
use crate::ib::model::{
    Guid, IbNode, IbPort, LidOnlyRemote, LinkSpeed, LinkWidth, NodeKind, PhysState, PortState,
    RemoteEnd,
};

/// One port line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkRow {
    /// The node GUID (`--line`), or the port GUID a CA line of the default layout starts with.
    pub guid: Option<Guid>,
    /// The node description (`--line` only).
    pub description: Option<String>,
    pub lid: Option<u16>,
    pub port: u8,
    pub active_width: Option<LinkWidth>,
    pub active_speed: Option<LinkSpeed>,
    pub state: Option<PortState>,
    pub phys_state: Option<PhysState>,
    /// `Could be …`: what the link should have trained at.
    pub could_be_width: Option<LinkWidth>,
    pub could_be_speed: Option<LinkSpeed>,
    pub remote: Option<RemoteRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteRow {
    pub guid: Option<Guid>,
    pub lid: Option<u16>,
    pub port: u8,
    pub description: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkInfo {
    /// Sorted by GUID (a CA known only by a port GUID is keyed by it).
    pub nodes: Vec<IbNode>,
    pub rows: usize,
    /// Remote ends named by a LID no line of the output gave (a filtered or cut output).
    pub unresolved_remotes: usize,
}

/// One port line of either layout (also ibqueryerrors' `Link info:` lines); `None` when the
/// line is not one.
pub fn parse_row(line: &str) -> Option<LinkRow> {
    let open = line.find("==(")?;
    let close = open + line[open..].find(")==>")?;
    let (left, middle, right) = (&line[..open], &line[open + 3..close], &line[close + 4..]);
    let mut row = LinkRow::default();

    // Left: [0xguid] ["desc"] lid port[..]
    let bracket = left.rfind('[')?;
    let before = &left[..bracket];
    let (lead, tail) = match (before.find('"'), before.rfind('"')) {
        (Some(a), Some(b)) if b > a => {
            row.description = Some(before[a + 1..b].trim().to_owned());
            (&before[..a], &before[b + 1..])
        }
        _ => ("", before),
    };
    let mut tail_words: Vec<&str> = lead.split_whitespace().collect();
    tail_words.extend(tail.split_whitespace());
    row.port = tail_words.pop()?.parse().ok()?;
    if let Some(lid) = tail_words.pop() {
        if let Some(g) = lid.strip_prefix("0x") {
            row.guid = words::guid_hex(g);
        } else {
            row.lid = lid.parse().ok();
        }
    }
    if let Some(g) = tail_words.pop() {
        row.guid = row.guid.or_else(|| words::guid_hex(g));
    }

    // Middle: [4X] [25.78125 Gbps] State/ Phys
    let (speed_part, phys) = middle.split_once('/')?;
    row.phys_state = words::phys_state(phys.trim());
    let mut mid: Vec<&str> = speed_part.split_whitespace().collect();
    row.state = words::port_state(mid.pop()?);
    if let Some(first) = mid.first() {
        row.active_width = words::width(first);
    }
    if let Some(i) = mid.iter().position(|w| w.eq_ignore_ascii_case("Gbps")) {
        row.active_speed = i
            .checked_sub(1)
            .and_then(|j| words::speed_lane_gbps(mid[j]));
    }

    // Right: [0xrguid] rlid rport[..] "desc" ( msg )
    let quote = right.find('"').unwrap_or(right.len());
    let (pre, post) = right.split_at(quote);
    let mut description = String::new();
    let mut msg = post;
    if let Some(rest) = post.strip_prefix('"') {
        if let Some(end) = rest.find('"') {
            description = rest[..end].to_owned();
            msg = &rest[end + 1..];
        }
    }
    if let Some(bracket) = pre.find('[') {
        let mut ws: Vec<&str> = pre[..bracket].split_whitespace().collect();
        if let Some(port) = ws.pop().and_then(|p| p.parse::<u8>().ok()) {
            let lid = ws.pop().and_then(|l| l.parse::<u16>().ok());
            let guid = ws.pop().and_then(words::guid_hex);
            row.remote = Some(RemoteRow {
                guid,
                lid,
                port,
                description,
            });
        }
    }
    let mut parts = msg.split("Could be ").skip(1);
    for part in parts.by_ref() {
        let mut ws = part.split_whitespace();
        let Some(first) = ws.next() else { continue };
        if let Some(w) = words::width(first) {
            row.could_be_width = Some(w);
        } else if ws
            .next()
            // iblinkinfo prints `(%s %s)`: the speed hint, last, meets the parenthesis.
            .is_some_and(|u| u.trim_end_matches(')').eq_ignore_ascii_case("Gbps"))
        {
            row.could_be_speed = words::speed_lane_gbps(first);
        }
    }
    Some(row)
}

#[derive(Debug, Clone)]
struct Header {
    kind: NodeKind,
    guid: Option<Guid>,
    description: String,
}

/// The whole output; its nodes with both ends of each link.
pub fn parse(text: &str) -> Result<LinkInfo, NotThisTool> {
    let mut header: Option<Header> = None;
    let mut rows: Vec<(Option<Header>, LinkRow)> = Vec::new();
    for raw in text.lines() {
        let line = words::unquoted(raw);
        if let Some(rest) = line.strip_prefix("CA: ") {
            header = Some(Header {
                kind: NodeKind::Hca,
                guid: None,
                description: rest.trim().trim_end_matches(':').to_owned(),
            });
        } else if let Some(rest) = line.strip_prefix("Switch: ") {
            let rest = rest.trim().trim_end_matches(':');
            let (guid, desc) = rest.split_once(' ').unwrap_or((rest, ""));
            header = Some(Header {
                kind: NodeKind::Switch,
                guid: words::guid_hex(guid),
                description: desc.trim().to_owned(),
            });
        } else if let Some(row) = parse_row(line) {
            rows.push((header.clone(), row));
        }
    }
    if rows.is_empty() {
        return Err(NotThisTool("iblinkinfo"));
    }
    Ok(assemble(rows))
}

/// A node's identity and kind for each row: the header's, else the line's own (`--line`),
/// whose kind iblinkinfo does not print: more than two ports, or a description of the
/// switches' firmware defaults (`MF0;…`, `… Mellanox Technologies`), make a switch.
fn assemble(rows: Vec<(Option<Header>, LinkRow)>) -> LinkInfo {
    struct Who {
        guid: Guid,
        kind: NodeKind,
        description: String,
    }
    let mut max_port: BTreeMap<Guid, u8> = BTreeMap::new();
    for (h, row) in &rows {
        if let Some(g) = h.as_ref().and_then(|h| h.guid).or(row.guid) {
            let m = max_port.entry(g).or_default();
            *m = (*m).max(row.port);
        }
    }
    let mut unresolved = 0;
    let mut who_by_lid: BTreeMap<u16, (Guid, NodeKind, String)> = BTreeMap::new();
    let mut resolved: Vec<(Who, &LinkRow)> = Vec::new();
    for (h, row) in &rows {
        let Some(guid) = h.as_ref().and_then(|h| h.guid).or(row.guid) else {
            unresolved += 1;
            continue;
        };
        let description = h
            .as_ref()
            .map(|h| h.description.clone())
            .or_else(|| row.description.clone())
            .unwrap_or_default();
        let kind = match h {
            Some(h) => h.kind,
            None => guess_kind(&description, max_port.get(&guid).copied().unwrap_or(0)),
        };
        if let Some(lid) = row.lid {
            who_by_lid
                .entry(lid)
                .or_insert((guid, kind, description.clone()));
        }
        resolved.push((
            Who {
                guid,
                kind,
                description,
            },
            row,
        ));
    }
    let kinds: BTreeMap<Guid, NodeKind> = resolved.iter().map(|(w, _)| (w.guid, w.kind)).collect();
    let mut nodes = Nodes::default();
    for (who, row) in &resolved {
        let active = row.state == Some(PortState::Active);
        let port = IbPort {
            number: row.port,
            state: row.state,
            phys_state: row.phys_state,
            active_width: row.active_width,
            active_speed: row.active_speed,
            enabled_width: row
                .could_be_width
                .or(if active { row.active_width } else { None }),
            enabled_speed: row
                .could_be_speed
                .or(if active { row.active_speed } else { None }),
            lid: row.lid,
            ..IbPort::default()
        };
        let near = (who.guid, who.kind, who.description.as_str());
        let far = row.remote.as_ref().and_then(|r| {
            let (guid, kind) = match r.guid {
                Some(g) => (
                    g,
                    kinds
                        .get(&g)
                        .copied()
                        .unwrap_or_else(|| guess_kind(&r.description, r.port)),
                ),
                None => {
                    let (g, k, _) = r.lid.and_then(|l| who_by_lid.get(&l))?;
                    (*g, *k)
                }
            };
            Some(RemoteEnd {
                guid,
                port: r.port,
                description: r.description.clone(),
                kind,
            })
        });
        match far {
            Some(far) => nodes.link(near, port, far),
            None => {
                let mut port = port;
                if let Some(remote) = &row.remote {
                    unresolved += 1;
                    port.remote_lid_only = remote.lid.map(|lid| LidOnlyRemote {
                        lid,
                        port: remote.port,
                        description: remote.description.clone(),
                    });
                }
                nodes.merge_port(who.guid, who.kind, &who.description, port);
            }
        }
    }
    LinkInfo {
        nodes: nodes.into_nodes(),
        rows: rows.len(),
        unresolved_remotes: unresolved,
    }
}

fn guess_kind(description: &str, max_port: u8) -> NodeKind {
    if max_port > 2
        || description.starts_with("MF0;")
        || description.ends_with("Mellanox Technologies")
    {
        NodeKind::Switch
    } else {
        NodeKind::Hca
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_layout_rows_with_could_be_hints() {
        let row = parse_row(
            "0x0002c90200a1b2c3 \"SwitchX -  Mellanox Technologies\"      4   17[  ] ==( 1X 2.5 Gbps Active/  LinkUp)==>  0x0002c90300d4e5f6      5    1[  ] \"gpu-node-09 HCA-1\" ( Could be 4X Could be 10.0 Gbps )",
        )
        .unwrap();
        assert_eq!(row.guid, Some(Guid(0x0002_c902_00a1_b2c3)));
        assert_eq!(
            row.description.as_deref(),
            Some("SwitchX -  Mellanox Technologies")
        );
        assert_eq!((row.lid, row.port), (Some(4), 17));
        assert_eq!(row.active_width, Some(LinkWidth(1)));
        assert_eq!(row.active_speed, Some(LinkSpeed::Sdr));
        assert_eq!(row.could_be_width, Some(LinkWidth(4)));
        assert_eq!(row.could_be_speed, Some(LinkSpeed::Qdr));
        let remote = row.remote.unwrap();
        assert_eq!(
            (remote.guid, remote.lid, remote.port),
            (Some(Guid(0x0002_c903_00d4_e5f6)), Some(5), 1)
        );
        assert_eq!(remote.description, "gpu-node-09 HCA-1");
    }

    #[test]
    fn down_ports_have_no_remote() {
        let row = parse_row(
            "           2    5[  ] ==(                Down/ Polling)==>             [  ] \"\" ( )",
        )
        .unwrap();
        assert_eq!((row.lid, row.port), (Some(2), 5));
        assert_eq!(row.state, Some(PortState::Down));
        assert_eq!(row.phys_state, Some(PhysState::Polling));
        assert_eq!(row.remote, None);
        assert_eq!(row.active_width, None);
    }
}
