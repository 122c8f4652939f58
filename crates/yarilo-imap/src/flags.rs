//! Client flag lists → the store's system flags and keywords.

use yarilo_imap_proto::Flag;
use yarilo_store::Flags;

/// A flag list split for the store, or the reason it is refused.
pub(crate) struct FlagSet {
    pub system: Flags,
    pub keywords: Vec<String>,
}

pub(crate) fn split(flags: &[Flag]) -> Result<FlagSet, String> {
    let mut system = Flags::EMPTY;
    let mut keywords: Vec<String> = Vec::new();
    for f in flags {
        match f {
            Flag::Seen => system = system.union(Flags::SEEN),
            Flag::Answered => system = system.union(Flags::ANSWERED),
            Flag::Flagged => system = system.union(Flags::FLAGGED),
            Flag::Deleted => system = system.union(Flags::DELETED),
            Flag::Draft => system = system.union(Flags::DRAFT),
            // \Recent is the server's to set; clients' attempts are ignored.
            Flag::Recent => {}
            Flag::Wildcard => return Err("Invalid flag \\*".into()),
            Flag::Extension(x) => return Err(format!("Invalid system flag \\{x}")),
            Flag::Keyword(k) => {
                if k.len() > 128 {
                    return Err("Keyword too long".into());
                }
                if !keywords.iter().any(|e| e.eq_ignore_ascii_case(k)) {
                    keywords.push(k.clone());
                }
            }
        }
    }
    Ok(FlagSet { system, keywords })
}
