//! HTTP handlers of cost accounting, budgets, autostop, schedules and advice.

use super::identity::Caller;
use super::routes::{require_admin, ApiError, ApiResult, AppState};
use super::service::costs::GroupBy;
use crate::config::AutostopConfig;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use gpuq_api::home::now_ms;
use gpuq_api::{Advice, AutostopRequest, AutostopStatus, CostReport, ScheduleInfo};
use gpuq_core::{DurationSpec, JobId};
use serde::Deserialize;

#[derive(Deserialize)]
pub struct CostQuery {
    by: Option<String>,
    /// Epoch ms, a date, a month, or a span ago (`7d`).
    since: Option<String>,
    until: Option<String>,
    /// `2026-11`: the whole month (instead of since/until).
    month: Option<String>,
}

fn bad(field: &str, why: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, format!("{field}: {why}"))
}

pub async fn cost(
    State(ctx): State<AppState>,
    Query(q): Query<CostQuery>,
) -> ApiResult<Json<CostReport>> {
    let now = now_ms();
    let service = &ctx.service;
    let by: GroupBy =
        q.by.as_deref()
            .unwrap_or("user")
            .parse()
            .map_err(|e: String| bad("by", e))?;
    let pricing = service.pricing();
    let (since, until) = match &q.month {
        Some(m) => pricing.month(m).map_err(|e| bad("month", e))?,
        None => {
            let since = match &q.since {
                Some(t) => pricing.parse_time(t, now).map_err(|e| bad("since", e))?,
                None => pricing.period(crate::config::BudgetPeriod::Month, now).0,
            };
            let until = match &q.until {
                Some(t) => pricing.parse_time(t, now).map_err(|e| bad("until", e))?,
                None => now,
            };
            (since, until)
        }
    };
    if until < since {
        return Err(bad("until", "is before since".into()));
    }
    let service = service.clone();
    let report = tokio::task::spawn_blocking(move || service.cost_report(by, since, until, now))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    Ok(Json(report))
}

pub async fn autostop(State(ctx): State<AppState>) -> Json<AutostopStatus> {
    Json(ctx.service.autostop_status())
}

pub async fn set_autostop(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Json(req): Json<AutostopRequest>,
) -> ApiResult<Json<AutostopStatus>> {
    require_admin(&caller, "change autostop")?;
    // Run by `sh -c`: one argument to exec.
    if let Some(command) = &req.command {
        use gpuq_core::limits::{arg_size, human_bytes, MAX_ARG_STRLEN};
        if command.contains('\0') {
            return Err(bad("command", "contains a NUL byte; remove it".into()));
        }
        if arg_size(command) > MAX_ARG_STRLEN {
            let size = human_bytes(arg_size(command));
            let limit = human_bytes(MAX_ARG_STRLEN);
            return Err(bad(
                "command",
                format!("is {size}; the limit is {limit}; put it in a script"),
            ));
        }
    }
    // A partial update: what the request leaves out keeps its current value
    // (or gpuq.toml's when autostop is off).
    let base = ctx.service.autostop_base();
    let idle_after = match (req.idle_after.as_deref().map(str::trim), &base) {
        (Some("off"), _) => return Ok(Json(ctx.service.set_autostop(None)?)),
        (Some(raw), _) => raw
            .parse::<DurationSpec>()
            .map_err(|e| bad("idle_after", format!("{e}")))?,
        (None, Some(b)) if ctx.service.autostop_status().idle_after.is_some() => b.idle_after,
        (None, _) => {
            return Err(bad(
                "idle_after",
                "autostop is off: give the idle time that turns it on (e.g. \"30m\")".into(),
            ))
        }
    };
    let warn_before = DurationSpec::from_millis(
        base.as_ref()
            .map_or(300_000, |b| b.warn_before.as_millis())
            .min(idle_after.as_millis() / 2),
    );
    // The daemon runs only commands its config names: the request may choose
    // one of them, never bring its own.
    let allowed = ctx.service.allowed_autostop_commands();
    if let Some(asked) = &req.command {
        if !allowed.iter().any(|c| c == asked) {
            return Err(bad(
                "command",
                if allowed.is_empty() {
                    "the daemon runs only commands its gpuq.toml names ([autostop] command or \
                     commands), and it names none; without --command the queue is drained"
                        .to_string()
                } else {
                    format!(
                        "{asked:?} is not one of the commands gpuq.toml allows: {}",
                        allowed
                            .iter()
                            .map(|c| format!("{c:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            ));
        }
    }
    let cfg = Some(AutostopConfig {
        idle_after,
        util_percent: base.as_ref().map_or(5.0, |b| b.util_percent),
        warn_before,
        command: req
            .command
            .or_else(|| base.as_ref().and_then(|b| b.command.clone())),
        commands: Vec::new(),
        dry_run: req
            .dry_run
            .unwrap_or_else(|| base.as_ref().is_some_and(|b| b.dry_run)),
    });
    Ok(Json(ctx.service.set_autostop(cfg)?))
}

pub async fn schedules(State(ctx): State<AppState>) -> Json<Vec<ScheduleInfo>> {
    Json(ctx.service.schedules())
}

pub async fn advice(State(ctx): State<AppState>, Path(id): Path<JobId>) -> ApiResult<Json<Advice>> {
    Ok(Json(ctx.service.advice(id)?))
}

#[derive(Deserialize)]
pub struct PricesQuery {
    /// Only this GPU model (e.g. A100-80GB), case-insensitive.
    gpu: Option<String>,
}

/// The price catalog this daemon uses (built-in rows, with `cost.catalog` overrides).
pub async fn prices(
    State(ctx): State<AppState>,
    Query(q): Query<PricesQuery>,
) -> Json<Vec<gpuq_core::catalog::InstancePrice>> {
    let rows = ctx
        .service
        .pricing()
        .catalog
        .instances
        .iter()
        .filter(|r| {
            q.gpu
                .as_ref()
                .is_none_or(|g| r.gpu_model.eq_ignore_ascii_case(g))
        })
        .cloned()
        .collect();
    Json(rows)
}
