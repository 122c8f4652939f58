//! Warden state in shared Redis, so any number of replicas answer any
//! request and a kick emitted on one reaches subscribers of all.
//!
//! Keys (prefix `p`, default `warden:`):
//! - `p penalty:<ip>` — auth failures, a counter with a TTL reset on
//!   every failure;
//! - `p sess:<user>` — hash session id → `<ip>|<replica>`, and
//!   `p sesscount:<user>` — the atomic session counter;
//! - `p conn:<ip>` — hash connection id → `<replica>`, and
//!   `p conncount:<ip>`;
//! - `p replica:<id>` — this replica is alive (PX TTL, refreshed);
//! - channel `p kick` — the kick bus (`<user>\t<reason>`).
//!
//! Invariants: admissions are one Lua script each (check and record
//! atomically, so two replicas cannot both admit the last slot); the
//! periodic sweep drops entries whose replica is dead (its clients have
//! re-registered on another replica by then) and reconciles each counter
//! with its hash, atomically per key. Single-instance Redis (or Sentinel):
//! the scripts touch keys they build, which Redis Cluster would refuse.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use tokio::sync::broadcast;
use yarilo_config::WardenLimits;
use yarilo_locks::redis_pubsub::{ChannelMessage, ChannelObserver, RedisChannel};
use yarilo_locks::{BoxFuture, RedisConn};

use crate::metrics::WardenMetrics;
use crate::protocol::Refusal;
use crate::state::{Admit, Kick, StateError, WardenState};

const CONNECT: &str = r#"
local pen = tonumber(redis.call('GET', KEYS[3]) or '0')
local maxpen = tonumber(ARGV[4])
if maxpen > 0 and pen >= maxpen then return -2 end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
local n = tonumber(redis.call('GET', KEYS[2]) or '0')
local max = tonumber(ARGV[3])
if max > 0 and n >= max then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return 1
"#;

/// KEYS: hash, counter. ARGV: id.
const RELEASE: &str = r#"
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
  if redis.call('DECR', KEYS[2]) <= 0 then redis.call('DEL', KEYS[2]) end
end
return 1
"#;

/// KEYS: sess hash, counter, penalty. ARGV: ip, max_user, max_user_ip,
/// max_failures, [id, replica] (record only when id is given).
const SESSION: &str = r#"
local pen = tonumber(redis.call('GET', KEYS[3]) or '0')
local maxpen = tonumber(ARGV[4])
if ARGV[5] == nil and maxpen > 0 and pen >= maxpen then return -2 end
if ARGV[5] ~= nil and redis.call('HEXISTS', KEYS[1], ARGV[5]) == 1 then
  redis.call('HSET', KEYS[1], ARGV[5], ARGV[1] .. '|' .. ARGV[6])
  return 1
end
local n = tonumber(redis.call('GET', KEYS[2]) or '0')
local maxu = tonumber(ARGV[2])
if maxu > 0 and n >= maxu then return 0 end
local maxip = tonumber(ARGV[3])
if maxip > 0 then
  local same = 0
  local prefix = ARGV[1] .. '|'
  for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
    if string.sub(v, 1, #prefix) == prefix then same = same + 1 end
  end
  if same >= maxip then return -1 end
end
if ARGV[5] ~= nil then
  redis.call('HSET', KEYS[1], ARGV[5], ARGV[1] .. '|' .. ARGV[6])
  redis.call('INCR', KEYS[2])
end
return 1
"#;

/// KEYS: hash, counter. ARGV: replica key prefix. Drops entries of dead
/// replicas, sets the counter to the hash size; returns the adjustments.
const RECONCILE: &str = r#"
local all = redis.call('HGETALL', KEYS[1])
local live = 0
local adj = 0
local alive = {}
for i = 1, #all, 2 do
  local v = all[i + 1]
  local rep = v
  local bar = string.find(v, '|', 1, true)
  if bar then rep = string.sub(v, bar + 1) end
  if alive[rep] == nil then
    alive[rep] = redis.call('EXISTS', ARGV[1] .. rep) == 1
  end
  if alive[rep] then
    live = live + 1
  else
    redis.call('HDEL', KEYS[1], all[i])
    adj = adj + 1
  end
end
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur ~= live then
  adj = adj + 1
  if live == 0 then redis.call('DEL', KEYS[2]) else redis.call('SET', KEYS[2], live) end
end
return adj
"#;

struct Observer(WardenMetrics);
impl ChannelObserver for Observer {
    fn redis_error(&self, op: &'static str) {
        self.0.redis_error(op);
    }
}

/// Warden state in Redis. Cheap to clone.
#[derive(Clone)]
pub struct RedisState {
    conn: RedisConn,
    prefix: String,
    replica: String,
    kicks: RedisChannel,
    local_kicks: broadcast::Sender<Kick>,
    scripts: Arc<Scripts>,
    metrics: WardenMetrics,
    _relay: Arc<AbortOnDrop>,
}

struct Scripts {
    connect: Script,
    release: Script,
    session: Script,
    reconcile: Script,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);
impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn err(e: yarilo_locks::RedisCallError) -> StateError {
    StateError(e.to_string())
}

impl RedisState {
    /// `replica` must be unique among live replicas (pod name + random).
    pub fn new(conn: RedisConn, prefix: &str, replica: &str, metrics: WardenMetrics) -> RedisState {
        let kicks = RedisChannel::with_observer(
            conn.clone(),
            &format!("{prefix}kick"),
            Arc::new(Observer(metrics.clone())),
        );
        let (local_kicks, _) = broadcast::channel(4096);
        let relay = {
            let mut rx = kicks.subscribe();
            let tx = local_kicks.clone();
            tokio::spawn(async move {
                loop {
                    match rx.recv().await {
                        Ok(ChannelMessage::Message(m)) => {
                            if let Ok(f) = yarilo_wire::split_line(&m) {
                                if let [user, reason] = f.as_slice() {
                                    let _ = tx.send(Kick {
                                        user: user.clone(),
                                        reason: reason.clone(),
                                    });
                                }
                            }
                        }
                        Ok(ChannelMessage::Reconnected) => {}
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            tracing::warn!(lost = n, "kick relay lagged");
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            })
        };
        RedisState {
            conn,
            prefix: prefix.to_string(),
            replica: replica.to_string(),
            kicks,
            local_kicks,
            scripts: Arc::new(Scripts {
                connect: Script::new(CONNECT),
                release: Script::new(RELEASE),
                session: Script::new(SESSION),
                reconcile: Script::new(RECONCILE),
            }),
            metrics,
            _relay: Arc::new(AbortOnDrop(relay)),
        }
    }

    pub fn conn(&self) -> &RedisConn {
        &self.conn
    }

    pub fn kick_channel(&self) -> &RedisChannel {
        &self.kicks
    }

    fn key(&self, kind: &str, rest: &str) -> String {
        format!("{}{kind}:{rest}", self.prefix)
    }

    /// Marks this replica alive for `ttl`. Called on a timer shorter than
    /// `ttl`; entries of a replica whose mark lapses are swept.
    pub async fn heartbeat(&self, ttl: Duration) -> Result<(), StateError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key("replica", &self.replica))
            .arg(1)
            .arg("PX")
            .arg(ttl.as_millis() as u64);
        self.conn.query::<()>(&cmd).await.map_err(err)
    }

    /// One sweep over every session and connection hash; returns the number
    /// of adjustments made (dead entries dropped + counters corrected).
    pub async fn reconcile(&self) -> Result<u64, StateError> {
        let mut total = 0u64;
        for (kind, counter) in [
            ("sess", "sesscount"),
            ("conn", "conncount"),
            ("dlv", "dlvcount"),
        ] {
            let pattern = format!("{}{kind}:*", self.prefix);
            let mut cursor: u64 = 0;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(500);
                let (next, keys): (u64, Vec<String>) = self.conn.query(&cmd).await.map_err(err)?;
                for key in keys {
                    let Some(rest) = key.strip_prefix(&format!("{}{kind}:", self.prefix)) else {
                        continue;
                    };
                    let ckey = self.key(counter, rest);
                    let mut inv = self.scripts.reconcile.key(&key);
                    inv.key(&ckey).arg(format!("{}replica:", self.prefix));
                    let n: u64 = self.conn.script(&inv).await.map_err(err)?;
                    total += n;
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(total)
    }

    async fn session_script(
        &self,
        user: &str,
        ip: IpAddr,
        limits: &WardenLimits,
        record: Option<&str>,
    ) -> Result<Admit, StateError> {
        let hash = self.key("sess", user);
        let count = self.key("sesscount", user);
        let pen = self.key("penalty", &ip.to_string());
        let mut inv = self.scripts.session.key(&hash);
        inv.key(&count)
            .key(&pen)
            .arg(ip.to_string())
            .arg(limits.max_sessions_per_user)
            .arg(limits.max_sessions_per_user_ip)
            .arg(limits.max_auth_failures);
        if let Some(id) = record {
            inv.arg(id).arg(&self.replica);
        }
        let r: i64 = self.conn.script(&inv).await.map_err(err)?;
        Ok(match r {
            1 => Admit::Yes,
            0 => Admit::No(Refusal::UserSessions),
            -1 => Admit::No(Refusal::UserIpSessions),
            _ => Admit::No(Refusal::Penalty),
        })
    }
}

impl WardenState for RedisState {
    fn connect<'a>(
        &'a self,
        id: &'a str,
        ip: IpAddr,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>> {
        Box::pin(async move {
            let ips = ip.to_string();
            let (hash, count, pen) = (
                self.key("conn", &ips),
                self.key("conncount", &ips),
                self.key("penalty", &ips),
            );
            let mut inv = self.scripts.connect.key(&hash);
            inv.key(&count)
                .key(&pen)
                .arg(id)
                .arg(&self.replica)
                .arg(limits.max_connections_per_ip)
                .arg(limits.max_auth_failures);
            let r: i64 = self.conn.script(&inv).await.map_err(err)?;
            Ok(match r {
                1 => Admit::Yes,
                0 => Admit::No(Refusal::IpConnections),
                _ => Admit::No(Refusal::Penalty),
            })
        })
    }

    fn disconnect<'a>(&'a self, id: &'a str, ip: IpAddr) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let ips = ip.to_string();
            let (hash, count) = (self.key("conn", &ips), self.key("conncount", &ips));
            let mut inv = self.scripts.release.key(&hash);
            inv.key(&count).arg(id);
            self.conn.script::<i64>(&inv).await.map_err(err)?;
            Ok(())
        })
    }

    fn check<'a>(
        &'a self,
        user: &'a str,
        ip: IpAddr,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>> {
        Box::pin(self.session_script(user, ip, limits, None))
    }

    fn session_start<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
        ip: IpAddr,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>> {
        Box::pin(self.session_script(user, ip, limits, Some(id)))
    }

    fn session_end<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
        _ip: IpAddr,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let (hash, count) = (self.key("sess", user), self.key("sesscount", user));
            let mut inv = self.scripts.release.key(&hash);
            inv.key(&count).arg(id);
            self.conn.script::<i64>(&inv).await.map_err(err)?;
            Ok(())
        })
    }

    fn delivery_start<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
        limits: &'a WardenLimits,
    ) -> BoxFuture<'a, Result<Admit, StateError>> {
        Box::pin(async move {
            // The connection script with a per-user key and no penalty.
            let (hash, count, pen) = (
                self.key("dlv", user),
                self.key("dlvcount", user),
                self.key("penalty", "-"),
            );
            let mut inv = self.scripts.connect.key(&hash);
            inv.key(&count)
                .key(&pen)
                .arg(id)
                .arg(&self.replica)
                .arg(limits.max_deliveries_per_user)
                .arg(0);
            let r: i64 = self.conn.script(&inv).await.map_err(err)?;
            Ok(if r == 1 {
                Admit::Yes
            } else {
                Admit::No(Refusal::UserDeliveries)
            })
        })
    }

    fn delivery_end<'a>(
        &'a self,
        id: &'a str,
        user: &'a str,
    ) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let (hash, count) = (self.key("dlv", user), self.key("dlvcount", user));
            let mut inv = self.scripts.release.key(&hash);
            inv.key(&count).arg(id);
            self.conn.script::<i64>(&inv).await.map_err(err)?;
            Ok(())
        })
    }

    fn sessions<'a>(&'a self, user: &'a str) -> BoxFuture<'a, Result<u64, StateError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("GET");
            cmd.arg(self.key("sesscount", user));
            let v: Option<i64> = self.conn.query(&cmd).await.map_err(err)?;
            Ok(v.unwrap_or(0).max(0) as u64)
        })
    }

    fn auth_fail<'a>(
        &'a self,
        ip: IpAddr,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<u64, StateError>> {
        Box::pin(async move {
            let key = self.key("penalty", &ip.to_string());
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("INCR")
                .arg(&key)
                .cmd("PEXPIRE")
                .arg(&key)
                .arg(ttl.as_millis() as u64)
                .ignore();
            let (n,): (u64,) = self.conn.query_pipeline(&pipe).await.map_err(err)?;
            Ok(n)
        })
    }

    fn auth_ok<'a>(&'a self, ip: IpAddr) -> BoxFuture<'a, Result<(), StateError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(self.key("penalty", &ip.to_string()));
            self.conn.query::<i64>(&cmd).await.map_err(err)?;
            Ok(())
        })
    }

    fn penalty<'a>(&'a self, ip: IpAddr) -> BoxFuture<'a, Result<u64, StateError>> {
        Box::pin(async move {
            let mut cmd = redis::cmd("GET");
            cmd.arg(self.key("penalty", &ip.to_string()));
            let v: Option<u64> = self.conn.query(&cmd).await.map_err(err)?;
            Ok(v.unwrap_or(0))
        })
    }

    fn emit(&self, kick: Kick) {
        let line = yarilo_wire::join_line(&[&kick.user, &kick.reason]);
        let line = line.strip_suffix('\n').unwrap_or(&line).to_string();
        if !self.kicks.publish(line) {
            self.metrics.redis_error("kick_publish");
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Kick> {
        self.local_kicks.subscribe()
    }
}
