//! `rate_limit`: one token bucket for the whole server, as the toolkit's
//! `rate.NewLimiter(rate.Every(interval), burst)`; requests beyond it get 429.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::raw::RawRateLimit;
use super::{Problem, RateLimit};

/// `Ok(None)`: limiter off (interval 0 or absent, as in the toolkit).
pub(crate) fn settings(raw: RawRateLimit) -> Result<Option<RateLimit>, Problem> {
    let interval = raw.interval.unwrap_or(Duration::ZERO);
    if interval.is_zero() {
        return Ok(None);
    }
    Ok(Some(RateLimit {
        interval,
        burst: raw.burst.unwrap_or(0),
    }))
}

#[derive(Debug)]
pub(crate) struct Bucket {
    limit: RateLimit,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    pub(crate) fn new(limit: RateLimit) -> Self {
        Bucket {
            limit,
            // Like Go's limiter, start full.
            state: Mutex::new((f64::from(limit.burst), Instant::now())),
        }
    }

    pub(crate) fn limit(&self) -> RateLimit {
        self.limit
    }

    pub(crate) fn allow(&self) -> bool {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> bool {
        let Ok(mut st) = self.state.lock() else {
            return true;
        };
        let (tokens, last) = *st;
        let elapsed = now.saturating_duration_since(last).as_secs_f64();
        let refill = elapsed / self.limit.interval.as_secs_f64();
        let tokens = (tokens + refill).min(f64::from(self.limit.burst));
        if tokens >= 1.0 {
            *st = (tokens - 1.0, now);
            true
        } else {
            *st = (tokens, now);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills_one_token_per_interval() {
        let b = Bucket::new(RateLimit {
            interval: Duration::from_secs(1),
            burst: 2,
        });
        let t0 = Instant::now();
        assert!(b.allow_at(t0));
        assert!(b.allow_at(t0));
        assert!(!b.allow_at(t0));
        assert!(!b.allow_at(t0 + Duration::from_millis(500)));
        assert!(b.allow_at(t0 + Duration::from_millis(1000)));
        assert!(!b.allow_at(t0 + Duration::from_millis(1000)));
    }

    #[test]
    fn zero_burst_refuses_everything_like_go() {
        let b = Bucket::new(RateLimit {
            interval: Duration::from_secs(1),
            burst: 0,
        });
        assert!(!b.allow_at(Instant::now() + Duration::from_secs(10)));
    }

    #[test]
    fn zero_interval_disables() {
        assert_eq!(
            settings(RawRateLimit {
                burst: Some(3),
                interval: None
            }),
            Ok(None)
        );
    }
}
