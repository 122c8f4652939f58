//! The Redis lock backend of the locks service in remote mode.
//!
//! State: key `lock:<resource>`, value `<owner>|<acquired_at>` with a PX
//! TTL. `acquired_at` is Redis server time in microseconds since the Unix
//! epoch (one clock for every replica; fine enough that two grants of one
//! resource never share it).
//!
//! Fairness: the first owner refused with BUSY takes the one-place waiting
//! line `lockwait:<resource>` (value: owner, short TTL refreshed by its
//! retries). While it stands there nobody else is granted the resource,
//! so a holder that releases and re-acquires in a tight loop cannot starve
//! a waiter; a waiter that dies frees the place within the TTL.
//!
//! Invariants: acquisition is one Lua script (`SET NX PX`), so two replicas
//! can never both grant a resource; release and renew compare the stored
//! value with the one the lock id carries inside the script, so only the
//! holder of that grant — never a later holder of the same resource — can
//! release or extend it. The lock id is self-describing (it names the
//! resource and the value), so any replica can serve UNLOCK/RENEW for a
//! lock another replica granted, and the service holds no state at all.

use std::time::Duration;

use redis::Script;

use crate::protocol::ttl_ms;
use crate::redis_conn::{RedisCallError, RedisConn};
use crate::{Acquire, BoxFuture, LockError, Locker};

/// Redis key prefix of the lock table (design: `lock:<resource>`).
pub const KEY_PREFIX: &str = "lock:";

/// Redis key prefix of the one-place waiting line.
pub const WAIT_PREFIX: &str = "lockwait:";

/// How long the waiting place outlives the waiter's last attempt. Longer
/// than the longest retry interval of `lock()`.
const WAIT_SLOT_MS: u64 = 500;

const ACQUIRE: &str = r#"
local waiter = redis.call('GET', KEYS[2])
if waiter and waiter ~= ARGV[1] then
  local cur = redis.call('GET', KEYS[1])
  if not cur then cur = waiter .. '|0' end
  return {0, cur}
end
local t = redis.call('TIME')
local stamp = t[1] .. string.format('%06d', tonumber(t[2]))
local value = ARGV[1] .. '|' .. stamp
if redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2]) then
  if waiter then redis.call('DEL', KEYS[2]) end
  return {1, stamp}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
local cur = redis.call('GET', KEYS[1])
if not cur then cur = '' end
return {0, cur}
"#;

const RELEASE: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

const RENEW: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#;

/// Exclusive TTL locks in Redis. Cheap to clone.
#[derive(Clone)]
pub struct RedisLocker {
    conn: RedisConn,
    acquire: Script,
    release: Script,
    renew: Script,
}

/// What a lock id carries: `R1.<acquired_at>.<hex owner>.<resource>`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LockId {
    stamp: String,
    owner: String,
    resource: String,
}

impl LockId {
    fn encode(&self) -> String {
        let mut hex = String::with_capacity(self.owner.len() * 2);
        for b in self.owner.bytes() {
            hex.push_str(&format!("{b:02x}"));
        }
        format!("R1.{}.{}.{}", self.stamp, hex, self.resource)
    }

    fn decode(id: &str) -> Option<LockId> {
        let rest = id.strip_prefix("R1.")?;
        let (stamp, rest) = rest.split_once('.')?;
        let (hex, resource) = rest.split_once('.')?;
        if stamp.is_empty() || !stamp.bytes().all(|b| b.is_ascii_digit()) || resource.is_empty() {
            return None;
        }
        if hex.len() % 2 != 0 {
            return None;
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        Some(LockId {
            stamp: stamp.to_string(),
            owner: String::from_utf8(bytes).ok()?,
            resource: resource.to_string(),
        })
    }

    fn key(&self) -> String {
        format!("{KEY_PREFIX}{}", self.resource)
    }

    fn value(&self) -> String {
        format!("{}|{}", self.owner, self.stamp)
    }
}

fn unavailable(e: RedisCallError) -> LockError {
    LockError::Unavailable(e.to_string())
}

impl RedisLocker {
    pub fn new(conn: RedisConn) -> Self {
        RedisLocker {
            conn,
            acquire: Script::new(ACQUIRE),
            release: Script::new(RELEASE),
            renew: Script::new(RENEW),
        }
    }

    pub fn conn(&self) -> &RedisConn {
        &self.conn
    }

    async fn do_acquire(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Acquire, LockError> {
        let key = format!("{KEY_PREFIX}{resource}");
        let wait_key = format!("{WAIT_PREFIX}{resource}");
        let mut inv = self.acquire.key(&key);
        inv.key(&wait_key)
            .arg(owner)
            .arg(ttl_ms(ttl))
            .arg(WAIT_SLOT_MS);
        let (granted, text): (i64, String) = self.conn.script(&inv).await.map_err(unavailable)?;
        if granted == 1 {
            let id = LockId {
                stamp: text,
                owner: owner.to_string(),
                resource: resource.to_string(),
            };
            return Ok(Acquire::Acquired {
                lock_id: id.encode(),
            });
        }
        // The value is `<owner>|<acquired_at>`; the owner may hold '|'.
        let owner = match text.rsplit_once('|') {
            Some((o, _)) => o.to_string(),
            None => text,
        };
        Ok(Acquire::Busy { owner })
    }

    async fn do_release(&self, lock_id: &str) -> Result<bool, LockError> {
        let Some(id) = LockId::decode(lock_id) else {
            return Ok(false);
        };
        let key = id.key();
        let mut inv = self.release.key(&key);
        inv.arg(id.value());
        let n: i64 = self.conn.script(&inv).await.map_err(unavailable)?;
        Ok(n == 1)
    }

    async fn do_renew(&self, lock_id: &str, ttl: Duration) -> Result<bool, LockError> {
        let Some(id) = LockId::decode(lock_id) else {
            return Ok(false);
        };
        let key = id.key();
        let mut inv = self.renew.key(&key);
        inv.arg(id.value()).arg(ttl_ms(ttl));
        let n: i64 = self.conn.script(&inv).await.map_err(unavailable)?;
        Ok(n == 1)
    }
}

impl Locker for RedisLocker {
    fn try_acquire<'a>(
        &'a self,
        resource: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Acquire, LockError>> {
        Box::pin(self.do_acquire(resource, owner, ttl))
    }

    fn release<'a>(&'a self, lock_id: &'a str) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(self.do_release(lock_id))
    }

    fn renew<'a>(
        &'a self,
        lock_id: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, LockError>> {
        Box::pin(self.do_renew(lock_id, ttl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_ids_carry_owner_and_resource_verbatim() {
        let id = LockId {
            stamp: "1700000000123456".into(),
            owner: "imap|pod.1\t".into(),
            resource: "mbox:u@x:Sent.Items".into(),
        };
        let enc = id.encode();
        assert_eq!(LockId::decode(&enc), Some(id.clone()));
        assert_eq!(id.key(), "lock:mbox:u@x:Sent.Items");
        assert_eq!(id.value(), "imap|pod.1\t|1700000000123456");
        for bad in [
            "",
            "R1.",
            "R1.x.00.r",
            "R1.1.0.r",
            "R1.1.zz.r",
            "R2.1.00.r",
            "R1.1.00.",
        ] {
            assert_eq!(LockId::decode(bad), None, "{bad:?}");
        }
    }
}
