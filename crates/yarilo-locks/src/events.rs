use tokio::sync::broadcast;

/// A change notification: `resource` is what changed (e.g.
/// `mbox:<user>:<folder>`), `kind` what happened (`append`, `flags`,
/// `expunge`, …), `payload` anything the kind needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub resource: String,
    pub kind: String,
    pub payload: String,
}

/// Fan-out of [`Event`]s to every subscriber, in this process and, for the
/// remote implementation, in every other process of the deployment.
/// Delivery is best-effort: a subscriber that lags loses events and must
/// rescan (which IMAP does at the next command boundary anyway).
pub trait EventBus: Send + Sync + 'static {
    fn publish(&self, event: Event);
    fn subscribe(&self) -> broadcast::Receiver<Event>;
}

/// One process's bus.
#[derive(Clone)]
pub struct MemoryEventBus {
    tx: broadcast::Sender<Event>,
}

impl MemoryEventBus {
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        MemoryEventBus { tx }
    }
}

impl Default for MemoryEventBus {
    fn default() -> Self {
        Self::new(1024)
    }
}

impl EventBus for MemoryEventBus {
    fn publish(&self, event: Event) {
        // No subscriber is not an error.
        let _ = self.tx.send(event);
    }

    fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }
}
