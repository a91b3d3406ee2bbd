//! A job's tracked run in gpuq's own API: its metrics (latest values and a
//! chart's worth of history) and its summary (params, tags, final metrics), for
//! `gpuq metrics`, `gpuq compare` and the dashboard. Readable by every caller, like the queue.

use super::routes::{ApiError, ApiResult, AppState};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use gpuq_api::tracking::{JobMetrics, MetricPoint, MetricSeries, MetricValue, RunSummary};
use gpuq_core::tracking::downsample::Point;
use gpuq_core::JobId;
use gpuq_store::tracking::{RunRow, TrackingError};
use serde::Deserialize;

const DEFAULT_POINTS: usize = 500;
const MAX_POINTS: usize = 20_000;

fn point(p: &Point) -> MetricPoint {
    MetricPoint {
        step: p.step,
        value: MetricValue(p.value),
        timestamp: p.time,
    }
}

fn tracking_error(e: TrackingError) -> ApiError {
    match e {
        TrackingError::NotFound(m) => ApiError::new(StatusCode::NOT_FOUND, m),
        TrackingError::Store(s) => crate::service::ServiceError::Store(s).into(),
        other => ApiError::new(StatusCode::BAD_REQUEST, other.to_string()),
    }
}

fn job_run(ctx: &AppState, id: JobId) -> ApiResult<RunRow> {
    // A job id that does not exist gets the API's usual 404.
    ctx.service.job(id)?;
    ctx.service
        .with_tracking(|t| t.job_run(id))
        .map_err(tracking_error)?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("job {id} has no tracked run"),
            )
        })
}

#[derive(Deserialize)]
pub struct MetricsQuery {
    /// Only this metric (default: all of the run's).
    key: Option<String>,
    /// Points per metric at most (default 500).
    max_points: Option<usize>,
}

pub async fn metrics(
    State(ctx): State<AppState>,
    Path(id): Path<JobId>,
    Query(q): Query<MetricsQuery>,
) -> ApiResult<Json<JobMetrics>> {
    let max = q.max_points.unwrap_or(DEFAULT_POINTS);
    if !(2..=MAX_POINTS).contains(&max) {
        return Err(ApiError::field(
            StatusCode::BAD_REQUEST,
            format!("max_points {max}: give 2 to {MAX_POINTS}"),
            "max_points".into(),
        ));
    }
    let run = job_run(&ctx, id)?;
    let keys: Vec<String> = match &q.key {
        Some(k) if !run.metrics.contains_key(k) => {
            let known: Vec<&str> = run.metrics.keys().map(String::as_str).collect();
            return Err(ApiError::field(
                StatusCode::NOT_FOUND,
                format!(
                    "job {id} has no metric {k:?}; it has {}",
                    if known.is_empty() {
                        "none yet".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
                "key".into(),
            ));
        }
        Some(k) => vec![k.clone()],
        None => run.metrics.keys().cloned().collect(),
    };
    let mut series = Vec::new();
    for key in keys {
        let (count, points, downsampled) = ctx
            .service
            .with_tracking(|t| t.metric_chart(&run.id, &key, max))
            .map_err(tracking_error)?;
        let latest = run.metrics.get(&key).map(point).unwrap_or(MetricPoint {
            step: 0,
            value: MetricValue(f64::NAN),
            timestamp: 0,
        });
        series.push(MetricSeries {
            key,
            count,
            latest,
            points: points.iter().map(point).collect(),
            downsampled,
        });
    }
    let dropped = ctx
        .service
        .with_tracking(|t| t.metric_drops(&run.id))
        .map_err(tracking_error)?
        .into_iter()
        .map(|(reason, n)| (reason.as_str().to_string(), n))
        .collect();
    Ok(Json(JobMetrics {
        job: id,
        run_id: run.id,
        series,
        dropped,
    }))
}

pub async fn run(
    State(ctx): State<AppState>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<RunSummary>> {
    let run = job_run(&ctx, id)?;
    let experiment = ctx
        .service
        .with_tracking(|t| t.experiment(run.experiment_id))
        .map_err(tracking_error)?
        .map(|e| e.name)
        .unwrap_or_default();
    Ok(Json(RunSummary {
        run_id: run.id.clone(),
        job: run.job,
        name: run.tags.get("mlflow.runName").cloned().or(run.name.clone()),
        experiment_id: run.experiment_id.to_string(),
        experiment,
        user: run.user.clone(),
        status: run.status.clone(),
        start_time: run.start_time,
        end_time: run.end_time,
        params: run.params.clone(),
        tags: run.tags.clone(),
        metrics: run
            .metrics
            .iter()
            .map(|(k, p)| (k.clone(), point(p)))
            .collect(),
    }))
}
