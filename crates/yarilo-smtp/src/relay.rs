//! The upstream side of Submission: an SMTP client (RFC 5321) to the
//! site's MTA, with implicit TLS (RFC 8314) or STARTTLS (RFC 3207) and
//! AUTH PLAIN (RFC 4954).
//!
//! Error classes: anything that keeps us from talking to the relay
//! (connect, TLS, timeout, a malformed reply, a refused greeting, EHLO or
//! AUTH) is a [`RelayError`] and becomes a 4xx for the client (the
//! client's message is fine; our relay is not). A reply the relay gives to
//! the client's own MAIL / RCPT / DATA is passed through unchanged.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::BytesMut;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;
use yarilo_config::{RelaySsl, Secret};

use crate::data::{dot_stuff, Line, LineFramer};
use crate::reply::{EnhancedCode, Reply, ReplyParser};

/// How to reach the relay.
#[derive(Debug, Clone)]
pub struct RelaySettings {
    pub host: String,
    pub port: u16,
    pub ssl: RelaySsl,
    pub ssl_verify: bool,
    /// Empty: the platform's trust store (see [`relay_roots_with_source`]).
    pub ssl_ca_file: String,
    pub user: String,
    pub password: Secret,
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
    /// Our name in EHLO.
    pub helo_name: String,
}

/// Why the relay could not be used; the client gets a 4xx.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("cannot connect to relay {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("relay TLS: {0}")]
    Tls(String),
    #[error("relay timed out waiting for {0}")]
    Timeout(&'static str),
    #[error("relay connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("relay closed the connection")]
    Closed,
    #[error("relay protocol error: {0}")]
    Protocol(String),
    /// The relay refused the greeting, EHLO, STARTTLS or AUTH.
    #[error("relay refused {step}: {reply}")]
    Refused { step: &'static str, reply: Reply },
}

impl RelayError {
    /// The reply for the client: always temporary (RFC 6409 §5: the MSA
    /// keeps responsibility only once it said 250).
    pub fn client_reply(&self) -> Reply {
        let (e, text) = match self {
            RelayError::Connect { .. } | RelayError::Timeout(_) | RelayError::Closed => (
                EnhancedCode::new(4, 4, 1),
                "Relay is not reachable, try again later",
            ),
            RelayError::Tls(_) => (
                EnhancedCode::new(4, 7, 0),
                "Relay TLS failed, try again later",
            ),
            RelayError::Refused { .. } => (
                EnhancedCode::new(4, 4, 0),
                "Relay refused us, try again later",
            ),
            RelayError::Io(_) | RelayError::Protocol(_) => {
                (EnhancedCode::new(4, 4, 0), "Relay failed, try again later")
            }
        };
        Reply::new(451, e, text)
    }
}

/// Builds relay connections; one per server.
pub struct RelayConnector {
    settings: RelaySettings,
    tls: Result<TlsConnector, String>,
}

impl RelayConnector {
    pub fn new(settings: RelaySettings) -> RelayConnector {
        let tls = match settings.ssl {
            RelaySsl::None => Err("TLS is off".to_string()),
            _ => build_tls(&settings),
        };
        if let (RelaySsl::Starttls | RelaySsl::Ssl, Err(e)) = (settings.ssl, &tls) {
            tracing::error!(error = %e, "submission relay TLS is misconfigured; relaying will fail");
        }
        RelayConnector { settings, tls }
    }

    pub fn settings(&self) -> &RelaySettings {
        &self.settings
    }

    /// Connects, greets, secures and authenticates.
    pub async fn connect(&self) -> Result<Relay, RelayError> {
        let s = &self.settings;
        let addr = format!("{}:{}", s.host, s.port);
        let tcp = match tokio::time::timeout(s.connect_timeout, TcpStream::connect(&addr)).await {
            Ok(Ok(t)) => t,
            Ok(Err(source)) => return Err(RelayError::Connect { addr, source }),
            Err(_) => return Err(RelayError::Timeout("connect")),
        };
        let _ = tcp.set_nodelay(true);
        let stream = match s.ssl {
            RelaySsl::Ssl => RelayStream::Tls(Box::new(self.handshake(tcp).await?)),
            _ => RelayStream::Plain(tcp),
        };
        let mut relay = Relay {
            stream,
            inbuf: BytesMut::with_capacity(4096),
            framer: LineFramer::default(),
            timeout: s.command_timeout,
            extensions: Extensions::default(),
        };
        let greeting = relay.read_reply("greeting").await?;
        if greeting.code != 220 {
            return Err(RelayError::Refused {
                step: "greeting",
                reply: greeting,
            });
        }
        relay.ehlo(&s.helo_name).await?;
        if s.ssl == RelaySsl::Starttls {
            if !relay.extensions.starttls {
                return Err(RelayError::Tls("relay does not offer STARTTLS".into()));
            }
            let reply = relay.command("STARTTLS", "STARTTLS").await?;
            if reply.code != 220 {
                return Err(RelayError::Refused {
                    step: "STARTTLS",
                    reply,
                });
            }
            relay.inbuf.clear();
            let RelayStream::Plain(tcp) = std::mem::replace(&mut relay.stream, RelayStream::Closed)
            else {
                return Err(RelayError::Tls("stream is not plain".into()));
            };
            relay.stream = RelayStream::Tls(Box::new(self.handshake(tcp).await?));
            relay.ehlo(&s.helo_name).await?;
        }
        if !s.user.is_empty() {
            let mut token = Vec::new();
            token.push(0);
            token.extend_from_slice(s.user.as_bytes());
            token.push(0);
            token.extend_from_slice(s.password.expose().as_bytes());
            let b64 = base64::engine::general_purpose::STANDARD.encode(token);
            let reply = relay.command(&format!("AUTH PLAIN {b64}"), "AUTH").await?;
            if reply.code != 235 {
                return Err(RelayError::Refused {
                    step: "AUTH",
                    reply,
                });
            }
        }
        Ok(relay)
    }

    async fn handshake(&self, tcp: TcpStream) -> Result<TlsStream<TcpStream>, RelayError> {
        let connector = self.tls.as_ref().map_err(|e| RelayError::Tls(e.clone()))?;
        let name = ServerName::try_from(self.settings.host.clone())
            .map_err(|e| RelayError::Tls(format!("bad relay name: {e}")))?;
        match tokio::time::timeout(self.settings.connect_timeout, connector.connect(name, tcp))
            .await
        {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => Err(RelayError::Tls(e.to_string())),
            Err(_) => Err(RelayError::Timeout("TLS handshake")),
        }
    }
}

fn build_tls(s: &RelaySettings) -> Result<TlsConnector, String> {
    let builder = rustls::ClientConfig::builder_with_provider(yarilo_tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let config = if s.ssl_verify {
        builder
            .with_root_certificates(relay_roots(&s.ssl_ca_file)?)
            .with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(yarilo_tls::provider())))
            .with_no_client_auth()
    };
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Where the CAs the relay's certificate must chain to came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RootSource {
    /// `relay_ssl_ca_file`.
    File,
    /// The platform's trust store (`SSL_CERT_FILE` / `SSL_CERT_DIR`, else
    /// the distribution's bundle, wherever it keeps it).
    Platform,
    /// The Mozilla root list built into the binary, when the platform has
    /// no usable store (a minimal container image).
    Builtin,
}

/// The roots for verifying the relay: `ca_file` when set, else the
/// platform's store, else the built-in Mozilla list.
pub fn relay_roots_with_source(
    ca_file: &str,
) -> Result<(rustls::RootCertStore, RootSource), String> {
    let mut roots = rustls::RootCertStore::empty();
    if !ca_file.is_empty() {
        let certs =
            yarilo_tls::load_certs(std::path::Path::new(ca_file)).map_err(|e| e.to_string())?;
        // A bundle may hold certificates rustls cannot use; skip them.
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!("{ca_file}: no usable CA certificate"));
        }
        return Ok((roots, RootSource::File));
    }
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!(error = %e, "a platform CA store entry could not be read");
    }
    let (added, _) = roots.add_parsable_certificates(native.certs);
    if added > 0 {
        return Ok((roots, RootSource::Platform));
    }
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    Ok((roots, RootSource::Builtin))
}

fn relay_roots(ca_file: &str) -> Result<rustls::RootCertStore, String> {
    let (roots, source) = relay_roots_with_source(ca_file)?;
    tracing::debug!(?source, count = roots.len(), "submission relay CA roots");
    Ok(roots)
}

/// `relay_ssl_verify: false`: accept any certificate (signatures are still
/// checked, so the handshake itself is sound).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// What the relay's EHLO reply advertised.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extensions {
    pub starttls: bool,
    pub dsn: bool,
    pub smtputf8: bool,
    pub eightbitmime: bool,
    pub size: bool,
    pub pipelining: bool,
}

enum RelayStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    Closed,
}

impl RelayStream {
    async fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            RelayStream::Plain(s) => write_flush(s, data).await,
            RelayStream::Tls(s) => write_flush(s.as_mut(), data).await,
            RelayStream::Closed => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }

    async fn read_buf(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        match self {
            RelayStream::Plain(s) => s.read_buf(buf).await,
            RelayStream::Tls(s) => s.read_buf(buf).await,
            RelayStream::Closed => Ok(0),
        }
    }
}

async fn write_flush<S: AsyncWrite + AsyncRead + Unpin>(
    s: &mut S,
    data: &[u8],
) -> std::io::Result<()> {
    s.write_all(data).await?;
    s.flush().await
}

/// An open, greeted (and possibly authenticated) relay connection.
pub struct Relay {
    stream: RelayStream,
    inbuf: BytesMut,
    framer: LineFramer,
    timeout: Duration,
    pub extensions: Extensions,
}

/// RFC 5321 §4.5.3.2.6: at least 10 minutes for the reply to DATA's end.
const DATA_END_TIMEOUT: Duration = Duration::from_secs(600);
const MAX_REPLY_LINE: usize = 4096;

impl Relay {
    async fn ehlo(&mut self, name: &str) -> Result<(), RelayError> {
        let reply = self.command(&format!("EHLO {name}"), "EHLO").await?;
        if reply.code != 250 {
            return Err(RelayError::Refused {
                step: "EHLO",
                reply,
            });
        }
        let mut ext = Extensions::default();
        for line in reply.lines.iter().skip(1) {
            let kw = line
                .split_ascii_whitespace()
                .next()
                .unwrap_or("")
                .to_ascii_uppercase();
            match kw.as_str() {
                "STARTTLS" => ext.starttls = true,
                "DSN" => ext.dsn = true,
                "SMTPUTF8" => ext.smtputf8 = true,
                "8BITMIME" => ext.eightbitmime = true,
                "SIZE" => ext.size = true,
                "PIPELINING" => ext.pipelining = true,
                _ => {}
            }
        }
        self.extensions = ext;
        Ok(())
    }

    async fn read_reply_within(
        &mut self,
        step: &'static str,
        timeout: Duration,
    ) -> Result<Reply, RelayError> {
        let mut parser = ReplyParser::default();
        let fut = async {
            loop {
                match self.framer.take_line(&mut self.inbuf, MAX_REPLY_LINE) {
                    Line::Complete(l) => {
                        let l = String::from_utf8_lossy(&l);
                        match parser.feed(&l) {
                            Ok(Some(r)) => return Ok(r),
                            Ok(None) => continue,
                            Err(e) => return Err(RelayError::Protocol(e.to_string())),
                        }
                    }
                    Line::TooLong => {
                        return Err(RelayError::Protocol("reply line too long".into()))
                    }
                    Line::Incomplete => {}
                }
                self.inbuf.reserve(4096);
                if self.stream.read_buf(&mut self.inbuf).await? == 0 {
                    return Err(RelayError::Closed);
                }
            }
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(RelayError::Timeout(step)),
        }
    }

    async fn read_reply(&mut self, step: &'static str) -> Result<Reply, RelayError> {
        self.read_reply_within(step, self.timeout).await
    }

    /// Sends one command line and reads its reply.
    pub async fn command(&mut self, line: &str, step: &'static str) -> Result<Reply, RelayError> {
        let mut out = Vec::with_capacity(line.len() + 2);
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
        match tokio::time::timeout(self.timeout, self.stream.write_all(&out)).await {
            Ok(r) => r?,
            Err(_) => return Err(RelayError::Timeout(step)),
        }
        self.read_reply(step).await
    }

    /// DATA, the dot-stuffed message, and the final reply. `Ok(reply)` is
    /// the relay's answer (354 refusals included, passed to the client).
    pub async fn data(&mut self, message: &[u8]) -> Result<Reply, RelayError> {
        let reply = self.command("DATA", "DATA").await?;
        if reply.code != 354 {
            return Ok(reply);
        }
        let wire = dot_stuff(message);
        match tokio::time::timeout(
            DATA_END_TIMEOUT.max(self.timeout),
            self.stream.write_all(&wire),
        )
        .await
        {
            Ok(r) => r?,
            Err(_) => return Err(RelayError::Timeout("message data")),
        }
        self.read_reply_within("end of data", DATA_END_TIMEOUT.max(self.timeout))
            .await
    }

    /// RSET between transactions; false when the connection is unusable.
    pub async fn reset(&mut self) -> bool {
        matches!(self.command("RSET", "RSET").await, Ok(r) if r.code == 250)
    }

    /// QUIT, best effort.
    pub async fn quit(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(5), self.command("QUIT", "QUIT")).await;
    }
}
