//! Live sessions, as login pods report them (SESSION-OPEN / SESSION-CLOSE).
//!
//! Used for two things: `least_sessions` placement (per-backend counts,
//! kept on the backend) and pin longevity (a user with a live session has
//! its pin refreshed every `user_expire / 2`, so an admin move or a fresh
//! pin survives exactly as long as the user stays connected).
//!
//! Bounded: at most [`MAX_SESSIONS`]; beyond it SESSION-OPEN is refused
//! (routing still works, only the accounting is incomplete).

use std::collections::HashMap;

use crate::backend::BackendId;
use crate::directory::{DirectorId, UserKey};
use crate::Proto;

/// Most sessions tracked.
pub const MAX_SESSIONS: usize = 4_000_000;
/// Longest username kept for kicks (longer ones are cut).
pub const MAX_USERNAME: usize = 512;
/// Longest session id accepted.
pub const MAX_SESSION_ID: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The username as the login pod sent it (kicks match on it).
    pub username: Box<str>,
    pub user: UserKey,
    pub backend: BackendId,
    pub proto: Proto,
    /// The director the login reported it to, and the seq of the report
    /// on that director's clock (the ring's envelope).
    pub origin: DirectorId,
    pub seq: u64,
}

#[derive(Debug, Default)]
pub struct SessionRegistry {
    sessions: HashMap<Box<str>, Session>,
}

impl SessionRegistry {
    pub fn get(&self, id: &str) -> Option<&Session> {
        self.sessions.get(id)
    }

    /// Records a session; returns the one it replaced (same id reopened).
    pub fn insert(&mut self, id: &str, session: Session) -> Result<Option<Session>, Full> {
        if id.len() > MAX_SESSION_ID {
            return Err(Full);
        }
        if self.sessions.len() >= MAX_SESSIONS && !self.sessions.contains_key(id) {
            return Err(Full);
        }
        Ok(self.sessions.insert(id.into(), session))
    }

    pub fn remove(&mut self, id: &str) -> Option<Session> {
        self.sessions.remove(id)
    }

    /// Drops every session on `backend`; returns them.
    pub fn drop_backend(&mut self, backend: BackendId) -> Vec<Session> {
        let mut dropped = Vec::new();
        self.sessions.retain(|_, s| {
            if s.backend == backend {
                dropped.push(s.clone());
                false
            } else {
                true
            }
        });
        dropped
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Session)> {
        self.sessions.iter().map(|(k, v)| (&**k, v))
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

/// The registry is full or the id too long; nothing was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;
