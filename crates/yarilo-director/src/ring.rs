//! The consistent-hash ring of one tag.
//!
//! A backend with `vhosts` weight owns points on a 32-bit circle; a user
//! hash goes to the first point at or after it, wrapping past the top.
//! Adding or removing a backend therefore moves only the users whose
//! nearest point changed — about its share — and nobody else.
//!
//! Two layouts ([`HashMode`]):
//! - `Dovecot`: exactly the Dovecot 2.3 director. User hash = first four
//!   bytes of MD5(key) big-endian; backend points MD5("<ip>-<i>") for
//!   `i in 0..vhosts`, same fold; points sorted by (hash, ip). Checked
//!   against vectors captured from a real Dovecot 2.3.19 director
//!   (`tests/data/dovecot-2.3-vectors.txt`).
//! - `Yarilo`: the same scheme with a little-endian fold and
//!   [`YARILO_POINTS_PER_VHOST`] points per vhost, so a tag of a few
//!   backends splits its users within a few percent of the weights
//!   (100 points per backend leave ~10 % noise per backend).
//!
//! Invariant: a ring holds only points of backends that may take new
//! users' hash slices; draining backends keep their points so that their
//! slice does not move, and [`Ring::lookup`] walks past them.

use std::net::IpAddr;

use md5::{Digest, Md5};
use yarilo_config::HashMode;

use crate::backend::BackendId;

/// Points per vhost in the yarilo layout (100 vhosts → 6,400 points).
pub const YARILO_POINTS_PER_VHOST: u32 = 64;

/// The 32-bit user hash of an expanded template key.
pub fn user_hash(mode: HashMode, key: &[u8]) -> u32 {
    fold(mode, &Md5::digest(key))
}

fn fold(mode: HashMode, md5: &[u8]) -> u32 {
    let b = [md5[0], md5[1], md5[2], md5[3]];
    match mode {
        HashMode::Dovecot => u32::from_be_bytes(b),
        HashMode::Yarilo => u32::from_le_bytes(b),
    }
}

/// The ring points of one backend.
pub fn backend_points(mode: HashMode, ip: IpAddr, vhosts: u32) -> impl Iterator<Item = u32> {
    // MD5 of the address text, then "-<i>" appended per point: the prefix
    // state is computed once.
    let mut base = Md5::new();
    base.update(ip.to_string().as_bytes());
    let count = match mode {
        HashMode::Dovecot => vhosts,
        HashMode::Yarilo => vhosts.saturating_mul(YARILO_POINTS_PER_VHOST),
    };
    (0..count).map(move |i| {
        let mut h = base.clone();
        h.update(format!("-{i}").as_bytes());
        fold(mode, &h.finalize())
    })
}

/// One point: the hash, the backend, and the backend's address for the
/// collision tie-break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Point {
    hash: u32,
    backend: BackendId,
}

/// The sorted points of one tag.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    points: Vec<Point>,
}

impl Ring {
    /// Builds the ring from `(backend, ip, vhosts)` of every backend that
    /// owns a slice.
    pub fn build(mode: HashMode, members: &[(BackendId, IpAddr, u32)]) -> Ring {
        let mut points: Vec<(u32, IpAddr, BackendId)> = Vec::new();
        for &(id, ip, vhosts) in members {
            points.extend(backend_points(mode, ip, vhosts).map(|h| (h, ip, id)));
        }
        // Dovecot: sort by hash, then by IP so every director agrees.
        points.sort_unstable_by_key(|p| (p.0, p.1));
        Ring {
            points: points
                .into_iter()
                .map(|(hash, _, backend)| Point { hash, backend })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Number of points (memory and debugging).
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// The backend owning `hash`: the first point with a hash at or after
    /// it, wrapping; points whose backend `skip` refuses are walked past.
    /// `None` when no point is acceptable.
    pub fn lookup(&self, hash: u32, mut skip: impl FnMut(BackendId) -> bool) -> Option<BackendId> {
        let n = self.points.len();
        if n == 0 {
            return None;
        }
        let start = self.points.partition_point(|p| p.hash < hash);
        let mut last = None;
        for k in 0..n {
            let backend = self.points[(start + k) % n].backend;
            if last == Some(backend) {
                continue;
            }
            if !skip(backend) {
                return Some(backend);
            }
            last = Some(backend);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_endianness() {
        // MD5("") = d41d8cd98f00b204...
        assert_eq!(user_hash(HashMode::Dovecot, b""), 0xd41d8cd9);
        assert_eq!(user_hash(HashMode::Yarilo, b""), 0xd98c1dd4);
    }

    #[test]
    fn lookup_wraps_and_skips() {
        let a = BackendId(0);
        let b = BackendId(1);
        let ring = Ring {
            points: vec![
                Point {
                    hash: 10,
                    backend: a,
                },
                Point {
                    hash: 20,
                    backend: b,
                },
            ],
        };
        assert_eq!(ring.lookup(5, |_| false), Some(a));
        assert_eq!(ring.lookup(10, |_| false), Some(a));
        assert_eq!(ring.lookup(11, |_| false), Some(b));
        assert_eq!(ring.lookup(21, |_| false), Some(a));
        assert_eq!(ring.lookup(5, |id| id == a), Some(b));
        assert_eq!(ring.lookup(5, |_| true), None);
        assert_eq!(Ring::default().lookup(5, |_| false), None);
    }
}
