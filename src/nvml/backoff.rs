//! Exponential backoff for re-initializing NVML after a failed load or init.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, cap: Duration) -> Self {
        let initial = initial.min(cap);
        Backoff {
            initial,
            cap,
            next: initial,
        }
    }

    /// The delay before the next attempt; each call doubles the one after,
    /// up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let current = self.next;
        self.next = (self.next * 2).min(self.cap);
        current
    }

    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let got: Vec<u64> = (0..5).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(got, vec![1, 2, 4, 5, 5]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn initial_above_cap_is_capped() {
        let mut b = Backoff::new(Duration::from_secs(60), Duration::from_secs(30));
        assert_eq!(b.next_delay(), Duration::from_secs(30));
    }
}
