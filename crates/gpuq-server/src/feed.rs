//! `GET /v1/events`: job events and alerts as server-sent events, in commit
//! order, straight from the store's tables. Each SSE `id` is a cursor
//! (`<last job event>.<last alert>`): a client that reconnects with
//! `Last-Event-ID` (or `?after=`) misses nothing.

use super::routes::{ApiError, AppState};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::Stream;
use gpuq_api::FeedItem;
use gpuq_core::JobId;
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;

#[derive(Deserialize)]
pub struct FeedQuery {
    /// A cursor from an earlier event's id; `0.0` replays everything. Default: from now on.
    after: Option<String>,
    /// Only this job's events (no alerts but the job's).
    job: Option<JobId>,
}

const BATCH: u32 = 500;

pub async fn events(
    State(ctx): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<FeedQuery>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let given = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or(q.after);
    let cursor = match given {
        Some(text) => parse_cursor(&text).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("after: {text:?} is not an event id; use an id from an earlier event, or 0.0 for everything"),
            )
        })?,
        None => ctx.service.with_store(|s| s.feed_heads())?,
    };
    let service = ctx.service.clone();
    let changed = service.subscribe();
    let stopping = ctx.stopping.clone();
    let state = (cursor, changed, VecDeque::<SseEvent>::new());
    let job = q.job;
    let stream =
        futures_util::stream::unfold(state, move |(mut cursor, mut changed, mut ready)| {
            let service = service.clone();
            let mut stopping = stopping.clone();
            async move {
                loop {
                    if let Some(event) = ready.pop_front() {
                        return Some((Ok(event), (cursor, changed, ready)));
                    }
                    // Mark the current version seen before reading: a commit after the
                    // read bumps it again, so no wake-up is lost.
                    changed.borrow_and_update();
                    let read = service.with_store(|s| {
                        Ok((
                            s.events_after(cursor.0, BATCH)?,
                            s.alerts_after(cursor.1, BATCH)?,
                        ))
                    });
                    let Ok((events, alerts)) = read else {
                        return None;
                    };
                    if events.is_empty() && alerts.is_empty() {
                        tokio::select! {
                            woke = changed.changed() => woke.ok()?,
                            _ = stopping.wait_for(|s| *s) => return None,
                        }
                        continue;
                    }
                    let mut items: Vec<(i64, FeedItem)> = events
                        .into_iter()
                        .map(|e| (e.at, FeedItem::Job(e)))
                        .chain(alerts.into_iter().map(|a| (a.alert.at, FeedItem::Alert(a))))
                        .collect();
                    items.sort_by_key(|(at, _)| *at);
                    for (_, item) in items {
                        let (kind, wanted) = match &item {
                            FeedItem::Job(e) => {
                                cursor.0 = e.seq;
                                ("job", job.is_none_or(|j| j == e.job_id))
                            }
                            FeedItem::Alert(a) => {
                                cursor.1 = a.id;
                                ("alert", job.is_none_or(|j| a.alert.job == Some(j)))
                            }
                        };
                        if !wanted {
                            continue;
                        }
                        let data = serde_json::to_string(&item).unwrap_or_default();
                        ready.push_back(
                            SseEvent::default()
                                .id(format!("{}.{}", cursor.0, cursor.1))
                                .event(kind)
                                .data(data),
                        );
                    }
                }
            }
        });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

fn parse_cursor(text: &str) -> Option<(i64, i64)> {
    let (e, a) = text.trim().split_once('.')?;
    Some((e.parse().ok()?, a.parse().ok()?))
}
