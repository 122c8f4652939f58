//! IMAP dates (`date`, `date-time`, RFC 9051 §9). Plain calendar values: the
//! session converts them to instants; no time library is needed here.

use std::fmt;

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A calendar date as used by SEARCH (`BEFORE 1-Feb-1994`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    /// Four-digit year.
    pub year: u16,
    /// 1..=12.
    pub month: u8,
    /// 1..=31 (checked against the month).
    pub day: u8,
}

/// An INTERNALDATE-style date and time with a zone offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DateTime {
    /// The local calendar date.
    pub date: Date,
    /// 0..=23.
    pub hour: u8,
    /// 0..=59.
    pub minute: u8,
    /// 0..=60 (leap second).
    pub second: u8,
    /// Offset from UTC in minutes, e.g. -420 for `-0700`.
    pub zone_minutes: i16,
}

impl Date {
    /// Validates and builds a date.
    pub fn new(year: u16, month: u8, day: u8) -> Option<Date> {
        if !(1..=12).contains(&month) || day == 0 || year == 0 || year > 9999 {
            return None;
        }
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let max = match month {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        (day <= max).then_some(Date { year, month, day })
    }

    /// Parses a three-letter month name, case-insensitively.
    pub(crate) fn month_from_name(s: &[u8]) -> Option<u8> {
        MONTHS
            .iter()
            .position(|m| m.as_bytes().eq_ignore_ascii_case(s))
            .map(|p| p as u8 + 1)
    }

    /// Days since 1970-01-01 (proleptic Gregorian).
    pub fn days_since_epoch(&self) -> i64 {
        let (y, m, d) = (
            i64::from(self.year),
            i64::from(self.month),
            i64::from(self.day),
        );
        let y = if m <= 2 { y - 1 } else { y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + d - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }
}

impl DateTime {
    /// Seconds since the Unix epoch (UTC).
    pub fn unix_seconds(&self) -> i64 {
        self.date.days_since_epoch() * 86_400
            + i64::from(self.hour) * 3600
            + i64::from(self.minute) * 60
            + i64::from(self.second)
            - i64::from(self.zone_minutes) * 60
    }
}

impl fmt::Display for Date {
    /// `d-Mon-yyyy` (the SEARCH form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = MONTHS[usize::from(self.month.clamp(1, 12) - 1)];
        write!(f, "{}-{}-{:04}", self.day, m, self.year)
    }
}

impl fmt::Display for DateTime {
    /// `dd-Mon-yyyy hh:mm:ss +zzzz` without the quotes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = MONTHS[usize::from(self.date.month.clamp(1, 12) - 1)];
        let sign = if self.zone_minutes < 0 { '-' } else { '+' };
        let z = self.zone_minutes.unsigned_abs();
        write!(
            f,
            "{:2}-{}-{:04} {:02}:{:02}:{:02} {}{:02}{:02}",
            self.date.day,
            m,
            self.date.year,
            self.hour,
            self.minute,
            self.second,
            sign,
            z / 60,
            z % 60
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_arithmetic() {
        assert_eq!(Date::new(1970, 1, 1).unwrap().days_since_epoch(), 0);
        assert_eq!(Date::new(2000, 3, 1).unwrap().days_since_epoch(), 11_017);
        assert!(Date::new(2023, 2, 29).is_none());
        assert!(Date::new(2024, 2, 29).is_some());
    }
}
