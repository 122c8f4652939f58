//! MD5 (RFC 1321) with access to the chaining state, which Dovecot's
//! `{CRAM-MD5}` scheme stores: the HMAC-MD5 (RFC 2104) inner and outer
//! contexts after their one key block. A CRAM-MD5 response can then be
//! checked by continuing those contexts, without the plaintext password.

/// The four chaining words after some whole 64-byte blocks.
pub(crate) type State = [u32; 4];

const INIT: State = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

const SHIFTS: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9,
    14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15,
    21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

fn constants() -> [u32; 64] {
    // RFC 1321 §3.4: T[i] = floor(2^32 * |sin(i)|); exact in f64.
    let mut k = [0u32; 64];
    for (i, v) in k.iter_mut().enumerate() {
        *v = ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32;
    }
    k
}

fn compress(state: &mut State, block: &[u8; 64], k: &[u32; 64]) {
    let mut m = [0u32; 16];
    for (i, w) in m.iter_mut().enumerate() {
        *w = u32::from_le_bytes([
            block[i * 4],
            block[i * 4 + 1],
            block[i * 4 + 2],
            block[i * 4 + 3],
        ]);
    }
    let [mut a, mut b, mut c, mut d] = *state;
    for i in 0..64 {
        let (f, g) = match i / 16 {
            0 => ((b & c) | (!b & d), i),
            1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
            2 => (b ^ c ^ d, (3 * i + 5) % 16),
            _ => (c ^ (b | !d), (7 * i) % 16),
        };
        let rotated = a
            .wrapping_add(f)
            .wrapping_add(k[i])
            .wrapping_add(m[g])
            .rotate_left(SHIFTS[i]);
        a = d;
        d = c;
        c = b;
        b = b.wrapping_add(rotated);
    }
    state[0] = state[0].wrapping_add(a);
    state[1] = state[1].wrapping_add(b);
    state[2] = state[2].wrapping_add(c);
    state[3] = state[3].wrapping_add(d);
}

/// Finishes an MD5 whose first `prefix_blocks` 64-byte blocks gave `state`.
pub(crate) fn finish(mut state: State, prefix_blocks: u64, data: &[u8]) -> [u8; 16] {
    let k = constants();
    let total_bits = (prefix_blocks * 64 + data.len() as u64).wrapping_mul(8);
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&total_bits.to_le_bytes());
    for chunk in msg.chunks_exact(64) {
        let mut block = [0u8; 64];
        block.copy_from_slice(chunk);
        compress(&mut state, &block, &k);
    }
    let mut out = [0u8; 16];
    for (i, w) in state.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// The HMAC-MD5 (inner, outer) states for `key`, as CRAM-MD5 stores them.
pub(crate) fn hmac_contexts(key: &[u8]) -> (State, State) {
    use md5::Digest;
    let hashed;
    let key = if key.len() > 64 {
        hashed = md5::Md5::digest(key);
        &hashed[..]
    } else {
        key
    };
    let k = constants();
    let mut ipad = [0x36u8; 64];
    let mut opad = [0x5cu8; 64];
    for (i, b) in key.iter().enumerate() {
        ipad[i] ^= b;
        opad[i] ^= b;
    }
    let mut inner = INIT;
    compress(&mut inner, &ipad, &k);
    let mut outer = INIT;
    compress(&mut outer, &opad, &k);
    (inner, outer)
}

/// HMAC-MD5 of `data` from precomputed contexts.
pub(crate) fn hmac_from_contexts(inner: State, outer: State, data: &[u8]) -> [u8; 16] {
    let inner_digest = finish(inner, 1, data);
    finish(outer, 1, &inner_digest)
}

/// Dovecot's `{CRAM-MD5}` byte layout: outer then inner state, each word
/// little-endian.
pub(crate) fn encode_contexts(inner: State, outer: State) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, w) in outer.iter().chain(inner.iter()).enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Inverse of [`encode_contexts`]: `(inner, outer)`.
pub(crate) fn decode_contexts(bytes: &[u8]) -> Option<(State, State)> {
    if bytes.len() != 32 {
        return None;
    }
    let word = |i: usize| {
        u32::from_le_bytes([
            bytes[i * 4],
            bytes[i * 4 + 1],
            bytes[i * 4 + 2],
            bytes[i * 4 + 3],
        ])
    };
    let outer = [word(0), word(1), word(2), word(3)];
    let inner = [word(4), word(5), word(6), word(7)];
    Some((inner, outer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{Hmac, Mac};
    use md5::Digest;

    #[test]
    fn plain_md5_matches_the_md5_crate() {
        for len in [0usize, 1, 55, 56, 63, 64, 65, 200] {
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            assert_eq!(
                finish(INIT, 0, &data)[..],
                md5::Md5::digest(&data)[..],
                "{len}"
            );
        }
    }

    #[test]
    fn hmac_from_contexts_matches_rfc2104_hmac() {
        for key in [&b"k"[..], &[7u8; 64][..], &[9u8; 100][..]] {
            let (i, o) = hmac_contexts(key);
            let mut mac = Hmac::<md5::Md5>::new_from_slice(key).unwrap();
            mac.update(b"<1896.697170952@postoffice.example.net>");
            let want = mac.finalize().into_bytes();
            let got = hmac_from_contexts(i, o, b"<1896.697170952@postoffice.example.net>");
            assert_eq!(got[..], want[..]);
            let (i2, o2) = decode_contexts(&encode_contexts(i, o)).unwrap();
            assert_eq!((i2, o2), (i, o));
        }
    }
}
