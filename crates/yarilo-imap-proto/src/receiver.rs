//! The streaming, sans-I/O command receiver: feed it bytes as they arrive,
//! take [`Outcome`]s out. It never touches a socket.
//!
//! Framing (RFC 9051 §2.2, §4.3; RFC 7888 LITERAL+/LITERAL-): a command is
//! lines ending in CRLF; a line ending in `{n}` / `{n+}` / `~{n}` announces
//! n octets that follow, after which the command continues.
//!
//! Invariants:
//! - memory is bounded: a line is at most [`Limits::max_line`] bytes, a
//!   buffered command at most [`Limits::max_command`]; APPEND message data is
//!   never buffered whole but handed out as [`AppendEvent::Chunk`]s;
//! - the outcome does not depend on how the input was split into `feed`
//!   calls (tested on every split of captured sessions);
//! - a client error is a [`Outcome::Bad`] after which the receiver resumes at
//!   the next command; it never panics.

use std::collections::VecDeque;

use bytes::{Buf, Bytes, BytesMut};

use crate::command::{Command, Tag};
use crate::lexer::{Cursor, LiteralAnnounce};
use crate::parse::{append_step, parse_command, AppendEvent, AppendState, ParseOptions, StepEnd};
use crate::{Mailbox, ParseError};

/// Bounds applied to everything a client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest line (CRLF included). Default 65 536 (Dovecot's
    /// `imap_max_line_length`).
    pub max_line: usize,
    /// Largest command held in memory, lines and non-APPEND literals
    /// together. Default 1 MiB.
    pub max_command: usize,
    /// Largest literal of a non-APPEND command. Default 1 MiB.
    pub max_literal: u64,
    /// Largest APPEND message literal (the APPENDLIMIT ceiling; the session
    /// may reject smaller ones). Default 64 MiB.
    pub max_append: u64,
    /// Largest non-synchronizing literal: `None` for LITERAL+, `Some(4096)`
    /// for LITERAL- (RFC 7888 §4). Default `None`.
    pub max_nonsync: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_line: 65_536,
            max_command: 1 << 20,
            max_literal: 1 << 20,
            max_append: 64 << 20,
            max_nonsync: None,
        }
    }
}

/// Why a command was rejected with BAD.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadReason {
    /// The grammar did not match; the command is ignored.
    #[error("{0}")]
    Syntax(#[from] ParseError),
    /// A line exceeded [`Limits::max_line`]; the rest of it is discarded.
    #[error("line too long")]
    LineTooLong,
    /// The command exceeded [`Limits::max_command`]; the rest is discarded.
    #[error("command too long")]
    CommandTooLong,
    /// A literal exceeded its limit (reply with `[TOOBIG]`); a
    /// non-synchronizing one is read and discarded.
    #[error("literal too large ({size} > {limit})")]
    LiteralTooLarge {
        /// Announced size.
        size: u64,
        /// The limit that applied.
        limit: u64,
    },
}

/// The next thing the driver must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// More input is needed.
    Incomplete,
    /// A literal of a non-APPEND command was announced. For `sync` the
    /// driver sends `+ ...` (or calls [`Receiver::reject_literal`] and
    /// replies with a tagged NO/BAD); for non-sync the data is already on
    /// its way and the driver need do nothing.
    NeedLiteral {
        /// Tag of the command, when readable.
        tag: Option<Tag>,
        /// Announced size.
        size: u64,
        /// Synchronizing literal.
        sync: bool,
    },
    /// A complete command.
    Command {
        /// Its tag.
        tag: Tag,
        /// The command.
        command: Command,
    },
    /// Part of an APPEND being streamed. A later `Bad` with the same tag
    /// cancels the whole APPEND.
    Append {
        /// Its tag.
        tag: Tag,
        /// What happened.
        event: AppendEvent,
    },
    /// A command was rejected; reply `<tag> BAD` (or `* BAD` without tag).
    Bad {
        /// Tag when it could be read.
        tag: Option<Tag>,
        /// Why.
        reason: BadReason,
    },
    /// `DONE` after IDLE ([`Expect::IdleDone`]).
    IdleDone,
    /// A SASL response line, still base64 ([`Expect::SaslResponse`]).
    SaslResponse(Vec<u8>),
    /// The client cancelled AUTHENTICATE with `*`.
    SaslCancel,
}

/// What the next line is (set by the driver after IDLE / AUTHENTICATE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expect {
    /// A tagged command.
    #[default]
    Command,
    /// `DONE` (RFC 2177).
    IdleDone,
    /// A base64 SASL response or `*` (RFC 9051 §6.2.2).
    SaslResponse,
}

#[derive(Debug, Clone)]
struct AppendCtx {
    tag: Option<Tag>,
    mailbox: Option<Mailbox>,
    state: AppendState,
}

#[derive(Debug)]
enum State {
    /// Reading lines of a command into `pending`.
    Lines { append: Option<AppendCtx> },
    /// Reading a buffered literal's data into `pending`.
    Literal {
        remaining: u64,
        sync: bool,
        append: Option<AppendCtx>,
    },
    /// Handing APPEND literal data to the driver.
    Stream {
        remaining: u64,
        sync: bool,
        started: bool,
        ctx: AppendCtx,
    },
    /// Discarding a rejected command's literal.
    SkipLiteral { remaining: u64 },
    /// Discarding the rest of a rejected command's line; `tail` keeps the
    /// last bytes to spot a literal announcement.
    SkipLine { tail: Vec<u8> },
}

/// The streaming command receiver.
#[derive(Debug)]
pub struct Receiver {
    limits: Limits,
    opts: ParseOptions,
    expect: Expect,
    input: BytesMut,
    /// Leading bytes of `input` known to hold no LF, so a line trickling in
    /// byte by byte is scanned once, not once per byte.
    lf_scan: usize,
    pending: Vec<u8>,
    state: State,
    queue: VecDeque<Outcome>,
}

/// `{n}` / `{n+}` / `~{n}` at the end of a line (CRLF stripped).
pub(crate) fn trailing_announce(line: &[u8]) -> Option<LiteralAnnounce> {
    let body = line.strip_suffix(b"}")?;
    let (body, sync) = match body.strip_suffix(b"+") {
        Some(b) => (b, false),
        None => (body, true),
    };
    let digits_start = body.iter().rposition(|b| !b.is_ascii_digit())?;
    let digits = &body[digits_start + 1..];
    if body[digits_start] != b'{' || digits.is_empty() || digits.len() > 19 {
        return None;
    }
    let size = std::str::from_utf8(digits).ok()?.parse::<u64>().ok()?;
    let binary = digits_start > 0 && body[digits_start - 1] == b'~';
    Some(LiteralAnnounce { size, sync, binary })
}

/// The tag at the start of `buf`, when it is followed by SP. Tags of
/// `max_line` bytes or more are not reported: a line cut at `max_line`
/// could not show the SP, and the answer must not depend on the cut.
fn tag_of(buf: &[u8], max_line: usize) -> Option<Tag> {
    let mut c = Cursor::new(buf);
    let t = c.tag().ok()?;
    (c.peek() == Some(b' ') && t.len() < max_line).then(|| t.to_owned())
}

fn is_append(buf: &[u8]) -> bool {
    let mut c = Cursor::new(buf);
    c.tag().is_ok() && c.eat(b' ') && c.keyword("APPEND")
}

impl Default for Receiver {
    fn default() -> Self {
        Receiver::new(Limits::default())
    }
}

impl Receiver {
    /// A receiver with the given limits.
    pub fn new(limits: Limits) -> Self {
        Receiver {
            limits,
            opts: ParseOptions::default(),
            expect: Expect::Command,
            input: BytesMut::new(),
            lf_scan: 0,
            pending: Vec::new(),
            state: State::Lines { append: None },
            queue: VecDeque::new(),
        }
    }

    /// Changes how mailbox names are decoded (after ENABLE UTF8=ACCEPT or
    /// IMAP4rev2).
    pub fn set_options(&mut self, opts: ParseOptions) {
        self.opts = opts;
    }

    /// Changes the limits (e.g. after login, when the APPENDLIMIT of the
    /// user is known).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// Says what the next line is; reset to [`Expect::Command`] after it.
    pub fn expect(&mut self, expect: Expect) {
        self.expect = expect;
    }

    /// Appends received bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.input.extend_from_slice(bytes);
    }

    /// Bytes received but not yet consumed (bounded by what the driver
    /// feeds between calls to [`next`](Self::next)).
    pub fn buffered(&self) -> usize {
        self.input.len() + self.pending.len()
    }

    /// Releases buffer memory while idle (keeps an IDLE session small).
    pub fn shrink(&mut self) {
        if self.pending.is_empty() {
            self.pending = Vec::new();
        }
        if self.input.is_empty() {
            self.input = BytesMut::new();
        }
    }

    /// Refuses the literal just announced (by [`Outcome::NeedLiteral`] or an
    /// APPEND event). A synchronizing literal will not be sent by the
    /// client; a non-synchronizing one is read and discarded with the rest
    /// of the command. The driver replies to the command itself.
    pub fn reject_literal(&mut self) {
        let (remaining, sync) = match &self.state {
            State::Literal {
                remaining, sync, ..
            } => (*remaining, *sync),
            State::Stream {
                remaining,
                sync,
                started: false,
                ..
            } => (*remaining, *sync),
            _ => return,
        };
        self.pending.clear();
        self.queue.clear();
        self.state = if sync {
            State::Lines { append: None }
        } else {
            State::SkipLiteral { remaining }
        };
    }

    /// The next outcome; [`Outcome::Incomplete`] when more input is needed.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Outcome {
        loop {
            if let Some(o) = self.queue.pop_front() {
                return o;
            }
            if let Some(o) = self.step() {
                return o;
            }
            if self.queue.is_empty() && !self.progress_possible() {
                return Outcome::Incomplete;
            }
        }
    }

    fn progress_possible(&self) -> bool {
        match &self.state {
            State::Lines { .. } => {
                self.input.len() >= self.limits.max_line
                    || self
                        .input
                        .get(self.lf_scan..)
                        .is_some_and(|r| r.contains(&b'\n'))
            }
            State::SkipLine { .. } => !self.input.is_empty(),
            State::Literal { remaining, .. } | State::SkipLiteral { remaining } => {
                !self.input.is_empty() || *remaining == 0
            }
            State::Stream { remaining, .. } => !self.input.is_empty() || *remaining == 0,
        }
    }

    /// Fails the current command and moves to discarding what is left of it.
    fn bad(
        &mut self,
        tag: Option<Tag>,
        reason: BadReason,
        line_announce: Option<LiteralAnnounce>,
    ) -> Outcome {
        self.pending.clear();
        self.state = match line_announce {
            Some(a) if !a.sync => State::SkipLiteral { remaining: a.size },
            _ => State::Lines { append: None },
        };
        Outcome::Bad { tag, reason }
    }

    fn take_line(&mut self) -> Option<BytesMut> {
        let from = self.lf_scan.min(self.input.len());
        match self.input[from..].iter().position(|&b| b == b'\n') {
            Some(p) => {
                self.lf_scan = 0;
                Some(self.input.split_to(from + p + 1))
            }
            None => {
                self.lf_scan = self.input.len();
                None
            }
        }
    }

    /// Does one unit of work; `None` when it only changed state or needs
    /// more input.
    fn step(&mut self) -> Option<Outcome> {
        match std::mem::replace(&mut self.state, State::Lines { append: None }) {
            State::Lines { append } => self.step_lines(append),
            State::Literal {
                remaining,
                sync,
                append,
            } => {
                let n = usize::try_from(remaining)
                    .unwrap_or(usize::MAX)
                    .min(self.input.len());
                self.pending.extend_from_slice(&self.input[..n]);
                self.input.advance(n);
                self.lf_scan = 0;
                let remaining = remaining - n as u64;
                self.state = if remaining == 0 {
                    State::Lines { append }
                } else {
                    State::Literal {
                        remaining,
                        sync,
                        append,
                    }
                };
                None
            }
            State::Stream {
                remaining,
                sync,
                started,
                ctx,
            } => {
                let tag = ctx.tag.clone().unwrap_or_default();
                if remaining == 0 {
                    self.state = State::Lines { append: Some(ctx) };
                    return Some(Outcome::Append {
                        tag,
                        event: AppendEvent::LiteralEnd,
                    });
                }
                if self.input.is_empty() {
                    self.state = State::Stream {
                        remaining,
                        sync,
                        started,
                        ctx,
                    };
                    return None;
                }
                let n = usize::try_from(remaining)
                    .unwrap_or(usize::MAX)
                    .min(self.input.len());
                let chunk: Bytes = self.input.split_to(n).freeze();
                self.lf_scan = 0;
                self.state = State::Stream {
                    remaining: remaining - n as u64,
                    sync,
                    started: true,
                    ctx,
                };
                Some(Outcome::Append {
                    tag,
                    event: AppendEvent::Chunk(chunk),
                })
            }
            State::SkipLiteral { remaining } => {
                let n = usize::try_from(remaining)
                    .unwrap_or(usize::MAX)
                    .min(self.input.len());
                self.input.advance(n);
                self.lf_scan = 0;
                let remaining = remaining - n as u64;
                self.state = if remaining == 0 {
                    State::SkipLine { tail: Vec::new() }
                } else {
                    State::SkipLiteral { remaining }
                };
                None
            }
            State::SkipLine { mut tail } => {
                match self.take_line() {
                    Some(line) => {
                        tail.extend_from_slice(&line);
                        let body = tail.strip_suffix(b"\n").unwrap_or(&tail);
                        let body = body.strip_suffix(b"\r").unwrap_or(body);
                        self.state = match trailing_announce(body) {
                            Some(a) if !a.sync => State::SkipLiteral { remaining: a.size },
                            _ => State::Lines { append: None },
                        };
                    }
                    None => {
                        // Keep only enough to recognise `~{n+}`.
                        tail.extend_from_slice(&self.input);
                        self.input.clear();
                        self.lf_scan = 0;
                        let keep = tail.len().saturating_sub(24);
                        tail.drain(..keep);
                        self.state = State::SkipLine { tail };
                    }
                }
                None
            }
        }
    }

    fn step_lines(&mut self, append: Option<AppendCtx>) -> Option<Outcome> {
        // IDLE's DONE and SASL responses are lines without a tag.
        let special = self.expect != Expect::Command && self.pending.is_empty() && append.is_none();
        let Some(line) = self.take_line() else {
            if self.input.len() >= self.limits.max_line {
                let tag = if special {
                    self.expect = Expect::Command;
                    None
                } else if self.pending.is_empty() {
                    tag_of(&self.input, self.limits.max_line)
                } else {
                    tag_of(&self.pending, self.limits.max_line)
                };
                // Keep the end of the line: it may begin a literal
                // announcement that decides how much more to skip.
                let tail = self.input[self.input.len().saturating_sub(24)..].to_vec();
                self.input.clear();
                self.lf_scan = 0;
                self.pending.clear();
                self.state = State::SkipLine { tail };
                return Some(Outcome::Bad {
                    tag,
                    reason: BadReason::LineTooLong,
                });
            }
            self.state = State::Lines { append };
            return None;
        };
        let body = line.strip_suffix(b"\n").unwrap_or(&line);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        let announce = trailing_announce(body);
        if special && line.len() > self.limits.max_line {
            self.expect = Expect::Command;
            return Some(self.bad(None, BadReason::LineTooLong, announce));
        }
        match self.expect {
            Expect::IdleDone if special => {
                self.expect = Expect::Command;
                return Some(if line.as_ref().eq_ignore_ascii_case(b"DONE\r\n") {
                    Outcome::IdleDone
                } else {
                    Outcome::Bad {
                        tag: None,
                        reason: BadReason::Syntax(ParseError::Expected("DONE")),
                    }
                });
            }
            Expect::SaslResponse if special => {
                self.expect = Expect::Command;
                let body = line.strip_suffix(b"\r\n").unwrap_or(&line);
                return Some(if body == b"*" {
                    Outcome::SaslCancel
                } else {
                    Outcome::SaslResponse(body.to_vec())
                });
            }
            _ => {}
        }
        if line.len() > self.limits.max_line {
            let tag = tag_of(
                if self.pending.is_empty() {
                    &line
                } else {
                    &self.pending
                },
                self.limits.max_line,
            );
            return Some(self.bad(tag, BadReason::LineTooLong, announce));
        }
        if self.pending.len() + line.len() > self.limits.max_command {
            let tag = tag_of(
                if self.pending.is_empty() {
                    &line
                } else {
                    &self.pending
                },
                self.limits.max_line,
            );
            return Some(self.bad(tag, BadReason::CommandTooLong, announce));
        }
        let first_line = self.pending.is_empty() && append.is_none();
        self.pending.extend_from_slice(&line);
        let append = if first_line && announce.is_some() && is_append(&self.pending) {
            Some(AppendCtx {
                tag: None,
                mailbox: None,
                state: AppendState::Start,
            })
        } else {
            append
        };
        match append {
            Some(ctx) => self.step_append(ctx, announce),
            None => match announce {
                Some(ann) => self.start_literal(ann, None),
                None => {
                    let res = parse_command(&self.pending, self.opts);
                    self.pending.clear();
                    Some(match res {
                        Ok((tag, command)) => Outcome::Command { tag, command },
                        Err((tag, e)) => Outcome::Bad {
                            tag,
                            reason: BadReason::Syntax(e),
                        },
                    })
                }
            },
        }
    }

    /// A literal that is buffered into `pending` (not streamed).
    fn start_literal(
        &mut self,
        ann: LiteralAnnounce,
        append: Option<AppendCtx>,
    ) -> Option<Outcome> {
        let tag = append
            .as_ref()
            .and_then(|a| a.tag.clone())
            .or_else(|| tag_of(&self.pending, self.limits.max_line));
        let room = self.limits.max_command.saturating_sub(self.pending.len()) as u64;
        let limit = self.limits.max_literal.min(room);
        let nonsync_limit = if ann.sync {
            u64::MAX
        } else {
            self.limits.max_nonsync.unwrap_or(u64::MAX)
        };
        if ann.size > limit || ann.size > nonsync_limit {
            let limit = limit.min(nonsync_limit);
            return Some(self.bad(
                tag,
                BadReason::LiteralTooLarge {
                    size: ann.size,
                    limit,
                },
                Some(ann),
            ));
        }
        self.state = State::Literal {
            remaining: ann.size,
            sync: ann.sync,
            append,
        };
        Some(Outcome::NeedLiteral {
            tag,
            size: ann.size,
            sync: ann.sync,
        })
    }

    fn step_append(
        &mut self,
        mut ctx: AppendCtx,
        announce: Option<LiteralAnnounce>,
    ) -> Option<Outcome> {
        let mut events = Vec::new();
        let res = append_step(
            &self.pending,
            ctx.state,
            self.opts,
            &mut ctx.tag,
            &mut ctx.mailbox,
            &mut events,
        );
        let tag = ctx
            .tag
            .clone()
            .or_else(|| tag_of(&self.pending, self.limits.max_line));
        match res {
            Ok(StepEnd::Done) => {
                self.pending.clear();
                let t = tag.unwrap_or_default();
                self.queue
                    .extend(events.into_iter().map(|event| Outcome::Append {
                        tag: t.clone(),
                        event,
                    }));
                None
            }
            Ok(StepEnd::Stream { ann, after }) => {
                if ann.size > self.limits.max_append
                    || (!ann.sync && ann.size > self.limits.max_nonsync.unwrap_or(u64::MAX))
                {
                    let limit = if ann.sync {
                        self.limits.max_append
                    } else {
                        self.limits
                            .max_append
                            .min(self.limits.max_nonsync.unwrap_or(u64::MAX))
                    };
                    return Some(self.bad(
                        tag,
                        BadReason::LiteralTooLarge {
                            size: ann.size,
                            limit,
                        },
                        Some(ann),
                    ));
                }
                self.pending.clear();
                let t = tag.clone().unwrap_or_default();
                self.queue
                    .extend(events.into_iter().map(|event| Outcome::Append {
                        tag: t.clone(),
                        event,
                    }));
                ctx.tag = tag;
                ctx.state = after;
                self.state = State::Stream {
                    remaining: ann.size,
                    sync: ann.sync,
                    started: false,
                    ctx,
                };
                None
            }
            Err(ParseError::Eof) if announce.is_some() => {
                // A literal inside the syntax (mailbox, URL): buffer it.
                let ann = announce?;
                self.start_literal(ann, Some(ctx))
            }
            Err(e) => Some(self.bad(tag, BadReason::Syntax(e), announce)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_receiver_is_small() {
        // An IDLE-ing session keeps one receiver; after shrink() it holds
        // no heap buffers, only the struct itself.
        let mut rx = Receiver::default();
        rx.feed(b"a IDLE\r\n");
        assert!(matches!(rx.next(), Outcome::Command { .. }));
        rx.shrink();
        assert_eq!(rx.input.capacity(), 0);
        assert_eq!(rx.pending.capacity(), 0);
        let size = std::mem::size_of::<Receiver>();
        println!("size_of::<Receiver>() = {size}");
        assert!(size <= 256, "{size}");
    }
}
