//! Quota limits from userdb fields, as Dovecot's quota plugin reads them:
//! `quota_rule=*:storage=1G`, `quota_rule2=*:messages=1000`,
//! `quota_rule=*:bytes=1048576`, `quota_rule=*:ignore`.
//!
//! Only `*` (the whole user) rules count; per-mailbox rules are ignored.
//! `storage=` is in KiB unless it has a suffix (`b k M G T`), `bytes=` in
//! bytes; `0` means unlimited — all as in Dovecot 2.3.

use crate::store::QuotaUsage;

/// A user's limits; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaLimits {
    pub bytes: Option<u64>,
    pub messages: Option<u64>,
}

impl QuotaLimits {
    /// Reads `quota_rule`, `quota_rule2`, … from userdb fields (name,
    /// value pairs).
    pub fn from_fields<'a>(fields: impl IntoIterator<Item = (&'a str, &'a str)>) -> QuotaLimits {
        let mut limits = QuotaLimits::default();
        let mut rules: Vec<(&str, &str)> = fields
            .into_iter()
            .filter(|(k, _)| {
                *k == "quota_rule"
                    || k.strip_prefix("quota_rule")
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .collect();
        rules.sort_by_key(|(k, _)| k.len());
        for (_, rule) in rules {
            let Some(spec) = rule.strip_prefix("*:") else {
                continue;
            };
            if spec == "ignore" {
                return QuotaLimits::default();
            }
            for part in spec.split(':') {
                let Some((key, value)) = part.split_once('=') else {
                    continue;
                };
                match key {
                    "storage" => limits.bytes = parse_size(value, 1024),
                    "bytes" => limits.bytes = parse_size(value, 1),
                    "messages" => limits.messages = parse_size(value, 1),
                    _ => {}
                }
            }
        }
        limits
    }

    pub fn is_unlimited(&self) -> bool {
        self.bytes.is_none() && self.messages.is_none()
    }

    /// Already at or over a limit (RCPT-time check).
    pub fn is_full(&self, usage: &QuotaUsage) -> bool {
        self.bytes.is_some_and(|b| usage.bytes >= b)
            || self.messages.is_some_and(|m| usage.messages >= m)
    }

    /// Whether one more message of `size` bytes fits.
    pub fn fits(&self, usage: &QuotaUsage, size: u64) -> bool {
        self.bytes
            .is_none_or(|b| usage.bytes.saturating_add(size) <= b)
            && self.messages.is_none_or(|m| usage.messages < m)
    }
}

/// `<number>[b|k|M|G|T]`; a bare number is multiplied by `unit`; `0` or
/// anything unparsable (percentages, relative `+` values) is unlimited.
fn parse_size(v: &str, unit: u64) -> Option<u64> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, suffix) = v.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult = match suffix {
        "" => unit,
        "b" | "B" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        "g" | "G" => 1 << 30,
        "t" | "T" => 1 << 40,
        _ => return None,
    };
    match n.checked_mul(mult) {
        Some(0) | None => None,
        Some(x) => Some(x),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(s: &str) -> QuotaLimits {
        // "k=v k=v", as a userdb line.
        let pairs: Vec<(&str, &str)> = s
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .collect();
        QuotaLimits::from_fields(pairs)
    }

    #[test]
    fn rules_parse_like_dovecot() {
        assert_eq!(limits("quota_rule=*:storage=1M").bytes, Some(1 << 20));
        assert_eq!(limits("quota_rule=*:storage=100").bytes, Some(100 * 1024));
        assert_eq!(limits("quota_rule=*:bytes=100").bytes, Some(100));
        let l = limits("quota_rule=*:storage=2G quota_rule2=*:messages=10");
        assert_eq!(l.bytes, Some(2 << 30));
        assert_eq!(l.messages, Some(10));
        assert!(limits("quota_rule=*:storage=0").is_unlimited());
        assert!(limits("quota_rule=Trash:storage=1M").is_unlimited());
        assert!(limits("quota_rule=*:storage=1M quota_rule2=*:ignore").is_unlimited());
        assert!(limits("home=/x").is_unlimited());
    }

    #[test]
    fn fits_and_full() {
        let l = limits("quota_rule=*:bytes=100:messages=2");
        let u = QuotaUsage {
            bytes: 60,
            messages: 1,
        };
        assert!(l.fits(&u, 40));
        assert!(!l.fits(&u, 41));
        assert!(!l.is_full(&u));
        let u2 = QuotaUsage {
            bytes: 60,
            messages: 2,
        };
        assert!(l.is_full(&u2));
        assert!(!l.fits(&u2, 1));
    }
}
