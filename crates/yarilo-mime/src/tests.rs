//! Exact-output tests of the public API: values are encoded with the
//! proto crate's writer and compared with the IMAP text that RFC 3501 /
//! RFC 9051 examples and Dovecot 2.3 produce for the same message.

use proptest::prelude::*;
use yarilo_imap_proto::command::{Section, SectionText};
use yarilo_imap_proto::response::{EncodeOptions, Writer};

use crate::*;

/// `\n` line ends to CRLF, the way messages arrive over SMTP/IMAP.
fn crlf(s: &str) -> Vec<u8> {
    s.replace('\n', "\r\n").into_bytes()
}

fn bodystructure(raw: &[u8]) -> String {
    let mut out = Vec::new();
    Writer::new(&mut out, EncodeOptions::default()).body_structure(&body_structure(raw), true);
    String::from_utf8_lossy(&out).into_owned()
}

fn body(raw: &[u8]) -> String {
    let mut out = Vec::new();
    Writer::new(&mut out, EncodeOptions::default()).body_structure(&body_structure(raw), false);
    String::from_utf8_lossy(&out).into_owned()
}

fn env(raw: &[u8]) -> String {
    let mut out = Vec::new();
    Writer::new(&mut out, EncodeOptions::default()).envelope(&envelope(raw));
    String::from_utf8_lossy(&out).into_owned()
}

fn sec(part: &[u32], text: Option<SectionText>) -> Section {
    Section {
        part: part.to_vec(),
        text,
    }
}

fn fetch(raw: &[u8], part: &[u32], text: Option<SectionText>) -> Option<String> {
    section(raw, &sec(part, text)).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Dovecot's own BODYSTRUCTURE test message (lib-imap), in CRLF form.
const DOVECOT_MSG: &str = "From: user@domain.org
Date: Sat, 24 Mar 2007 23:00:00 +0200
Mime-Version: 1.0
Content-Type: multipart/mixed; boundary=\"foo
 bar\"

Root MIME prologue

--foo bar
Content-Type: text/x-myown; charset=us-ascii; foo=\"quoted\\\"string\"
Content-ID: <foo@example.com>
Content-MD5: Q2hlY2sgSW50ZWdyaXR5IQ==
Content-Disposition: inline; foo=bar
Content-Description: hellodescription
Content-Language: en, fi, se
Content-Location: http://example.com/test.txt

hello

--foo bar
Content-Type: message/rfc822

From: sub@domain.org
To: sub-to1@domain.org, sub-to2@domain.org
Date: Sun, 12 Aug 2012 12:34:56 +0300
Subject: submsg
Content-Type: multipart/alternative; boundary=\"sub1\"

Sub MIME prologue
--sub1
Content-Type: text/html
Content-Transfer-Encoding: 8bit

<p>Hello world</p>

--sub1
Content-Type: text/plain
Content-Transfer-Encoding: ?invalid

Hello another world

--sub1--
Sub MIME epilogue

--foo bar--
Root MIME epilogue
";

#[test]
fn dovecot_bodystructure_vector_matches_exactly() {
    let m = crlf(DOVECOT_MSG);
    assert_eq!(
        bodystructure(&m),
        concat!(
            r#"(("text" "x-myown" ("charset" "us-ascii" "foo" "quoted\"string") "<foo@example.com>" "hellodescription" "7bit" 7 1 "Q2hlY2sgSW50ZWdyaXR5IQ==" ("inline" ("foo" "bar")) ("en" "fi" "se") "http://example.com/test.txt")"#,
            r#"("message" "rfc822" NIL NIL NIL "7bit" 412 ("Sun, 12 Aug 2012 12:34:56 +0300" "submsg" ((NIL NIL "sub" "domain.org")) ((NIL NIL "sub" "domain.org")) ((NIL NIL "sub" "domain.org")) ((NIL NIL "sub-to1" "domain.org")(NIL NIL "sub-to2" "domain.org")) NIL NIL NIL NIL) "#,
            r#"(("text" "html" ("charset" "us-ascii") NIL NIL "8bit" 20 1 NIL NIL NIL NIL)("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 21 1 NIL NIL NIL NIL) "alternative" ("boundary" "sub1") NIL NIL NIL) 21 NIL NIL NIL NIL)"#,
            r#" "mixed" ("boundary" "foo bar") NIL NIL NIL)"#
        )
    );
    assert_eq!(
        body(&m),
        concat!(
            r#"(("text" "x-myown" ("charset" "us-ascii" "foo" "quoted\"string") "<foo@example.com>" "hellodescription" "7bit" 7 1)"#,
            r#"("message" "rfc822" NIL NIL NIL "7bit" 412 ("Sun, 12 Aug 2012 12:34:56 +0300" "submsg" ((NIL NIL "sub" "domain.org")) ((NIL NIL "sub" "domain.org")) ((NIL NIL "sub" "domain.org")) ((NIL NIL "sub-to1" "domain.org")(NIL NIL "sub-to2" "domain.org")) NIL NIL NIL NIL) "#,
            r#"(("text" "html" ("charset" "us-ascii") NIL NIL "8bit" 20 1)("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 21 1) "alternative") 21) "mixed")"#
        )
    );
}

#[test]
fn rfc3501_body_example_is_reproduced_with_sender_case() {
    // RFC 3501 §7.4.2 example: sizes 1152/23 and 4554/73.
    let text: String = "x".repeat(50) + "\n";
    let text = text.repeat(22) + "last!!\n";
    let b64: String = ("A".repeat(60) + "\n").repeat(72) + &"A".repeat(88) + "\n";
    let m = format!(
        "MIME-Version: 1.0\nContent-Type: MULTIPART/MIXED; BOUNDARY=\"x\"\n\n--x\nContent-Type: TEXT/PLAIN; CHARSET=US-ASCII\nContent-Transfer-Encoding: 7BIT\n\n{text}\n--x\nContent-Type: TEXT/PLAIN; CHARSET=US-ASCII; NAME=cc.diff\nContent-ID: <960723163407.20117h@cac.washington.edu>\nContent-Description: Compiler diff\nContent-Transfer-Encoding: BASE64\n\n{b64}\n--x--\n"
    );
    assert_eq!(
        body(&crlf(&m)),
        r#"(("TEXT" "PLAIN" ("CHARSET" "US-ASCII") NIL NIL "7BIT" 1152 23)("TEXT" "PLAIN" ("CHARSET" "US-ASCII" "NAME" "cc.diff") "<960723163407.20117h@cac.washington.edu>" "Compiler diff" "BASE64" 4554 73) "MIXED")"#
    );
}

const ALTERNATIVE: &str = "From: Nathaniel Borenstein <nsb@bellcore.com>
To: Ned Freed <ned@innosoft.com>
Date: Mon, 22 Mar 1993 09:41:09 -0800 (PST)
Subject: Formatted text mail
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary=boundary42

--boundary42
Content-Type: text/plain; charset=us-ascii

...plain text version of message goes here...

--boundary42
Content-Type: text/enriched

... RFC 1896 text/enriched version of same message
   goes here ...

--boundary42--
";

#[test]
fn multipart_alternative_structure_and_envelope() {
    let m = crlf(ALTERNATIVE);
    assert_eq!(
        bodystructure(&m),
        r#"(("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 47 1 NIL NIL NIL NIL)("text" "enriched" ("charset" "us-ascii") NIL NIL "7bit" 70 2 NIL NIL NIL NIL) "alternative" ("boundary" "boundary42") NIL NIL NIL)"#
    );
    assert_eq!(
        env(&m),
        r#"("Mon, 22 Mar 1993 09:41:09 -0800 (PST)" "Formatted text mail" (("Nathaniel Borenstein" NIL "nsb" "bellcore.com")) (("Nathaniel Borenstein" NIL "nsb" "bellcore.com")) (("Nathaniel Borenstein" NIL "nsb" "bellcore.com")) (("Ned Freed" NIL "ned" "innosoft.com")) NIL NIL NIL NIL)"#
    );
    assert_eq!(sent_date(&m), Some(732_822_069));
}

const ATTACHMENT: &str = "From: a@b.example
Subject: report
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary=\"XYZ\"

This is a multi-part message in MIME format.
--XYZ
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: quoted-printable

caf=C3=A9 =
au lait
--XYZ
Content-Type: application/pdf; name=\"report.pdf\"
Content-Transfer-Encoding: base64
Content-Disposition: attachment; filename=\"report.pdf\"

aGVsbG8g
d29ybGQ=
--XYZ
Content-Type: application/octet-stream
Content-Transfer-Encoding: x-uuencode

begin 644 x
--XYZ--
";

#[test]
fn base64_attachment_with_disposition_and_filename() {
    let m = crlf(ATTACHMENT);
    assert_eq!(
        bodystructure(&m),
        concat!(
            r#"(("text" "plain" ("charset" "utf-8") NIL NIL "quoted-printable" 20 1 NIL NIL NIL NIL)"#,
            r#"("application" "pdf" ("name" "report.pdf") NIL NIL "base64" 18 NIL ("attachment" ("filename" "report.pdf")) NIL NIL)"#,
            r#"("application" "octet-stream" NIL NIL NIL "x-uuencode" 11 NIL NIL NIL NIL)"#,
            r#" "mixed" ("boundary" "XYZ") NIL NIL NIL)"#
        )
    );
    assert_eq!(
        binary(&m, &[1]).ok().flatten(),
        Some("café au lait".as_bytes().to_vec())
    );
    assert_eq!(
        binary(&m, &[2]).ok().flatten(),
        Some(b"hello world".to_vec())
    );
    assert!(matches!(binary(&m, &[3]), Err(UnknownCte)));
    assert!(matches!(binary(&m, &[4]), Ok(None)));
    assert_eq!(binary(&m, &[]).ok().flatten(), Some(m.clone()));
    assert!(body_contains(&m, "CAFÉ AU"));
    assert!(
        !body_contains(&m, "hello world"),
        "attachments are not text"
    );
    assert!(
        !body_contains(&m, "multi-part message"),
        "preamble is no part"
    );
    assert!(text_contains(&m, "report"));
}

#[test]
fn sections_of_nested_message() {
    let m = crlf(DOVECOT_MSG);
    assert_eq!(fetch(&m, &[1], None).as_deref(), Some("hello\r\n"));
    assert_eq!(
        fetch(
            &m,
            &[],
            Some(SectionText::HeaderFields(vec![
                "DATE".into(),
                "FROM".into()
            ]))
        )
        .as_deref(),
        Some("From: user@domain.org\r\nDate: Sat, 24 Mar 2007 23:00:00 +0200\r\n\r\n")
    );
    assert_eq!(
        fetch(
            &m,
            &[],
            Some(SectionText::HeaderFieldsNot(vec![
                "CONTENT-TYPE".into(),
                "DATE".into()
            ]))
        )
        .as_deref(),
        Some("From: user@domain.org\r\nMime-Version: 1.0\r\n\r\n")
    );
    assert_eq!(
        fetch(
            &m,
            &[],
            Some(SectionText::HeaderFields(vec!["X-NONE".into()]))
        )
        .as_deref(),
        Some("\r\n")
    );
    let header = fetch(&m, &[], Some(SectionText::Header)).unwrap_or_default();
    assert!(header.starts_with("From: user@domain.org\r\n"));
    assert!(header.ends_with("bar\"\r\n\r\n"));
    let text = fetch(&m, &[], Some(SectionText::Text)).unwrap_or_default();
    assert_eq!(header.len() + text.len(), m.len());
    assert!(text.starts_with("Root MIME prologue"));
    assert_eq!(
        fetch(&m, &[], None).map(String::into_bytes),
        Some(m.clone())
    );
    assert_eq!(
        fetch(&m, &[2], Some(SectionText::Mime)).as_deref(),
        Some("Content-Type: message/rfc822\r\n\r\n")
    );
    assert_eq!(
        fetch(
            &m,
            &[2],
            Some(SectionText::HeaderFields(vec!["SUBJECT".into()]))
        )
        .as_deref(),
        Some("Subject: submsg\r\n\r\n")
    );
    let inner_header = fetch(&m, &[2], Some(SectionText::Header)).unwrap_or_default();
    assert!(inner_header.starts_with("From: sub@domain.org\r\n"));
    assert!(inner_header.ends_with("\"sub1\"\r\n\r\n"));
    let inner_text = fetch(&m, &[2], Some(SectionText::Text)).unwrap_or_default();
    assert!(inner_text.starts_with("Sub MIME prologue\r\n--sub1\r\n"));
    assert!(inner_text.ends_with("Sub MIME epilogue\r\n"));
    assert_eq!(inner_header.len() + inner_text.len(), 412);
    assert_eq!(
        fetch(&m, &[2, 1], None).as_deref(),
        Some("<p>Hello world</p>\r\n")
    );
    assert_eq!(
        fetch(&m, &[2, 2], Some(SectionText::Mime)).as_deref(),
        Some("Content-Type: text/plain\r\nContent-Transfer-Encoding: ?invalid\r\n\r\n")
    );
    assert_eq!(
        binary(&m, &[2, 2]).ok().flatten(),
        Some(b"Hello another world\r\n".to_vec())
    );
    // Parts that do not exist, and text specs on non-message parts.
    assert_eq!(fetch(&m, &[3], None), None);
    assert_eq!(fetch(&m, &[2, 3], None), None);
    assert_eq!(fetch(&m, &[1, 1], None), None);
    assert_eq!(fetch(&m, &[0], None), None);
    assert_eq!(fetch(&m, &[1], Some(SectionText::Header)), None);
    assert_eq!(fetch(&m, &[], Some(SectionText::Mime)), None);
}

#[test]
fn part_one_of_a_non_multipart_message_is_its_body() {
    let m = crlf("Subject: hi\nMIME-Version: 1.0\nContent-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: base64\n\naMOk\n");
    assert_eq!(fetch(&m, &[1], None).as_deref(), Some("aMOk\r\n"));
    assert_eq!(
        binary(&m, &[1]).ok().flatten(),
        Some("hä".as_bytes().to_vec())
    );
    assert_eq!(fetch(&m, &[2], None), None);
    assert_eq!(fetch(&m, &[1, 1], None), None);
    assert!(body_contains(&m, "HÄ"));
    assert_eq!(
        bodystructure(&m),
        r#"("text" "plain" ("charset" "utf-8") NIL NIL "base64" 6 1 NIL NIL NIL NIL)"#
    );
}

#[test]
fn nested_rfc822_inside_non_multipart_subparts() {
    // 2 is message/rfc822 whose body is a single text part: 2.1 is it.
    let m = crlf("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\n\nfirst\n--b\nContent-Type: message/rfc822\n\nSubject: inner\n\ninner body\n--b--\n");
    assert_eq!(fetch(&m, &[2, 1], None).as_deref(), Some("inner body"));
    assert_eq!(
        fetch(&m, &[2, 1], Some(SectionText::Mime)).as_deref(),
        Some("Subject: inner\r\n\r\n")
    );
    assert_eq!(fetch(&m, &[2, 2], None), None);
    assert_eq!(
        bodystructure(&m),
        concat!(
            r#"(("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 5 0 NIL NIL NIL NIL)"#,
            r#"("message" "rfc822" NIL NIL NIL "7bit" 28 (NIL "inner" NIL NIL NIL NIL NIL NIL NIL NIL) ("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 10 0 NIL NIL NIL NIL) 2 NIL NIL NIL NIL)"#,
            r#" "mixed" ("boundary" "b") NIL NIL NIL)"#
        )
    );
}

#[test]
fn dovecot_envelope_vectors() {
    let cases: &[(&str, &str)] = &[
        (
            "Message-ID: <msg@id>\nIn-Reply-To: <reply@to.id>\nDate: Thu, 15 Feb 2007 01:02:03 +0200\nSubject: subject header\nFrom: From Real <fromuser@fromdomain.org>\nTo: To Real <touser@todomain.org>\nCc: Cc Real <ccuser@ccdomain.org>\nBcc: Bcc Real <bccuser@bccdomain.org>\nSender: Sender Real <senderuser@senderdomain.org>\nReply-To: ReplyTo Real <replytouser@replytodomain.org>\n\nbody\n",
            r#"("Thu, 15 Feb 2007 01:02:03 +0200" "subject header" (("From Real" NIL "fromuser" "fromdomain.org")) (("Sender Real" NIL "senderuser" "senderdomain.org")) (("ReplyTo Real" NIL "replytouser" "replytodomain.org")) (("To Real" NIL "touser" "todomain.org")) (("Cc Real" NIL "ccuser" "ccdomain.org")) (("Bcc Real" NIL "bccuser" "bccdomain.org")) "<reply@to.id>" "<msg@id>")"#,
        ),
        (
            "Date: Thu, 15 Feb 2007 01:02:03 +0200\nFrom: user@domain\n\nbody\n",
            r#"("Thu, 15 Feb 2007 01:02:03 +0200" NIL ((NIL NIL "user" "domain")) ((NIL NIL "user" "domain")) ((NIL NIL "user" "domain")) NIL NIL NIL NIL NIL)"#,
        ),
        (
            "Date: Thu, 15 Feb 2007 01:02:03 +0200\nFrom: user@domain (Real Name)\nTo: group: g1@d1.org, g2@d2.org;, group2: g3@d3.org;\nCc: group:;, group2: (foo) ;\n\nbody\n",
            r#"("Thu, 15 Feb 2007 01:02:03 +0200" NIL (("Real Name" NIL "user" "domain")) (("Real Name" NIL "user" "domain")) (("Real Name" NIL "user" "domain")) ((NIL NIL "group" NIL)(NIL NIL "g1" "d1.org")(NIL NIL "g2" "d2.org")(NIL NIL NIL NIL)(NIL NIL "group2" NIL)(NIL NIL "g3" "d3.org")(NIL NIL NIL NIL)) ((NIL NIL "group" NIL)(NIL NIL NIL NIL)(NIL NIL "group2" NIL)(NIL NIL NIL NIL)) NIL NIL NIL)"#,
        ),
        (
            "Date: Thu, 15 Feb 2007 01:02:03 +0200\nFrom: user@domain (Real Name)\nSender: \nReply-To: \n\nbody\n",
            r#"("Thu, 15 Feb 2007 01:02:03 +0200" NIL (("Real Name" NIL "user" "domain")) (("Real Name" NIL "user" "domain")) (("Real Name" NIL "user" "domain")) NIL NIL NIL NIL NIL)"#,
        ),
        (
            "Date: Thu, 15 Feb 2007 01:02:03 +0200\nFrom: <@route:user@domain>\n\nbody\n",
            r#"("Thu, 15 Feb 2007 01:02:03 +0200" NIL ((NIL "@route" "user" "domain")) ((NIL "@route" "user" "domain")) ((NIL "@route" "user" "domain")) NIL NIL NIL NIL NIL)"#,
        ),
    ];
    for (msg, want) in cases {
        assert_eq!(&env(&crlf(msg)), want, "for {msg:?}");
    }
}

#[test]
fn addresses_routes_quotes_and_missing_parts() {
    let h = crlf("To: \"foo bar\" <user@domain>, hello <@route@route2:u@d>, Joe Q. Public <jqp@x.example>,\n user (hello), @domain, =?utf-8?q?J=C3=B6rg?= <j@x>\n\n");
    assert_eq!(
        env(&h),
        concat!(
            r#"(NIL NIL NIL NIL NIL "#,
            r#"(("foo bar" NIL "user" "domain")("hello" "@route,@route2" "u" "d")("Joe Q. Public" NIL "jqp" "x.example")"#,
            r#"("hello" NIL "user" "MISSING_DOMAIN")(NIL NIL "MISSING_MAILBOX" "domain")("=?utf-8?q?J=C3=B6rg?=" NIL "j" "x"))"#,
            r#" NIL NIL NIL NIL)"#
        )
    );
}

#[test]
fn missing_headers_give_nil_envelope_and_default_structure() {
    assert_eq!(env(b""), "(NIL NIL NIL NIL NIL NIL NIL NIL NIL NIL)");
    assert_eq!(
        bodystructure(b""),
        r#"("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 0 0 NIL NIL NIL NIL)"#
    );
    let m = crlf("Subject: no mime\n\nline one\nline two\n");
    assert_eq!(
        bodystructure(&m),
        r#"("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 20 2 NIL NIL NIL NIL)"#
    );
    // Folded subject is unfolded; an empty Subject is "" not NIL.
    let m = crlf("Subject: a\n b\nIn-Reply-To:\n\n");
    assert_eq!(env(&m), r#"(NIL "a b" NIL NIL NIL NIL NIL NIL "" NIL)"#);
}

#[test]
fn without_mime_version_a_multipart_is_plain_text() {
    let m = crlf("Content-Type: multipart/mixed; boundary=b\n\n--b\n\nx\n--b--\n");
    assert_eq!(
        bodystructure(&m),
        r#"("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 17 4 NIL NIL NIL NIL)"#
    );
}

#[test]
fn broken_multiparts_follow_dovecot() {
    // No closing boundary: the last part runs to the end of the message.
    let m = crlf("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n--b\nContent-Type: text/plain\n\nunfinished\n");
    assert_eq!(
        bodystructure(&m),
        r#"(("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 12 1 NIL NIL NIL NIL) "mixed" ("boundary" "b") NIL NIL NIL)"#
    );
    assert_eq!(fetch(&m, &[1], None).as_deref(), Some("unfinished\r\n"));
    // No boundary line at all: an empty text/plain part stands in.
    let m = crlf("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\nnothing here\n");
    assert_eq!(
        bodystructure(&m),
        r#"(("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 0 0) "mixed" ("boundary" "b") NIL NIL NIL)"#
            .replace("0 0)", "0 0 NIL NIL NIL NIL)")
    );
    assert_eq!(fetch(&m, &[1], None), None);
    // An outer boundary ends an unterminated inner multipart.
    let m = crlf("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=outer\n\n--outer\nContent-Type: multipart/alternative; boundary=outerinner\n\n--outerinner\n\ninner\n--outer\n\nsecond\n--outer--\n");
    assert_eq!(
        bodystructure(&m),
        concat!(
            r#"((("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 5 0 NIL NIL NIL NIL) "alternative" ("boundary" "outerinner") NIL NIL NIL)"#,
            r#"("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 6 0 NIL NIL NIL NIL) "mixed" ("boundary" "outer") NIL NIL NIL)"#
        )
    );
    assert_eq!(fetch(&m, &[1, 1], None).as_deref(), Some("inner"));
    assert_eq!(fetch(&m, &[2], None).as_deref(), Some("second"));
}

#[test]
fn rfc2231_parameters_pass_through_and_digest_defaults_to_rfc822() {
    let m = crlf("MIME-Version: 1.0\nContent-Type: multipart/digest; boundary=d\n\n--d\n\nSubject: one\n\nbody\n--d--\n");
    assert_eq!(
        bodystructure(&m),
        concat!(
            r#"(("message" "rfc822" NIL NIL NIL "7bit" 20 (NIL "one" NIL NIL NIL NIL NIL NIL NIL NIL) ("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 4 0 NIL NIL NIL NIL) 2 NIL NIL NIL NIL)"#,
            r#" "digest" ("boundary" "d") NIL NIL NIL)"#
        )
    );
    let m = crlf("MIME-Version: 1.0\nContent-Type: application/x-foo;\n Name*0*=utf-8''a%20;\n Name*1=b\nContent-Disposition: ATTACHMENT; FileName=x.bin\nContent-Language: de\n\n\x01");
    assert_eq!(
        bodystructure(&m),
        r#"("application" "x-foo" ("Name*0*" "utf-8''a%20" "Name*1" "b") NIL NIL "7bit" 1 NIL ("ATTACHMENT" ("FileName" "x.bin")) "de" NIL)"#
    );
}

#[test]
fn header_search_decodes_and_unfolds() {
    let h = crlf("Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\n =?utf-8?b?YXVz?= Berlin\nFrom: \"Ann\" <ann@x.example>\nX-Empty:\n\n");
    assert!(header_matches(&h, "SUBJECT", "grüßeaus berlin"));
    // Simple case folding: ß does not expand to "ss" (full folding would).
    assert!(!header_matches(&h, "subject", "GRÜSSE"));
    assert!(header_matches(&h, "subject", "GRÜßE"));
    assert!(header_matches(&h, "From", "ANN@X"));
    assert!(header_matches(&h, "x-empty", ""));
    assert!(!header_matches(&h, "To", ""));
    assert!(!header_matches(&h, "Subject", "nope"));
    assert!(text_contains(&h, "berlin"));
}

#[test]
fn body_search_converts_charsets() {
    let m = crlf("MIME-Version: 1.0\nContent-Type: text/plain; charset=iso-8859-1\nContent-Transfer-Encoding: quoted-printable\n\nK=F6ln\n");
    assert!(body_contains(&m, "KÖLN"));
    assert!(!body_contains(&m, "K=F6ln"));
    let m = crlf("MIME-Version: 1.0\nContent-Type: text/plain; charset=x-bogus\nContent-Transfer-Encoding: 8bit\n\nK\u{f6}ln \n");
    assert!(body_contains(&m, "köln"));
    let m = b"MIME-Version: 1.0\r\nContent-Type: text/plain; charset=x-bogus\r\n\r\nK\xf6ln\r\n";
    assert!(
        body_contains(m, "köln"),
        "invalid UTF-8 falls back to Latin-1"
    );
}

#[test]
fn lf_only_messages_keep_stored_sizes() {
    let m = DOVECOT_MSG.as_bytes();
    let s = bodystructure(m);
    assert!(s.contains(r#""7bit" 6 1 "Q2hl"#), "{s}");
    assert!(
        s.contains(r#""message" "rfc822" NIL NIL NIL "7bit" 391 "#),
        "{s}"
    );
}

#[test]
fn deep_nesting_is_bounded() {
    let mut m = String::from("MIME-Version: 1.0\n");
    for _ in 0..500 {
        m.push_str("Content-Type: message/rfc822\n\n");
    }
    m.push_str("end\n");
    let s = bodystructure(m.as_bytes());
    assert!(s.len() < 200_000);
    assert!(section(m.as_bytes(), &sec(&[1; 300], None)).is_none());
}

proptest! {
    #[test]
    fn never_panics_on_random_bytes(raw in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = body_structure(&raw);
        let _ = envelope(&raw);
        let _ = section(&raw, &sec(&[1, 2], Some(SectionText::Header)));
        let _ = binary(&raw, &[1]);
        let _ = body_contains(&raw, "a");
        let _ = text_contains(&raw, "ä");
        let _ = sent_date(&raw);
        let _ = header_matches(&raw, "from", "x");
    }

    #[test]
    fn never_panics_on_mutated_mime(
        cut in 0usize..2000,
        insert in proptest::collection::vec(prop::sample::select(vec![
            b'\r', b'\n', b'-', b'"', b'(', b')', b'<', b'>', b':', b';', b'=', b'?', b' ', b'@', b',',
        ]), 0..16),
    ) {
        let mut raw = crlf(DOVECOT_MSG);
        let at = cut.min(raw.len());
        raw.splice(at..at, insert);
        let bs = body_structure(&raw);
        let mut out = Vec::new();
        Writer::new(&mut out, EncodeOptions::default()).body_structure(&bs, true);
        for path in [&[][..], &[1], &[2], &[2, 1], &[2, 2], &[2, 2, 1]] {
            for text in [None, Some(SectionText::Header), Some(SectionText::Text), Some(SectionText::Mime)] {
                let _ = section(&raw, &sec(path, text));
            }
            let _ = binary(&raw, path);
        }
        let _ = text_contains(&raw, "hello");
    }
}

#[test]
fn sort_helpers_decode_and_pick_the_first_address() {
    let h = b"Subject: =?UTF-8?Q?caf=C3=A9?= time\r\nFrom: undisclosed:;, =?ISO-8859-1?Q?Bob_M=FCller?= <bob@x.org>, c@d\r\nReferences: <a@b>\r\n  <c@d>\r\n\r\n";
    assert_eq!(
        crate::header_text(h, "subject").as_deref(),
        Some("café time")
    );
    assert_eq!(
        crate::header_raw(h, "References").as_deref(),
        Some(&b"<a@b>  <c@d>"[..])
    );
    let a = crate::first_address(h, "From").unwrap();
    assert_eq!(a.mailbox.as_deref(), Some(&b"bob"[..]));
    assert_eq!(
        crate::decode_words(a.name.as_deref().unwrap()),
        "Bob Müller"
    );
    assert!(crate::first_address(h, "To").is_none());
    assert!(crate::header_text(h, "Cc").is_none());
    // No ENVELOPE placeholders in what sort keys are made of.
    let h = b"To: user (Name)\r\nCc: @only.example\r\n\r\n";
    let a = crate::first_address(h, "To").unwrap();
    assert_eq!(
        (a.mailbox.as_deref(), a.host.as_deref()),
        (Some(&b"user"[..]), None)
    );
    let a = crate::first_address(h, "Cc").unwrap();
    assert_eq!(
        (a.mailbox.as_deref(), a.host.as_deref()),
        (None, Some(&b"only.example"[..]))
    );
}

#[test]
fn part_structure_is_the_nested_bodystructure_of_one_part() {
    let m = crlf(ATTACHMENT);
    let one = |part: &[u32]| {
        part_structure(&m, part).map(|b| {
            let mut out = Vec::new();
            Writer::new(&mut out, EncodeOptions::default()).body_structure(&b, true);
            String::from_utf8_lossy(&out).into_owned()
        })
    };
    assert_eq!(
        one(&[2]).as_deref(),
        Some(
            r#"("application" "pdf" ("name" "report.pdf") NIL NIL "base64" 18 NIL ("attachment" ("filename" "report.pdf")) NIL NIL)"#
        )
    );
    assert_eq!(one(&[]), Some(bodystructure(&m)));
    assert_eq!(one(&[4]), None);
    assert_eq!(one(&[2, 1]), None);
}

#[test]
fn address_search_matches_the_parsed_addresses() {
    let h = crlf("From: <user-from (comment)@ (comment) domain.org>\nTo: undisclosed: a@example.org, \"B Person\" <b@example.net>;\nCc: =?UTF-8?Q?J=C3=B6rg?= <j@x.example>\nBcc: hidden@\n example.com\n\n");
    assert!(address_matches(&h, "From", "user-from@domain.org"));
    assert!(!address_matches(&h, "From", "comment"));
    assert!(address_matches(&h, "To", "a@example.org"));
    assert!(address_matches(&h, "To", "B Person <b@example.net>"));
    assert!(address_matches(&h, "To", "undisclosed"));
    assert!(address_matches(&h, "Cc", "jörg <j@"));
    assert!(address_matches(&h, "Bcc", "hidden@example.com"));
    assert!(!address_matches(&h, "Cc", "a@example.org"));
    // Nothing that parses as an address: the text as written.
    let h = crlf("From: ;;;\n\n");
    assert!(address_matches(&h, "From", ";;"));
}

#[test]
fn envelope_skips_comments_before_the_domain() {
    let h = crlf("From: <user-from (comment)@ (comment) domain.org>\n\n");
    assert_eq!(
        env(&h),
        r#"(NIL NIL ((NIL NIL "user-from" "domain.org")) ((NIL NIL "user-from" "domain.org")) ((NIL NIL "user-from" "domain.org")) NIL NIL NIL NIL NIL)"#
    );
}
