//! The passdb/userdb lookup cache (Dovecot's auth cache): found users for
//! `auth_cache_ttl`, unknown users for `auth_cache_negative_ttl`, at most
//! `auth_cache_size` entries. Lookup errors are never cached.
//! Passwords are still verified on every login; only the lookup is saved.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A bounded TTL map; `None` values are negative entries.
#[derive(Debug)]
pub struct LookupCache<K, V> {
    capacity: usize,
    ttl: Duration,
    negative_ttl: Duration,
    map: Mutex<HashMap<K, (Instant, Option<V>)>>,
}

impl<K: Hash + Eq + Clone, V: Clone> LookupCache<K, V> {
    pub fn new(capacity: usize, ttl: Duration, negative_ttl: Duration) -> Self {
        LookupCache {
            capacity,
            ttl,
            negative_ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// `Some(Some(v))` hit, `Some(None)` negative hit, `None` miss.
    pub fn get(&self, key: &K) -> Option<Option<V>> {
        if !self.enabled() {
            return None;
        }
        let mut map = self.map.lock().ok()?;
        let (expires, value) = map.get(key)?;
        if *expires <= Instant::now() {
            map.remove(key);
            return None;
        }
        Some(value.clone())
    }

    pub fn put(&self, key: K, value: Option<V>) {
        if !self.enabled() {
            return;
        }
        let ttl = if value.is_some() {
            self.ttl
        } else {
            self.negative_ttl
        };
        if ttl.is_zero() {
            return;
        }
        let Ok(mut map) = self.map.lock() else {
            return;
        };
        if map.len() >= self.capacity && !map.contains_key(&key) {
            let now = Instant::now();
            map.retain(|_, (exp, _)| *exp > now);
            if map.len() >= self.capacity {
                // Evict the entry closest to expiry.
                if let Some(k) = map
                    .iter()
                    .min_by_key(|(_, (e, _))| *e)
                    .map(|(k, _)| k.clone())
                {
                    map.remove(&k);
                }
            }
        }
        map.insert(key, (Instant::now() + ttl, value));
    }

    /// Drops everything (after `yarctl user` changes, or on reload).
    pub fn clear(&self) {
        if let Ok(mut m) = self.map.lock() {
            m.clear();
        }
    }

    pub fn len(&self) -> usize {
        self.map.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_negative_and_capacity() {
        let c = LookupCache::new(2, Duration::from_secs(60), Duration::from_secs(60));
        assert_eq!(c.get(&"a"), None);
        c.put("a", Some(1));
        c.put("b", None);
        assert_eq!(c.get(&"a"), Some(Some(1)));
        assert_eq!(c.get(&"b"), Some(None));
        c.put("c", Some(3));
        assert_eq!(c.len(), 2);
        let off = LookupCache::<&str, i32>::new(0, Duration::from_secs(1), Duration::from_secs(1));
        off.put("a", Some(1));
        assert_eq!(off.get(&"a"), None);
        let zero = LookupCache::new(4, Duration::ZERO, Duration::ZERO);
        zero.put("a", Some(1));
        assert_eq!(zero.get(&"a"), None);
    }
}
