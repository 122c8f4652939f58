//! The Date: field as a point in time (RFC 5322 §3.3, with the obsolete
//! forms of §4.3: two-digit years, named zones, missing seconds).

use crate::header;

/// See [`crate::sent_date`].
pub(crate) fn sent_date(header: &[u8]) -> Option<i64> {
    let f = header::first(header, "Date")?;
    parse(&f.unfolded())
}

/// See [`crate::sent_day`].
pub(crate) fn sent_day(header: &[u8]) -> Option<i64> {
    let f = header::first(header, "Date")?;
    parse_parts(&f.unfolded()).map(|p| p.days)
}

/// A Date: value as written: its own calendar day, time and zone.
struct Parts {
    /// Days since 1970-01-01 of the date as written (not moved to UTC).
    days: i64,
    /// Seconds since the start of that day, local to the zone.
    seconds: i64,
    /// Zone offset, seconds east of UTC.
    offset: i64,
}

/// `[day-name ","] day month year hour ":" minute [":" second] zone`.
pub(crate) fn parse(value: &[u8]) -> Option<i64> {
    parse_parts(value).map(|p| p.days * 86_400 + p.seconds - p.offset)
}

fn parse_parts(value: &[u8]) -> Option<Parts> {
    // Comments are allowed anywhere (CFWS); drop them first.
    let mut clean = Vec::with_capacity(value.len());
    let mut depth = 0usize;
    for &b in value {
        match b {
            b'(' => depth += 1,
            b')' if depth > 0 => depth -= 1,
            _ if depth == 0 => clean.push(if b == b',' { b' ' } else { b }),
            _ => {}
        }
    }
    let text = String::from_utf8_lossy(&clean);
    let mut words = text.split_ascii_whitespace().peekable();
    if words
        .peek()
        .is_some_and(|w| w.chars().next().is_some_and(|c| c.is_ascii_alphabetic()))
    {
        words.next();
    }
    let day: i64 = words.next()?.parse().ok()?;
    let month = month(words.next()?)?;
    let year_word = words.next()?;
    let mut year: i64 = year_word.parse().ok()?;
    if year_word.len() <= 2 {
        // RFC 5322 §4.3: 00-49 → 20xx, 50-99 → 19xx.
        year += if year < 50 { 2000 } else { 1900 };
    } else if year_word.len() == 3 {
        year += 1900;
    }
    let mut time = words.next()?.split(':');
    let hour: i64 = time.next()?.parse().ok()?;
    let minute: i64 = time.next()?.parse().ok()?;
    let second: i64 = match time.next() {
        Some(s) => s.parse().ok()?,
        None => 0,
    };
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let offset = words.next().map_or(Some(0), zone)?;
    Some(Parts {
        days: days_from_civil(year, month, day),
        seconds: hour * 3600 + minute * 60 + second,
        offset,
    })
}

fn month(w: &str) -> Option<i64> {
    const NAMES: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let w = w.get(..3)?.to_ascii_lowercase();
    NAMES
        .iter()
        .position(|m| *m == w)
        .and_then(|i| i64::try_from(i + 1).ok())
}

/// A zone as seconds east of UTC; unknown names count as UTC (RFC 5322
/// §4.3 says military zones carry no information).
fn zone(z: &str) -> Option<i64> {
    let b = z.as_bytes();
    if let (Some(&sign), Some(digits)) = (b.first(), z.get(1..)) {
        if (sign == b'+' || sign == b'-') && digits.len() == 4 {
            let n: i64 = digits.parse().ok()?;
            let secs = (n / 100) * 3600 + (n % 100) * 60;
            return Some(if sign == b'-' { -secs } else { secs });
        }
    }
    let hours = match z.to_ascii_uppercase().as_str() {
        "EDT" => -4,
        "EST" | "CDT" => -5,
        "CST" | "MDT" => -6,
        "MST" | "PDT" => -7,
        "PST" => -8,
        _ => 0,
    };
    Some(hours * 3600)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rfc5322_dates() {
        assert_eq!(parse(b"Thu, 01 Jan 1970 00:00:00 +0000"), Some(0));
        assert_eq!(
            parse(b"Thu, 15 Feb 2007 01:02:03 +0200"),
            Some(1_171_494_123)
        );
        assert_eq!(parse(b"15 Feb 07 01:02 GMT (comment)"), Some(1_171_501_320));
        assert_eq!(parse(b"Mon, 7 Feb 1994 21:52:25 -0800"), Some(760_686_745));
        assert_eq!(parse(b"garbage"), None);
    }

    #[test]
    fn sent_day_is_the_written_calendar_day() {
        // 23:00 +0200 is 21:00 UTC the same day; 01:00 +0200 is the
        // previous day in UTC: both count as the day written.
        let d = days_from_civil(2007, 3, 24);
        assert_eq!(
            sent_day(b"Date: Sat, 24 Mar 2007 23:00:00 +0200\r\n\r\n"),
            Some(d)
        );
        assert_eq!(
            sent_day(b"Date: Sat, 24 Mar 2007 01:00:00 +0200\r\n\r\n"),
            Some(d)
        );
        assert_eq!(
            sent_day(b"Date: Sat, 24 Mar 2007 23:30:00 -0700\r\n\r\n"),
            Some(d)
        );
        assert_eq!(sent_day(b"Date: soon\r\n\r\n"), None);
    }
}
