//! Admission to bcrypt: a bounded queue in front of the one thread that runs
//! password verifications, with a share per client address.
//!
//! Why: bcrypt is deliberately slow (tens of milliseconds at cost 10), so a
//! client looping wrong passwords can queue work faster than it is done.
//! Unbounded, that queue delays every login behind it, and a queue on the
//! runtime's blocking pool also delays anything else sent there. Bounded, a
//! check that cannot be queued is answered at once (429), and since each
//! address may hold only a few places, a flood from one host cannot keep a
//! login from another host waiting for more than a few verifications.
//! Successful logins remembered in the cache never come here.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

/// Verifications queued or running at once, from all clients. At cost 10
/// one takes about 50 ms on one core, so a full queue drains in about a
/// second.
pub const MAX_PENDING: usize = 16;

/// Verifications one client address may have queued or running at once.
/// One: a flooding host then holds at most the check that is running, so a
/// first login from another host waits for at most that one before its own
/// (measured: docs/load.md). A scraper needs one first login per
/// credential; a second at the same moment gets 429 and retries.
pub const MAX_PENDING_PER_PEER: usize = 1;

/// Verifications running at once: one, so a password storm takes one core,
/// never all of them.
const CONCURRENCY: usize = 1;

pub(crate) struct BcryptGate {
    run: Arc<Semaphore>,
    pending: Mutex<Pending>,
    max_pending: usize,
    max_per_peer: usize,
}

#[derive(Default)]
struct Pending {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
    /// Whether the refusal in progress has been logged (reset when the
    /// queue empties), so a flood costs one log line, not one per request.
    refusal_logged: bool,
}

impl Default for BcryptGate {
    fn default() -> Self {
        BcryptGate::new(MAX_PENDING, MAX_PENDING_PER_PEER)
    }
}

impl BcryptGate {
    pub(crate) fn new(max_pending: usize, max_per_peer: usize) -> Self {
        BcryptGate {
            run: Arc::new(Semaphore::new(CONCURRENCY)),
            pending: Mutex::new(Pending::default()),
            max_pending,
            max_per_peer,
        }
    }

    /// A place in the queue for `peer`, or `None` when the queue, or this
    /// peer's share of it, is full.
    pub(crate) fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Ticket> {
        let mut p = self.pending.lock().ok()?;
        let mine = p.per_peer.get(&peer).copied().unwrap_or(0);
        if p.total >= self.max_pending || mine >= self.max_per_peer {
            if !std::mem::replace(&mut p.refusal_logged, true) {
                tracing::warn!(
                    peer = %peer,
                    queued = p.total,
                    "basic auth: too many password checks queued; answering 429 until the queue drains"
                );
            }
            return None;
        }
        p.total += 1;
        *p.per_peer.entry(peer).or_default() += 1;
        Some(Ticket {
            gate: self.clone(),
            peer,
        })
    }

    #[cfg(test)]
    fn queued(&self) -> usize {
        self.pending.lock().map(|p| p.total).unwrap_or(0)
    }
}

/// A place in the bcrypt queue; given back when dropped (the check ran, or
/// its client went away while waiting).
pub(crate) struct Ticket {
    gate: Arc<BcryptGate>,
    peer: IpAddr,
}

impl Ticket {
    /// Waits for the bcrypt thread (first come, first served), then runs
    /// `check` on the blocking pool. `None` if the check panicked.
    pub(crate) async fn run<T, F>(self, check: F) -> Option<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let permit = self.gate.run.clone().acquire_owned().await.ok()?;
        // Both move into the blocking task: if the client disconnects, the
        // running check still holds its place until bcrypt returns, so
        // disconnecting cannot start more verifications than the limit.
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _ticket = self;
            check()
        })
        .await
        .ok()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let Ok(mut p) = self.gate.pending.lock() else {
            return;
        };
        p.total = p.total.saturating_sub(1);
        if let Some(n) = p.per_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                p.per_peer.remove(&self.peer);
            }
        }
        if p.total == 0 {
            p.refusal_logged = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn per_peer_and_total_bounds() {
        let gate = Arc::new(BcryptGate::new(3, 2));
        let a1 = gate.admit(ip("10.0.0.1")).expect("first");
        let a2 = gate.admit(ip("10.0.0.1")).expect("second");
        assert!(gate.admit(ip("10.0.0.1")).is_none(), "peer share full");
        let b1 = gate.admit(ip("10.0.0.2")).expect("another peer");
        assert!(gate.admit(ip("10.0.0.3")).is_none(), "queue full");
        drop(a1);
        assert!(gate.admit(ip("10.0.0.1")).is_some(), "a place came back");
        drop((a2, b1));
        assert_eq!(gate.queued(), 0);
        assert!(gate.pending.lock().unwrap().per_peer.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_run_one_at_a_time_and_hold_their_place_until_done() {
        let gate = Arc::new(BcryptGate::new(4, 4));
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel::<u32>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let mut tasks = Vec::new();
        for i in 0..3 {
            let ticket = gate.admit(ip("10.0.0.1")).unwrap();
            let (release_rx, started_tx) = (release_rx.clone(), started_tx.clone());
            tasks.push(tokio::spawn(ticket.run(move || {
                started_tx.send(i).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
                i
            })));
        }
        let first = tokio::task::spawn_blocking(move || {
            let first = started_rx.recv().unwrap();
            // Only one may run: no second start while the first is held.
            let second = started_rx.recv_timeout(Duration::from_millis(200));
            (first, second.is_err(), started_rx)
        })
        .await
        .unwrap();
        assert!(first.1, "a second check started while one ran");
        assert_eq!(gate.queued(), 3);
        for _ in 0..3 {
            release_tx.send(()).unwrap();
        }
        let mut done = Vec::new();
        for t in tasks {
            done.push(t.await.unwrap().unwrap());
        }
        done.sort_unstable();
        assert_eq!(done, vec![0, 1, 2]);
        assert_eq!(gate.queued(), 0);
    }

    #[tokio::test]
    async fn a_waiting_check_abandoned_by_its_client_gives_its_place_back() {
        let gate = Arc::new(BcryptGate::new(4, 4));
        let hold = gate.run.clone().acquire_owned().await.unwrap();
        let ticket = gate.admit(ip("10.0.0.1")).unwrap();
        let waiting = tokio::spawn(ticket.run(|| ()));
        tokio::task::yield_now().await;
        assert_eq!(gate.queued(), 1);
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(gate.queued(), 0);
        drop(hold);
    }
}
