//! STATUS (RFC 9051 §6.3.11, RFC 8438 SIZE, RFC 7162 HIGHESTMODSEQ,
//! RFC 7889 APPENDLIMIT).

use yarilo_imap_proto::command::StatusItem;
use yarilo_imap_proto::response::{Data, Response, StatusValue};
use yarilo_imap_proto::Mailbox;
use yarilo_store::{Flags, StoreError};

use crate::mailboxes::recent_floor;
use crate::session::Session;

impl Session {
    pub(crate) async fn status(
        &mut self,
        tag: &str,
        mailbox: Mailbox,
        items: Vec<StatusItem>,
    ) -> Response {
        if items.contains(&StatusItem::HighestModSeq) {
            // A CONDSTORE-enabling command (RFC 7162 §3.1).
            self.enable_condstore();
        }
        match self.status_data(&mailbox, &items).await {
            Ok(()) => Response::ok(tag, None, "Status completed."),
            Err(Ok(r)) => match r {
                Response::Status { code, text, .. } => Response::no(tag, code, text),
                other => other,
            },
            Err(Err(e)) => crate::mailboxes::open_no(tag, &e),
        }
    }

    /// Queues `* STATUS`; the error is a ready NO (bad name) or a store
    /// error.
    pub(crate) async fn status_data(
        &mut self,
        mailbox: &Mailbox,
        items: &[StatusItem],
    ) -> Result<(), Result<Response, StoreError>> {
        let name = self.store_name("*", mailbox).map_err(Ok)?;
        let Some(store) = self.user_store() else {
            return Err(Err(StoreError::Internal("not logged in".into())));
        };
        let mbox = store.open(&name).await.map_err(Err)?;
        let view = mbox.refresh().await.map_err(Err)?;
        // The selected mailbox answers with what the client was told, so
        // STATUS never runs ahead of EXISTS (RFC 9051 §6.3.11 advice).
        let selected_exists = self
            .selected
            .as_ref()
            .filter(|s| s.mailbox.name() == name)
            .map(|s| s.exists());
        let mut out = Vec::new();
        for &item in items {
            let v = match item {
                StatusItem::Messages => {
                    StatusValue::Number(selected_exists.unwrap_or(view.len() as u32).into())
                }
                StatusItem::UidNext => StatusValue::Number(view.uidnext().into()),
                StatusItem::UidValidity => StatusValue::Number(view.uidvalidity().into()),
                StatusItem::Unseen => StatusValue::Number(
                    view.records()
                        .filter(|r| !r.flags.contains(Flags::SEEN))
                        .count() as u64,
                ),
                StatusItem::Deleted => StatusValue::Number(
                    view.records()
                        .filter(|r| r.flags.contains(Flags::DELETED))
                        .count() as u64,
                ),
                StatusItem::Size => StatusValue::Number(view.records().map(|r| r.vsize).sum()),
                StatusItem::Recent => {
                    let selected = self
                        .selected
                        .as_ref()
                        .filter(|s| s.mailbox.name() == name)
                        .map(|s| s.recent.len() as u64);
                    // Not selected here: the messages no session has
                    // claimed yet (those the next SELECT would see as
                    // \Recent), as Dovecot answers.
                    let recent = selected.unwrap_or_else(|| {
                        let user = self
                            .user
                            .as_ref()
                            .map(|u| u.name.clone())
                            .unwrap_or_default();
                        let floor = self
                            .server
                            .recent
                            .claimed(&user, &name)
                            .unwrap_or_else(|| recent_floor(&view));
                        view.records().filter(|r| r.uid > floor).count() as u64
                    });
                    StatusValue::Number(recent)
                }
                StatusItem::HighestModSeq => StatusValue::Number(view.highest_modseq()),
                StatusItem::AppendLimit => StatusValue::Number(self.server.settings.append_limit),
                // Not advertised (OBJECTID, QUOTA): NIL rather than a guess.
                StatusItem::MailboxId | StatusItem::DeletedStorage => StatusValue::Nil,
            };
            out.push((item, v));
        }
        self.conn.send(&Response::Data(Data::Status {
            mailbox: mailbox.clone(),
            items: out,
        }));
        Ok(())
    }
}
