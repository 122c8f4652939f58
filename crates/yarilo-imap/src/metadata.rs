//! METADATA and METADATA-SERVER (RFC 5464): entries per user on the server
//! and per mailbox, stored by the store with its size and count limits.

use yarilo_imap_proto::command::MetadataDepth;
use yarilo_imap_proto::response::{Code, Data, MetadataEntries, Response};
use yarilo_imap_proto::Mailbox;
use yarilo_store::metadata::{entry_name, MetadataError, MAX_VALUE};

use crate::selected::store_no;
use crate::session::Session;

/// Is `name` selected by `wanted` at `depth`?
fn selected_by(wanted: &str, name: &str, depth: MetadataDepth) -> bool {
    if name == wanted {
        return true;
    }
    let Some(rest) = name.strip_prefix(wanted).and_then(|r| r.strip_prefix('/')) else {
        return false;
    };
    match depth {
        MetadataDepth::Zero => false,
        MetadataDepth::One => !rest.contains('/'),
        MetadataDepth::Infinity => true,
    }
}

impl Session {
    /// The store key of a METADATA mailbox argument (`None`: the server).
    async fn metadata_target(
        &self,
        tag: &str,
        mailbox: &Option<Mailbox>,
    ) -> Result<String, Response> {
        let Some(m) = mailbox else {
            return Ok(String::new());
        };
        let name = self.store_name(tag, m)?;
        let Some(store) = self.user_store() else {
            return Err(Response::bad(
                Some(tag.to_string()),
                None,
                "Please log in first.",
            ));
        };
        store.open(&name).await.map_err(|e| store_no(tag, &e))?;
        Ok(name)
    }

    pub(crate) async fn get_metadata(
        &mut self,
        tag: &str,
        max_size: Option<u32>,
        depth: MetadataDepth,
        mailbox: Option<Mailbox>,
        entries: Vec<String>,
    ) -> Response {
        let key = match self.metadata_target(tag, &mailbox).await {
            Ok(k) => k,
            Err(r) => return r,
        };
        let mut wanted = Vec::new();
        for e in &entries {
            match entry_name(e) {
                Ok(n) => wanted.push(n),
                Err(_) => {
                    return Response::bad(
                        Some(tag.to_string()),
                        None,
                        format!("Invalid entry name {e}"),
                    )
                }
            }
        }
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        let stored = match store.metadata(&key).await {
            Ok(s) => s,
            Err(e) => return store_no(tag, &e),
        };
        let mut values: Vec<(String, Option<Vec<u8>>)> = Vec::new();
        let mut longest_skipped: u32 = 0;
        for w in &wanted {
            let mut found = false;
            for (name, value) in &stored {
                if !selected_by(w, name, depth) {
                    continue;
                }
                found |= name == w;
                if max_size.is_some_and(|m| value.len() > m as usize) {
                    longest_skipped = longest_skipped.max(value.len() as u32);
                    continue;
                }
                if !values.iter().any(|(n, _)| n == name) {
                    values.push((name.clone(), Some(value.clone())));
                }
            }
            // A requested entry without a value is reported as NIL.
            if !found && !values.iter().any(|(n, _)| n == w) && depth == MetadataDepth::Zero {
                values.push((w.clone(), None));
            }
        }
        if !values.is_empty() {
            self.conn.send(&Response::Data(Data::Metadata {
                mailbox,
                entries: MetadataEntries::Values(values),
            }));
        }
        let code = (longest_skipped > 0).then_some(Code::MetadataLongEntries(longest_skipped));
        Response::ok(tag, code, "Getmetadata completed.")
    }

    pub(crate) async fn set_metadata(
        &mut self,
        tag: &str,
        mailbox: Option<Mailbox>,
        entries: Vec<(String, Option<Vec<u8>>)>,
    ) -> Response {
        let key = match self.metadata_target(tag, &mailbox).await {
            Ok(k) => k,
            Err(r) => return r,
        };
        let Some(store) = self.user_store() else {
            return Response::bad(Some(tag.to_string()), None, "Please log in first.");
        };
        match store.set_metadata(&key, entries).await {
            Ok(Ok(())) => Response::ok(tag, None, "Setmetadata completed."),
            Ok(Err(MetadataError::BadEntry(e))) => Response::bad(
                Some(tag.to_string()),
                None,
                format!("Invalid entry name {e}"),
            ),
            Ok(Err(MetadataError::TooLarge)) => Response::no(
                tag,
                Some(Code::MetadataMaxSize(MAX_VALUE as u32)),
                "Value too large.",
            ),
            Ok(Err(MetadataError::TooMany)) => {
                Response::no(tag, Some(Code::MetadataTooMany), "Too many entries.")
            }
            Err(e) => store_no(tag, &e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_selection() {
        assert!(selected_by("/private/a", "/private/a", MetadataDepth::Zero));
        assert!(!selected_by(
            "/private/a",
            "/private/a/b",
            MetadataDepth::Zero
        ));
        assert!(selected_by(
            "/private/a",
            "/private/a/b",
            MetadataDepth::One
        ));
        assert!(!selected_by(
            "/private/a",
            "/private/a/b/c",
            MetadataDepth::One
        ));
        assert!(selected_by(
            "/private/a",
            "/private/a/b/c",
            MetadataDepth::Infinity
        ));
        assert!(!selected_by(
            "/private/a",
            "/private/ab",
            MetadataDepth::Infinity
        ));
    }
}
