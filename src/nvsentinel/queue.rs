//! The events waiting for the platform connector, in the order they were
//! raised, up to a bound. Past the bound the latest state of each entity
//! wins: the oldest event of an entity that has a newer one queued goes
//! first (that state is already stale), else the oldest event of all; each
//! one dropped is counted (`nvml_exporter_nvsentinel_events_total{result="dropped"}`).

use std::collections::VecDeque;

use super::proto::HealthEvent;

/// Whose state an event carries: the GPU's UUID, and the MIG instance
/// (GPU instance, compute instance) where the verdict is an instance's.
pub type Key = (String, Option<u32>, Option<u32>);

/// One queued event, numbered so the sender removes the one it sent even
/// if the queue changed while the call was in flight.
#[derive(Debug, Clone)]
pub struct Queued {
    pub seq: u64,
    pub key: Key,
    pub event: HealthEvent,
}

#[derive(Debug)]
pub struct Queue {
    items: VecDeque<Queued>,
    bound: usize,
    next_seq: u64,
    dropped: u64,
}

impl Queue {
    pub fn new(bound: usize) -> Self {
        Queue {
            items: VecDeque::new(),
            bound: bound.max(1),
            next_seq: 0,
            dropped: 0,
        }
    }

    /// Adds an event at the back, making room first where the queue is
    /// full.
    pub fn push(&mut self, key: Key, event: HealthEvent) {
        if self.items.len() >= self.bound {
            let stale = self.items.iter().position(|q| {
                q.key == key || self.items.iter().filter(|o| o.key == q.key).count() > 1
            });
            self.items.remove(stale.unwrap_or(0));
            self.dropped += 1;
        }
        self.items.push_back(Queued {
            seq: self.next_seq,
            key,
            event,
        });
        self.next_seq += 1;
    }

    /// The oldest event, to send next.
    pub fn front(&self) -> Option<&Queued> {
        self.items.front()
    }

    /// Removes the event numbered `seq` once it was delivered (it may have
    /// been dropped meanwhile).
    pub fn delivered(&mut self, seq: u64) {
        if let Some(i) = self.items.iter().position(|q| q.seq == seq) {
            self.items.remove(i);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uuid: &str) -> Key {
        (uuid.to_string(), None, None)
    }

    fn event(check: &str) -> HealthEvent {
        HealthEvent {
            check_name: check.to_string(),
            ..HealthEvent::default()
        }
    }

    fn checks(q: &Queue) -> Vec<(String, String)> {
        q.items
            .iter()
            .map(|i| (i.key.0.clone(), i.event.check_name.clone()))
            .collect()
    }

    #[test]
    fn within_the_bound_every_event_waits_in_order() {
        let mut q = Queue::new(4);
        q.push(key("a"), event("hung"));
        q.push(key("a"), event("none"));
        q.push(key("b"), event("lost"));
        assert_eq!(
            checks(&q),
            [("a", "hung"), ("a", "none"), ("b", "lost")]
                .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        assert_eq!(q.dropped(), 0);
        let first = q.front().unwrap().seq;
        q.delivered(first);
        assert_eq!(q.front().unwrap().event.check_name, "none");
    }

    #[test]
    fn past_the_bound_the_latest_state_of_each_gpu_wins_and_drops_are_counted() {
        let mut q = Queue::new(3);
        q.push(key("a"), event("hung"));
        q.push(key("b"), event("lost"));
        q.push(key("a"), event("none"));
        // Full: a's stale "hung" goes, b's only state stays.
        q.push(key("c"), event("remap_pending"));
        assert_eq!(q.len(), 3);
        assert_eq!(q.dropped(), 1);
        let got = checks(&q);
        assert_eq!(got[0], ("b".to_string(), "lost".to_string()));
        assert_eq!(got[1], ("a".to_string(), "none".to_string()));
        // Full of distinct GPUs: b's own older state makes room for b.
        q.push(key("b"), event("none"));
        assert_eq!(q.dropped(), 2);
        assert_eq!(
            checks(&q),
            [("a", "none"), ("c", "remap_pending"), ("b", "none")]
                .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        // Full, and the new GPU has nothing queued: the oldest goes.
        q.push(key("d"), event("hung"));
        assert_eq!(q.dropped(), 3);
        assert_eq!(q.len(), 3);
        assert_eq!(q.front().unwrap().key, key("c"));
    }

    #[test]
    fn an_event_dropped_while_it_was_sent_is_not_removed_twice() {
        let mut q = Queue::new(1);
        q.push(key("a"), event("hung"));
        let sending = q.front().unwrap().seq;
        q.push(key("a"), event("none"));
        q.delivered(sending);
        assert_eq!(q.len(), 1, "the newer state stays queued");
        assert_eq!(q.front().unwrap().event.check_name, "none");
    }
}
