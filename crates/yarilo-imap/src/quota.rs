//! QUOTA (RFC 9208): one quota root, `""`, per user, with the STORAGE and
//! MESSAGE resources. Usage comes from the store's accounting, limits from
//! the userdb's `quota_rule` fields (as Dovecot reads them); SETQUOTA is
//! refused because limits belong to the userdb.

use yarilo_imap_proto::response::{Code, Data, Response};
use yarilo_imap_proto::Mailbox;
use yarilo_store::QuotaUsage;

use crate::selected::store_no;
use crate::session::Session;

impl Session {
    fn quota_data(&self, usage: &QuotaUsage) -> Option<Data> {
        let limits = self.user.as_ref()?.limits;
        if limits.is_unlimited() {
            return None;
        }
        let mut resources = Vec::new();
        if let Some(b) = limits.bytes {
            // STORAGE is counted in units of 1024 octets (RFC 9208 §5.1).
            resources.push(("STORAGE".to_string(), usage.bytes.div_ceil(1024), b / 1024));
        }
        if let Some(m) = limits.messages {
            resources.push(("MESSAGE".to_string(), usage.messages, m));
        }
        Some(Data::Quota {
            root: String::new(),
            resources,
        })
    }

    pub(crate) async fn get_quota_root(&mut self, tag: &str, mailbox: Mailbox) -> Response {
        let name = match self.store_name(tag, &mailbox) {
            Ok(n) => n,
            Err(r) => return r,
        };
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        if let Err(e) = store.open(&name).await {
            return store_no(tag, &e);
        }
        let usage = match store.quota().await {
            Ok(u) => u,
            Err(e) => return store_no(tag, &e),
        };
        let data = self.quota_data(&usage);
        self.conn.send(&Response::Data(Data::QuotaRoot {
            mailbox,
            roots: if data.is_some() {
                vec![String::new()]
            } else {
                Vec::new()
            },
        }));
        if let Some(d) = data {
            self.conn.send(&Response::Data(d));
        }
        Response::ok(tag, None, "Getquotaroot completed.")
    }

    pub(crate) async fn get_quota(&mut self, tag: &str, root: &str) -> Response {
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        let unlimited = self.user.as_ref().is_none_or(|u| u.limits.is_unlimited());
        if !root.is_empty() || unlimited {
            return Response::no(tag, Some(Code::NonExistent), "Quota root doesn't exist.");
        }
        let usage = match store.quota().await {
            Ok(u) => u,
            Err(e) => return store_no(tag, &e),
        };
        if let Some(d) = self.quota_data(&usage) {
            self.conn.send(&Response::Data(d));
        }
        Response::ok(tag, None, "Getquota completed.")
    }

    /// Whether `extra` more bytes in `count` messages still fit; `Err` is
    /// the NO [OVERQUOTA] to send.
    pub(crate) async fn quota_allows(
        &self,
        tag: &str,
        extra: u64,
        count: u64,
    ) -> Result<(), Response> {
        let Some(user) = self.user.as_ref() else {
            return Ok(());
        };
        if user.limits.is_unlimited() {
            return Ok(());
        }
        let usage = user.store.quota().await.map_err(|e| store_no(tag, &e))?;
        let after = QuotaUsage {
            bytes: usage.bytes.saturating_add(extra),
            messages: usage.messages.saturating_add(count),
        };
        let over = user.limits.bytes.is_some_and(|b| after.bytes > b)
            || user.limits.messages.is_some_and(|m| after.messages > m);
        if over {
            return Err(Response::no(tag, Some(Code::OverQuota), "Quota exceeded."));
        }
        Ok(())
    }
}
