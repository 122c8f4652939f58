//! yarilo authentication.
//!
//! * [`scheme`]: password schemes with Dovecot's `{SCHEME}` prefixes;
//! * [`db`]: passdb/userdb drivers (passwd-file, SQL, static);
//! * [`sasl`]: sans-I/O SASL servers (PLAIN, LOGIN, CRAM-MD5, SCRAM-SHA-1/-256);
//! * [`Authenticator`]: chains + cache + failure penalty + tokens, the engine
//!   every protocol authenticates through (in-process in `single`);
//! * [`service`] and [`client`]: the same engine as `yarilo auth` on the
//!   internal TAB/LF protocol (AUTH, CONT, VERIFY, USER, MECHS);
//! * [`admin`]: `yarctl user` and `yarctl pw` logic.

pub mod db;
pub mod fields;
pub mod scheme;
pub mod template;

pub use fields::{ExtraFields, LoginRefused};
pub use scheme::{hash_password, Scheme, StoredPassword};
mod authenticator;
pub mod cache;
pub mod metrics;
pub mod penalty;
pub mod sasl;
pub mod token;
pub mod token_redis;

pub use authenticator::{
    AuthFailure, AuthReply, AuthRequest, AuthSettings, AuthSuccess, Authenticator, BuildError,
    Exchange, FailureKind, VerifiedLogin,
};
pub mod admin;
pub mod client;
pub mod handle;
pub mod protocol;
pub mod service;

pub use handle::{AuthHandle, HandleExchange};
