//! Every parser of `src/ib/diags/` over every sample of the corpus kind `infiniband-diags`
//! (`tests/common/corpus.rs`), compared with the sample's expectation: `key = value` lines that
//! must each equal the summary computed here (counts, and chosen ports' width/speed/state/remote
//! or counter values). A sample without its expectation fails, and so does one whose tool is not detected. Then every file,
//! cut and garbled, through every parser, the merge and the findings: none may panic.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rdma_fabric_exporter::diag::ib_report::findings;
use rdma_fabric_exporter::ib::diags::detect::{parse_any, Parsed};
use rdma_fabric_exporter::ib::diags::{iblinkinfo, ibnetdiscover, ibqueryerrors, merge, perfquery};
use rdma_fabric_exporter::ib::model::IbNode;

use crate::common::corpus::corpus;

/// The corpus samples, sorted.
pub fn samples() -> Vec<PathBuf> {
    corpus("infiniband-diags").samples()
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or("-".to_owned(), |v| v.to_string())
}

fn topology_summary(out: &mut BTreeMap<String, String>, nodes: &[IbNode]) {
    let count = |k: &str| nodes.iter().filter(|n| n.kind.as_label() == k).count();
    out.insert("nodes".into(), nodes.len().to_string());
    out.insert("switches".into(), count("switch").to_string());
    out.insert("hcas".into(), count("hca").to_string());
    let linked: usize = nodes
        .iter()
        .map(|n| n.ports.iter().filter(|p| p.remote.is_some()).count())
        .sum();
    out.insert("linked_ports".into(), linked.to_string());
    for n in nodes {
        out.insert(format!("description {}", n.guid), n.description.clone());
        for p in &n.ports {
            let remote = p
                .remote
                .as_ref()
                .map_or("-".to_owned(), |r| format!("{} {}", r.guid, r.port));
            out.insert(
                format!("port {} {}", n.guid, p.number),
                format!(
                    "{} {} enabled {} {} state {} lid {} -> {}",
                    opt(p.active_width),
                    opt(p.active_speed.map(|s| s.as_label())),
                    opt(p.enabled_width),
                    opt(p.enabled_speed.map(|s| s.as_label())),
                    opt(p.state.map(|s| s as u8)),
                    opt(p.lid),
                    remote
                ),
            );
        }
    }
}

fn summary(parsed: &Parsed) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("tool".into(), parsed.tool().as_str().to_owned());
    match parsed {
        Parsed::Ibnetdiscover(d) => {
            out.insert("port_lines".into(), d.port_lines.to_string());
            topology_summary(&mut out, &d.nodes);
        }
        Parsed::Iblinkinfo(l) => {
            out.insert("rows".into(), l.rows.to_string());
            out.insert(
                "unresolved_remotes".into(),
                l.unresolved_remotes.to_string(),
            );
            topology_summary(&mut out, &l.nodes);
        }
        Parsed::Perfquery(p) => {
            out.insert("blocks".into(), p.blocks.len().to_string());
            out.insert("skipped_lines".into(), p.skipped_lines.to_string());
            for b in &p.blocks {
                let at = format!("{} {}", opt(b.lid), opt(b.port));
                out.insert(format!("extended {at}"), b.extended.to_string());
                out.insert(format!("fields {at}"), b.counters.len().to_string());
                for (name, value) in &b.counters {
                    out.insert(format!("counter {at} {name}"), value.to_string());
                }
            }
        }
        Parsed::Ibqueryerrors(q) => {
            out.insert("error_nodes".into(), q.nodes.len().to_string());
            let ports: usize = q.nodes.iter().map(|n| n.ports.len()).sum();
            out.insert("error_ports".into(), ports.to_string());
            out.insert("nodes_checked".into(), opt(q.nodes_checked));
            out.insert("ports_checked".into(), opt(q.ports_checked));
            for n in &q.nodes {
                for p in &n.ports {
                    let at = format!(
                        "{} {}",
                        p.guid,
                        p.port.map_or("ALL".to_owned(), |p| p.to_string())
                    );
                    for (name, value) in &p.counters {
                        out.insert(format!("counter {at} {name}"), value.to_string());
                    }
                }
            }
        }
    }
    out
}

#[test]
fn every_sample_gives_its_expected_summary() {
    for (file, expected) in corpus("infiniband-diags").with_expected_files() {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        let parsed = parse_any(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let got = summary(&parsed);
        let mut checked = 0;
        for line in expected
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            let (key, value) = line
                .split_once(" = ")
                .unwrap_or_else(|| panic!("{}: expectation {line:?}", file.display()));
            assert_eq!(
                got.get(key).map(String::as_str),
                Some(value),
                "{}: {key}",
                file.display()
            );
            checked += 1;
        }
        assert!(checked >= 3, "{}: too few expectations", file.display());
    }
}

/// Cut at every 1/300th of the file and at every line end, then garbled: lines reversed,
/// digits turned into letters, separators doubled, every 7th byte replaced.
fn variants(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let step = (text.len() / 300).max(1);
    let mut cuts: Vec<usize> = (0..text.len()).step_by(step).collect();
    cuts.extend(text.match_indices('\n').map(|(i, _)| i));
    for cut in cuts {
        if text.is_char_boundary(cut) {
            out.push(text[..cut].to_owned());
            out.push(text[cut..].to_owned());
        }
    }
    out.push(text.lines().rev().collect::<Vec<_>>().join("\n"));
    out.push(text.replace(|c: char| c.is_ascii_digit(), "z"));
    out.push(text.replace(':', "::").replace('[', "[[").replace('"', ""));
    out.push(text.replace("0x", "0x0000000000000000000"));
    let garbled: String = text
        .chars()
        .enumerate()
        .map(|(i, c)| if i % 7 == 3 { '\u{fffd}' } else { c })
        .collect();
    out.push(garbled);
    out
}

#[test]
fn cut_and_garbled_samples_never_panic_any_parser() {
    let mut parsed_parts = 0;
    for file in samples() {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        for v in variants(&text) {
            let _ = ibnetdiscover::parse(&v);
            let _ = iblinkinfo::parse(&v);
            let _ = perfquery::parse(&v);
            let _ = ibqueryerrors::parse(&v);
            for line in v.lines() {
                let _ = iblinkinfo::parse_row(line);
            }
            if let Ok(p) = parse_any(&v) {
                parsed_parts += 1;
                let merged = merge::merge(&[p]);
                let _ = findings::find(&merged, 0.01);
            }
        }
    }
    // Most cuts still hold lines of their tool: the parsers read what is there.
    assert!(parsed_parts > 500, "{parsed_parts}");
}
