//! What the server answered and refused, counted for the exporter's own
//! metrics: scrapes of the telemetry path by status code (client_golang's
//! `promhttp_metric_handler_requests_total`, which node_exporter users
//! know), and requests or connections refused before a handler, by reason.
//! A refusal is invisible to the scraper's own `up` when it comes from
//! another client (a flood, a password guesser): these make it visible.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::snapshot::{HttpCounts, HttpRefusal};

#[derive(Default)]
pub struct HttpStats {
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    scrapes: BTreeMap<u16, u64>,
    refusals: BTreeMap<HttpRefusal, u64>,
}

impl HttpStats {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn scrape(&self, status: u16) {
        *self.lock().scrapes.entry(status).or_insert(0) += 1;
    }

    pub fn refused(&self, why: HttpRefusal) {
        *self.lock().refusals.entry(why).or_insert(0) += 1;
    }

    /// The counts so far, as plain data for the snapshot.
    pub fn counts(&self) -> HttpCounts {
        let c = self.lock();
        HttpCounts {
            scrapes: c.scrapes.iter().map(|(&k, &v)| (k, v)).collect(),
            refusals: c.refusals.iter().map(|(&k, &v)| (k, v)).collect(),
        }
    }
}
