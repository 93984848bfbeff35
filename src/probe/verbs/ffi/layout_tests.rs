//! Every size and offset the binding declares, compared with what a C compiler makes of
//! rdma-core's `infiniband/verbs.h` (libibverbs-dev; `scripts/test` installs it).

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::process::Command;

use super::*;

/// One declared struct: its C name, its Rust size, and (C field path, Rust offset) pairs.
struct Layout {
    c_type: &'static str,
    size: usize,
    fields: Vec<(String, usize)>,
}

/// `layout!("struct ibv_sge", ibv_sge { addr, length, lkey })`; a field whose C name differs
/// is written `rust_path as "c.path"`.
macro_rules! layout {
    ($c:literal, $rust:ty { $($($field:ident).+ $(as $cname:literal)?),* $(,)? }) => {
        Layout {
            c_type: $c,
            size: size_of::<$rust>(),
            fields: vec![$((
                layout!(@name $($field).+ $(as $cname)?),
                offset_of!($rust, $($field).+),
            )),*],
        }
    };
    (@name $($field:ident).+ as $cname:literal) => { $cname.to_string() };
    (@name $($field:ident).+) => { stringify!($($field).+).replace(' ', "") };
}

fn declared() -> Vec<Layout> {
    vec![
        layout!("union ibv_gid", ibv_gid { raw }),
        layout!(
            "struct ibv_comp_channel",
            ibv_comp_channel {
                context,
                fd,
                refcnt
            }
        ),
        layout!(
            "struct ibv_device",
            ibv_device {
                node_type,
                transport_type,
                name,
                dev_name,
                dev_path,
                ibdev_path
            }
        ),
        layout!(
            "struct ibv_context_ops",
            ibv_context_ops {
                poll_cq,
                req_notify_cq,
                post_send,
                post_recv
            }
        ),
        layout!("struct ibv_context", ibv_context { device, ops, ops.poll_cq, ops.post_send, ops.post_recv, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }),
        layout!("struct verbs_context", verbs_context { query_port, query_rt_values, create_cq_ex, priv_ as "priv", query_device_ex, sz, context, context.ops.poll_cq, context.abi_compat }),
        layout!("struct ibv_device_attr", ibv_device_attr {}),
        layout!(
            "struct ibv_odp_caps",
            ibv_odp_caps {
                general_caps,
                per_transport_caps
            }
        ),
        layout!(
            "struct ibv_device_attr_ex",
            ibv_device_attr_ex {
                orig_attr,
                comp_mask,
                odp_caps,
                completion_timestamp_mask,
                hca_core_clock
            }
        ),
        layout!(
            "struct ibv_port_attr",
            ibv_port_attr {
                state,
                max_mtu,
                active_mtu,
                gid_tbl_len,
                port_cap_flags,
                max_msg_sz,
                bad_pkey_cntr,
                qkey_viol_cntr,
                pkey_tbl_len,
                lid,
                sm_lid,
                lmc,
                max_vl_num,
                sm_sl,
                subnet_timeout,
                init_type_reply,
                active_width,
                active_speed,
                phys_state,
                link_layer,
                flags,
                port_cap_flags2,
            }
        ),
        layout!(
            "struct ibv_gid_entry",
            ibv_gid_entry {
                gid,
                gid_index,
                port_num,
                gid_type,
                ndev_ifindex
            }
        ),
        layout!(
            "struct ibv_mr",
            ibv_mr {
                context,
                pd,
                addr,
                length,
                handle,
                lkey,
                rkey
            }
        ),
        layout!(
            "struct ibv_cq",
            ibv_cq {
                context,
                channel,
                cq_context,
                handle,
                cqe,
                mutex,
                cond,
                comp_events_completed,
                async_events_completed
            }
        ),
        layout!(
            "struct ibv_cq_ex",
            ibv_cq_ex {
                context,
                channel,
                cq_context,
                handle,
                cqe,
                mutex,
                cond,
                comp_events_completed,
                async_events_completed,
                comp_mask,
                status,
                wr_id,
                start_poll,
                next_poll,
                end_poll,
                read_opcode,
                read_vendor_err,
                read_byte_len,
                read_imm_data,
                read_qp_num,
                read_src_qp,
                read_wc_flags,
                read_slid,
                read_sl,
                read_dlid_path_bits,
                read_completion_ts,
                read_cvlan,
                read_flow_tag,
                read_tm_info,
                read_completion_wallclock_ns,
            }
        ),
        layout!("struct ibv_poll_cq_attr", ibv_poll_cq_attr { comp_mask }),
        layout!(
            "struct ibv_cq_init_attr_ex",
            ibv_cq_init_attr_ex {
                cqe,
                cq_context,
                channel,
                comp_vector,
                wc_flags,
                comp_mask,
                flags,
                parent_domain
            }
        ),
        layout!(
            "struct ibv_wc",
            ibv_wc {
                wr_id,
                status,
                opcode,
                vendor_err,
                byte_len,
                imm_data,
                qp_num,
                src_qp,
                wc_flags,
                pkey_index,
                slid,
                sl,
                dlid_path_bits
            }
        ),
        layout!(
            "struct ibv_qp",
            ibv_qp {
                context,
                qp_context,
                pd,
                send_cq,
                recv_cq,
                srq,
                handle,
                qp_num,
                state,
                qp_type,
                mutex,
                cond,
                events_completed
            }
        ),
        layout!(
            "struct ibv_qp_cap",
            ibv_qp_cap {
                max_send_wr,
                max_recv_wr,
                max_send_sge,
                max_recv_sge,
                max_inline_data
            }
        ),
        layout!(
            "struct ibv_qp_init_attr",
            ibv_qp_init_attr {
                qp_context,
                send_cq,
                recv_cq,
                srq,
                cap,
                qp_type,
                sq_sig_all
            }
        ),
        layout!(
            "struct ibv_global_route",
            ibv_global_route {
                dgid,
                flow_label,
                sgid_index,
                hop_limit,
                traffic_class
            }
        ),
        layout!("struct ibv_ah_attr", ibv_ah_attr { grh, grh.dgid, grh.sgid_index, dlid, sl, src_path_bits, static_rate, is_global, port_num }),
        layout!(
            "struct ibv_qp_attr",
            ibv_qp_attr {
                qp_state,
                cur_qp_state,
                path_mtu,
                path_mig_state,
                qkey,
                rq_psn,
                sq_psn,
                dest_qp_num,
                qp_access_flags,
                cap,
                ah_attr,
                alt_ah_attr,
                pkey_index,
                alt_pkey_index,
                en_sqd_async_notify,
                sq_draining,
                max_rd_atomic,
                max_dest_rd_atomic,
                min_rnr_timer,
                port_num,
                timeout,
                retry_cnt,
                rnr_retry,
                alt_port_num,
                alt_timeout,
                rate_limit,
            }
        ),
        layout!("struct ibv_sge", ibv_sge { addr, length, lkey }),
        layout!(
            "struct ibv_recv_wr",
            ibv_recv_wr {
                wr_id,
                next,
                sg_list,
                num_sge
            }
        ),
        layout!("struct ibv_send_wr", ibv_send_wr { wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey, qp_type, _bind_mw as "bind_mw" }),
        layout!(
            "struct ibv_async_event",
            ibv_async_event {
                element,
                event_type
            }
        ),
        layout!(
            "struct ibv_values_ex",
            ibv_values_ex {
                comp_mask,
                raw_clock
            }
        ),
    ]
}

/// The C program that prints `TYPE SIZE` and `TYPE.FIELD OFFSET` for every declared item.
fn c_program(layouts: &[Layout]) -> String {
    let mut program = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for layout in layouts {
        let c = layout.c_type;
        program += &format!("  printf(\"%s %zu\\n\", \"{c}\", sizeof({c}));\n");
        for (field, _) in &layout.fields {
            program += &format!(
                "  printf(\"%s.%s %zu\\n\", \"{c}\", \"{field}\", offsetof({c}, {field}));\n"
            );
        }
    }
    program + "  return 0;\n}\n"
}

fn rust_figures(layouts: &[Layout]) -> BTreeMap<String, usize> {
    let mut figures = BTreeMap::new();
    for layout in layouts {
        figures.insert(layout.c_type.to_string(), layout.size);
        for (field, offset) in &layout.fields {
            figures.insert(format!("{}.{field}", layout.c_type), *offset);
        }
    }
    figures
}

/// What the C compiler says, or why it could not be asked.
fn c_figures(layouts: &[Layout]) -> Result<BTreeMap<String, usize>, String> {
    let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
    if !header.exists() {
        return Err(format!("{} is missing (libibverbs-dev)", header.display()));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let source = dir.path().join("layout.c");
    let binary = dir.path().join("layout");
    std::fs::write(&source, c_program(layouts)).map_err(|e| e.to_string())?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .output()
        .map_err(|e| format!("{cc}: {e}"))?;
    if !built.status.success() {
        // A compile error is a finding (a field the header lacks), not a missing tool.
        panic!(
            "the layout program does not compile against verbs.h:\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
    }
    let run = Command::new(&binary).output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&run.stdout);
    Ok(text
        .lines()
        .filter_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect())
}

/// The lines where Rust and C disagree.
fn mismatches(rust: &BTreeMap<String, usize>, c: &BTreeMap<String, usize>) -> Vec<String> {
    rust.iter()
        .filter(|(key, value)| c.get(*key) != Some(value))
        .map(|(key, value)| format!("{key}: Rust {value}, C {:?}", c.get(key)))
        .collect()
}

fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// The C figures, or `None` after saying why the test is skipped (a failure under CI).
fn c_figures_or_skip(layouts: &[Layout]) -> Option<BTreeMap<String, usize>> {
    match c_figures(layouts) {
        Ok(figures) => Some(figures),
        Err(reason) if under_ci() => panic!("{reason} (CI is set: the layout test must run)"),
        Err(reason) => {
            eprintln!("skipped: {reason}");
            None
        }
    }
}

#[test]
fn every_declared_size_and_offset_is_the_headers() {
    let layouts = declared();
    let Some(c) = c_figures_or_skip(&layouts) else {
        return;
    };
    let rust = rust_figures(&layouts);
    assert!(rust.len() > 150, "{} figures declared", rust.len());
    let wrong = mismatches(&rust, &c);
    assert!(
        wrong.is_empty(),
        "layouts differ from verbs.h:\n{}",
        wrong.join("\n")
    );
    // `extended_field` reads `sz` as the word right before the context.
    assert_eq!(
        offset_of!(verbs_context, sz) + size_of::<usize>(),
        offset_of!(verbs_context, context)
    );
}

/// The comparison catches one field out of place: a struct with two fields swapped, declared
/// as `struct ibv_sge`, is refused.
#[test]
fn a_wrong_offset_is_caught() {
    #[repr(C)]
    struct SwappedSge {
        addr: u64,
        lkey: u32,
        length: u32,
    }
    let layouts = vec![layout!("struct ibv_sge", SwappedSge { addr, length, lkey })];
    let Some(c) = c_figures_or_skip(&layouts) else {
        return;
    };
    let wrong = mismatches(&rust_figures(&layouts), &c);
    assert_eq!(
        wrong,
        [
            "struct ibv_sge.length: Rust 12, C Some(8)",
            "struct ibv_sge.lkey: Rust 8, C Some(12)"
        ],
        "{wrong:?}"
    );
}
