//! HAProxy PROXY protocol, versions 1 (text) and 2 (binary), as a sans-I/O
//! parser: give it the bytes received so far, get `Incomplete`, a header
//! with the number of bytes it used, or an error.
//!
//! Only the addresses are taken; v2 TLVs are skipped. A `LOCAL` (v2) or
//! `UNKNOWN` (v1) header means "use the connection's own addresses".

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The longest header we accept. v1 is at most 107 bytes; v2 may carry
/// TLVs, which we bound rather than trust the announced length.
pub const MAX_HEADER: usize = 16 + 1024;

const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// What the header says about the real client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxiedAddrs {
    /// Source and destination as the load balancer saw them.
    Proxied {
        source: SocketAddr,
        destination: SocketAddr,
    },
    /// Health check or unknown family: keep the connection's addresses.
    Local,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Incomplete,
    Done {
        addrs: ProxiedAddrs,
        consumed: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    /// Not a PROXY header at all.
    #[error("no PROXY protocol header")]
    Missing,
    #[error("malformed PROXY header: {0}")]
    Malformed(&'static str),
}

/// Parses the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<Parsed, ProxyError> {
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] == V2_SIGNATURE[..n] {
        if buf.len() < 16 {
            return Ok(Parsed::Incomplete);
        }
        return parse_v2(buf);
    }
    let n = buf.len().min(6);
    if buf[..n] == b"PROXY "[..n] {
        if buf.len() < 6 {
            return Ok(Parsed::Incomplete);
        }
        return parse_v1(buf);
    }
    Err(ProxyError::Missing)
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, ProxyError> {
    const MAX_V1: usize = 107;
    let Some(end) = buf.windows(2).take(MAX_V1).position(|w| w == b"\r\n") else {
        return if buf.len() >= MAX_V1 {
            Err(ProxyError::Malformed("v1 line too long"))
        } else {
            Ok(Parsed::Incomplete)
        };
    };
    let line =
        std::str::from_utf8(&buf[6..end]).map_err(|_| ProxyError::Malformed("v1 not ASCII"))?;
    let consumed = end + 2;
    let parts: Vec<&str> = line.split(' ').collect();
    if parts.first() == Some(&"UNKNOWN") {
        return Ok(Parsed::Done {
            addrs: ProxiedAddrs::Local,
            consumed,
        });
    }
    let [proto, src, dst, sport, dport] = parts.as_slice() else {
        return Err(ProxyError::Malformed("v1 needs 5 fields"));
    };
    let (src, dst): (IpAddr, IpAddr) = match *proto {
        "TCP4" => (
            IpAddr::V4(
                src.parse()
                    .map_err(|_| ProxyError::Malformed("v1 bad IPv4 source"))?,
            ),
            IpAddr::V4(
                dst.parse()
                    .map_err(|_| ProxyError::Malformed("v1 bad IPv4 destination"))?,
            ),
        ),
        "TCP6" => (
            IpAddr::V6(
                src.parse()
                    .map_err(|_| ProxyError::Malformed("v1 bad IPv6 source"))?,
            ),
            IpAddr::V6(
                dst.parse()
                    .map_err(|_| ProxyError::Malformed("v1 bad IPv6 destination"))?,
            ),
        ),
        _ => return Err(ProxyError::Malformed("v1 unknown protocol")),
    };
    let port = |p: &str| {
        p.parse::<u16>()
            .map_err(|_| ProxyError::Malformed("v1 bad port"))
    };
    Ok(Parsed::Done {
        addrs: ProxiedAddrs::Proxied {
            source: SocketAddr::new(src, port(sport)?),
            destination: SocketAddr::new(dst, port(dport)?),
        },
        consumed,
    })
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, ProxyError> {
    let ver_cmd = buf[12];
    if ver_cmd >> 4 != 2 {
        return Err(ProxyError::Malformed("v2 bad version"));
    }
    let family = buf[13];
    let len = u16::from_be_bytes([buf[14], buf[15]]) as usize;
    if 16 + len > MAX_HEADER {
        return Err(ProxyError::Malformed("v2 header too long"));
    }
    if buf.len() < 16 + len {
        return Ok(Parsed::Incomplete);
    }
    let consumed = 16 + len;
    let body = &buf[16..consumed];
    match ver_cmd & 0x0f {
        0x0 => {
            return Ok(Parsed::Done {
                addrs: ProxiedAddrs::Local,
                consumed,
            })
        }
        0x1 => {}
        _ => return Err(ProxyError::Malformed("v2 unknown command")),
    }
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    let addrs = match family {
        // TCP or UDP over IPv4
        0x11 | 0x12 => {
            if body.len() < 12 {
                return Err(ProxyError::Malformed("v2 short IPv4 block"));
            }
            let src = Ipv4Addr::new(body[0], body[1], body[2], body[3]);
            let dst = Ipv4Addr::new(body[4], body[5], body[6], body[7]);
            ProxiedAddrs::Proxied {
                source: SocketAddr::new(src.into(), port(&body[8..10])),
                destination: SocketAddr::new(dst.into(), port(&body[10..12])),
            }
        }
        0x21 | 0x22 => {
            if body.len() < 36 {
                return Err(ProxyError::Malformed("v2 short IPv6 block"));
            }
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&body[0..16]);
            d.copy_from_slice(&body[16..32]);
            ProxiedAddrs::Proxied {
                source: SocketAddr::new(Ipv6Addr::from(s).into(), port(&body[32..34])),
                destination: SocketAddr::new(Ipv6Addr::from(d).into(), port(&body[34..36])),
            }
        }
        // UNSPEC or unix sockets: nothing usable.
        _ => ProxiedAddrs::Local,
    };
    Ok(Parsed::Done { addrs, consumed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2_ipv4() -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.extend([0x21, 0x11, 0, 12 + 7]);
        h.extend([203, 0, 113, 42, 10, 0, 0, 1]);
        h.extend(41234u16.to_be_bytes());
        h.extend(993u16.to_be_bytes());
        h.extend([0x04, 0, 4, 1, 2, 3, 4]); // a TLV, skipped
        h
    }

    #[test]
    fn v1_every_prefix_is_incomplete_then_done() {
        let line = b"PROXY TCP4 203.0.113.42 10.0.0.1 41234 993\r\n\x16\x03\x01";
        let header_len = line.len() - 3;
        for n in 0..header_len {
            assert_eq!(parse(&line[..n]), Ok(Parsed::Incomplete), "prefix {n}");
        }
        let want = Parsed::Done {
            addrs: ProxiedAddrs::Proxied {
                source: "203.0.113.42:41234".parse().unwrap(),
                destination: "10.0.0.1:993".parse().unwrap(),
            },
            consumed: header_len,
        };
        assert_eq!(parse(line), Ok(want));
    }

    #[test]
    fn v1_ipv6_and_unknown() {
        let Ok(Parsed::Done { addrs, .. }) = parse(b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n")
        else {
            panic!()
        };
        assert!(matches!(addrs, ProxiedAddrs::Proxied { source, .. } if source.port() == 1));
        assert_eq!(
            parse(b"PROXY UNKNOWN\r\n"),
            Ok(Parsed::Done {
                addrs: ProxiedAddrs::Local,
                consumed: 15
            })
        );
    }

    #[test]
    fn v2_every_prefix_is_incomplete_then_done() {
        let h = v2_ipv4();
        for n in 0..h.len() {
            assert_eq!(parse(&h[..n]), Ok(Parsed::Incomplete), "prefix {n}");
        }
        let Ok(Parsed::Done { addrs, consumed }) = parse(&h) else {
            panic!()
        };
        assert_eq!(consumed, h.len());
        assert_eq!(
            addrs,
            ProxiedAddrs::Proxied {
                source: "203.0.113.42:41234".parse().unwrap(),
                destination: "10.0.0.1:993".parse().unwrap()
            }
        );
    }

    #[test]
    fn v2_local_and_hostile_lengths() {
        let mut h = V2_SIGNATURE.to_vec();
        h.extend([0x20, 0x00, 0, 0]);
        assert_eq!(
            parse(&h),
            Ok(Parsed::Done {
                addrs: ProxiedAddrs::Local,
                consumed: 16
            })
        );
        let mut h = V2_SIGNATURE.to_vec();
        h.extend([0x21, 0x11, 0xff, 0xff]);
        assert!(matches!(parse(&h), Err(ProxyError::Malformed(_))));
        let mut h = V2_SIGNATURE.to_vec();
        h.extend([0x21, 0x11, 0, 4, 1, 2, 3, 4]);
        assert!(matches!(parse(&h), Err(ProxyError::Malformed(_))));
    }

    #[test]
    fn not_a_header_and_garbage() {
        assert_eq!(parse(b"a001 LOGIN x y\r\n"), Err(ProxyError::Missing));
        assert!(parse(b"PROXY TCP4 1.2.3.4\r\n").is_err());
        assert!(parse(b"PROXY TCP4 999.1.1.1 1.1.1.1 1 2\r\n").is_err());
        assert!(parse(b"PROXY xxxxx").is_ok());
        let long = [b"PROXY ".as_slice(), &[b'1'; 200]].concat();
        assert!(parse(&long).is_err());
    }
}
