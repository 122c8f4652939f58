//! Storing one recipient's copy: the trace headers, the target mailbox
//! (`+detail`, filter actions), quota, the durable append.
//!
//! Invariant: [`Deliverer::deliver`] returns 250 only after the store's
//! append returned, i.e. after the message file, the uid list and the
//! directory entries are fsynced (yarilo-store's append contract).

use std::net::IpAddr;
use std::time::Instant;

use yarilo_auth::ExtraFields;
use yarilo_store::{AppendOptions, Flags, Store, StoreError, UserInfo, UserStore};

use super::filter::{DeliveryAction, DeliveryContext, DeliveryFilter};
use super::LmtpSettings;
use crate::data::crlf_to_lf;
use crate::metrics::{label, LmtpMetrics};
use crate::reply::{EnhancedCode, Reply};
use yarilo_store::QuotaLimits;

/// An accepted RCPT.
#[derive(Debug, Clone)]
pub struct Recipient {
    /// As the client wrote it (with `+detail`).
    pub address: String,
    /// The userdb name.
    pub user: String,
    pub fields: ExtraFields,
    pub detail: Option<String>,
    pub limits: QuotaLimits,
}

/// The envelope and trace data shared by every recipient of a message.
pub struct Envelope<'a> {
    pub sender: &'a str,
    pub helo: &'a str,
    pub client_ip: IpAddr,
    pub session: &'a str,
    /// The message as received, CRLF.
    pub message: &'a [u8],
    /// The same with LF line endings, as stored.
    pub message_lf: &'a [u8],
}

pub struct Deliverer<'a> {
    pub settings: &'a LmtpSettings,
    pub store: &'a Store,
    pub filter: &'a dyn DeliveryFilter,
    pub metrics: &'a LmtpMetrics,
}

/// The outcome class, for the metric label and logs.
fn result_of(r: &Reply) -> &'static str {
    match (r.code, r.enhanced.map(|e| (e.subject, e.detail))) {
        (250, _) => "ok",
        (_, Some((2, 2))) => "quota",
        (_, Some((3, 4))) => "too_large",
        (550, Some((7, 1))) => "rejected",
        (c, _) if c >= 500 => "failed",
        _ => "tempfail",
    }
}

fn store_error_reply(address: &str, e: &StoreError) -> Reply {
    match e {
        StoreError::TooLarge(_) => Reply::new(
            552,
            EnhancedCode::new(5, 3, 4),
            format!("<{address}> Message too big"),
        ),
        _ => Reply::new(
            451,
            EnhancedCode::new(4, 3, 0),
            format!("<{address}> Temporary internal error"),
        ),
    }
}

pub fn quota_reply(settings: &LmtpSettings, address: &str) -> Reply {
    if settings.quota_full_tempfail {
        Reply::new(
            452,
            EnhancedCode::new(4, 2, 2),
            format!("<{address}> Quota exceeded (mailbox for user is full)"),
        )
    } else {
        Reply::new(
            552,
            EnhancedCode::new(5, 2, 2),
            format!("<{address}> Quota exceeded (mailbox for user is full)"),
        )
    }
}

pub async fn open_user(
    store: &Store,
    user: &str,
    fields: &ExtraFields,
) -> Result<UserStore, StoreError> {
    store
        .user(&UserInfo {
            user: user.to_string(),
            home: fields.get("home").unwrap_or_default().to_string(),
        })
        .await
}

impl Deliverer<'_> {
    /// Delivers one copy; the reply is this recipient's line after DATA.
    pub async fn deliver(&self, rcpt: &Recipient, env: &Envelope<'_>) -> Reply {
        let started = Instant::now();
        let reply = self.deliver_inner(rcpt, env).await;
        let result = result_of(&reply);
        self.metrics.deliveries.get_or_create(&label(result)).inc();
        if result == "ok" {
            self.metrics
                .delivery_seconds
                .observe(started.elapsed().as_secs_f64());
        }
        tracing::info!(
            user = %rcpt.user, rcpt = %rcpt.address, from = %env.sender,
            size = env.message.len(), result, reply = %reply,
            "delivery"
        );
        reply
    }

    async fn deliver_inner(&self, rcpt: &Recipient, env: &Envelope<'_>) -> Reply {
        let us = match open_user(self.store, &rcpt.user, &rcpt.fields).await {
            Ok(us) => us,
            Err(e) => {
                tracing::error!(user = %rcpt.user, error = %e, "cannot open the user's mail");
                return store_error_reply(&rcpt.address, &e);
            }
        };
        let default_mailbox = match (&rcpt.detail, self.settings.save_to_detail_mailbox) {
            (Some(d), true) if !d.is_empty() => d.clone(),
            _ => "INBOX".to_string(),
        };
        let ctx = DeliveryContext {
            user: &rcpt.user,
            fields: &rcpt.fields,
            sender: env.sender,
            recipient: &rcpt.address,
            default_mailbox: &default_mailbox,
            message: env.message,
        };
        let mut actions = self.filter.filter(&ctx).await;
        if actions.is_empty() {
            actions.push(DeliveryAction::Keep);
        }
        if let Some(DeliveryAction::Reject(text)) = actions
            .iter()
            .find(|a| matches!(a, DeliveryAction::Reject(_)))
        {
            return Reply::new(
                550,
                EnhancedCode::new(5, 7, 1),
                format!("<{}> {text}", rcpt.address),
            );
        }
        let data = self.with_trace_headers(rcpt, env);
        // RFC 2033 §4.2: the quota is checked against the real size at DATA.
        if !rcpt.limits.is_unlimited() {
            match us.quota().await {
                Ok(usage) => {
                    if !rcpt.limits.fits(&usage, data.len() as u64) {
                        return quota_reply(self.settings, &rcpt.address);
                    }
                }
                Err(e) => {
                    tracing::error!(user = %rcpt.user, error = %e, "quota lookup failed");
                    return store_error_reply(&rcpt.address, &e);
                }
            }
        }
        for action in &actions {
            let (mailbox, flags) = match action {
                DeliveryAction::Keep => (default_mailbox.as_str(), &[][..]),
                DeliveryAction::FileInto { mailbox, flags } => (mailbox.as_str(), flags.as_slice()),
                DeliveryAction::Discard | DeliveryAction::Reject(_) => continue,
            };
            if let Err(e) = self.store_copy(&us, mailbox, flags, data.clone()).await {
                tracing::error!(user = %rcpt.user, mailbox, error = %e, "append failed");
                return store_error_reply(&rcpt.address, &e);
            }
        }
        Reply::new(
            250,
            EnhancedCode::new(2, 0, 0),
            format!("<{}> {} Saved", rcpt.address, env.session),
        )
    }

    /// Appends to `mailbox`, falling back to INBOX when it does not exist
    /// and `mailbox_autocreate` is off (or creating it fails), as Dovecot's
    /// LDA does.
    async fn store_copy(
        &self,
        us: &UserStore,
        mailbox: &str,
        flags: &[String],
        data: Vec<u8>,
    ) -> Result<u32, StoreError> {
        let mut opts = AppendOptions::default();
        for f in flags {
            match Flags::from_imap_name(f) {
                Some(fl) => opts.flags = opts.flags.union(fl),
                None => opts.keywords.push(f.clone()),
            }
        }
        let mb = match us.open(mailbox).await {
            Ok(mb) => mb,
            Err(StoreError::NoMailbox(_)) | Err(StoreError::Name(_)) if mailbox != "INBOX" => {
                let created = self.settings.mailbox_autocreate
                    && matches!(
                        us.create(mailbox).await,
                        Ok(()) | Err(StoreError::MailboxExists(_))
                    );
                if created {
                    us.open(mailbox).await?
                } else {
                    us.open("INBOX").await?
                }
            }
            Err(e) => return Err(e),
        };
        // Under `deliver:` too (the store takes it after `mbox:`).
        let uids = mb.deliver(vec![(data, opts)]).await?;
        uids.first()
            .copied()
            .ok_or_else(|| StoreError::Internal("delivery returned no uid".into()))
    }

    /// `Return-Path:`, `Delivered-To:` and (optionally) `Received:` in
    /// front of the LF-normalised message, as Dovecot's LMTP writes them.
    fn with_trace_headers(&self, rcpt: &Recipient, env: &Envelope<'_>) -> Vec<u8> {
        let mut h = String::with_capacity(256);
        h.push_str(&format!("Return-Path: <{}>\n", env.sender));
        h.push_str(&format!("Delivered-To: {}\n", rcpt.address));
        if self.settings.add_received_header {
            h.push_str(&format!(
                "Received: from {} ([{}])\n\tby {} with LMTP id {}\n\t(envelope-from <{}>)\n\tfor <{}>; {}\n",
                sanitize(env.helo),
                env.client_ip,
                self.settings.hostname,
                env.session,
                env.sender,
                rcpt.address,
                crate::received::rfc5322_now()
            ));
        }
        let mut out = Vec::with_capacity(h.len() + env.message_lf.len());
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(env.message_lf);
        out
    }
}

/// A HELO name in a header: no controls, bounded.
fn sanitize(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(255).collect()
}

/// CRLF → LF for the whole message (once per message, not per recipient).
pub fn normalise(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    crlf_to_lf(message, &mut out);
    out
}
