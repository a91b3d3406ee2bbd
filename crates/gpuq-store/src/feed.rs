//! Alerts, and the feed of everything that happened (job events and alerts in
//! order of their ids) that the API streams to `gpuq events`, `top` and `logs -f`.

use crate::{Result, Store};
use gpuq_core::alerts::{Alert, AlertKind, NewAlert};
use gpuq_core::Event;
use rusqlite::{params, Row};

impl Store {
    /// Records alerts in one transaction; returns them with their ids.
    pub fn insert_alerts(&mut self, alerts: &[NewAlert]) -> Result<Vec<Alert>> {
        self.write(|tx| {
            let mut out = Vec::with_capacity(alerts.len());
            for a in alerts {
                tx.prepare_cached(
                    "INSERT INTO alerts (at, kind, job_id, user, gpu, message) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![a.at, a.kind.as_str(), a.job, a.user, a.gpu, a.message])?;
                out.push(Alert {
                    id: tx.last_insert_rowid(),
                    alert: a.clone(),
                });
            }
            Ok(out)
        })
    }

    /// Alerts with an id above `after`, oldest first, at most `limit`.
    pub fn alerts_after(&self, after: i64, limit: u32) -> Result<Vec<Alert>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, at, kind, job_id, user, gpu, message FROM alerts WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![after, limit], alert_of)?;
        Ok(rows.filter_map(|r| r.ok()).flatten().collect())
    }

    /// The newest `limit` alerts, oldest first.
    pub fn recent_alerts(&self, limit: u32) -> Result<Vec<Alert>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, at, kind, job_id, user, gpu, message FROM \
             (SELECT * FROM alerts ORDER BY id DESC LIMIT ?1) ORDER BY id",
        )?;
        let rows = stmt.query_map(params![limit], alert_of)?;
        Ok(rows.filter_map(|r| r.ok()).flatten().collect())
    }

    /// Job events of every job with a sequence number above `after`, oldest first.
    pub fn events_after(&self, after: i64, limit: u32) -> Result<Vec<Event>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, at, job_id, kind, detail FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![after, limit], crate::event_of)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The last job event's and the last alert's ids: where a new feed starts.
    pub fn feed_heads(&self) -> Result<(i64, i64)> {
        let events = self
            .conn
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM events", [], |r| r.get(0))?;
        let alerts = self
            .conn
            .query_row("SELECT COALESCE(MAX(id), 0) FROM alerts", [], |r| r.get(0))?;
        Ok((events, alerts))
    }
}

/// A row with a kind this build does not know (written by a newer one) is skipped.
fn alert_of(r: &Row<'_>) -> rusqlite::Result<Option<Alert>> {
    let kind: String = r.get(2)?;
    let Some(kind) = AlertKind::parse(&kind) else {
        return Ok(None);
    };
    Ok(Some(Alert {
        id: r.get(0)?,
        alert: NewAlert {
            at: r.get(1)?,
            kind,
            job: r.get(3)?,
            user: r.get(4)?,
            gpu: r.get(5)?,
            message: r.get(6)?,
        },
    }))
}
