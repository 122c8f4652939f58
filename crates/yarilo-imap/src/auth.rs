//! STARTTLS, LOGIN and AUTHENTICATE (RFC 9051 §6.2, RFC 4959 SASL-IR).

use base64::Engine;
use yarilo_auth::{AuthFailure, AuthReply, AuthRequest, FailureKind};
use yarilo_imap_proto::response::{Code, Response};
use yarilo_imap_proto::{Expect, Outcome};

use crate::conn::Read;
use crate::metrics::ResultLabel;
use crate::session::Session;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

impl Session {
    pub(crate) async fn starttls(&mut self, tag: &str) -> std::io::Result<Response> {
        let Some(acceptor) = self.server.starttls.clone() else {
            return Ok(Response::bad(
                Some(tag.to_string()),
                None,
                "STARTTLS is not offered here.",
            ));
        };
        if self.secured() {
            return Ok(Response::bad(
                Some(tag.to_string()),
                None,
                "TLS is already active.",
            ));
        }
        // Anything pipelined after STARTTLS was sent in clear: drop it
        // (the classic STARTTLS command injection).
        self.conn.rx = yarilo_imap_proto::Receiver::new(Default::default());
        self.conn
            .send(&Response::ok(tag, None, "Begin TLS negotiation now."));
        self.conn.flush().await?;
        let within = self.server.settings.starttls_timeout;
        if let Err(e) = self.conn.stream.upgrade_within(&acceptor, within).await {
            if e.kind() == std::io::ErrorKind::TimedOut {
                tracing::info!("STARTTLS handshake timed out");
                self.server.metrics.timed_out("starttls");
            }
            return Err(e);
        }
        let s = &self.server.settings;
        self.conn.rx.set_limits(yarilo_imap_proto::Limits {
            max_line: s.max_line_length,
            max_command: s.max_line_length.max(s.max_literal) + s.max_line_length,
            max_literal: s.max_literal as u64,
            // The session answers NO [TOOBIG] itself (RFC 7889).
            max_append: u64::MAX,
            max_nonsync: None,
        });
        // The tagged reply is already out; nothing more for this command.
        Ok(crate::session::answered())
    }

    fn request(&self) -> AuthRequest {
        AuthRequest {
            service: "imap".into(),
            client_ip: self.peer.ip(),
            local_ip: Some(self.local.ip()),
            session: self.id.clone(),
            secured: self.secured(),
        }
    }

    pub(crate) async fn login(
        &mut self,
        tag: &str,
        user: &[u8],
        password: &[u8],
    ) -> std::io::Result<Response> {
        let mut ir = Vec::with_capacity(user.len() + password.len() + 2);
        ir.push(0);
        ir.extend_from_slice(user);
        ir.push(0);
        ir.extend_from_slice(password);
        let (_, reply) = self
            .server
            .auth
            .begin(self.request(), "PLAIN", Some(&ir))
            .await;
        Ok(self.finish_auth(tag, reply).await)
    }

    pub(crate) async fn authenticate(
        &mut self,
        tag: &str,
        mechanism: &str,
        initial: Option<Vec<u8>>,
    ) -> std::io::Result<Response> {
        let initial = match initial {
            None => None,
            Some(b) if b.is_empty() => Some(Vec::new()),
            Some(b) => match B64.decode(&b) {
                Ok(d) => Some(d),
                Err(_) => {
                    return Ok(Response::bad(
                        Some(tag.to_string()),
                        None,
                        "Invalid base64 in the initial response.",
                    ))
                }
            },
        };
        let (mut ex, mut reply) = self
            .server
            .auth
            .begin(self.request(), mechanism, initial.as_deref())
            .await;
        loop {
            let challenge = match reply {
                AuthReply::Continue(c) => c,
                other => return Ok(self.finish_auth(tag, other).await),
            };
            self.conn.raw(b"+ ");
            self.conn.raw(B64.encode(&challenge).as_bytes());
            self.conn.raw(b"\r\n");
            self.conn.flush().await?;
            self.conn.rx.expect(Expect::SaslResponse);
            let answer = loop {
                match self.conn.rx.next() {
                    Outcome::SaslResponse(line) => break Some(line),
                    Outcome::SaslCancel => break None,
                    Outcome::Incomplete => match self.conn.fill(self.read_timeout()).await? {
                        Read::Data => {}
                        Read::Eof => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                        Read::Timeout => {
                            self.read_timed_out();
                            let _ = self.conn.flush().await;
                            return Err(std::io::ErrorKind::TimedOut.into());
                        }
                    },
                    Outcome::Bad { .. } => {
                        return Ok(Response::bad(
                            Some(tag.to_string()),
                            None,
                            "Invalid SASL response.",
                        ))
                    }
                    _ => {}
                }
            };
            let Some(line) = answer else {
                let _ = ex.step(None).await;
                return Ok(Response::bad(
                    Some(tag.to_string()),
                    None,
                    "Authentication cancelled.",
                ));
            };
            let decoded = match B64.decode(&line) {
                Ok(d) => d,
                Err(_) => {
                    let _ = ex.step(None).await;
                    return Ok(Response::bad(
                        Some(tag.to_string()),
                        None,
                        "Invalid base64 in the SASL response.",
                    ));
                }
            };
            reply = ex.step(Some(&decoded)).await;
        }
    }

    async fn finish_auth(&mut self, tag: &str, reply: AuthReply) -> Response {
        match reply {
            AuthReply::Success(ok) => {
                self.server
                    .metrics
                    .logins
                    .get_or_create(&ResultLabel { result: "ok" })
                    .inc();
                if let Err(r) = self.log_in(&ok.user, &ok.fields).await {
                    return match r {
                        Response::Status { code, text, .. } => Response::no(tag, code, text),
                        other => other,
                    };
                }
                let caps = self.capabilities().await;
                Response::ok(tag, Some(Code::Capability(caps)), "Logged in")
            }
            AuthReply::Failure(f) => self.auth_failed(tag, f).await,
            AuthReply::Continue(_) => Response::no(tag, None, "Authentication failed."),
        }
    }

    async fn auth_failed(&mut self, tag: &str, f: AuthFailure) -> Response {
        self.server
            .metrics
            .logins
            .get_or_create(&ResultLabel {
                result: f.kind.as_str(),
            })
            .inc();
        tracing::info!(reason = f.kind.as_str(), user = ?f.user, "login failed");
        self.auth_failures += 1;
        let (code, text) = match f.kind {
            FailureKind::Temporary => (Code::Unavailable, f.message),
            FailureKind::PlaintextDisabled => (
                Code::PrivacyRequired,
                "Plaintext authentication disallowed on non-secure connections.".into(),
            ),
            FailureKind::UnsupportedMechanism => {
                return Response::no(tag, None, "Unsupported authentication mechanism.")
            }
            FailureKind::Aborted => {
                return Response::bad(Some(tag.to_string()), None, "Authentication aborted.")
            }
            _ => (Code::AuthenticationFailed, "Authentication failed.".into()),
        };
        // Slow down guessing on this connection; the auth layer also
        // penalises the IP across connections.
        if f.kind != FailureKind::Temporary {
            tokio::time::sleep(self.server.settings.auth_failure_delay).await;
        }
        if self.auth_failures >= self.server.settings.max_auth_failures {
            self.conn.send(&Response::no(tag, Some(code), text));
            self.conn.send(&Response::Status {
                tag: None,
                kind: yarilo_imap_proto::response::StatusKind::Bye,
                code: None,
                text: "Too many invalid login attempts.".into(),
            });
            self.closing = true;
            return crate::session::answered();
        }
        Response::no(tag, Some(code), text)
    }
}
