//! SASL server mechanisms as sans-I/O state machines (RFC 4422).
//!
//! A protocol session (IMAP AUTHENTICATE, POP3 AUTH, SMTP AUTH, the auth
//! service's AUTH/CONT) feeds the client's decoded responses into
//! [`SaslServer::step`] and acts on the returned [`SaslStep`]: send a
//! challenge, verify a clear-text password, look up the user's stored
//! credentials and hand them to [`SaslServer::credentials`], or finish.
//! Base64 is the caller's business; no I/O and no passdb access here.
//!
//! Mechanisms: PLAIN (RFC 4616), LOGIN (draft-murchison-sasl-login),
//! CRAM-MD5 (RFC 2195), SCRAM-SHA-1 and SCRAM-SHA-256 (RFC 5802, RFC 7677,
//! without channel binding: the -PLUS variants are not offered).
//! Invariants: a client message longer than [`MAX_MESSAGE`] fails the
//! exchange; no input panics; proofs are compared in constant time.

mod cram_md5;
mod plain;
mod scram;

use std::fmt;

use crate::scheme::{Scheme, StoredPassword};

/// The longest client message accepted in one step.
pub const MAX_MESSAGE: usize = 8 * 1024;

/// A SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    Login,
    CramMd5,
    ScramSha1,
    ScramSha256,
}

impl Mechanism {
    pub const ALL: [Mechanism; 5] = [
        Mechanism::Plain,
        Mechanism::Login,
        Mechanism::CramMd5,
        Mechanism::ScramSha1,
        Mechanism::ScramSha256,
    ];

    pub fn parse(name: &str) -> Option<Mechanism> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name))
    }

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Login => "LOGIN",
            Mechanism::CramMd5 => "CRAM-MD5",
            Mechanism::ScramSha1 => "SCRAM-SHA-1",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
        }
    }

    /// Sends the password itself: refused on insecure connections when
    /// `disable_plaintext_auth` is set.
    pub fn is_plaintext(self) -> bool {
        matches!(self, Mechanism::Plain | Mechanism::Login)
    }

    /// Whether the mechanism accepts an initial response (RFC 4422 §3.3);
    /// CRAM-MD5 starts with a server challenge.
    pub fn allows_initial_response(self) -> bool {
        !matches!(self, Mechanism::CramMd5)
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the driver does next.
#[derive(Debug, PartialEq, Eq)]
pub enum SaslStep {
    /// Send this challenge and call [`SaslServer::step`] with the answer.
    Challenge(Vec<u8>),
    /// Verify this password against the passdb, then report with
    /// [`SaslServer::password_verified`] (or just finish).
    VerifyPassword {
        /// The login name (authentication identity).
        authcid: String,
        /// The authorization identity, when different from `authcid`.
        authzid: Option<String>,
        password: Vec<u8>,
    },
    /// Look up the user's stored password and call
    /// [`SaslServer::credentials`] with it (CRAM-MD5, SCRAM).
    NeedCredentials {
        authcid: String,
        authzid: Option<String>,
    },
    /// Authenticated as `authcid`; `additional` is RFC 4422 §3.6
    /// additional data with success (SCRAM's server-final message).
    Success {
        authcid: String,
        authzid: Option<String>,
        additional: Option<Vec<u8>>,
    },
    /// The exchange failed; the session answers NO.
    Failure(SaslError),
}

/// Why an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    /// The client's message does not follow the mechanism's grammar.
    #[error("malformed SASL message: {0}")]
    Malformed(&'static str),
    /// A client message exceeded [`MAX_MESSAGE`].
    #[error("SASL message too long")]
    TooLong,
    /// Wrong password or proof.
    #[error("authentication failed")]
    BadCredentials,
    /// Proxy authorization (authzid ≠ authcid) is not supported.
    #[error("authorization identity not permitted")]
    AuthzidNotPermitted,
    /// The stored password cannot serve this mechanism (e.g. SCRAM with an
    /// ARGON2ID hash).
    #[error("mechanism not usable with this user's password scheme")]
    CredentialsUnusable,
    /// Channel binding was requested; we do not offer -PLUS.
    #[error("channel binding not supported")]
    ChannelBinding,
    /// Called out of order (a driver bug).
    #[error("SASL state machine misuse")]
    OutOfOrder,
}

/// Credentials a mechanism may need, derived from the stored password.
#[derive(Debug, Clone)]
pub enum Credentials {
    Stored(StoredPassword),
}

#[derive(Debug)]
enum State {
    Plain(plain::Plain),
    Login(plain::Login),
    CramMd5(cram_md5::CramMd5),
    Scram(scram::Scram),
}

/// One SASL exchange, server side.
#[derive(Debug)]
pub struct SaslServer {
    mechanism: Mechanism,
    state: State,
}

impl SaslServer {
    /// Starts `mechanism`. `host` appears in the CRAM-MD5 challenge; `nonce`
    /// is random bytes for CRAM-MD5 / SCRAM (injected for tests).
    pub fn new(mechanism: Mechanism, host: &str, nonce: [u8; 18]) -> SaslServer {
        let state = match mechanism {
            Mechanism::Plain => State::Plain(plain::Plain),
            Mechanism::Login => State::Login(plain::Login::new()),
            Mechanism::CramMd5 => State::CramMd5(cram_md5::CramMd5::new(host, &nonce)),
            Mechanism::ScramSha1 => State::Scram(scram::Scram::new(Scheme::ScramSha1, &nonce)),
            Mechanism::ScramSha256 => State::Scram(scram::Scram::new(Scheme::ScramSha256, &nonce)),
        };
        SaslServer { mechanism, state }
    }

    /// Starts with a random nonce.
    pub fn start(mechanism: Mechanism, host: &str) -> SaslServer {
        use rand::Rng as _;
        let mut nonce = [0u8; 18];
        rand::thread_rng().fill(&mut nonce);
        SaslServer::new(mechanism, host, nonce)
    }

    #[cfg(test)]
    pub(crate) fn set_scram_nonce(&mut self, nonce: &str) {
        if let State::Scram(s) = &mut self.state {
            s.set_server_nonce(nonce);
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The first step: `initial` is the client's initial response, if it
    /// sent one (an empty one is `Some(&[])`).
    pub fn begin(&mut self, initial: Option<&[u8]>) -> SaslStep {
        match (&mut self.state, initial) {
            (State::CramMd5(c), _) => SaslStep::Challenge(c.challenge()),
            (State::Plain(_), None) => SaslStep::Challenge(Vec::new()),
            (State::Login(l), None) => l.begin(),
            (State::Scram(_), None) => SaslStep::Challenge(Vec::new()),
            (_, Some(data)) => self.step(data),
        }
    }

    /// Feeds one client response.
    pub fn step(&mut self, data: &[u8]) -> SaslStep {
        if data.len() > MAX_MESSAGE {
            return SaslStep::Failure(SaslError::TooLong);
        }
        match &mut self.state {
            State::Plain(p) => p.step(data),
            State::Login(l) => l.step(data),
            State::CramMd5(c) => c.step(data),
            State::Scram(s) => s.step(data),
        }
    }

    /// Answers a [`SaslStep::NeedCredentials`].
    pub fn credentials(&mut self, stored: &StoredPassword) -> SaslStep {
        match &mut self.state {
            State::CramMd5(c) => c.credentials(stored),
            State::Scram(s) => s.credentials(stored),
            _ => SaslStep::Failure(SaslError::OutOfOrder),
        }
    }
}

/// Normalises a SASL identity: PLAIN/LOGIN/SCRAM identities are UTF-8.
pub(crate) fn utf8(bytes: &[u8], what: &'static str) -> Result<String, SaslError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| SaslError::Malformed(what))
}

#[cfg(test)]
mod tests;
