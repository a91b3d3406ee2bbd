//! experiments/create, get, get-by-name, search, update, delete, restore, and
//! their tags. Experiment "0" (Default) always exists; a project's experiment is
//! made by its first job.

use super::{
    body, de_i64, experiment_json, page_token, parse_page_token, query_one, query_pairs, required,
    KeyValue, MlflowError, MlflowResult,
};
use crate::identity::Caller;
use crate::routes::AppState;
use axum::extract::{RawQuery, State};
use axum::{Extension, Json};
use gpuq_core::tracking::search::{self, ExperimentRecord};
use gpuq_store::tracking::ExperimentRow;
use serde::Deserialize;
use serde_json::{json, Value};

/// MLflow's page size limit for experiment searches.
const MAX_RESULTS: i64 = 50_000;
const DEFAULT_RESULTS: i64 = 1_000;

fn now() -> i64 {
    gpuq_api::home::now_ms()
}

fn parse_id(raw: &str) -> MlflowResult<i64> {
    raw.trim()
        .parse::<i64>()
        .map_err(|_| MlflowError::not_found(format!("No Experiment with id={raw} exists")))
}

fn load(ctx: &AppState, id: i64) -> MlflowResult<ExperimentRow> {
    ctx.service
        .with_tracking(|t| t.experiment(id))?
        .ok_or_else(|| MlflowError::not_found(format!("No Experiment with id={id} exists")))
}

/// Whoever made an experiment (or an admin) may change it; a project's, a
/// sweep's and the Default experiment belong to the admins, including one a
/// user made before the first job's run was filed under it (the store takes it over).
fn writable(ctx: &AppState, caller: &Caller, id: i64) -> MlflowResult<ExperimentRow> {
    let e = load(ctx, id)?;
    if caller.admin || e.owner.as_deref() == Some(caller.user.as_str()) {
        return Ok(e);
    }
    Err(MlflowError::denied(match e.owner.as_deref() {
        Some(maker) => format!(
            "experiment {id} ({}) was made by {maker}; only its maker or an admin may change it, and you are {}",
            e.name, caller.user
        ),
        None => format!(
            "experiment {id} ({}) is gpuq's: it holds jobs' runs (a project's, a sweep's or the Default), \
             so only an admin may change it, and you are {}",
            e.name, caller.user
        ),
    }))
}

#[derive(Deserialize)]
pub struct CreateRequest {
    #[serde(default)]
    name: String,
    #[serde(default)]
    artifact_location: Option<String>,
    #[serde(default)]
    tags: Vec<KeyValue>,
}

pub async fn create(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    let req: CreateRequest = body(&raw)?;
    required(Some(&req.name), "name")?;
    if req
        .artifact_location
        .as_deref()
        .is_some_and(|l| !l.is_empty())
    {
        // Artifacts live in the run's outputs; a location elsewhere would be ignored silently.
        return Err(MlflowError::invalid(
            "artifact_location is not supported: gpuq keeps a run's artifacts in its outputs (mlflow-artifacts:/runs/<run id>); leave it unset",
        ));
    }
    let tags: Vec<(String, String)> = req
        .tags
        .into_iter()
        .map(|t| (t.key, t.value.unwrap_or_default()))
        .collect();
    let id = ctx
        .service
        .with_tracking_mut(|t| t.create_experiment(&req.name, Some(&caller.user), &tags, now()))?;
    Ok(Json(json!({ "experiment_id": id.to_string() })))
}

pub async fn get(State(ctx): State<AppState>, RawQuery(q): RawQuery) -> MlflowResult<Json<Value>> {
    let pairs = query_pairs(q.as_deref());
    let raw = required(query_one(&pairs, "experiment_id"), "experiment_id")?;
    let e = load(&ctx, parse_id(raw)?)?;
    Ok(Json(json!({ "experiment": experiment_json(&e) })))
}

pub async fn get_by_name(
    State(ctx): State<AppState>,
    RawQuery(q): RawQuery,
) -> MlflowResult<Json<Value>> {
    let pairs = query_pairs(q.as_deref());
    let name = required(query_one(&pairs, "experiment_name"), "experiment_name")?;
    let e = ctx
        .service
        .with_tracking(|t| t.experiment_by_name(name))?
        .ok_or_else(|| {
            MlflowError::not_found(format!("Could not find experiment with name '{name}'"))
        })?;
    Ok(Json(json!({ "experiment": experiment_json(&e) })))
}

#[derive(Deserialize, Default)]
pub struct SearchRequest {
    #[serde(default, deserialize_with = "de_i64")]
    max_results: Option<i64>,
    #[serde(default)]
    page_token: Option<String>,
    #[serde(default)]
    filter: Option<String>,
    #[serde(default)]
    order_by: Vec<String>,
    #[serde(default)]
    view_type: Option<String>,
}

pub async fn search(
    State(ctx): State<AppState>,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    let req: SearchRequest = body(&raw)?;
    run_search(&ctx, req)
}

/// MLflow's UI searches experiments with GET and a query string.
pub async fn search_get(
    State(ctx): State<AppState>,
    RawQuery(q): RawQuery,
) -> MlflowResult<Json<Value>> {
    let pairs = query_pairs(q.as_deref());
    let max_results = query_one(&pairs, "max_results")
        .map(|m| {
            m.parse::<i64>()
                .map_err(|_| MlflowError::invalid(format!("max_results {m:?} is not an integer")))
        })
        .transpose()?;
    let req = SearchRequest {
        max_results,
        page_token: query_one(&pairs, "page_token").map(str::to_string),
        filter: query_one(&pairs, "filter").map(str::to_string),
        order_by: pairs
            .iter()
            .filter(|(k, _)| k == "order_by")
            .map(|(_, v)| v.clone())
            .collect(),
        view_type: query_one(&pairs, "view_type").map(str::to_string),
    };
    run_search(&ctx, req)
}

/// Which lifecycle stages a view type shows.
pub fn view_shows(view: Option<&str>, stage: &str) -> MlflowResult<bool> {
    Ok(match view.unwrap_or("ACTIVE_ONLY") {
        "ACTIVE_ONLY" | "1" | "" => stage == "active",
        "DELETED_ONLY" | "2" => stage == "deleted",
        "ALL" | "3" => true,
        other => {
            return Err(MlflowError::invalid(format!(
                "Invalid view_type '{other}'; use ACTIVE_ONLY, DELETED_ONLY or ALL"
            )))
        }
    })
}

fn run_search(ctx: &AppState, req: SearchRequest) -> MlflowResult<Json<Value>> {
    let max = req.max_results.unwrap_or(DEFAULT_RESULTS);
    if !(1..=MAX_RESULTS).contains(&max) {
        return Err(MlflowError::invalid(format!(
            "Invalid value {max} for parameter 'max_results' supplied. It must be at most {MAX_RESULTS}, and at least 1."
        )));
    }
    let filter = search::parse_experiment_filter(req.filter.as_deref().unwrap_or(""))
        .map_err(|e| MlflowError::invalid(e.message))?;
    let order = search::parse_experiment_order(&req.order_by)
        .map_err(|e| MlflowError::invalid(e.message))?;
    let offset = parse_page_token(req.page_token.as_deref())?;
    let all = ctx.service.with_tracking(|t| t.experiments())?;
    let mut shown: Vec<(ExperimentRecord, ExperimentRow)> = Vec::new();
    for e in all {
        if !view_shows(req.view_type.as_deref(), &e.lifecycle_stage)? {
            continue;
        }
        let record = ExperimentRecord {
            experiment_id: e.id.to_string(),
            name: e.name.clone(),
            lifecycle_stage: e.lifecycle_stage.clone(),
            creation_time: e.created_at,
            last_update_time: e.updated_at,
            tags: e.tags.clone(),
        };
        if filter.matches(&record) {
            shown.push((record, e));
        }
    }
    shown.sort_by(|a, b| order.compare(&a.0, &b.0));
    let page: Vec<Value> = shown
        .iter()
        .skip(offset)
        .take(max as usize)
        .map(|(_, e)| experiment_json(e))
        .collect();
    let mut out = json!({ "experiments": page });
    let next = offset + max as usize;
    if next < shown.len() {
        out["next_page_token"] = json!(page_token(next));
    }
    Ok(Json(out))
}

#[derive(Deserialize)]
pub struct IdRequest {
    #[serde(default)]
    experiment_id: String,
    #[serde(default)]
    new_name: Option<String>,
}

pub async fn update(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    let req: IdRequest = body(&raw)?;
    let id = parse_id(required(Some(&req.experiment_id), "experiment_id")?)?;
    writable(&ctx, &caller, id)?;
    ctx.service
        .with_tracking_mut(|t| t.update_experiment(id, req.new_name.as_deref(), None, now()))?;
    Ok(Json(json!({})))
}

pub async fn delete(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    lifecycle(ctx, caller, raw, "deleted")
}

pub async fn restore(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    lifecycle(ctx, caller, raw, "active")
}

fn lifecycle(
    ctx: AppState,
    caller: Caller,
    raw: axum::body::Bytes,
    stage: &str,
) -> MlflowResult<Json<Value>> {
    let req: IdRequest = body(&raw)?;
    let id = parse_id(required(Some(&req.experiment_id), "experiment_id")?)?;
    writable(&ctx, &caller, id)?;
    ctx.service
        .with_tracking_mut(|t| t.update_experiment(id, None, Some(stage), now()))?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct TagRequest {
    #[serde(default)]
    experiment_id: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: Option<String>,
}

pub async fn set_tag(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    tag(&ctx, &caller, &raw, true)
}

pub async fn delete_tag(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    tag(&ctx, &caller, &raw, false)
}

/// Sets (or, `set` false, deletes) an experiment's tag.
fn tag(ctx: &AppState, caller: &Caller, raw: &[u8], set: bool) -> MlflowResult<Json<Value>> {
    let req: TagRequest = body(raw)?;
    let id = parse_id(required(Some(&req.experiment_id), "experiment_id")?)?;
    required(Some(&req.key), "key")?;
    writable(ctx, caller, id)?;
    let value = set.then(|| req.value.unwrap_or_default());
    ctx.service
        .with_tracking_mut(|t| t.set_experiment_tag(id, &req.key, value.as_deref(), now()))?;
    Ok(Json(json!({})))
}
