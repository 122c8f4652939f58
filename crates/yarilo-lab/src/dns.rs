//! The cluster's DNS server (the role CoreDNS plays): A records for
//! Services and StatefulSet pods, answered from the cluster's live state,
//! so a headless name follows readiness as the ring seed needs. Anything
//! else is NXDOMAIN; AAAA and other types of a known name are answered
//! empty (NOERROR), so resolvers do not wait for them.
//!
//! Only what a stub resolver sends is handled: one question, no EDNS
//! options needed (an OPT record is ignored). Replies fit in 512 bytes
//! (at most 30 addresses), else TC is set.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::net::UdpSocket;

/// What answers a name: `None` is NXDOMAIN.
pub trait Resolve: Send + Sync + 'static {
    fn lookup(&self, name: &str) -> Option<Vec<IpAddr>>;
}

impl<R: crate::substrate::PodRuntime> Resolve for crate::substrate::cluster::Cluster<R> {
    fn lookup(&self, name: &str) -> Option<Vec<IpAddr>> {
        self.resolve(name)
    }
}

const TTL: u32 = 5;

/// Serves UDP and TCP on `addr` until the task is dropped.
pub async fn serve(
    addr: SocketAddr,
    resolver: Arc<dyn Resolve>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let udp = UdpSocket::bind(addr).await?;
    let tcp = tokio::net::TcpListener::bind(addr).await?;
    let r2 = resolver.clone();
    Ok(tokio::spawn(async move {
        let udp_task = async {
            let mut buf = [0u8; 1500];
            loop {
                let Ok((n, peer)) = udp.recv_from(&mut buf).await else {
                    continue;
                };
                if let Some(reply) = answer(&buf[..n], resolver.as_ref(), 512) {
                    let _ = udp.send_to(&reply, peer).await;
                }
            }
        };
        let tcp_task = async {
            loop {
                let Ok((mut s, _)) = tcp.accept().await else {
                    continue;
                };
                let r = r2.clone();
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let io = async {
                        let mut len = [0u8; 2];
                        s.read_exact(&mut len).await.ok()?;
                        let n = usize::from(u16::from_be_bytes(len));
                        let mut q = vec![0u8; n];
                        s.read_exact(&mut q).await.ok()?;
                        let reply = answer(&q, r.as_ref(), 65535)?;
                        let l = u16::try_from(reply.len()).ok()?.to_be_bytes();
                        s.write_all(&l).await.ok()?;
                        s.write_all(&reply).await.ok()
                    };
                    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), io).await;
                });
            }
        };
        tokio::join!(udp_task, tcp_task);
    }))
}

/// Parses a question name starting at `pos`; returns it and the offset
/// after it. No compression pointers in questions (stub resolvers send
/// none).
fn read_name(msg: &[u8], mut pos: usize) -> Option<(String, usize)> {
    let mut labels = Vec::new();
    let mut total = 0;
    loop {
        let len = usize::from(*msg.get(pos)?);
        pos += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None;
        }
        total += len + 1;
        if total > 255 {
            return None;
        }
        let label = msg.get(pos..pos + len)?;
        labels.push(String::from_utf8_lossy(label).into_owned());
        pos += len;
    }
    Some((labels.join("."), pos))
}

/// The reply to one query, or `None` for something not worth answering.
pub fn answer(q: &[u8], r: &dyn Resolve, limit: usize) -> Option<Vec<u8>> {
    if q.len() < 12 {
        return None;
    }
    let flags = u16::from_be_bytes([q[2], q[3]]);
    if flags & 0x8000 != 0 {
        return None; // a response, not a query
    }
    let qdcount = u16::from_be_bytes([q[4], q[5]]);
    let opcode = (flags >> 11) & 0xf;
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(&q[0..2]);
    let rd = flags & 0x0100;
    if qdcount != 1 || opcode != 0 {
        // NOTIMP / FORMERR without a question.
        let rcode = if opcode != 0 { 4 } else { 1 };
        out.extend_from_slice(&(0x8000 | rd | 0x0080 | rcode).to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        return Some(out);
    }
    let (name, end) = read_name(q, 12)?;
    let qtype = u16::from_be_bytes([*q.get(end)?, *q.get(end + 1)?]);
    let qclass = u16::from_be_bytes([*q.get(end + 2)?, *q.get(end + 3)?]);
    let question = &q[12..end + 4];
    let found = if qclass == 1 { r.lookup(&name) } else { None };
    let mut answers: Vec<IpAddr> = match (&found, qtype) {
        (Some(ips), 1) | (Some(ips), 255) => {
            ips.iter().filter(|ip| ip.is_ipv4()).copied().collect()
        }
        (Some(ips), 28) => ips.iter().filter(|ip| ip.is_ipv6()).copied().collect(),
        _ => Vec::new(),
    };
    let rcode: u16 = if found.is_none() { 3 } else { 0 };
    let mut tc = 0u16;
    let per = |ip: &IpAddr| if ip.is_ipv4() { 16 } else { 28 };
    let mut size = 12 + question.len();
    let mut keep = 0;
    for ip in &answers {
        if size + per(ip) > limit {
            tc = 0x0200;
            break;
        }
        size += per(ip);
        keep += 1;
    }
    answers.truncate(keep);
    // QR, AA, RD copied, RA, rcode.
    let f = 0x8000 | 0x0400 | tc | rd | 0x0080 | rcode;
    out.extend_from_slice(&f.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&(answers.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(question);
    for ip in answers {
        out.extend_from_slice(&[0xc0, 0x0c]); // pointer to the question name
        match ip {
            IpAddr::V4(a) => {
                out.extend_from_slice(&1u16.to_be_bytes());
                out.extend_from_slice(&1u16.to_be_bytes());
                out.extend_from_slice(&TTL.to_be_bytes());
                out.extend_from_slice(&4u16.to_be_bytes());
                out.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                out.extend_from_slice(&28u16.to_be_bytes());
                out.extend_from_slice(&1u16.to_be_bytes());
                out.extend_from_slice(&TTL.to_be_bytes());
                out.extend_from_slice(&16u16.to_be_bytes());
                out.extend_from_slice(&a.octets());
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl Resolve for Fixed {
        fn lookup(&self, name: &str) -> Option<Vec<IpAddr>> {
            (name == "ring.yarilo.svc.cluster.local")
                .then(|| vec!["10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap()])
        }
    }

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in name.split('.') {
            q.push(l.len() as u8);
            q.extend_from_slice(l.as_bytes());
        }
        q.push(0);
        q.extend_from_slice(&qtype.to_be_bytes());
        q.extend_from_slice(&1u16.to_be_bytes());
        q
    }

    #[test]
    fn a_headless_name_answers_every_address() {
        let r = answer(&query("ring.yarilo.svc.cluster.local", 1), &Fixed, 512).unwrap();
        assert_eq!(&r[0..2], &[0x12, 0x34]);
        assert_eq!(r[3] & 0x0f, 0, "NOERROR");
        assert_eq!(u16::from_be_bytes([r[6], r[7]]), 2);
        assert!(r.ends_with(&[10, 0, 0, 3]));
    }

    #[test]
    fn unknown_names_are_nxdomain_and_aaaa_is_empty() {
        let r = answer(&query("nope.example", 1), &Fixed, 512).unwrap();
        assert_eq!(r[3] & 0x0f, 3);
        let r = answer(&query("ring.yarilo.svc.cluster.local", 28), &Fixed, 512).unwrap();
        assert_eq!(r[3] & 0x0f, 0);
        assert_eq!(u16::from_be_bytes([r[6], r[7]]), 0);
    }

    #[test]
    fn truncated_and_hostile_queries_do_not_panic() {
        let q = query("ring.yarilo.svc.cluster.local", 1);
        for n in 0..q.len() {
            let _ = answer(&q[..n], &Fixed, 512);
        }
        let mut bad = q.clone();
        bad[12] = 200;
        let _ = answer(&bad, &Fixed, 512);
    }
}
