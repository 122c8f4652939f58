//! APPEND with MULTIAPPEND (RFC 3502), LITERAL+ and UTF8 (RFC 6855),
//! streamed from the receiver: the message arrives in chunks, is checked
//! against APPENDLIMIT before a byte is accepted, and is committed only at
//! the end of the command (MULTIAPPEND is all-or-nothing). The tagged OK
//! is sent after the store says the messages are durable.

use yarilo_imap_proto::command::{AppendData, AppendMessage};
use yarilo_imap_proto::response::{Code, Response};
use yarilo_imap_proto::{AppendEvent, AppendKind, DateTime, Flag, Mailbox, SequenceSet};
use yarilo_store::AppendOptions;

use crate::flags::split;
use crate::selected::store_no;
use crate::session::Session;

/// An APPEND being received.
pub(crate) struct AppendInProgress {
    tag: String,
    mailbox: yarilo_store::Mailbox,
    done: Vec<(Vec<u8>, AppendOptions)>,
    current: Option<(Vec<u8>, AppendOptions)>,
    total: u64,
}

/// Bound on the sum of one MULTIAPPEND, whatever the per-message limit.
const MAX_MULTIAPPEND_BYTES: u64 = 256 * 1024 * 1024;

fn options(flags: &[Flag], date: Option<&DateTime>) -> Result<AppendOptions, String> {
    let fs = split(flags)?;
    Ok(AppendOptions {
        flags: fs.system,
        keywords: fs.keywords,
        internal_date: date.map(DateTime::unix_seconds),
    })
}

impl Session {
    /// Resolves the target of an APPEND; `Err` is the NO to send.
    async fn append_target(
        &mut self,
        tag: &str,
        mailbox: &Mailbox,
    ) -> Result<yarilo_store::Mailbox, Response> {
        let Some(store) = self.user_store() else {
            return Err(Response::bad(
                Some(tag.to_string()),
                None,
                "Please log in first.",
            ));
        };
        let name = self.store_name(tag, mailbox)?;
        match store.open(&name).await {
            Ok(m) => Ok(m),
            Err(yarilo_store::StoreError::NoMailbox(_)) => Err(Response::no(
                tag,
                Some(Code::TryCreate),
                "Mailbox doesn't exist.",
            )),
            Err(e) => Err(store_no(tag, &e)),
        }
    }

    /// Answers an APPEND early (the receiver skips the rest of it).
    fn append_abort(&mut self, r: Response, command: &'static str) {
        self.conn.rx.reject_literal();
        self.append = None;
        let result = match &r {
            Response::Status {
                kind: yarilo_imap_proto::response::StatusKind::No,
                ..
            } => "no",
            _ => "bad",
        };
        self.server
            .metrics
            .commands
            .get_or_create(&crate::metrics::CommandLabels { command, result })
            .inc();
        self.conn.send(&r);
    }

    pub(crate) async fn append_event(
        &mut self,
        tag: String,
        event: AppendEvent,
    ) -> std::io::Result<()> {
        match event {
            AppendEvent::Message {
                mailbox,
                flags,
                date,
                kind,
            } => {
                if self.user.is_none() {
                    self.append_abort(
                        Response::bad(Some(tag), None, "Please log in first."),
                        "APPEND",
                    );
                    return Ok(());
                }
                let ann = match kind {
                    AppendKind::Literal(a) | AppendKind::Utf8(a) => a,
                    AppendKind::Catenate => {
                        self.append_abort(
                            Response::bad(Some(tag), None, "CATENATE is not supported."),
                            "APPEND",
                        );
                        return Ok(());
                    }
                };
                if self.append.is_none() {
                    match self.append_target(&tag, &mailbox).await {
                        Ok(m) => {
                            self.append = Some(AppendInProgress {
                                tag: tag.clone(),
                                mailbox: m,
                                done: Vec::new(),
                                current: None,
                                total: 0,
                            })
                        }
                        Err(r) => {
                            self.append_abort(r, "APPEND");
                            return Ok(());
                        }
                    }
                }
                let limit = self.server.settings.append_limit;
                let total = self.append.as_ref().map(|a| a.total).unwrap_or(0);
                if ann.size > limit || total.saturating_add(ann.size) > MAX_MULTIAPPEND_BYTES {
                    self.append_abort(
                        Response::no(tag, Some(Code::TooBig), "Message too large."),
                        "APPEND",
                    );
                    return Ok(());
                }
                let opts = match options(&flags, date.as_ref()) {
                    Ok(o) => o,
                    Err(e) => {
                        self.append_abort(Response::bad(Some(tag), None, e), "APPEND");
                        return Ok(());
                    }
                };
                if let Some(a) = self.append.as_mut() {
                    a.total += ann.size;
                    a.current = Some((Vec::with_capacity(ann.size as usize), opts));
                }
                if ann.sync {
                    self.conn.raw(b"+ OK\r\n");
                    self.conn.flush().await?;
                }
            }
            AppendEvent::Chunk(bytes) => {
                if let Some((data, _)) = self.append.as_mut().and_then(|a| a.current.as_mut()) {
                    data.extend_from_slice(&bytes);
                }
            }
            AppendEvent::LiteralEnd => {
                if let Some(a) = self.append.as_mut() {
                    if let Some(m) = a.current.take() {
                        a.done.push(m);
                    }
                }
            }
            AppendEvent::Done => {
                let Some(a) = self.append.take() else {
                    return Ok(());
                };
                let started = std::time::Instant::now();
                let r = self.append_commit(&a.tag, &a.mailbox, a.done).await;
                self.finish_command("APPEND", r, started).await?;
            }
            AppendEvent::CatUrl(_) | AppendEvent::CatText(_) | AppendEvent::CatEnd => {
                if self.append.is_some() {
                    self.append_abort(
                        Response::bad(Some(tag), None, "CATENATE is not supported."),
                        "APPEND",
                    );
                }
            }
        }
        Ok(())
    }

    async fn append_commit(
        &mut self,
        tag: &str,
        mailbox: &yarilo_store::Mailbox,
        messages: Vec<(Vec<u8>, AppendOptions)>,
    ) -> Response {
        if messages.is_empty() {
            return Response::bad(Some(tag.to_string()), None, "No message to append.");
        }
        if messages.iter().any(|(d, _)| d.is_empty()) {
            return Response::no(tag, None, "Empty messages are not allowed.");
        }
        let bytes: u64 = messages.iter().map(|(d, _)| d.len() as u64).sum();
        if let Err(r) = self.quota_allows(tag, bytes, messages.len() as u64).await {
            return r;
        }
        match mailbox.append_many(messages).await {
            Ok(uids) => {
                let uidvalidity = mailbox.view().uidvalidity();
                Response::ok(
                    tag,
                    Some(Code::AppendUid {
                        uidvalidity,
                        uids: SequenceSet::from_numbers(uids),
                    }),
                    "Append completed.",
                )
            }
            Err(e) => store_no(tag, &e),
        }
    }

    /// APPEND parsed whole (not through the streaming receiver).
    pub(crate) async fn append_whole(
        &mut self,
        tag: &str,
        mailbox: Mailbox,
        messages: Vec<AppendMessage>,
    ) -> Response {
        let target = match self.append_target(tag, &mailbox).await {
            Ok(m) => m,
            Err(r) => return r,
        };
        let mut batch = Vec::new();
        for m in messages {
            let data = match m.data {
                AppendData::Literal { data, .. } | AppendData::Utf8(data) => data,
                AppendData::Catenate(_) => {
                    return Response::bad(Some(tag.to_string()), None, "CATENATE is not supported.")
                }
            };
            if data.len() as u64 > self.server.settings.append_limit {
                return Response::no(tag, Some(Code::TooBig), "Message too large.");
            }
            match options(&m.flags, m.date.as_ref()) {
                Ok(o) => batch.push((data, o)),
                Err(e) => return Response::bad(Some(tag.to_string()), None, e),
            }
        }
        self.append_commit(tag, &target, batch).await
    }
}
