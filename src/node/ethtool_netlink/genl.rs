//! Generic netlink over any datagram transport (the kernel socket, scripted answers in tests):
//! a family's id from the controller (`CTRL_CMD_GETFAMILY`), and one request's one answer,
//! awaited until a deadline. A late or foreign answer (another sequence number) is skipped; an
//! answer abandoned at the deadline drops the transport, so its late parts are never taken for
//! the next request's.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::node::rdma_netlink::wire::{self, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_REQUEST};
use crate::node::rdma_netlink::Transport;

use super::uapi::*;
use super::{AttrWriter, EthtoolNlError};

/// One answer: the generic netlink header's command and version, and the attributes after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub cmd: u8,
    pub version: u8,
    pub attrs: Vec<u8>,
}

impl Answer {
    /// The top-level attributes of the answer.
    pub fn attrs(&self) -> wire::Attrs<'_> {
        wire::attrs(&self.attrs)
    }
}

/// A request's bytes: `nlmsghdr`, `genlmsghdr`, then `attrs` (already aligned).
pub fn encode(family: u16, cmd: u8, version: u8, seq: u32, attrs: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDRLEN + GENL_HDRLEN + attrs.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&family.to_ne_bytes());
    out.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // pid 0: the kernel fills in our port id
    out.extend_from_slice(&[cmd, version, 0, 0]);
    out.extend_from_slice(attrs);
    out
}

/// What one datagram says about the request `seq` of `family`.
enum Verdict {
    /// Nothing of ours in it (a late answer to an earlier request).
    NotOurs,
    Answer(Answer),
    /// `NLMSG_ERROR` with a negative errno (the positive value here).
    Errno(i32),
}

fn judge(datagram: &[u8], family: u16, seq: u32) -> Result<Verdict, EthtoolNlError> {
    for message in wire::messages(datagram) {
        let message = message.map_err(|e| EthtoolNlError::Malformed(e.to_string()))?;
        if message.header.seq != seq {
            continue;
        }
        match message.header.kind {
            NLMSG_ERROR => {
                let code = message
                    .error_code()
                    .map_err(|e| EthtoolNlError::Malformed(e.to_string()))?;
                return Ok(match code {
                    // An acknowledgement without an answer: never asked for (no NLM_F_ACK).
                    0 => {
                        return Err(EthtoolNlError::Malformed(
                            "acknowledged without an answer".into(),
                        ))
                    }
                    code => Verdict::Errno(code.saturating_neg()),
                });
            }
            NLMSG_DONE => continue,
            kind if kind == family => {
                let payload = message.payload;
                if payload.len() < GENL_HDRLEN {
                    return Err(EthtoolNlError::Malformed(format!(
                        "a {}-byte answer has no generic netlink header",
                        payload.len()
                    )));
                }
                return Ok(Verdict::Answer(Answer {
                    cmd: payload[0],
                    version: payload[1],
                    attrs: payload[GENL_HDRLEN..].to_vec(),
                }));
            }
            kind => {
                return Err(EthtoolNlError::Malformed(format!(
                    "message type {kind} where family {family} answers"
                )))
            }
        }
    }
    Ok(Verdict::NotOurs)
}

/// Requests over one transport at a time; `open` makes a new one after an abandoned answer.
pub(crate) struct Genl<T, F> {
    transport: Option<T>,
    open: F,
    seq: u32,
}

impl<T: Transport, F: FnMut() -> io::Result<T>> Genl<T, F> {
    pub fn new(open: F, seq: u32) -> Self {
        Genl {
            transport: None,
            open,
            seq,
        }
    }

    #[cfg(test)]
    pub(crate) fn transport_for_tests(&self) -> Option<&T> {
        self.transport.as_ref()
    }

    /// Sends one request and waits until `timeout` for its answer. `Err(Errno(e))` is the
    /// kernel's refusal, for the caller to name.
    pub fn exchange(
        &mut self,
        family: u16,
        cmd: u8,
        version: u8,
        attrs: &[u8],
        timeout: Duration,
    ) -> Result<Answer, EthtoolNlError> {
        let io_error = |op: &'static str| {
            move |e: io::Error| EthtoolNlError::Io {
                op,
                source: Arc::new(e),
            }
        };
        let transport = match &mut self.transport {
            Some(t) => t,
            None => self
                .transport
                .insert((self.open)().map_err(io_error("socket"))?),
        };
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let deadline = Instant::now() + timeout;
        let result = transport
            .send(&encode(family, cmd, version, seq, attrs))
            .map_err(io_error("send"))
            .and_then(|()| loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break Err(EthtoolNlError::Timeout { timeout });
                }
                let Some(datagram) = transport.recv(left).map_err(io_error("recv"))? else {
                    break Err(EthtoolNlError::Timeout { timeout });
                };
                match judge(&datagram, family, seq)? {
                    Verdict::NotOurs => continue,
                    Verdict::Answer(answer) => break Ok(answer),
                    Verdict::Errno(errno) => break Err(EthtoolNlError::Errno(errno)),
                }
            });
        if matches!(
            result,
            Err(EthtoolNlError::Timeout { .. } | EthtoolNlError::Io { .. })
                | Err(EthtoolNlError::Malformed(_))
        ) {
            // The rest of this answer may still come: a new socket rather than draining.
            self.transport = None;
        }
        result
    }

    /// The id of family `name`, from the controller. A kernel without the family answers
    /// ENOENT: [`EthtoolNlError::NoFamily`].
    pub(crate) fn family_id(
        &mut self,
        name: &'static str,
        timeout: Duration,
    ) -> Result<u16, EthtoolNlError> {
        let mut attrs = AttrWriter::default();
        attrs.string(CTRL_ATTR_FAMILY_NAME, name);
        let answer = match self.exchange(
            GENL_ID_CTRL,
            CTRL_CMD_GETFAMILY,
            CTRL_VERSION,
            attrs.bytes(),
            timeout,
        ) {
            Err(EthtoolNlError::Errno(libc::ENOENT)) => {
                return Err(EthtoolNlError::NoFamily { family: name })
            }
            other => other?,
        };
        if answer.cmd != CTRL_CMD_NEWFAMILY {
            return Err(EthtoolNlError::Malformed(format!(
                "controller answered command {}",
                answer.cmd
            )));
        }
        for attr in answer.attrs() {
            let attr = attr.map_err(|e| EthtoolNlError::Malformed(e.to_string()))?;
            if attr.kind == CTRL_ATTR_FAMILY_ID {
                return match attr.value {
                    [a, b, ..] => Ok(u16::from_ne_bytes([*a, *b])),
                    _ => Err(EthtoolNlError::Malformed(
                        "short CTRL_ATTR_FAMILY_ID".into(),
                    )),
                };
            }
        }
        Err(EthtoolNlError::Malformed(
            "controller answer without CTRL_ATTR_FAMILY_ID".into(),
        ))
    }
}

#[cfg(all(test, target_endian = "little"))]
pub(super) mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// What a scripted kernel answers to (nlmsg type, genl cmd, attrs, seq).
    type Script = Box<dyn FnMut(u16, u8, &[u8], u32) -> Vec<Vec<u8>> + Send>;

    /// Answers each request by its script; records the requests.
    pub struct Scripted {
        pub answer: Script,
        pub queue: VecDeque<Vec<u8>>,
        pub sent: Vec<(u16, u8, Vec<u8>)>,
    }

    impl Scripted {
        pub fn new(
            answer: impl FnMut(u16, u8, &[u8], u32) -> Vec<Vec<u8>> + Send + 'static,
        ) -> Self {
            Scripted {
                answer: Box::new(answer),
                queue: VecDeque::new(),
                sent: Vec::new(),
            }
        }
    }

    impl Transport for Scripted {
        fn send(&mut self, request: &[u8]) -> io::Result<()> {
            let m = wire::messages(request).next().unwrap().unwrap();
            let (cmd, attrs) = (m.payload[0], &m.payload[GENL_HDRLEN..]);
            self.sent.push((m.header.kind, cmd, attrs.to_vec()));
            let datagrams = (self.answer)(m.header.kind, cmd, attrs, m.header.seq);
            self.queue.extend(datagrams);
            Ok(())
        }

        fn recv(&mut self, _timeout: Duration) -> io::Result<Option<Vec<u8>>> {
            Ok(self.queue.pop_front())
        }
    }

    /// A kernel-built message: `nlmsghdr` of `kind`, then `payload`, padded to 4.
    pub fn message(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDRLEN + payload.len();
        let mut out = Vec::new();
        out.extend_from_slice(&(len as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&0u16.to_ne_bytes());
        out.extend_from_slice(&seq.to_ne_bytes());
        out.extend_from_slice(&4242u32.to_ne_bytes());
        out.extend_from_slice(payload);
        out.resize(wire::align(out.len()), 0);
        out
    }

    /// `NLMSG_ERROR` with `-errno`, then the request's header as the kernel echoes it.
    pub fn error(seq: u32, errno: i32) -> Vec<u8> {
        let mut payload = (-errno).to_ne_bytes().to_vec();
        payload.extend_from_slice(&[0; NLMSG_HDRLEN]);
        message(NLMSG_ERROR, seq, &payload)
    }

    /// The controller's answer naming `id` (with the name, as the kernel puts it first).
    pub(crate) fn new_family(seq: u32, id: u16) -> Vec<u8> {
        let mut attrs = AttrWriter::default();
        attrs.string(CTRL_ATTR_FAMILY_NAME, "ethtool");
        attrs.u16(CTRL_ATTR_FAMILY_ID, id);
        let mut payload = vec![CTRL_CMD_NEWFAMILY, 2, 0, 0];
        payload.extend_from_slice(attrs.bytes());
        message(GENL_ID_CTRL, seq, &payload)
    }

    fn no_reopen() -> io::Result<Scripted> {
        Err(io::Error::other("no second socket here"))
    }

    #[test]
    fn the_family_id_comes_from_the_controller() {
        let transport = Scripted::new(|kind, cmd, attrs, seq| {
            assert_eq!((kind, cmd), (GENL_ID_CTRL, CTRL_CMD_GETFAMILY));
            let name = wire::attrs(attrs).next().unwrap().unwrap();
            assert_eq!(
                (name.kind, name.value),
                (CTRL_ATTR_FAMILY_NAME, &b"ethtool\0"[..])
            );
            // A late answer of an earlier request comes first: skipped.
            vec![new_family(seq - 1, 99), new_family(seq, 27)]
        });
        let mut once = Some(transport);
        let mut genl = Genl::new(
            move || once.take().ok_or_else(|| io::Error::other("twice")),
            0,
        );
        assert_eq!(genl.family_id("ethtool", Duration::from_secs(1)), Ok(27));
    }

    #[test]
    fn a_kernel_without_the_family_says_enoent() {
        let transport = Scripted::new(|_, _, _, seq| vec![error(seq, libc::ENOENT)]);
        let mut once = Some(transport);
        let mut genl = Genl::new(
            move || once.take().ok_or_else(|| io::Error::other("twice")),
            0,
        );
        assert_eq!(
            genl.family_id("ethtool", Duration::from_secs(1)),
            Err(EthtoolNlError::NoFamily { family: "ethtool" })
        );
    }

    #[test]
    fn silence_is_a_timeout_and_the_socket_is_replaced() {
        let mut opened = 0;
        let mut genl = Genl::new(
            move || {
                opened += 1;
                if opened > 2 {
                    return no_reopen();
                }
                Ok(Scripted::new(|_, _, _, _| Vec::new()))
            },
            0,
        );
        let timeout = Duration::from_millis(20);
        assert_eq!(
            genl.exchange(27, 29, 1, &[], timeout),
            Err(EthtoolNlError::Timeout { timeout })
        );
        assert!(genl.transport.is_none());
        // The next request opens a new socket (the second), and the third open fails.
        assert!(matches!(
            genl.exchange(27, 29, 1, &[], timeout),
            Err(EthtoolNlError::Timeout { .. })
        ));
        assert!(matches!(
            genl.exchange(27, 29, 1, &[], timeout),
            Err(EthtoolNlError::Io { op: "socket", .. })
        ));
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for bad in [
            vec![1u8, 2, 3],
            // nlmsg_len 8: shorter than its header.
            {
                let mut m = message(27, 1, &[30, 1, 0, 0]);
                m[0] = 8;
                m
            },
            // Our sequence number, no genl header.
            message(27, 1, &[30]),
            // Our sequence number, a type that is neither the family nor an error.
            message(77, 1, &[30, 1, 0, 0]),
            // An error message cut before its code.
            message(NLMSG_ERROR, 1, &[0xff]),
        ] {
            let mut once = Some(Scripted::new(move |_, _, _, _| vec![bad.clone()]));
            let mut genl = Genl::new(move || once.take().ok_or_else(|| io::Error::other("x")), 0);
            let result = genl.exchange(27, 29, 1, &[], Duration::from_secs(1));
            assert!(
                matches!(result, Err(EthtoolNlError::Malformed(_))),
                "{result:?}"
            );
        }
    }
}
