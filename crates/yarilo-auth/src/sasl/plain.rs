//! PLAIN (RFC 4616) and LOGIN (draft-murchison-sasl-login-00).

use super::{utf8, SaslError, SaslStep};

#[derive(Debug)]
pub(super) struct Plain;

impl Plain {
    /// RFC 4616 §2: `[authzid] NUL authcid NUL passwd`.
    pub(super) fn step(&mut self, data: &[u8]) -> SaslStep {
        let mut parts = data.split(|b| *b == 0);
        let (Some(authzid), Some(authcid), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return SaslStep::Failure(SaslError::Malformed(
                "PLAIN needs authzid NUL authcid NUL password",
            ));
        };
        let authcid = match utf8(authcid, "PLAIN authcid") {
            Ok(a) if !a.is_empty() => a,
            Ok(_) => return SaslStep::Failure(SaslError::Malformed("empty PLAIN authcid")),
            Err(e) => return SaslStep::Failure(e),
        };
        let authzid = match utf8(authzid, "PLAIN authzid") {
            Ok(z) if z.is_empty() || z == authcid => None,
            Ok(z) => Some(z),
            Err(e) => return SaslStep::Failure(e),
        };
        SaslStep::VerifyPassword {
            authcid,
            authzid,
            password: password.to_vec(),
        }
    }
}

#[derive(Debug)]
pub(super) struct Login {
    user: Option<String>,
}

impl Login {
    pub(super) fn new() -> Login {
        Login { user: None }
    }

    pub(super) fn begin(&mut self) -> SaslStep {
        SaslStep::Challenge(b"Username:".to_vec())
    }

    pub(super) fn step(&mut self, data: &[u8]) -> SaslStep {
        match self.user.take() {
            None => match utf8(data, "LOGIN user name") {
                Ok(u) if !u.is_empty() => {
                    self.user = Some(u);
                    SaslStep::Challenge(b"Password:".to_vec())
                }
                Ok(_) => SaslStep::Failure(SaslError::Malformed("empty LOGIN user name")),
                Err(e) => SaslStep::Failure(e),
            },
            Some(authcid) => SaslStep::VerifyPassword {
                authcid,
                authzid: None,
                password: data.to_vec(),
            },
        }
    }
}
