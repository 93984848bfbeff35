//! `ibnetdiscover` output, both layouts:
//!
//! - the topology file (default): `vendid=`/`devid=`/`…guid=` lines, then a block per node,
//!   `Switch\t36 "S-<guid>"\t\t# "<desc>" base port 0 lid 48 lmc 0` or
//!   `Ca\t2 "H-<guid>"\t\t# "<desc>"`, and one line per linked port:
//!   `[1]\t"H-<rguid>"[1](<rportguid>) \t\t# "<remote desc>" lid 67 4xEDR` in a switch block,
//!   `[1](<portguid>) \t"S-<rguid>"[4]\t\t# lid 3 lmc 0 "<remote desc>" lid 1 4xDDR` in a CA's;
//! - `--ports` (`-p`): one line per port, `SW  1719 10 0x<guid> 4x EDR - CA   134  1 0x<guid>
//!   ( '<desc>' - '<remote desc>' )`, or without the `- …` part for a port with no link
//!   (`4x ???` when its speed is unknown). These GUIDs are port GUIDs: a switch's equals its
//!   node GUID; a CA's stands in for its node's here.
//!
//! Neither layout prints enabled widths or speeds: those stay unknown (ib-report then compares
//! a link with the fabric's common width and speed).

use super::nodes::Nodes;
use super::{words, NotThisTool};
use crate::ib::model::{Guid, IbNode, IbPort, NodeKind, RemoteEnd};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discovery {
    pub nodes: Vec<IbNode>,
    /// Port lines read (links or, with `-p`, unlinked ports).
    pub port_lines: usize,
}

pub fn parse(text: &str) -> Result<Discovery, NotThisTool> {
    let mut nodes = Nodes::default();
    let mut current: Option<(Guid, NodeKind, String, Option<u16>)> = None;
    let mut port_lines = 0;
    let mut headers = 0;
    for raw in text.lines() {
        let line = words::unquoted(raw);
        if let Some(node) = node_header(line) {
            nodes.node(node.0, node.1, &node.2);
            current = Some(node);
            headers += 1;
        } else if line.starts_with('[') {
            if let Some((guid, kind, desc, lid)) = &current {
                if let Some((port, far, far_lid)) = block_port(line, *kind, *lid) {
                    let (far_guid, far_kind, far_port) = (far.guid, far.kind, far.port);
                    let far_desc = far.description.clone();
                    nodes.link((*guid, *kind, desc), port, far);
                    // The comment's last `lid N` is the far end's: a switch's one LID.
                    let far_lid = IbPort {
                        number: far_port,
                        lid: far_lid,
                        ..IbPort::default()
                    };
                    nodes.merge_port(far_guid, far_kind, &far_desc, far_lid);
                    port_lines += 1;
                }
            }
        } else if let Some(()) = ports_line(line, &mut nodes) {
            port_lines += 1;
        }
    }
    if headers == 0 && port_lines == 0 {
        return Err(NotThisTool("ibnetdiscover"));
    }
    Ok(Discovery {
        nodes: nodes.into_nodes(),
        port_lines,
    })
}

fn kind_of_prefix(quoted_id: &str) -> Option<(NodeKind, Guid)> {
    let (kind, hex) = quoted_id.split_once('-')?;
    let kind = match kind {
        "S" => NodeKind::Switch,
        "H" => NodeKind::Hca,
        "R" => NodeKind::Router,
        _ => return None,
    };
    Some((kind, words::guid_hex(hex)?))
}

/// The first `"…"` of `text` and what follows it.
fn quoted(text: &str) -> Option<(&str, &str)> {
    let start = text.find('"')? + 1;
    let len = text[start..].find('"')?;
    Some((&text[start..start + len], &text[start + len + 1..]))
}

/// `Switch\t36 "S-…"\t\t# "desc" base port 0 lid 48 lmc 0`, `Ca\t2 "H-…"\t\t# "desc"`.
fn node_header(line: &str) -> Option<(Guid, NodeKind, String, Option<u16>)> {
    let word = line.split_whitespace().next()?;
    if !matches!(word, "Switch" | "Ca" | "Rt") {
        return None;
    }
    let (id, rest) = quoted(line)?;
    let (kind, guid) = kind_of_prefix(id)?;
    let comment = rest.split_once('#').map(|(_, c)| c).unwrap_or("");
    let (description, after) = quoted(comment).unwrap_or(("", comment));
    let lid = lid_after(after);
    Some((guid, kind, description.to_owned(), lid))
}

/// The number after the first `lid ` in `text`.
fn lid_after(text: &str) -> Option<u16> {
    let mut ws = text.split_whitespace();
    while let Some(w) = ws.next() {
        if w == "lid" {
            return ws.next()?.parse().ok();
        }
    }
    None
}

/// A port line of a node block.
fn block_port(
    line: &str,
    kind: NodeKind,
    node_lid: Option<u16>,
) -> Option<(IbPort, RemoteEnd, Option<u16>)> {
    let close = line.find(']')?;
    let number: u8 = line[1..close].trim().parse().ok()?;
    let rest = &line[close + 1..];
    let (id, after_id) = quoted(rest)?;
    let (far_kind, far_guid) = kind_of_prefix(id)?;
    let far_port: u8 = {
        let a = after_id.strip_prefix('[')?;
        a[..a.find(']')?].trim().parse().ok()?
    };
    let comment = after_id.split_once('#').map(|(_, c)| c).unwrap_or("");
    // The local LID (CA blocks: `# lid 3 lmc 0 "desc" …`) comes before the remote description.
    let local_lid = match kind {
        NodeKind::Switch => node_lid,
        _ => comment.split('"').next().and_then(lid_after).or(node_lid),
    };
    let (description, tail) = match (comment.find('"'), comment.rfind('"')) {
        (Some(a), Some(b)) if b > a => (&comment[a + 1..b], &comment[b + 1..]),
        _ => ("", comment),
    };
    let (width, speed) = tail
        .split_whitespace()
        .last()
        .and_then(words::width_speed)
        .map_or((None, None), |(w, s)| (Some(w), Some(s)));
    let port = IbPort {
        number,
        active_width: width,
        active_speed: speed,
        lid: local_lid,
        ..IbPort::default()
    };
    let far = RemoteEnd {
        guid: far_guid,
        port: far_port,
        description: description.to_owned(),
        kind: far_kind,
    };
    Some((port, far, lid_after(tail)))
}

fn kind_word(word: &str) -> Option<NodeKind> {
    match word {
        "SW" => Some(NodeKind::Switch),
        "CA" => Some(NodeKind::Hca),
        "RT" => Some(NodeKind::Router),
        _ => None,
    }
}

/// One `-p` line: `SW  1719 10 0x… 4x EDR - CA   134  1 0x… ( 'desc' - 'rdesc' )`.
fn ports_line(line: &str, nodes: &mut Nodes) -> Option<()> {
    let (near, far) = match line.split_once(" - ") {
        Some((n, f)) if kind_word(f.split_whitespace().next()?).is_some() => (n, Some(f)),
        _ => (line, None),
    };
    let mut ws = near.split_whitespace();
    let kind = kind_word(ws.next()?)?;
    let lid: u16 = ws.next()?.parse().ok()?;
    let number: u8 = ws.next()?.parse().ok()?;
    let guid = words::guid_hex(ws.next()?.strip_prefix("0x")?)?;
    let width = ws.next().and_then(words::width);
    let speed = ws.next().and_then(words::speed_name);
    let port = IbPort {
        number,
        active_width: width,
        active_speed: speed,
        lid: Some(lid),
        ..IbPort::default()
    };
    let Some(far) = far else {
        // No link: the rest is the node's description, quoted by newer versions.
        let desc: String = ws.collect::<Vec<_>>().join(" ");
        let desc = desc.trim_matches('\'');
        nodes.merge_port(guid, kind, desc, port);
        return Some(());
    };
    let (far_head, descs) = far.split_once('(').unwrap_or((far, ""));
    let mut fw = far_head.split_whitespace();
    let far_kind = kind_word(fw.next()?)?;
    let far_lid: Option<u16> = fw.next()?.parse().ok();
    let far_port: u8 = fw.next()?.parse().ok()?;
    let far_guid = words::guid_hex(fw.next()?.strip_prefix("0x")?)?;
    let descs = descs.trim().trim_end_matches(')').trim();
    let (desc, far_desc) = descs.split_once("' - '").unwrap_or((descs, ""));
    let desc = desc.trim().trim_matches('\'');
    let far_desc = far_desc.trim().trim_matches('\'');
    nodes.link(
        (guid, kind, desc),
        port,
        RemoteEnd {
            guid: far_guid,
            port: far_port,
            description: far_desc.to_owned(),
            kind: far_kind,
        },
    );
    let far_port = IbPort {
        number: far_port,
        lid: far_lid,
        ..IbPort::default()
    };
    nodes.merge_port(far_guid, far_kind, far_desc, far_port);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ib::model::{LinkSpeed, LinkWidth};

    #[test]
    fn ca_blocks_give_the_local_lid_and_the_remote_switch() {
        let text = "Ca\t2 \"H-001e0bffff4cafc0\"\t\t# \"telesto HCA-1\"\n\
                    [1](1e0bffff4cafc1) \t\"S-0008f10500200134\"[4]\t\t# lid 3 lmc 0 \"Voltaire 4036 # v4036\" lid 1 4xDDR\n";
        let d = parse(text).unwrap();
        assert_eq!(d.nodes.len(), 2);
        let ca = d.nodes.iter().find(|n| n.kind == NodeKind::Hca).unwrap();
        assert_eq!(ca.description, "telesto HCA-1");
        let p = &ca.ports[0];
        assert_eq!((p.number, p.lid), (1, Some(3)));
        assert_eq!(
            (p.active_width, p.active_speed),
            (Some(LinkWidth(4)), Some(LinkSpeed::Ddr))
        );
        let remote = p.remote.as_ref().unwrap();
        assert_eq!((remote.guid, remote.port), (Guid(0x0008_f105_0020_0134), 4));
        assert_eq!(remote.description, "Voltaire 4036 # v4036");
        let sw = d.nodes.iter().find(|n| n.kind == NodeKind::Switch).unwrap();
        assert_eq!(sw.ports[0].number, 4);
        assert_eq!(sw.ports[0].remote.as_ref().unwrap().guid, ca.guid);
    }
}
