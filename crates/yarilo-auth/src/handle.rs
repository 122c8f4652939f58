//! [`AuthHandle`]: one API for protocol sessions whether the authenticator
//! runs in this process (`yarilo single`) or behind `yarilo auth` (login
//! pods, backends). Transport errors become temporary failures, so a
//! session only ever deals with [`AuthReply`].

use std::net::IpAddr;
use std::sync::Arc;

use crate::authenticator::{
    AuthFailure, AuthReply, AuthRequest, Authenticator, Exchange, FailureKind, VerifiedLogin,
};
use crate::client::{AuthClient, ClientExchange};
use crate::fields::ExtraFields;

/// Where authentication happens.
#[derive(Clone, Debug)]
pub enum AuthHandle {
    Local(Arc<Authenticator>),
    Remote(AuthClient),
}

/// An exchange in progress; feed it with [`HandleExchange::step`] while the
/// reply is [`AuthReply::Continue`].
pub enum HandleExchange {
    Local(Box<Exchange>),
    Remote(ClientExchange),
    /// The service could not be reached; every step fails.
    Broken,
}

fn temporary(e: impl std::fmt::Display) -> AuthReply {
    tracing::warn!(error = %e, "auth service unavailable");
    AuthReply::Failure(AuthFailure {
        kind: FailureKind::Temporary,
        message: "Temporary authentication failure.".into(),
        user: None,
    })
}

impl AuthHandle {
    /// Starts an exchange with the client's initial response, if any.
    pub async fn begin(
        &self,
        request: AuthRequest,
        mechanism: &str,
        initial: Option<&[u8]>,
    ) -> (HandleExchange, AuthReply) {
        match self {
            AuthHandle::Local(auth) => {
                let mut ex = auth.exchange(request, mechanism);
                let reply = ex.begin(initial).await;
                (HandleExchange::Local(Box::new(ex)), reply)
            }
            AuthHandle::Remote(client) => match client.begin(&request, mechanism, initial).await {
                Ok((ex, reply)) => (HandleExchange::Remote(ex), reply),
                Err(e) => (HandleExchange::Broken, temporary(e)),
            },
        }
    }

    /// Mechanisms to advertise to a client.
    pub async fn mechanisms(&self, secured: bool, ip: IpAddr) -> Vec<String> {
        match self {
            AuthHandle::Local(auth) => auth
                .mechanisms(secured, ip)
                .iter()
                .map(|m| m.name().to_string())
                .collect(),
            AuthHandle::Remote(client) => client.mechanisms(secured, ip).await.unwrap_or_default(),
        }
    }

    /// VERIFY a preamble token; `Err` carries the reason to log.
    pub async fn verify(
        &self,
        token: &str,
        session: &str,
        service: &str,
        user: &str,
    ) -> Result<VerifiedLogin, String> {
        match self {
            AuthHandle::Local(auth) => auth
                .verify_token(token, session, service, user)
                .await
                .map_err(|e| e.to_string()),
            AuthHandle::Remote(client) => {
                match client.verify(token, session, service, user).await {
                    Ok(r) => r,
                    Err(e) => Err(e.to_string()),
                }
            }
        }
    }

    /// userdb lookup (LMTP recipients); `Err` is temporary.
    pub async fn lookup_user(
        &self,
        user: &str,
        service: &str,
    ) -> Result<Option<(String, ExtraFields)>, String> {
        match self {
            AuthHandle::Local(auth) => auth
                .lookup_user(user, service)
                .await
                .map_err(|e| e.to_string()),
            AuthHandle::Remote(client) => client
                .lookup_user(user, service)
                .await
                .map_err(|e| e.to_string()),
        }
    }
}

impl AuthHandle {
    /// userdb lookup of an LMTP recipient with a single-use token for the
    /// hop's preamble ([`Authenticator::lookup_delivery`]); `Err` is
    /// temporary.
    pub async fn lookup_delivery(
        &self,
        user: &str,
        session: &str,
    ) -> Result<Option<(String, ExtraFields, String)>, String> {
        match self {
            AuthHandle::Local(auth) => auth
                .lookup_delivery(user, session)
                .await
                .map_err(|e| e.to_string()),
            AuthHandle::Remote(client) => client
                .lookup_delivery(user, session)
                .await
                .map_err(|e| e.to_string()),
        }
    }
}

impl HandleExchange {
    /// The client's next response; `None` cancels.
    pub async fn step(&mut self, response: Option<&[u8]>) -> AuthReply {
        match self {
            HandleExchange::Local(ex) => ex.step(response).await,
            HandleExchange::Remote(ex) => match ex.step(response).await {
                Ok(r) => r,
                Err(e) => temporary(e),
            },
            HandleExchange::Broken => temporary("no connection"),
        }
    }
}
