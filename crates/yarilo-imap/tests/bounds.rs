//! The bounds an IMAP peer cannot push past: sequence sets cost what the
//! mailbox holds, the STARTTLS handshake, writes and the unauthenticated
//! phase are bounded in time, APPEND literals are bounded in size, alone
//! and over all sessions.
//!
//! Timeouts are configured to 1–2 s; the tests assert that the
//! disconnect happens (within a generous 30 s), never how fast.

mod common;

use std::time::Duration;

use common::{Raw, USER};

/// Far above every configured timeout: only a missing bound fails it.
const GENEROUS: Duration = Duration::from_secs(30);

/// `n` copies of `item` joined by commas.
fn repeated(item: &str, n: usize) -> String {
    vec![item; n].join(",")
}

/// Appends `count` messages of about `size` bytes each to INBOX.
async fn fill_inbox(c: &mut Raw, count: usize, size: usize) {
    let line = "y".repeat(76);
    let mut body = String::from("Subject: filler\r\n\r\n");
    while body.len() + 78 <= size {
        body.push_str(&line);
        body.push_str("\r\n");
    }
    for i in 0..count {
        c.send(&format!("a{i} APPEND INBOX {{{}+}}", body.len()))
            .await;
        c.send(&body).await;
        let l = c.line().await;
        assert!(l.starts_with(&format!("a{i} OK [APPENDUID ")), "{l}");
    }
}

#[tokio::test]
async fn uid_fetch_with_thousands_of_full_ranges_answers_each_message_once() {
    let srv = common::start().await;
    let mut c = Raw::login(srv.addr, USER).await;
    fill_inbox(&mut c, 5, 100).await;
    let r = c.cmd("s SELECT INBOX").await;
    assert!(r.iter().any(|l| l == "* 5 EXISTS"), "{r:?}");
    // ~16,000 items: what fits a 64 KiB command line.
    let set = repeated("1:*", 16_000);
    let r = c.cmd(&format!("f UID FETCH {set} (UID)")).await;
    assert_eq!(
        r,
        vec![
            "* 1 FETCH (UID 1)",
            "* 2 FETCH (UID 2)",
            "* 3 FETCH (UID 3)",
            "* 4 FETCH (UID 4)",
            "* 5 FETCH (UID 5)",
            "f OK Fetch completed.",
        ]
    );
}

#[tokio::test]
async fn fetch_store_and_search_with_repeated_ranges_answer_each_message_once() {
    let srv = common::start().await;
    let mut c = Raw::login(srv.addr, USER).await;
    fill_inbox(&mut c, 3, 100).await;
    c.cmd("s SELECT INBOX").await;
    let set = repeated("1:*", 16_000);
    let r = c.cmd(&format!("f FETCH {set} (UID)")).await;
    assert_eq!(
        r,
        vec![
            "* 1 FETCH (UID 1)",
            "* 2 FETCH (UID 2)",
            "* 3 FETCH (UID 3)",
            "f OK Fetch completed.",
        ]
    );
    let set = repeated("3:1", 10_000);
    let r = c.cmd(&format!("t STORE {set} +FLAGS (\\Flagged)")).await;
    assert_eq!(
        r,
        vec![
            "* 1 FETCH (FLAGS (\\Flagged \\Recent))",
            "* 2 FETCH (FLAGS (\\Flagged \\Recent))",
            "* 3 FETCH (FLAGS (\\Flagged \\Recent))",
            "t OK Store completed.",
        ]
    );
    let set = repeated("2:*", 12_000);
    let r = c.cmd(&format!("u UID SEARCH UID {set}")).await;
    assert_eq!(r, vec!["* SEARCH 2 3", "u OK Search completed."]);
    let r = c.cmd(&format!("v SEARCH {set}")).await;
    assert_eq!(r, vec!["* SEARCH 2 3", "v OK Search completed."]);
}

#[tokio::test]
async fn a_stalled_starttls_handshake_is_disconnected() {
    let srv = common::start_with(|c| c.imap.starttls_timeout_seconds = 1).await;
    let mut c = Raw::connect(srv.addr).await;
    let r = c.cmd("t STARTTLS").await;
    assert_eq!(r, vec!["t OK Begin TLS negotiation now."]);
    // The start of a TLS record, then nothing.
    c.write_raw(&[0x16, 0x03, 0x01]).await.unwrap();
    assert!(c.closed_within(GENEROUS).await, "still connected");
    assert!(
        srv.metric_reaches("yarilo_imap_timeouts_total{kind=\"starttls\"} 1", GENEROUS)
            .await,
        "{}",
        srv.metrics()
    );
}

#[tokio::test]
async fn a_client_that_never_reads_is_disconnected() {
    let srv = common::start_with(|c| c.imap.write_timeout_seconds = 1).await;
    let mut c = Raw::login(srv.addr, USER).await;
    fill_inbox(&mut c, 8, 2 << 20).await;
    c.cmd("s SELECT INBOX").await;
    // 16 MiB per FETCH, far more than the socket buffers hold; the
    // client reads none of it.
    let mut pipeline = String::new();
    for i in 0..4 {
        pipeline.push_str(&format!("f{i} FETCH 1:* BODY.PEEK[]\r\n"));
    }
    c.write_raw(pipeline.as_bytes()).await.unwrap();
    assert!(
        srv.metric_reaches("yarilo_imap_timeouts_total{kind=\"write\"} 1", GENEROUS)
            .await,
        "{}",
        srv.metrics()
    );
    assert!(
        srv.metric_reaches("yarilo_imap_sessions_open 0", GENEROUS)
            .await,
        "the session still runs:\n{}",
        srv.metrics()
    );
    assert!(c.closed_within(GENEROUS).await, "still connected");
}

#[tokio::test]
async fn an_unauthenticated_client_trickling_bytes_is_disconnected() {
    let srv = common::start_with(|c| c.imap.preauth_timeout_seconds = 2).await;
    let mut c = Raw::connect(srv.addr).await;
    // One byte at a time, never a whole line: each read is fresh, so
    // only the overall deadline can end it.
    let timed_out = "yarilo_imap_timeouts_total{kind=\"preauth\"} 1";
    let until = tokio::time::Instant::now() + GENEROUS;
    while !srv.metrics().lines().any(|l| l == timed_out) {
        assert!(tokio::time::Instant::now() < until, "{}", srv.metrics());
        if c.write_raw(b"x").await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A byte sent after the close draws a reset that may discard the BYE.
    let bye = c.try_line().await;
    assert!(
        matches!(bye.as_deref(), None | Some("* BYE Login timed out.")),
        "{bye:?}"
    );
    assert!(c.closed_within(GENEROUS).await, "still connected");
}

#[tokio::test]
async fn an_unauthenticated_client_sending_commands_is_disconnected() {
    let srv = common::start_with(|c| c.imap.preauth_timeout_seconds = 2).await;
    let mut c = Raw::connect(srv.addr).await;
    let until = tokio::time::Instant::now() + GENEROUS;
    let mut last = Some(String::new());
    // The BYE can race a NOOP already on its way: the server has closed,
    // the write fails or its RST discards the BYE before it is read.
    while tokio::time::Instant::now() < until {
        if c.write_raw(b"n NOOP\r\n").await.is_err() {
            last = None;
            break;
        }
        last = c.try_line().await;
        if last.as_deref() != Some("n OK NOOP completed.") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        matches!(last.as_deref(), None | Some("* BYE Login timed out.")),
        "{last:?}"
    );
    assert!(c.closed_within(GENEROUS).await, "still connected");
}

#[tokio::test]
async fn an_append_larger_than_the_limit_is_refused_before_it_is_read() {
    let srv = common::start_with(|c| c.imap.append_limit = 1000).await;
    let mut c = Raw::login(srv.addr, USER).await;
    // Synchronising: no "+", the client never sends the literal.
    let r = c.cmd("a APPEND INBOX {1001}").await;
    assert_eq!(r, vec!["a NO [TOOBIG] Message too large."]);
    // Non-synchronising (RFC 7888): the bytes are on their way; they are
    // read and dropped, not buffered, and the session goes on.
    c.send("b APPEND INBOX {5000+}").await;
    c.send(&"z".repeat(5000)).await;
    assert_eq!(c.line().await, "b NO [TOOBIG] Message too large.");
    let r = c.cmd("c NOOP").await;
    assert_eq!(r, vec!["c OK NOOP completed."]);
    let r = c.cmd("d STATUS INBOX (MESSAGES)").await;
    assert_eq!(
        r,
        vec!["* STATUS INBOX (MESSAGES 0)", "d OK Status completed."]
    );
}

#[tokio::test]
async fn appends_over_the_process_budget_are_refused_until_it_frees_up() {
    let srv = common::start_with(|c| {
        c.imap.append_limit = 1000;
        c.imap.append_buffer_bytes = 1500;
    })
    .await;
    let mut first = Raw::login(srv.addr, USER).await;
    let mut second = Raw::login(srv.addr, "bob").await;
    first.send("a APPEND INBOX {1000}").await;
    assert_eq!(first.line().await, "+ OK");
    // The first upload holds 1000 of the 1500 bytes.
    let r = second.cmd("b APPEND INBOX {1000}").await;
    assert_eq!(
        r,
        vec!["b NO [LIMIT] Too much mail is being uploaded at once; try again later."]
    );
    let msg = format!("Subject: s\r\n\r\n{}", "m".repeat(1000 - 14));
    first.send(&msg).await;
    let l = first.line().await;
    assert!(l.starts_with("a OK [APPENDUID "), "{l}");
    // Released with the command: the retry goes through.
    second.send("c APPEND INBOX {1000}").await;
    assert_eq!(second.line().await, "+ OK");
    second.send(&msg).await;
    let l = second.line().await;
    assert!(l.starts_with("c OK [APPENDUID "), "{l}");
}
