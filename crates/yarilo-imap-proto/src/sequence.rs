//! Sequence sets (RFC 9051 §9 `sequence-set`, RFC 5182 `$`).

use std::fmt::{self, Write};

/// One end of a range: a number or `*` (the largest number in use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SeqNum {
    /// A message sequence number or UID (never 0).
    Value(u32),
    /// `*`.
    Largest,
}

impl SeqNum {
    /// Resolves `*` against the largest number in use.
    pub fn resolve(self, largest: u32) -> u32 {
        match self {
            SeqNum::Value(v) => v,
            SeqNum::Largest => largest,
        }
    }
}

/// A single number or a range (`a:b`, in either order, inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SeqItem {
    /// `n` or `*`.
    One(SeqNum),
    /// `a:b`.
    Range(SeqNum, SeqNum),
}

/// A sequence set, or `$` (the saved search result, RFC 5182).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SequenceSet {
    /// Explicit numbers and ranges (never empty).
    Set(Vec<SeqItem>),
    /// `$`: the result saved by `SEARCH RETURN (SAVE)`.
    Saved,
}

impl SequenceSet {
    /// A set of one number.
    pub fn single(n: u32) -> Self {
        SequenceSet::Set(vec![SeqItem::One(SeqNum::Value(n))])
    }

    /// A set of one range.
    pub fn range(a: u32, b: u32) -> Self {
        SequenceSet::Set(vec![SeqItem::Range(SeqNum::Value(a), SeqNum::Value(b))])
    }

    /// Compresses sorted or unsorted numbers into a minimal set of ranges
    /// (for COPYUID, ESEARCH ALL, VANISHED). Empty input gives an empty set.
    pub fn from_numbers(nums: impl IntoIterator<Item = u32>) -> Self {
        let mut v: Vec<u32> = nums.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        let mut items = Vec::new();
        let mut iter = v.into_iter();
        if let Some(first) = iter.next() {
            let (mut lo, mut hi) = (first, first);
            for n in iter {
                if n == hi + 1 {
                    hi = n;
                } else {
                    items.push(Self::item(lo, hi));
                    lo = n;
                    hi = n;
                }
            }
            items.push(Self::item(lo, hi));
        }
        SequenceSet::Set(items)
    }

    fn item(lo: u32, hi: u32) -> SeqItem {
        if lo == hi {
            SeqItem::One(SeqNum::Value(lo))
        } else {
            SeqItem::Range(SeqNum::Value(lo), SeqNum::Value(hi))
        }
    }

    /// True when `n` is in the set, `*` meaning `largest`. `$` contains
    /// nothing here: the session substitutes the saved result.
    pub fn contains(&self, n: u32, largest: u32) -> bool {
        match self {
            SequenceSet::Saved => false,
            SequenceSet::Set(items) => items.iter().any(|it| match *it {
                SeqItem::One(a) => a.resolve(largest) == n,
                SeqItem::Range(a, b) => {
                    let (a, b) = (a.resolve(largest), b.resolve(largest));
                    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                    (lo..=hi).contains(&n)
                }
            }),
        }
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeqNum::Value(v) => write!(f, "{v}"),
            SeqNum::Largest => f.write_char('*'),
        }
    }
}

impl fmt::Display for SequenceSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SequenceSet::Saved => f.write_char('$'),
            SequenceSet::Set(items) => {
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    match it {
                        SeqItem::One(a) => write!(f, "{a}")?,
                        SeqItem::Range(a, b) => write!(f, "{a}:{b}")?,
                    }
                }
                Ok(())
            }
        }
    }
}
