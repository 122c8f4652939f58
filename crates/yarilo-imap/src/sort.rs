//! SORT keys (RFC 5256 §3, RFC 5957 DISPLAYFROM/DISPLAYTO) and the
//! ordered sequence sets ESORT returns (RFC 5267 §3.2).
//!
//! Each message's keys are computed once from its header section (never
//! the body) and kept as collation keys ([`crate::collation`]); sorting
//! then compares plain values. Ties fall back to mailbox order (RFC 5256
//! §3: the implicit final "sequence number" criterion, never reversed).

use std::cmp::Ordering;

use yarilo_imap_proto::command::{SortCriterion, SortKey};
use yarilo_imap_proto::response::Address;
use yarilo_imap_proto::{SeqItem, SeqNum, SequenceSet};
use yarilo_store::MessageRecord;

use crate::base_subject::base_subject;
use crate::collation::unicode_casemap;

/// One criterion's value for one message.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum SortValue {
    Num(i64),
    Text(String),
}

/// Does any criterion look at the header (all but ARRIVAL and SIZE)?
pub(crate) fn needs_header(criteria: &[SortCriterion]) -> bool {
    criteria
        .iter()
        .any(|c| !matches!(c.key, SortKey::Arrival | SortKey::Size))
}

/// The sent date (RFC 5256 §2.2): Date:, else INTERNALDATE.
pub(crate) fn sent_date(rec: &MessageRecord, header: &[u8]) -> i64 {
    yarilo_mime::sent_date(header).unwrap_or(rec.internal_date)
}

/// The i;unicode-casemap key of the base subject, and the reply flag.
pub(crate) fn subject_key(header: &[u8]) -> (String, bool) {
    let raw = yarilo_mime::header_text(header, "Subject").unwrap_or_default();
    let b = base_subject(&raw);
    (unicode_casemap(&b.text), b.reply_or_forward)
}

/// RFC 5256 §3 FROM/TO/CC: the addr-mailbox of the first address.
pub(crate) fn mailbox_key(header: &[u8], field: &str) -> String {
    mailbox_key_of(yarilo_mime::first_address(header, field).as_ref())
}

/// RFC 5957 §3: the decoded display name, else mailbox@host, else the
/// mailbox, else "".
pub(crate) fn display_key(header: &[u8], field: &str) -> String {
    display_key_of(yarilo_mime::first_address(header, field).as_ref())
}

/// [`mailbox_key`] and [`display_key`] from one parse of the field.
pub(crate) fn address_keys(header: &[u8], field: &str) -> (String, String) {
    let a = yarilo_mime::first_address(header, field);
    (mailbox_key_of(a.as_ref()), display_key_of(a.as_ref()))
}

fn mailbox_key_of(a: Option<&Address>) -> String {
    let mailbox = a.and_then(|a| a.mailbox.as_deref()).unwrap_or_default();
    unicode_casemap(&String::from_utf8_lossy(mailbox))
}

fn display_key_of(a: Option<&Address>) -> String {
    let Some(a) = a else {
        return String::new();
    };
    let name = a
        .name
        .as_deref()
        .map(yarilo_mime::decode_words)
        .unwrap_or_default();
    let value = if !name.trim().is_empty() {
        name
    } else {
        let mailbox =
            String::from_utf8_lossy(a.mailbox.as_deref().unwrap_or_default()).into_owned();
        match a.host.as_deref() {
            Some(h) if !mailbox.is_empty() => format!("{mailbox}@{}", String::from_utf8_lossy(h)),
            _ => mailbox,
        }
    };
    unicode_casemap(&value)
}

/// The keys of one message, one per criterion.
pub(crate) fn keys_of(
    criteria: &[SortCriterion],
    rec: &MessageRecord,
    header: &[u8],
) -> Vec<SortValue> {
    criteria
        .iter()
        .map(|c| match c.key {
            SortKey::Arrival => SortValue::Num(rec.internal_date),
            SortKey::Size => SortValue::Num(i64::try_from(rec.vsize).unwrap_or(i64::MAX)),
            SortKey::Date => SortValue::Num(sent_date(rec, header)),
            SortKey::Subject => SortValue::Text(subject_key(header).0),
            SortKey::From => SortValue::Text(mailbox_key(header, "From")),
            SortKey::To => SortValue::Text(mailbox_key(header, "To")),
            SortKey::Cc => SortValue::Text(mailbox_key(header, "Cc")),
            SortKey::DisplayFrom => SortValue::Text(display_key(header, "From")),
            SortKey::DisplayTo => SortValue::Text(display_key(header, "To")),
        })
        .collect()
}

/// Compares two messages' keys under the criteria; `a_seq`/`b_seq` (UID
/// or MSN, both in mailbox order) break ties.
pub(crate) fn compare(
    criteria: &[SortCriterion],
    a: &[SortValue],
    a_seq: u32,
    b: &[SortValue],
    b_seq: u32,
) -> Ordering {
    for (i, c) in criteria.iter().enumerate() {
        let o = a.get(i).cmp(&b.get(i));
        let o = if c.reverse { o.reverse() } else { o };
        if o != Ordering::Equal {
            return o;
        }
    }
    a_seq.cmp(&b_seq)
}

/// A sequence set listing `nums` in the given order: ascending runs
/// become ranges, nothing is reordered (RFC 5267 §3.2).
pub(crate) fn ordered_set(nums: &[u32]) -> SequenceSet {
    let mut items = Vec::new();
    let mut i = 0;
    while let Some(&start) = nums.get(i) {
        let mut end = start;
        let mut j = i + 1;
        while let Some(&n) = nums.get(j) {
            if end.checked_add(1) != Some(n) {
                break;
            }
            end = n;
            j += 1;
        }
        items.push(if end == start {
            SeqItem::One(SeqNum::Value(start))
        } else {
            SeqItem::Range(SeqNum::Value(start), SeqNum::Value(end))
        });
        i = j;
    }
    SequenceSet::Set(items)
}

/// The positions (0-based, inclusive) a PARTIAL range selects from a
/// result of `len` entries, or None when it selects nothing. Negative
/// ranges count from the end (RFC 9394 §3.1); `500:400` is `400:500`.
pub(crate) fn partial_window(range: (i64, i64), len: usize) -> Option<(usize, usize)> {
    let len = i64::try_from(len).ok()?;
    let (lo, hi) = {
        let (a, b) = (range.0.abs(), range.1.abs());
        (a.min(b), a.max(b))
    };
    if lo < 1 {
        return None;
    }
    let (first, last) = if range.0 < 0 {
        (len - hi, len - lo)
    } else {
        (lo - 1, hi - 1)
    };
    let first = first.max(0);
    let last = last.min(len - 1);
    if first > last {
        return None;
    }
    Some((usize::try_from(first).ok()?, usize::try_from(last).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(internal_date: i64, vsize: u64) -> MessageRecord {
        MessageRecord {
            uid: 1,
            flags: Default::default(),
            keywords: Default::default(),
            modseq: 1,
            size: vsize,
            vsize,
            internal_date,
            in_new: false,
            filename: "x".into(),
            cache: None,
        }
    }

    fn crit(key: SortKey, reverse: bool) -> SortCriterion {
        SortCriterion { reverse, key }
    }

    #[test]
    fn display_from_uses_decoded_name_then_address() {
        let c = [
            crit(SortKey::DisplayFrom, false),
            crit(SortKey::From, false),
        ];
        let h = b"From: =?UTF-8?Q?=C3=89mile?= <zed@x.org>\r\n\r\n";
        assert_eq!(
            keys_of(&c, &rec(0, 1), h),
            vec![
                SortValue::Text("E\u{301}MILE".into()),
                SortValue::Text("ZED".into())
            ]
        );
        let h = b"From: amy@x.org\r\n\r\n";
        assert_eq!(
            keys_of(&c, &rec(0, 1), h)[0],
            SortValue::Text("AMY@X.ORG".into())
        );
        assert_eq!(
            keys_of(&c, &rec(0, 1), b"\r\n")[0],
            SortValue::Text(String::new())
        );
    }

    #[test]
    fn date_falls_back_to_internaldate() {
        let c = [crit(SortKey::Date, false)];
        assert_eq!(
            keys_of(&c, &rec(77, 1), b"Date: garbage\r\n\r\n"),
            vec![SortValue::Num(77)]
        );
        assert_eq!(
            keys_of(
                &c,
                &rec(77, 1),
                b"Date: Thu, 01 Jan 1970 00:01:00 +0000\r\n\r\n"
            ),
            vec![SortValue::Num(60)]
        );
    }

    #[test]
    fn reverse_applies_per_criterion_and_ties_keep_mailbox_order() {
        let c = [crit(SortKey::Size, true)];
        let (a, b) = ([SortValue::Num(1)], [SortValue::Num(2)]);
        assert_eq!(compare(&c, &a, 1, &b, 2), Ordering::Greater);
        assert_eq!(compare(&c, &a, 1, &a, 2), Ordering::Less);
    }

    #[test]
    fn ordered_sets_keep_order() {
        assert_eq!(ordered_set(&[5, 6, 7, 2, 9, 8]).to_string(), "5:7,2,9,8");
        assert_eq!(
            ordered_set(&[23765, 23764, 23763]).to_string(),
            "23765,23764,23763"
        );
    }

    #[test]
    fn partial_windows() {
        assert_eq!(partial_window((1, 3), 10), Some((0, 2)));
        assert_eq!(partial_window((3, 1), 10), Some((0, 2)));
        assert_eq!(partial_window((9, 20), 10), Some((8, 9)));
        assert_eq!(partial_window((11, 20), 10), None);
        assert_eq!(partial_window((-1, -3), 10), Some((7, 9)));
        assert_eq!(partial_window((-5, -20), 3), None);
        assert_eq!(partial_window((-2, -20), 3), Some((0, 1)));
        assert_eq!(partial_window((-1, -1), 0), None);
    }
}
