//! metrics/get-history (every point, paged when the client asks for pages) and
//! get-history-bulk-interval (a chart's worth of points per run, as MLflow's UI asks).

use super::{
    load_run, metric_json, page_token, parse_page_token, query_one, query_pairs, required,
    MlflowError, MlflowResult,
};
use crate::routes::AppState;
use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use gpuq_api::tracking::MetricValue;
use serde::Serialize;
use serde_json::{json, Value};

/// Points per page when the client names no page size: the whole history,
/// as MLflow's own server answers a request without `max_results`.
const UNPAGED: usize = usize::MAX;
/// Largest chart MLflow's UI asks for per run.
const MAX_INTERVAL_POINTS: usize = 10_000;
const MAX_BULK_RUNS: usize = 100;

fn int_param(pairs: &[(String, String)], key: &str) -> MlflowResult<Option<i64>> {
    query_one(pairs, key)
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.trim().parse::<i64>().map_err(|_| {
                MlflowError::invalid(format!(
                    "Invalid value {v:?} for parameter '{key}': give an integer"
                ))
            })
        })
        .transpose()
}

pub async fn get_history(
    State(ctx): State<AppState>,
    RawQuery(q): RawQuery,
) -> MlflowResult<Response> {
    let pairs = query_pairs(q.as_deref());
    let run = required(
        query_one(&pairs, "run_id")
            .filter(|s| !s.is_empty())
            .or(query_one(&pairs, "run_uuid")),
        "run_id",
    )?;
    let key = required(query_one(&pairs, "metric_key"), "metric_key")?;
    let limit = match int_param(&pairs, "max_results")? {
        None => UNPAGED,
        Some(n) if n >= 1 => n as usize,
        Some(n) => {
            return Err(MlflowError::invalid(format!(
                "Invalid value {n} for parameter 'max_results': give at least 1"
            )))
        }
    };
    let offset = parse_page_token(query_one(&pairs, "page_token"))?;
    load_run(&ctx, run)?;
    let (points, next) = ctx
        .service
        .with_tracking(|t| t.metric_history(run, key, offset as u64, limit))?;
    // Serialized straight from the points: a million-point history is one
    // buffer of text, not a tree of a million JSON objects first.
    Ok(Json(History {
        metrics: points
            .iter()
            .map(|p| HistoryPoint {
                key,
                value: MetricValue(p.value),
                timestamp: p.time,
                step: p.step,
            })
            .collect(),
        next_page_token: next
            .filter(|_| limit != UNPAGED)
            .map(|n| page_token(n as usize)),
    })
    .into_response())
}

#[derive(Serialize)]
struct History<'a> {
    metrics: Vec<HistoryPoint<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_page_token: Option<String>,
}

#[derive(Serialize)]
struct HistoryPoint<'a> {
    key: &'a str,
    value: MetricValue,
    timestamp: i64,
    step: i64,
}

pub async fn bulk_interval(
    State(ctx): State<AppState>,
    RawQuery(q): RawQuery,
) -> MlflowResult<Json<Value>> {
    let pairs = query_pairs(q.as_deref());
    let runs: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "run_ids")
        .map(|(_, v)| v.as_str())
        .collect();
    if runs.is_empty() || runs.len() > MAX_BULK_RUNS {
        return Err(MlflowError::invalid(format!(
            "Give 1 to {MAX_BULK_RUNS} run_ids; got {}",
            runs.len()
        )));
    }
    let key = required(query_one(&pairs, "metric_key"), "metric_key")?;
    let max = int_param(&pairs, "max_results")?
        .unwrap_or(320)
        .clamp(2, MAX_INTERVAL_POINTS as i64) as usize;
    let start = int_param(&pairs, "start_step")?;
    let end = int_param(&pairs, "end_step")?;
    let mut metrics = Vec::new();
    for run in runs {
        load_run(&ctx, run)?;
        let (_, points, _) = ctx
            .service
            .with_tracking(|t| t.metric_chart(run, key, max))?;
        for p in points
            .iter()
            .filter(|p| start.is_none_or(|s| p.step >= s) && end.is_none_or(|e| p.step <= e))
        {
            let mut m = metric_json(key, p);
            m["run_id"] = json!(run);
            metrics.push(m);
        }
    }
    Ok(Json(json!({ "metrics": metrics })))
}
