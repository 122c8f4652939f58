//! Unix seconds ↔ IMAP dates. yarilo keeps INTERNALDATE in UTC; date-only
//! search keys compare calendar days in UTC.

use yarilo_imap_proto::{Date, DateTime};

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u8, u8) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m as u8, d as u8)
}

/// INTERNALDATE value for unix seconds, in UTC.
pub(crate) fn datetime(secs: i64) -> DateTime {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let year = y.clamp(1, 9999) as u16;
    let date = Date::new(year, m, d).unwrap_or(Date {
        year: 1970,
        month: 1,
        day: 1,
    });
    DateTime {
        date,
        hour: (rem / 3600) as u8,
        minute: ((rem % 3600) / 60) as u8,
        second: (rem % 60) as u8,
        zone_minutes: 0,
    }
}

/// The UTC day number of unix seconds.
pub(crate) fn day_of(secs: i64) -> i64 {
    secs.div_euclid(86_400)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        let d = datetime(0);
        assert_eq!((d.date.year, d.date.month, d.date.day), (1970, 1, 1));
        let d = datetime(1_700_000_000);
        assert_eq!((d.date.year, d.date.month, d.date.day), (2023, 11, 14));
        assert_eq!((d.hour, d.minute, d.second), (22, 13, 20));
        assert_eq!(day_of(1_700_000_000), d.date.days_since_epoch());
    }
}
