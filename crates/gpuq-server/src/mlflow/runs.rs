//! runs/create, get, update, delete, restore, search, and the logging calls
//! (log-metric, log-parameter, set-tag, delete-tag, log-batch).

use super::experiments::view_shows;
use super::scope::{self, Writer};
use super::{
    body, de_i64, de_value, load_run, new_run_id, page_token, parse_page_token, query_one,
    query_pairs, required, run_info_json, run_json, writable_run, KeyValue, MlflowError,
    MlflowResult,
};
use crate::identity::Caller;
use crate::routes::AppState;
use axum::extract::{RawQuery, State};
use axum::Json;
use gpuq_core::tracking::search::{self, RunRecord};
use gpuq_store::tracking::{Batch, MetricIn, NewRun, RunRow, RunUpdate};
use serde::Deserialize;
use serde_json::{json, Value};

/// MLflow's page size limits for run searches.
const MAX_RESULTS: i64 = 50_000;
const DEFAULT_RESULTS: i64 = 1_000;

fn now() -> i64 {
    gpuq_api::home::now_ms()
}

/// The run a request names: `run_id`, or the older `run_uuid`.
#[derive(Deserialize, Default)]
struct RunRef {
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    run_uuid: Option<String>,
}

impl RunRef {
    fn id(&self) -> MlflowResult<&str> {
        required(
            self.run_id
                .as_deref()
                .filter(|s| !s.is_empty())
                .or(self.run_uuid.as_deref()),
            "run_id",
        )
    }
}

#[derive(Deserialize)]
pub struct CreateRequest {
    #[serde(default)]
    experiment_id: Option<String>,
    #[serde(default, deserialize_with = "de_i64")]
    start_time: Option<i64>,
    #[serde(default)]
    run_name: Option<String>,
    #[serde(default)]
    tags: Vec<KeyValue>,
}

pub async fn create(
    State(ctx): State<AppState>,
    caller: Writer,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    let req: CreateRequest = body(&raw)?;
    let exp_raw = req.experiment_id.as_deref().unwrap_or("0");
    let experiment_id: i64 = exp_raw
        .trim()
        .parse()
        .map_err(|_| MlflowError::not_found(format!("No Experiment with id={exp_raw} exists")))?;
    let tags: Vec<(String, String)> = req
        .tags
        .into_iter()
        // The run's user is the caller; a client cannot name another.
        .filter(|t| t.key != "mlflow.user")
        .map(|t| (t.key, t.value.unwrap_or_default()))
        .collect();
    check_reserved(&ctx, &caller, &tags)?;
    scope::may_create(&ctx, &caller, &tags)?;
    super::check_reserve(&ctx, "creating a run", 0)?;
    // Each run has its own caps on points and keys: the number of runs is capped too.
    let max = ctx.service.output_config().max_runs_per_user;
    let held = ctx.service.with_tracking(|t| t.api_runs_of(&caller.user))?;
    if held >= max {
        return Err(MlflowError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "RESOURCE_LIMIT_EXCEEDED",
            format!(
                "{} already has {held} runs made through the API, the most [output] max_runs_per_user \
                 in gpuq.toml allows (deleted runs count: they stay in the database); ask an admin to \
                 raise it",
                caller.user
            ),
        ));
    }
    let name = req.run_name.filter(|n| !n.is_empty()).or_else(|| {
        tags.iter()
            .find(|(k, _)| k == "mlflow.runName")
            .map(|(_, v)| v.clone())
    });
    let id = new_run_id()?;
    ctx.service.with_tracking_mut(|t| {
        t.create_run(&NewRun {
            id: &id,
            experiment_id,
            name: name.as_deref(),
            user: &caller.user,
            start_time: req.start_time.unwrap_or_else(now),
            tags: &tags,
        })
    })?;
    Ok(Json(json!({ "run": run_json(&load_run(&ctx, &id)?) })))
}

pub async fn get(State(ctx): State<AppState>, RawQuery(q): RawQuery) -> MlflowResult<Json<Value>> {
    let pairs = query_pairs(q.as_deref());
    let r = RunRef {
        run_id: query_one(&pairs, "run_id").map(str::to_string),
        run_uuid: query_one(&pairs, "run_uuid").map(str::to_string),
    };
    Ok(Json(json!({ "run": run_json(&load_run(&ctx, r.id()?)?) })))
}

#[derive(Deserialize)]
pub struct UpdateRequest {
    #[serde(flatten)]
    run: RunRef,
    #[serde(default)]
    status: Option<String>,
    #[serde(default, deserialize_with = "de_i64")]
    end_time: Option<i64>,
    #[serde(default)]
    run_name: Option<String>,
}

pub async fn update(
    State(ctx): State<AppState>,
    caller: Writer,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    let req: UpdateRequest = body(&raw)?;
    let id = req.run.id()?.to_string();
    writable_run(&ctx, &caller, &id)?;
    ctx.service.with_tracking_mut(|t| {
        t.update_run(
            &id,
            &RunUpdate {
                status: req.status.as_deref(),
                end_time: req.end_time,
                name: req.run_name.as_deref().filter(|n| !n.is_empty()),
            },
        )
    })?;
    Ok(Json(
        json!({ "run_info": run_info_json(&load_run(&ctx, &id)?) }),
    ))
}

pub async fn delete(
    State(ctx): State<AppState>,
    caller: Writer,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    lifecycle(ctx, caller, raw, "deleted")
}

pub async fn restore(
    State(ctx): State<AppState>,
    caller: Writer,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    lifecycle(ctx, caller, raw, "active")
}

fn lifecycle(
    ctx: AppState,
    caller: Writer,
    raw: axum::body::Bytes,
    stage: &str,
) -> MlflowResult<Json<Value>> {
    let req: RunRef = body(&raw)?;
    let id = req.id()?.to_string();
    writable_run(&ctx, &caller, &id)?;
    ctx.service
        .with_tracking_mut(|t| t.set_run_lifecycle(&id, stage))?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct SearchRequest {
    #[serde(default)]
    experiment_ids: Vec<String>,
    #[serde(default)]
    filter: Option<String>,
    #[serde(default)]
    run_view_type: Option<String>,
    #[serde(default, deserialize_with = "de_i64")]
    max_results: Option<i64>,
    #[serde(default)]
    order_by: Vec<String>,
    #[serde(default)]
    page_token: Option<String>,
}

fn record(r: &RunRow) -> RunRecord {
    RunRecord {
        run_id: r.id.clone(),
        run_name: r.tags.get("mlflow.runName").cloned().or(r.name.clone()),
        experiment_id: r.experiment_id.to_string(),
        user: r.user.clone(),
        status: r.status.clone(),
        start_time: r.start_time,
        end_time: r.end_time,
        artifact_uri: r.artifact_uri(),
        lifecycle_stage: r.lifecycle_stage.clone(),
        params: r.params.clone(),
        tags: r.tags.clone(),
        metrics: r
            .metrics
            .iter()
            .map(|(k, p)| (k.clone(), p.value))
            .collect(),
    }
}

pub async fn search(
    State(ctx): State<AppState>,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    let req: SearchRequest = body(&raw)?;
    let max = req.max_results.unwrap_or(DEFAULT_RESULTS);
    if !(1..=MAX_RESULTS).contains(&max) {
        return Err(MlflowError::invalid(format!(
            "Invalid value {max} for parameter 'max_results' supplied. It must be at most {MAX_RESULTS}, and at least 1."
        )));
    }
    let filter = search::parse_run_filter(req.filter.as_deref().unwrap_or(""))
        .map_err(|e| MlflowError::invalid(e.message))?;
    let order =
        search::parse_run_order(&req.order_by).map_err(|e| MlflowError::invalid(e.message))?;
    let offset = parse_page_token(req.page_token.as_deref())?;
    let mut experiments = Vec::new();
    for raw in &req.experiment_ids {
        // An id that names no experiment matches no run, as in MLflow.
        if let Ok(id) = raw.trim().parse::<i64>() {
            experiments.push(id);
        }
    }
    let runs = ctx.service.with_tracking(|t| t.runs_in(&experiments))?;
    let mut shown: Vec<(RunRecord, RunRow)> = Vec::new();
    for r in runs {
        if !view_shows(req.run_view_type.as_deref(), &r.lifecycle_stage)? {
            continue;
        }
        let rec = record(&r);
        if filter.matches(&rec) {
            shown.push((rec, r));
        }
    }
    shown.sort_by(|a, b| order.compare(&a.0, &b.0));
    let page: Vec<Value> = shown
        .iter()
        .skip(offset)
        .take(max as usize)
        .map(|(_, r)| run_json(r))
        .collect();
    let mut out = json!({ "runs": page });
    let next = offset + max as usize;
    if next < shown.len() {
        out["next_page_token"] = json!(page_token(next));
    }
    Ok(Json(out))
}

#[derive(Deserialize)]
pub struct MetricRequest {
    #[serde(default)]
    key: String,
    #[serde(default, deserialize_with = "de_value")]
    value: Option<f64>,
    #[serde(default, deserialize_with = "de_i64")]
    timestamp: Option<i64>,
    #[serde(default, deserialize_with = "de_i64")]
    step: Option<i64>,
}

impl MetricRequest {
    fn into_metric(self) -> MlflowResult<MetricIn> {
        required(Some(&self.key), "key")?;
        let value = self.value.ok_or_else(|| {
            MlflowError::invalid(format!(
                "Missing value for required parameter 'value' of metric '{}'.",
                self.key
            ))
        })?;
        Ok(MetricIn {
            key: self.key,
            value,
            time: self.timestamp.unwrap_or_else(now),
            step: Some(self.step.unwrap_or(0)),
        })
    }
}

#[derive(Deserialize)]
pub struct LogMetricRequest {
    #[serde(flatten)]
    run: RunRef,
    #[serde(flatten)]
    metric: MetricRequest,
}

pub async fn log_metric(
    State(ctx): State<AppState>,
    caller: Writer,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    let req: LogMetricRequest = body(&raw)?;
    let batch = Batch {
        metrics: vec![req.metric.into_metric()?],
        ..Default::default()
    };
    write(&ctx, &caller, req.run.id()?, &batch)
}

#[derive(Deserialize)]
pub struct KeyValueRequest {
    #[serde(flatten)]
    run: RunRef,
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: Option<String>,
}

pub async fn log_param(
    State(ctx): State<AppState>,
    caller: Writer,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    log_key_value(&ctx, &caller, &raw, |kv| Batch {
        params: vec![kv],
        ..Default::default()
    })
}

pub async fn set_tag(
    State(ctx): State<AppState>,
    caller: Writer,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    log_key_value(&ctx, &caller, &raw, |kv| Batch {
        tags: vec![kv],
        ..Default::default()
    })
}

/// One param or tag, as log-parameter and set-tag carry it.
fn log_key_value(
    ctx: &AppState,
    caller: &Writer,
    raw: &[u8],
    batch: impl FnOnce((String, String)) -> Batch,
) -> MlflowResult<Json<Value>> {
    let req: KeyValueRequest = body(raw)?;
    required(Some(&req.key), "key")?;
    let id = req.run.id()?.to_string();
    write(
        ctx,
        caller,
        &id,
        &batch((req.key, req.value.unwrap_or_default())),
    )
}

pub async fn delete_tag(
    State(ctx): State<AppState>,
    caller: Writer,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    let req: KeyValueRequest = body(&raw)?;
    let id = req.run.id()?.to_string();
    required(Some(&req.key), "key")?;
    if is_gpuq_tag(&req.key) {
        return Err(reserved(&req.key));
    }
    writable_run(&ctx, &caller, &id)?;
    ctx.service
        .with_tracking_mut(|t| t.delete_tag(&id, &req.key))?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct BatchRequest {
    #[serde(flatten)]
    run: RunRef,
    #[serde(default)]
    metrics: Vec<MetricRequest>,
    #[serde(default)]
    params: Vec<KeyValue>,
    #[serde(default)]
    tags: Vec<KeyValue>,
}

pub async fn log_batch(
    State(ctx): State<AppState>,
    caller: Writer,
    raw: axum::body::Bytes,
) -> MlflowResult<Json<Value>> {
    let req: BatchRequest = body(&raw)?;
    let batch = Batch {
        metrics: req
            .metrics
            .into_iter()
            .map(MetricRequest::into_metric)
            .collect::<MlflowResult<_>>()?,
        params: req
            .params
            .into_iter()
            .map(|p| (p.key, p.value.unwrap_or_default()))
            .collect(),
        tags: req
            .tags
            .into_iter()
            .map(|t| (t.key, t.value.unwrap_or_default()))
            .collect(),
    };
    write(&ctx, &caller, req.run.id()?, &batch)
}

/// A batch checked against MLflow's limits, then written whole to a run the caller may write.
fn write(ctx: &AppState, caller: &Writer, id: &str, batch: &Batch) -> MlflowResult<Json<Value>> {
    gpuq_store::tracking::check_batch(batch)?;
    check_reserved(ctx, caller, &batch.tags)?;
    writable_run(ctx, caller, id)?;
    // mlflow.user names the run's gpuq user; a client's own idea of it is dropped.
    let mut batch = batch.clone();
    batch.tags.retain(|(k, _)| k != "mlflow.user");
    // Over the job's or the user's rate (or on a disk at its reserve) the excess
    // is dropped and counted, never refused: a client must not stall its job.
    let (admitted, earlier) = ctx
        .service
        .admit_metrics(id, &caller.user, batch.metrics.len());
    batch.metrics.truncate(admitted);
    // Params and tags go to the same disk: at the reserve they are dropped and
    // counted with the points, never refused, for the same reason.
    let keyed = batch.params.len() + batch.tags.len();
    if keyed > 0 && ctx.service.disk_low() {
        ctx.service
            .count_dropped(id, gpuq_store::tracking::DropReason::Disk, keyed as u64);
        batch.params.clear();
        batch.tags.clear();
    }
    if batch.metrics.is_empty() && batch.params.is_empty() && batch.tags.is_empty() {
        return Ok(Json(json!({})));
    }
    let caps = ctx.service.metric_caps();
    let now = gpuq_api::home::now_ms();
    match ctx
        .service
        .with_tracking_mut(|t| t.log_batch_capped(id, &batch, caps, &earlier, now))
    {
        Ok(dropped) => ctx.service.say_dropped(id, &dropped),
        Err(e) => {
            ctx.service.unrecorded_drops(id, earlier);
            return Err(e.into());
        }
    }
    Ok(Json(json!({})))
}

/// `gpuq.*` tags are the daemon's: a run's job, sweep and trial, which gpuq
/// reads back; nobody sets or deletes them through the API.
fn is_gpuq_tag(key: &str) -> bool {
    key.get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case("gpuq."))
}

fn reserved(key: &str) -> MlflowError {
    MlflowError::invalid(format!(
        "Invalid value for parameter 'key': the tag '{key}' is reserved (gpuq sets the gpuq.* tags: \
         a run's job, sweep and trial); choose a key outside gpuq.*"
    ))
}

/// Refuses the reserved tags: any `gpuq.*`, and an `mlflow.parentRunId` that
/// would nest the run under a run that is not the caller's.
fn check_reserved(ctx: &AppState, caller: &Caller, tags: &[(String, String)]) -> MlflowResult<()> {
    for (key, value) in tags {
        if is_gpuq_tag(key) {
            return Err(reserved(key));
        }
        if key == "mlflow.parentRunId" {
            let user = ctx.service.with_tracking(|t| t.run_user(value))?;
            if !(caller.owner || user.as_deref() == Some(caller.user.as_str())) {
                let whose = user.map_or_else(|| "no run".to_string(), |u| format!("a run of {u}"));
                return Err(MlflowError::invalid(format!(
                    "Invalid value for parameter 'mlflow.parentRunId': a run nests only under a run \
                     of its own user ({}); {value:?} is {whose}",
                    caller.user
                )));
            }
        }
    }
    Ok(())
}
