//! APPEND with MULTIAPPEND (RFC 3502), LITERAL+ and UTF8 (RFC 6855),
//! streamed from the receiver: the message arrives in chunks, is checked
//! against APPENDLIMIT before a byte is accepted, and is committed only at
//! the end of the command (MULTIAPPEND is all-or-nothing). The tagged OK
//! is sent after the store says the messages are durable.
//!
//! Memory: every byte an APPEND will buffer is reserved from the
//! process-wide [`AppendBudget`] (`imap.append_buffer_bytes`) when its
//! literal is announced, before a byte of it is read; an APPEND that would
//! go over is answered `NO [LIMIT]` at once (RFC 5530), so concurrent
//! uploads cannot exhaust memory. The reservation is released when the
//! command ends, however it ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use yarilo_imap_proto::command::{AppendData, AppendMessage, CatPart};
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
    /// The current message is a CATENATE (parts until `CatEnd`).
    catenate: bool,
    /// A CATENATE part failed: the rest of the command is read and then
    /// answered with this.
    failed: Option<Response>,
    /// What this command holds of the process-wide budget.
    reserved: Reservation,
}

/// The process-wide bound on APPEND bytes held in memory at once.
#[derive(Clone, Debug)]
pub(crate) struct AppendBudget {
    inner: Arc<BudgetInner>,
}

#[derive(Debug)]
struct BudgetInner {
    limit: u64,
    used: AtomicU64,
}

/// Bytes taken from an [`AppendBudget`], given back on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<BudgetInner>,
    bytes: u64,
}

impl AppendBudget {
    pub fn new(limit: u64) -> AppendBudget {
        AppendBudget {
            inner: Arc::new(BudgetInner {
                limit,
                used: AtomicU64::new(0),
            }),
        }
    }

    /// An empty reservation to grow.
    pub fn empty(&self) -> Reservation {
        Reservation {
            budget: self.inner.clone(),
            bytes: 0,
        }
    }

    /// Bytes reserved now, over all sessions.
    #[cfg(test)]
    pub fn in_use(&self) -> u64 {
        self.inner.used.load(Ordering::Acquire)
    }
}

impl Reservation {
    /// Takes `bytes` more, or nothing (false) when that would go over the
    /// limit.
    pub fn grow(&mut self, bytes: u64) -> bool {
        let b = &self.budget;
        let taken = b
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= b.limit)
            })
            .is_ok();
        if taken {
            self.bytes += bytes;
        }
        taken
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

fn over_budget(tag: impl Into<String>) -> Response {
    Response::no(
        tag,
        Some(Code::Limit),
        "Too much mail is being uploaded at once; try again later.",
    )
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
                    AppendKind::Literal(a) | AppendKind::Utf8(a) => Some(a),
                    AppendKind::Catenate => None,
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
                                catenate: false,
                                failed: None,
                                reserved: self.server.append_budget.empty(),
                            })
                        }
                        Err(r) => {
                            self.append_abort(r, "APPEND");
                            return Ok(());
                        }
                    }
                }
                let opts = match options(&flags, date.as_ref()) {
                    Ok(o) => o,
                    Err(e) => {
                        self.append_abort(Response::bad(Some(tag), None, e), "APPEND");
                        return Ok(());
                    }
                };
                let Some(ann) = ann else {
                    if let Some(a) = self.append.as_mut() {
                        a.current = Some((Vec::new(), opts));
                        a.catenate = true;
                    }
                    return Ok(());
                };
                let limit = self.server.settings.append_limit;
                let total = self.append.as_ref().map(|a| a.total).unwrap_or(0);
                if ann.size > limit || total.saturating_add(ann.size) > MAX_MULTIAPPEND_BYTES {
                    self.append_abort(
                        Response::no(tag, Some(Code::TooBig), "Message too large."),
                        "APPEND",
                    );
                    return Ok(());
                }
                if self
                    .append
                    .as_mut()
                    .is_some_and(|a| !a.reserved.grow(ann.size))
                {
                    self.append_abort(over_budget(tag), "APPEND");
                    return Ok(());
                }
                if let Some(a) = self.append.as_mut() {
                    a.total += ann.size;
                    a.catenate = false;
                    a.current = Some((Vec::with_capacity(ann.size as usize), opts));
                }
                if ann.sync {
                    self.conn.raw(b"+ OK\r\n");
                    self.conn.flush().await?;
                }
            }
            AppendEvent::Chunk(bytes) => {
                if let Some(a) = self.append.as_mut().filter(|a| a.failed.is_none()) {
                    if let Some((data, _)) = a.current.as_mut() {
                        data.extend_from_slice(&bytes);
                    }
                }
            }
            AppendEvent::LiteralEnd => {
                if let Some(a) = self.append.as_mut() {
                    // Inside CATENATE a literal ends a TEXT part only.
                    if !a.catenate {
                        if let Some(m) = a.current.take() {
                            a.done.push(m);
                        }
                    }
                }
            }
            AppendEvent::Done => {
                let Some(a) = self.append.take() else {
                    return Ok(());
                };
                let started = std::time::Instant::now();
                let r = match a.failed {
                    Some(r) => r,
                    None => self.append_commit(&a.tag, &a.mailbox, a.done).await,
                };
                self.finish_command("APPEND", r, started).await?;
            }
            AppendEvent::CatUrl(url) => {
                if self.append.as_ref().is_none_or(|a| a.failed.is_some()) {
                    return Ok(());
                }
                let part = self.catenate_url(&tag, &url).await;
                let limit = self.server.settings.append_limit;
                if let Some(a) = self.append.as_mut() {
                    match part {
                        Ok(bytes) => {
                            let cur = a.current.as_ref().map(|c| c.0.len()).unwrap_or(0);
                            if (cur + bytes.len()) as u64 > limit {
                                a.failed = Some(Response::no(
                                    tag,
                                    Some(Code::TooBig),
                                    "Message too large.",
                                ));
                            } else if !a.reserved.grow(bytes.len() as u64) {
                                a.failed = Some(over_budget(tag));
                            } else if let Some((data, _)) = a.current.as_mut() {
                                a.total += bytes.len() as u64;
                                data.extend_from_slice(&bytes);
                            }
                        }
                        Err(r) => a.failed = Some(r),
                    }
                }
            }
            AppendEvent::CatText(ann) => {
                let limit = self.server.settings.append_limit;
                let Some(a) = self.append.as_mut() else {
                    return Ok(());
                };
                let cur = a.current.as_ref().map(|c| c.0.len() as u64).unwrap_or(0);
                if a.failed.is_none() && cur.saturating_add(ann.size) > limit {
                    a.failed = Some(Response::no(
                        tag.clone(),
                        Some(Code::TooBig),
                        "Message too large.",
                    ));
                }
                if a.failed.is_none() && !a.reserved.grow(ann.size) {
                    a.failed = Some(over_budget(tag.clone()));
                }
                if let Some(r) = a.failed.take() {
                    if ann.sync {
                        // The client waits for "+": refuse the literal and
                        // answer the APPEND now.
                        self.append_abort(r, "APPEND");
                    } else {
                        // The data is already on its way: read and drop it,
                        // answer at the end of the command.
                        a.failed = Some(r);
                    }
                    return Ok(());
                }
                a.total += ann.size;
                if ann.sync {
                    self.conn.raw(b"+ OK\r\n");
                    self.conn.flush().await?;
                }
            }
            AppendEvent::CatEnd => {
                if let Some(a) = self.append.as_mut() {
                    a.catenate = false;
                    if let Some(m) = a.current.take() {
                        a.done.push(m);
                    }
                }
            }
        }
        Ok(())
    }

    /// The bytes a CATENATE URL names, or the `NO [BADURL]` to answer.
    async fn catenate_url(&self, tag: &str, url: &str) -> Result<Vec<u8>, Response> {
        let bad = || Response::no(tag, Some(Code::BadUrl(url.to_string())), "Bad URL.");
        let u = crate::imap_url::parse(url).ok_or_else(bad)?;
        let store = self.user_store().ok_or_else(bad)?;
        let mailbox = match &u.mailbox {
            Some(name) => {
                let n = self
                    .store_name(tag, &yarilo_imap_proto::Mailbox::new(name.clone()))
                    .map_err(|_| bad())?;
                store.open(&n).await.map_err(|_| bad())?
            }
            None => self.selected.as_ref().ok_or_else(bad)?.mailbox.clone(),
        };
        self.url_content(&mailbox, &u).await.ok_or_else(bad)
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
                self.note_arrived(mailbox, &uids);
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
                // RFC 4469 §5: an unresolvable URL fails the whole
                // command with NO [BADURL], nothing appended.
                AppendData::Catenate(parts) => {
                    let mut data = Vec::new();
                    for part in parts {
                        match part {
                            CatPart::Text(t) => data.extend_from_slice(&t),
                            CatPart::Url(url) => match self.catenate_url(tag, &url).await {
                                Ok(b) => data.extend_from_slice(&b),
                                Err(r) => return r,
                            },
                        }
                        if data.len() as u64 > self.server.settings.append_limit {
                            return Response::no(tag, Some(Code::TooBig), "Message too large.");
                        }
                    }
                    data
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stay_within_the_budget_and_are_given_back_on_drop() {
        let budget = AppendBudget::new(1000);
        let mut a = budget.empty();
        let mut b = budget.empty();
        assert!(a.grow(600));
        assert!(!b.grow(500), "600 + 500 is over 1000");
        assert!(b.grow(400));
        assert_eq!(budget.in_use(), 1000);
        assert!(!a.grow(1));
        drop(a);
        assert_eq!(budget.in_use(), 400);
        assert!(b.grow(600));
        drop(b);
        assert_eq!(budget.in_use(), 0);
    }
}
