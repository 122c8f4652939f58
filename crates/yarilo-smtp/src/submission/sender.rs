//! Who may use which MAIL FROM (RFC 6409 §6.1: the MSA may check that the
//! sender is the authenticated user).
//!
//! Allowed: the login name when it is an address; `<login>@<default_domain>`
//! when it is not; and every entry of the userdb field `submission_from`, a
//! comma-separated list of addresses (`alias@example.org`) and whole
//! domains (`@example.org`). Comparison ignores ASCII case. The null
//! sender `<>` is refused: an authenticated user has no reason to send
//! bounces through the MSA.

use yarilo_auth::ExtraFields;

use crate::address::split_address;

/// The userdb field listing extra sender addresses.
pub const SUBMISSION_FROM_FIELD: &str = "submission_from";

/// The addresses and `@domain` patterns a user may send as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedSenders(Vec<String>);

impl AllowedSenders {
    pub fn for_user(user: &str, fields: &ExtraFields, default_domain: &str) -> AllowedSenders {
        let mut list = Vec::new();
        if user.contains('@') {
            list.push(user.to_ascii_lowercase());
        } else if !default_domain.is_empty() {
            list.push(format!("{user}@{default_domain}").to_ascii_lowercase());
        }
        if let Some(v) = fields.get(SUBMISSION_FROM_FIELD) {
            list.extend(
                v.split(',')
                    .map(|s| s.trim().to_ascii_lowercase())
                    .filter(|s| !s.is_empty()),
            );
        }
        AllowedSenders(list)
    }

    pub fn allows(&self, from: &str) -> bool {
        if from.is_empty() {
            return false;
        }
        let from = from.to_ascii_lowercase();
        let (_, domain) = split_address(&from);
        self.0.iter().any(|a| match a.strip_prefix('@') {
            Some(d) => !domain.is_empty() && d == domain,
            None => *a == from,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_address_aliases_and_domains() {
        let f = ExtraFields::parse_dovecot("submission_from=Sales@Example.org,@lists.example.org");
        let a = AllowedSenders::for_user("alice@example.org", &f, "ignored");
        assert!(a.allows("alice@example.org"));
        assert!(a.allows("ALICE@example.ORG"));
        assert!(a.allows("sales@example.org"));
        assert!(a.allows("anything@lists.example.org"));
        assert!(!a.allows("bob@example.org"));
        assert!(!a.allows("alice@example.org.evil"));
        assert!(!a.allows(""));
        let a = AllowedSenders::for_user("bob", &ExtraFields::new(), "example.net");
        assert!(a.allows("bob@example.net"));
        assert!(!a.allows("bob"));
    }
}
