//! From a request to a reply, as Dovecot 2.3's quota-status decides.
//!
//! * No recipient, or a `protocol_state` other than `RCPT` (the service
//!   only makes sense as a recipient restriction; Dovecot 2.3 answers
//!   `END-OF-MESSAGE` with `DUNNO` too), or a recipient that is not an
//!   address: `DUNNO`.
//! * The recipient's detail (after `recipient_delimiter`) is dropped and the
//!   rest looked up in the userdb: unknown → `quota_status_nouser`; lookup
//!   failure → `DEFER_IF_PERMIT Temporary internal error`.
//! * The message `size` (absent or unparsable: 0; at least 1 byte counted)
//!   is tested against the user's `*` quota rules and current usage:
//!   fits → `quota_status_success`; alone larger than the storage limit →
//!   `quota_status_toolarge` (or `quota_status_overquota` when that is
//!   empty); otherwise over → `quota_status_overquota`, `%{error}` replaced
//!   by Dovecot's `Quota exceeded (mailbox for user is full)`.
//!
//! Every reply is `action=<value>` and an empty line.

use yarilo_store::{QuotaLimits, QuotaUsage};

use crate::codec::PolicyRequest;

/// Dovecot's `quota_exceeded_message` default: the `%{error}` of an
/// over-quota reply.
pub const QUOTA_EXCEEDED: &str = "Quota exceeded (mailbox for user is full)";

/// What the request asks, once read: DUNNO at once, or a user to check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not a question this service answers.
    Dunno,
    /// Look `user` up and test `size` bytes against its quota.
    Check { user: String, size: u64 },
}

/// How a check ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Dunno,
    Success,
    NoUser,
    OverQuota,
    TooLarge,
    /// Lookup or usage failed; `reason` goes after `DEFER_IF_PERMIT`.
    TempFail {
        reason: &'static str,
    },
}

impl Outcome {
    /// The `result` label of `yarilo_quota_status_requests_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Dunno => "dunno",
            Outcome::Success => "ok",
            Outcome::NoUser => "nouser",
            Outcome::OverQuota => "overquota",
            Outcome::TooLarge => "toolarge",
            Outcome::TempFail { .. } => "tempfail",
        }
    }
}

/// Reads the request the way Dovecot 2.3 does: the first `recipient`
/// (even an empty one, which is the null path and so DUNNO), the last
/// `size`, the first `protocol_state`.
pub fn verdict(req: &PolicyRequest, delimiter: &str) -> Verdict {
    let state = req.first("protocol_state");
    // Dovecot 2.3 answers at RCPT only (END-OF-MESSAGE, which Postfix
    // sends once per message, gets DUNNO even with a recipient in it).
    if state.is_some_and(|s| !s.eq_ignore_ascii_case("RCPT")) {
        return Verdict::Dunno;
    }
    let Some(recipient) = req.first("recipient") else {
        return Verdict::Dunno;
    };
    let Some(user) = lookup_name(recipient, delimiter) else {
        return Verdict::Dunno;
    };
    let size = req.last("size").and_then(|s| s.parse().ok()).unwrap_or(0);
    Verdict::Check { user, size }
}

/// The userdb name of a recipient: `local@domain` (or a bare local part)
/// without its detail; `None` when it is not an address. As lenient as
/// Dovecot's parser with a "bad local part" allowed: the local part may be
/// any printable ASCII (spaces and specials included, even empty), the
/// domain must be well formed; angle brackets are optional.
fn lookup_name(recipient: &str, delimiter: &str) -> Option<String> {
    let addr = match recipient.strip_prefix('<') {
        Some(rest) => rest.strip_suffix('>')?,
        None => recipient,
    };
    // The null path `<>` (or an empty value) names no recipient.
    if addr.is_empty() {
        return None;
    }
    let (local, domain) = match addr.rsplit_once('@') {
        Some((l, d)) => (l, Some(d)),
        None => (addr, None),
    };
    if !local.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    if let Some(d) = domain {
        if !valid_domain(d) {
            return None;
        }
    }
    let base = match local.find(|c: char| delimiter.contains(c)) {
        Some(i) if !delimiter.is_empty() => &local[..i],
        _ => local,
    };
    Some(match domain {
        Some(d) => format!("{base}@{d}"),
        None => base.to_string(),
    })
}

/// A domain (RFC 5321 §4.1.2, with `_` tolerated as Dovecot does):
/// dot-separated non-empty labels of ASCII letters, digits, `-` and `_`,
/// or an address literal in brackets.
fn valid_domain(domain: &str) -> bool {
    if let Some(lit) = domain.strip_prefix('[') {
        return lit.strip_suffix(']').is_some_and(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'[' && b != b']')
        });
    }
    !domain.is_empty()
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Dovecot's quota test of one message (`quota_test_alloc`): the size is
/// at least 1; a message alone over the storage limit is "too large";
/// otherwise it must fit in what is left, and one more message must fit
/// under the message limit.
pub fn check_quota(limits: &QuotaLimits, usage: &QuotaUsage, size: u64) -> Outcome {
    let size = size.max(1);
    if limits.fits(usage, size) {
        return Outcome::Success;
    }
    if limits.bytes.is_some_and(|b| size > b) {
        return Outcome::TooLarge;
    }
    Outcome::OverQuota
}

/// The configured reply values (`quota_status.*`).
#[derive(Debug, Clone)]
pub struct Replies {
    pub success: String,
    pub nouser: String,
    pub overquota: String,
    pub toolarge: String,
}

impl Replies {
    /// The reply bytes for an outcome: `action=…\n\n`.
    pub fn render(&self, outcome: &Outcome) -> String {
        let action = match outcome {
            Outcome::Dunno => "DUNNO".to_string(),
            Outcome::Success => self.success.clone(),
            Outcome::NoUser => self.nouser.clone(),
            Outcome::TooLarge if !self.toolarge.is_empty() => expand(&self.toolarge),
            Outcome::TooLarge | Outcome::OverQuota => expand(&self.overquota),
            Outcome::TempFail { reason } => format!("DEFER_IF_PERMIT {reason}"),
        };
        format!("action={action}\n\n")
    }
}

fn expand(template: &str) -> String {
    template.replace("%{error}", QUOTA_EXCEEDED)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(lines: &[(&str, &str)]) -> PolicyRequest {
        PolicyRequest {
            attributes: lines
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn replies() -> Replies {
        Replies {
            success: "OK".into(),
            nouser: "REJECT Unknown user".into(),
            overquota: "554 5.2.2 %{error}".into(),
            toolarge: String::new(),
        }
    }

    #[test]
    fn only_rcpt_is_checked_other_states_are_dunno() {
        for state in ["RCPT", "rcpt"] {
            assert_eq!(
                verdict(
                    &req(&[("protocol_state", state), ("recipient", "a@b.org")]),
                    "+"
                ),
                Verdict::Check {
                    user: "a@b.org".into(),
                    size: 0
                }
            );
        }
        for state in ["DATA", "MAIL", "CONNECT", "END-OF-MESSAGE", ""] {
            assert_eq!(
                verdict(
                    &req(&[("protocol_state", state), ("recipient", "a@b.org")]),
                    "+"
                ),
                Verdict::Dunno,
                "{state}"
            );
        }
    }

    #[test]
    fn missing_empty_or_unparsable_recipient_is_dunno() {
        assert_eq!(verdict(&req(&[("size", "1")]), "+"), Verdict::Dunno);
        assert_eq!(verdict(&req(&[("recipient", "")]), "+"), Verdict::Dunno);
        for bad in [
            "<>",
            "a@",
            "a@b..c",
            "a@b.",
            "<a@b",
            "a@b@",
            "a\tb@c",
            "\u{e9}@x",
            "a@\u{e9}.org",
            "a@b c",
            "a@[x",
            "a@[]",
            "<a@x>x",
        ] {
            assert_eq!(
                verdict(&req(&[("recipient", bad)]), "+"),
                Verdict::Dunno,
                "{bad}"
            );
        }
    }

    #[test]
    fn detail_is_dropped_and_size_read() {
        assert_eq!(
            verdict(&req(&[("recipient", "a+list@b.org"), ("size", "100")]), "+"),
            Verdict::Check {
                user: "a@b.org".into(),
                size: 100
            }
        );
        assert_eq!(
            verdict(&req(&[("recipient", "a+x"), ("size", "junk")]), ""),
            Verdict::Check {
                user: "a+x".into(),
                size: 0
            }
        );
        assert_eq!(
            verdict(&req(&[("recipient", "<a@b.org>")]), "+"),
            Verdict::Check {
                user: "a@b.org".into(),
                size: 0
            }
        );
    }

    #[test]
    fn a_bad_local_part_is_still_looked_up() {
        for (rcpt, user) in [
            ("@b.org", "@b.org"),
            ("a b@@x", "a b@@x"),
            ("\"q\"@x", "\"q\"@x"),
            ("a<b@x_y.org", "a<b@x_y.org"),
            ("x@[1.2.3.4]", "x@[1.2.3.4]"),
            ("+@x", "@x"),
            ("a++b@x", "a@x"),
        ] {
            assert_eq!(
                verdict(&req(&[("recipient", rcpt)]), "+"),
                Verdict::Check {
                    user: user.into(),
                    size: 0
                },
                "{rcpt}"
            );
        }
    }

    #[test]
    fn the_first_recipient_counts_even_when_empty() {
        assert_eq!(
            verdict(&req(&[("recipient", ""), ("recipient", "x@y")]), "+"),
            Verdict::Dunno
        );
        assert_eq!(
            verdict(&req(&[("recipient", "x@y"), ("recipient", "z@y")]), "+"),
            Verdict::Check {
                user: "x@y".into(),
                size: 0
            }
        );
    }

    #[test]
    fn quota_test_counts_at_least_one_byte() {
        let limits = QuotaLimits {
            bytes: Some(100),
            messages: Some(10),
        };
        let u = |bytes, messages| QuotaUsage { bytes, messages };
        assert_eq!(check_quota(&limits, &u(99, 0), 0), Outcome::Success);
        assert_eq!(check_quota(&limits, &u(100, 0), 0), Outcome::OverQuota);
        assert_eq!(check_quota(&limits, &u(50, 0), 51), Outcome::OverQuota);
        assert_eq!(check_quota(&limits, &u(0, 0), 101), Outcome::TooLarge);
        assert_eq!(check_quota(&limits, &u(0, 10), 1), Outcome::OverQuota);
        assert_eq!(
            check_quota(&QuotaLimits::default(), &u(1 << 40, 1 << 20), 1 << 30),
            Outcome::Success
        );
    }

    #[test]
    fn replies_are_exact() {
        let r = replies();
        assert_eq!(r.render(&Outcome::Success), "action=OK\n\n");
        assert_eq!(r.render(&Outcome::Dunno), "action=DUNNO\n\n");
        assert_eq!(r.render(&Outcome::NoUser), "action=REJECT Unknown user\n\n");
        assert_eq!(
            r.render(&Outcome::OverQuota),
            "action=554 5.2.2 Quota exceeded (mailbox for user is full)\n\n"
        );
        assert_eq!(
            r.render(&Outcome::TooLarge),
            "action=554 5.2.2 Quota exceeded (mailbox for user is full)\n\n"
        );
        assert_eq!(
            r.render(&Outcome::TempFail {
                reason: "Temporary internal error"
            }),
            "action=DEFER_IF_PERMIT Temporary internal error\n\n"
        );
        let custom = Replies {
            toolarge: "552 5.3.4 Message too big".into(),
            ..replies()
        };
        assert_eq!(
            custom.render(&Outcome::TooLarge),
            "action=552 5.3.4 Message too big\n\n"
        );
    }
}
