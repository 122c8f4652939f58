//! The CAPABILITY lists. Only what the session implements is advertised.

/// After login (and in PREAUTH): everything this crate implements.
pub const AUTHENTICATED: &[&str] = &[
    "IMAP4rev1",
    "IMAP4rev2",
    "SASL-IR",
    "LITERAL+",
    "ID",
    "ENABLE",
    "IDLE",
    "NAMESPACE",
    "UIDPLUS",
    "MOVE",
    "UNSELECT",
    "CHILDREN",
    "SPECIAL-USE",
    "CREATE-SPECIAL-USE",
    "LIST-EXTENDED",
    "LIST-STATUS",
    "ESEARCH",
    "SEARCHRES",
    "CONDSTORE",
    "QRESYNC",
    "BINARY",
    "MULTIAPPEND",
    "STATUS=SIZE",
    "WITHIN",
    "UTF8=ACCEPT",
    "SAVEDATE",
    "SORT",
    "SORT=DISPLAY",
    "ESORT",
    "THREAD=ORDEREDSUBJECT",
    "THREAD=REFERENCES",
    "THREAD=REFS",
    "CONTEXT=SEARCH",
    "CONTEXT=SORT",
    "PARTIAL",
    "COMPRESS=DEFLATE",
    "QUOTA",
    "QUOTA=RES-STORAGE",
    "QUOTA=RES-MESSAGE",
    "METADATA",
    "METADATA-SERVER",
    "CATENATE",
    "NOTIFY",
    "URLAUTH",
    "URLAUTH=BINARY",
];

/// Before login. `starttls`: offered on this connection; `login_ok`: a
/// plaintext LOGIN would be accepted (else `LOGINDISABLED`); `mechs`: SASL
/// mechanisms allowed now.
pub fn pre_login(starttls: bool, login_ok: bool, mechs: &[String]) -> Vec<String> {
    let mut v: Vec<String> = [
        "IMAP4rev1",
        "IMAP4rev2",
        "SASL-IR",
        "LITERAL+",
        "ID",
        "ENABLE",
        "IDLE",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if starttls {
        v.push("STARTTLS".into());
    }
    if !login_ok {
        v.push("LOGINDISABLED".into());
    }
    for m in mechs {
        v.push(format!("AUTH={m}"));
    }
    v
}

/// After login: the full list with `APPENDLIMIT=`, or the operator's
/// override.
pub fn post_login(append_limit: u64, over: &[String]) -> Vec<String> {
    if !over.is_empty() {
        return over.to_vec();
    }
    let mut v: Vec<String> = AUTHENTICATED.iter().map(|s| s.to_string()).collect();
    v.push(format!("APPENDLIMIT={append_limit}"));
    v
}

/// ENABLE-able names (RFC 5161): the session changes behaviour for these.
pub const ENABLEABLE: &[&str] = &["CONDSTORE", "QRESYNC", "IMAP4REV2", "UTF8=ACCEPT"];
