//! Netlink framing (`include/uapi/linux/netlink.h`): messages (`nlmsghdr`) and attributes
//! (`nlattr`), both 4-byte aligned. A pure decoder over bytes: every length is checked against
//! what is there, so no input panics; a bad length is a [`WireError`].

/// `sizeof(struct nlmsghdr)`: len u32, type u16, flags u16, seq u32, pid u32.
pub const NLMSG_HDRLEN: usize = 16;
/// `sizeof(struct nlattr)`: len u16, type u16.
pub(crate) const NLA_HDRLEN: usize = 4;

pub const NLMSG_NOOP: u16 = 1;
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
#[cfg(test)]
pub(crate) const NLM_F_MULTI: u16 = 0x2;
pub(crate) const NLM_F_ACK: u16 = 0x4;
/// `NLM_F_ROOT | NLM_F_MATCH`.
pub(crate) const NLM_F_DUMP: u16 = 0x300;

pub const NLA_F_NESTED: u16 = 0x8000;
pub(crate) const NLA_F_NET_BYTEORDER: u16 = 0x4000;
const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);

/// Rounds up to the 4-byte netlink alignment (`NLMSG_ALIGN`, `NLA_ALIGN`).
pub const fn align(len: usize) -> usize {
    (len + 3) & !3
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{what}: {have} bytes where {need} are needed")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("{what} length {len} is smaller than its own header")]
    ShortLength { what: &'static str, len: usize },
    #[error("{what} is missing")]
    Missing { what: &'static str },
    #[error("attribute {kind}: {len} bytes where a {expected} is expected")]
    BadValue {
        kind: u16,
        len: usize,
        expected: &'static str,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub len: u32,
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    pub pid: u32,
}

/// One message: its header and the bytes after it (up to `nlmsg_len`, padding excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    pub header: Header,
    pub payload: &'a [u8],
}

impl Message<'_> {
    /// `NLMSG_ERROR`'s code: 0 for an acknowledgement, else a negative errno. The original
    /// request's header follows it; it is not needed.
    pub(crate) fn error_code(&self) -> Result<i32, WireError> {
        let bytes = self.payload.get(..4).ok_or(WireError::Truncated {
            what: "NLMSG_ERROR",
            need: 4,
            have: self.payload.len(),
        })?;
        Ok(i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }
}

fn u16_at(buf: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([buf[at], buf[at + 1]])
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

/// The messages of one buffer (one or more datagrams laid end to end). Yields an error once
/// and then stops: past a bad length nothing can be framed.
pub fn messages(buf: &[u8]) -> Messages<'_> {
    Messages { rest: buf }
}

pub struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let buf = self.rest;
        let fail = |e| Some(Err(e));
        if buf.len() < NLMSG_HDRLEN {
            self.rest = &[];
            return fail(WireError::Truncated {
                what: "message header",
                need: NLMSG_HDRLEN,
                have: buf.len(),
            });
        }
        let header = Header {
            len: u32_at(buf, 0),
            kind: u16_at(buf, 4),
            flags: u16_at(buf, 6),
            seq: u32_at(buf, 8),
            pid: u32_at(buf, 12),
        };
        let len = header.len as usize;
        if len < NLMSG_HDRLEN {
            self.rest = &[];
            return fail(WireError::ShortLength {
                what: "message",
                len,
            });
        }
        if len > buf.len() {
            self.rest = &[];
            return fail(WireError::Truncated {
                what: "message",
                need: len,
                have: buf.len(),
            });
        }
        // The last message of a datagram may lack its padding.
        self.rest = buf.get(align(len)..).unwrap_or(&[]);
        Some(Ok(Message {
            header,
            payload: &buf[NLMSG_HDRLEN..len],
        }))
    }
}

/// One attribute, its type with the NESTED and NET_BYTEORDER flags masked off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub kind: u16,
    pub value: &'a [u8],
}

impl<'a> Attr<'a> {
    fn bad(&self, expected: &'static str) -> WireError {
        WireError::BadValue {
            kind: self.kind,
            len: self.value.len(),
            expected,
        }
    }

    pub fn u8(&self) -> Result<u8, WireError> {
        match self.value {
            [v] => Ok(*v),
            _ => Err(self.bad("u8")),
        }
    }

    pub fn u32(&self) -> Result<u32, WireError> {
        match self.value {
            [a, b, c, d] => Ok(u32::from_ne_bytes([*a, *b, *c, *d])),
            _ => Err(self.bad("u32")),
        }
    }

    pub fn u64(&self) -> Result<u64, WireError> {
        let bytes: [u8; 8] = self.value.try_into().map_err(|_| self.bad("u64"))?;
        Ok(u64::from_ne_bytes(bytes))
    }

    /// A NUL-terminated string (`NLA_NUL_STRING`); bytes after the first NUL are ignored, and
    /// invalid UTF-8 is replaced rather than refused (names are ASCII in practice).
    pub fn string(&self) -> String {
        let end = self
            .value
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(self.value.len());
        String::from_utf8_lossy(&self.value[..end]).into_owned()
    }

    /// The attributes nested in this one.
    pub fn nested(&self) -> Attrs<'a> {
        attrs(self.value)
    }
}

/// The attributes laid end to end in `buf` (a message payload, or a nested attribute's value).
/// An attribute overrunning `buf` is an error, after which the iterator stops.
pub fn attrs(buf: &[u8]) -> Attrs<'_> {
    Attrs { rest: buf }
}

pub struct Attrs<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let buf = self.rest;
        self.rest = &[];
        if buf.len() < NLA_HDRLEN {
            return Some(Err(WireError::Truncated {
                what: "attribute header",
                need: NLA_HDRLEN,
                have: buf.len(),
            }));
        }
        let len = u16_at(buf, 0) as usize;
        let kind = u16_at(buf, 2) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN {
            return Some(Err(WireError::ShortLength {
                what: "attribute",
                len,
            }));
        }
        if len > buf.len() {
            return Some(Err(WireError::Truncated {
                what: "attribute",
                need: len,
                have: buf.len(),
            }));
        }
        self.rest = buf.get(align(len)..).unwrap_or(&[]);
        Some(Ok(Attr {
            kind,
            value: &buf[NLA_HDRLEN..len],
        }))
    }
}

/// A request: header and u32 attributes (all that nldev requests here carry).
pub fn encode_request(kind: u16, flags: u16, seq: u32, attrs: &[(u16, u32)]) -> Vec<u8> {
    let len = NLMSG_HDRLEN + attrs.len() * (NLA_HDRLEN + 4);
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes()); // pid 0: the kernel fills in our port id
    for (kind, value) in attrs {
        out.extend_from_slice(&((NLA_HDRLEN + 4) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&value.to_ne_bytes());
    }
    out
}

/// `IFNAMSIZ` of `include/uapi/linux/if.h` (with the NUL).
pub const IFNAMSIZ: usize = 16;

/// Whether the kernel could hold this netdev name (`dev_valid_name`): not empty, shorter than
/// IFNAMSIZ, no `/`, `:`, NUL or whitespace, not `.` or `..`. Checked before a name goes into a
/// request (DCB, ethtool), so that a hostile name is refused here, not by the kernel.
pub(crate) fn is_valid_netdev_name(netdev: &str) -> bool {
    !netdev.is_empty()
        && netdev.len() < IFNAMSIZ
        && netdev != "."
        && netdev != ".."
        && !netdev
            .bytes()
            .any(|b| b == b'/' || b == b':' || b == 0 || b.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_through_the_decoder() {
        let req = encode_request(0x1409, NLM_F_REQUEST | NLM_F_DUMP, 7, &[(1, 3), (3, 1)]);
        let msgs: Vec<_> = messages(&req).collect::<Result<_, _>>().unwrap();
        assert_eq!(msgs.len(), 1);
        let h = msgs[0].header;
        assert_eq!(
            (h.len as usize, h.kind, h.flags, h.seq),
            (req.len(), 0x1409, 0x301, 7)
        );
        let a: Vec<_> = attrs(msgs[0].payload).collect::<Result<_, _>>().unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!((a[0].kind, a[0].u32().unwrap()), (1, 3));
        assert_eq!((a[1].kind, a[1].u32().unwrap()), (3, 1));
    }

    #[test]
    fn flags_are_masked_off_the_attribute_type() {
        let buf = [8, 0, 0x13, 0xc0, 1, 2, 3, 4];
        let a = attrs(&buf).next().unwrap().unwrap();
        assert_eq!(a.kind, 0x13);
        assert_eq!(a.value, &[1, 2, 3, 4]);
    }

    #[test]
    fn bad_lengths_are_errors_not_panics() {
        // Header cut short.
        assert!(matches!(
            messages(&[1, 2, 3]).next(),
            Some(Err(WireError::Truncated { .. }))
        ));
        // nlmsg_len 8: smaller than the header.
        let mut short = encode_request(1, 0, 0, &[]);
        short[0] = 8;
        assert!(matches!(
            messages(&short).next(),
            Some(Err(WireError::ShortLength { .. }))
        ));
        // nlmsg_len beyond the buffer.
        let mut long = encode_request(1, 0, 0, &[]);
        long[0] = 200;
        assert!(matches!(
            messages(&long).next(),
            Some(Err(WireError::Truncated { need: 200, .. }))
        ));
        // Attribute of length 2, and one overrunning.
        assert!(matches!(
            attrs(&[2, 0, 1, 0]).next(),
            Some(Err(WireError::ShortLength { .. }))
        ));
        assert!(matches!(
            attrs(&[9, 0, 1, 0, 0, 0, 0, 0]).next(),
            Some(Err(WireError::Truncated { .. }))
        ));
        // After an error the iterators stop.
        let mut it = attrs(&[9, 0, 1, 0, 0, 0, 0, 0]);
        it.next();
        assert!(it.next().is_none());
    }

    #[test]
    fn values_of_the_wrong_size_are_refused() {
        let a = Attr {
            kind: 5,
            value: &[1, 2],
        };
        assert!(a.u8().is_err() && a.u32().is_err() && a.u64().is_err());
        let s = Attr {
            kind: 2,
            value: b"mlx5_0\0\0",
        };
        assert_eq!(s.string(), "mlx5_0");
    }
}
