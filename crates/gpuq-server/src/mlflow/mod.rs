//! MLflow's tracking REST API (2.0), served from the tracking store so the
//! unmodified `mlflow` client logs to gpuq: `MLFLOW_TRACKING_URI` is the daemon,
//! `MLFLOW_TRACKING_TOKEN` a gpuq token. Requests and replies use MLflow's JSON
//! (protobuf field names; 64-bit integers as numbers or strings; NaN and
//! infinities as the strings "NaN", "Infinity", "-Infinity"); errors use its
//! shape, `{"error_code": …, "message": …}`.
//!
//! Permissions: every caller reads runs; a run and its artifacts are written
//! (its artifacts read) only by its user, never by an admin acting for them;
//! an experiment is changed by whoever made it, or an admin, until a job's run
//! is filed under it (a project's or a sweep's name): then by admins only.
//! `gpuq.*` tags are the daemon's, and a run nests (`mlflow.parentRunId`) only
//! under its own user's runs. A job's token writes only its job's run and the
//! runs nested under it (`scope`). One file per group of endpoints.

mod artifacts;
mod experiments;
mod history;
mod runs;
pub mod scope;

use crate::routes::AppState;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gpuq_api::tracking::{parse_special, MetricValue};
use gpuq_store::tracking::{ExperimentRow, RunRow, TrackingError};
use gpuq_store::StoreError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

/// The tracking endpoints, under both prefixes the client and MLflow's own UI use.
pub fn router() -> Router<AppState> {
    let mut r = Router::new();
    for prefix in ["/api/2.0/mlflow", "/ajax-api/2.0/mlflow"] {
        let at = |p: &str| format!("{prefix}{p}");
        r = r
            .route(&at("/experiments/create"), post(experiments::create))
            .route(&at("/experiments/get"), get(experiments::get))
            .route(
                &at("/experiments/get-by-name"),
                get(experiments::get_by_name),
            )
            .route(
                &at("/experiments/search"),
                post(experiments::search).get(experiments::search_get),
            )
            .route(&at("/experiments/update"), post(experiments::update))
            .route(&at("/experiments/delete"), post(experiments::delete))
            .route(&at("/experiments/restore"), post(experiments::restore))
            .route(
                &at("/experiments/set-experiment-tag"),
                post(experiments::set_tag),
            )
            .route(
                &at("/experiments/delete-experiment-tag"),
                post(experiments::delete_tag),
            )
            .route(&at("/runs/create"), post(runs::create))
            .route(&at("/runs/get"), get(runs::get))
            .route(&at("/runs/update"), post(runs::update))
            .route(&at("/runs/delete"), post(runs::delete))
            .route(&at("/runs/restore"), post(runs::restore))
            .route(&at("/runs/search"), post(runs::search))
            .route(&at("/runs/log-metric"), post(runs::log_metric))
            .route(&at("/runs/log-parameter"), post(runs::log_param))
            .route(&at("/runs/set-tag"), post(runs::set_tag))
            .route(&at("/runs/delete-tag"), post(runs::delete_tag))
            .route(&at("/runs/log-batch"), post(runs::log_batch))
            // gpuq keeps no logged models (log_model's registry); the artifact
            // client asks for them when listing a subdirectory, and there are none.
            .route(&at("/logged-models/search"), post(no_logged_models))
            .route(&at("/metrics/get-history"), get(history::get_history))
            .route(
                &at("/metrics/get-history-bulk-interval"),
                get(history::bulk_interval),
            );
    }
    for prefix in [
        "/api/2.0/mlflow-artifacts",
        "/ajax-api/2.0/mlflow-artifacts",
    ] {
        r = r
            .route(&format!("{prefix}/artifacts"), get(artifacts::list))
            .route(
                &format!("{prefix}/artifacts/*path"),
                get(artifacts::download)
                    .put(artifacts::upload)
                    .delete(artifacts::remove)
                    // The upload counts its bytes against [output] artifact_max_size.
                    .layer(axum::extract::DefaultBodyLimit::disable()),
            );
    }
    r
}

async fn no_logged_models() -> Json<Value> {
    Json(json!({ "models": [] }))
}

/// True for the paths this module serves: their errors take MLflow's shape.
pub fn is_mlflow_path(path: &str) -> bool {
    ["/api/2.0/mlflow", "/ajax-api/2.0/mlflow"]
        .iter()
        .any(|p| path.starts_with(p))
}

/// An error in MLflow's shape, with the status its client expects.
#[derive(Debug)]
pub struct MlflowError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl MlflowError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_PARAMETER_VALUE", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "RESOURCE_DOES_NOT_EXIST", message)
    }

    pub fn denied(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "PERMISSION_DENIED", message)
    }

    /// The MLflow error code for an HTTP status gpuq produced elsewhere.
    pub fn code_for(status: StatusCode) -> &'static str {
        match status {
            StatusCode::UNAUTHORIZED => "UNAUTHENTICATED",
            StatusCode::FORBIDDEN => "PERMISSION_DENIED",
            StatusCode::NOT_FOUND => "ENDPOINT_NOT_FOUND",
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::BAD_REQUEST => "INVALID_PARAMETER_VALUE",
            StatusCode::TOO_MANY_REQUESTS => "REQUEST_LIMIT_EXCEEDED",
            s if s.is_server_error() => "INTERNAL_ERROR",
            _ => "BAD_REQUEST",
        }
    }

    pub fn body(code: &str, message: &str) -> Value {
        json!({ "error_code": code, "message": message })
    }
}

impl IntoResponse for MlflowError {
    fn into_response(self) -> Response {
        (self.status, Json(Self::body(self.code, &self.message))).into_response()
    }
}

impl From<TrackingError> for MlflowError {
    fn from(e: TrackingError) -> Self {
        match e {
            TrackingError::NotFound(m) => Self::not_found(m),
            TrackingError::AlreadyExists(m) => {
                Self::new(StatusCode::BAD_REQUEST, "RESOURCE_ALREADY_EXISTS", m)
            }
            TrackingError::Invalid(m) => Self::invalid(m),
            TrackingError::Store(e) => e.into(),
        }
    }
}

impl From<StoreError> for MlflowError {
    fn from(e: StoreError) -> Self {
        let status = match e {
            StoreError::DiskFull => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, "INTERNAL_ERROR", e.to_string())
    }
}

impl From<crate::service::ServiceError> for MlflowError {
    fn from(e: crate::service::ServiceError) -> Self {
        match e {
            crate::service::ServiceError::NoSuchJob(_) => Self::not_found(e.to_string()),
            crate::service::ServiceError::Store(s) => s.into(),
            other => Self::invalid(other.to_string()),
        }
    }
}

pub type MlflowResult<T> = Result<T, MlflowError>;

/// Refuses a write of `more` bytes (`what`) that would take the data
/// directory's disk below the space kept for the database: 507, as a full disk.
pub fn check_reserve(ctx: &AppState, what: &str, more: u64) -> MlflowResult<()> {
    if ctx.service.would_breach_reserve(more) {
        return Err(MlflowError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "INTERNAL_ERROR",
            format!(
                "{what}: refused, the disk holding the gpuq database is down to the space kept for it \
                 ([output] disk_reserve in gpuq.toml); free space, then try again"
            ),
        ));
    }
    Ok(())
}

/// A JSON body in MLflow's request shape; unknown fields are ignored, as MLflow does.
pub fn body<T: DeserializeOwned>(bytes: &[u8]) -> MlflowResult<T> {
    let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        bytes
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || inner.is_syntax() || inner.is_eof() {
            MlflowError::new(
                StatusCode::BAD_REQUEST,
                "MALFORMED_REQUEST",
                format!("Malformed request body: {inner}"),
            )
        } else {
            MlflowError::invalid(format!("Invalid value for parameter '{path}': {inner}"))
        }
    })
}

/// A GET request's query string as MLflow's client sends it (repeated keys for lists).
pub fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(raw.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

pub fn query_one<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

pub fn required<'a>(value: Option<&'a str>, name: &str) -> MlflowResult<&'a str> {
    value.filter(|v| !v.is_empty()).ok_or_else(|| {
        MlflowError::invalid(format!("Missing value for required parameter '{name}'."))
    })
}

/// A 64-bit integer as MLflow's JSON writes it: a number, or a string of digits.
pub fn de_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(i64),
        Float(f64),
        Text(String),
    }
    match Option::<Raw>::deserialize(d)? {
        None => Ok(None),
        Some(Raw::Int(i)) => Ok(Some(i)),
        Some(Raw::Float(f)) if f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(Some(f as i64)),
        Some(Raw::Float(f)) => Err(serde::de::Error::custom(format!("{f} is not an integer"))),
        Some(Raw::Text(t)) => t
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("{t:?} is not an integer"))),
    }
}

/// A metric value: a number, or "NaN" / "Infinity" / "-Infinity".
pub fn de_value<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(f64),
        Text(String),
    }
    match Option::<Raw>::deserialize(d)? {
        None => Ok(None),
        Some(Raw::Number(v)) => Ok(Some(v)),
        Some(Raw::Text(t)) => parse_special(&t)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("{t:?} is not a number"))),
    }
}

/// A key and a value, as MLflow's params and tags travel.
#[derive(Debug, Deserialize)]
pub struct KeyValue {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value: Option<String>,
}

pub fn experiment_json(e: &ExperimentRow) -> Value {
    json!({
        "experiment_id": e.id.to_string(),
        "name": e.name,
        "artifact_location": e.artifact_location,
        "lifecycle_stage": e.lifecycle_stage,
        "creation_time": e.created_at,
        "last_update_time": e.updated_at,
        "tags": e.tags.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>(),
    })
}

pub fn run_info_json(r: &RunRow) -> Value {
    let mut info = json!({
        "run_id": r.id,
        "run_uuid": r.id,
        "experiment_id": r.experiment_id.to_string(),
        "user_id": r.user,
        "status": r.status,
        "artifact_uri": r.artifact_uri(),
        "lifecycle_stage": r.lifecycle_stage,
    });
    let obj = info.as_object_mut().expect("an object");
    if let Some(name) = r.tags.get("mlflow.runName").or(r.name.as_ref()) {
        obj.insert("run_name".into(), json!(name));
    }
    if let Some(t) = r.start_time {
        obj.insert("start_time".into(), json!(t));
    }
    if let Some(t) = r.end_time {
        obj.insert("end_time".into(), json!(t));
    }
    info
}

pub fn metric_json(key: &str, p: &gpuq_core::tracking::downsample::Point) -> Value {
    json!({
        "key": key,
        "value": MetricValue(p.value),
        "timestamp": p.time,
        "step": p.step,
    })
}

pub fn run_json(r: &RunRow) -> Value {
    let kv = |m: &std::collections::BTreeMap<String, String>| {
        m.iter()
            .map(|(k, v)| json!({"key": k, "value": v}))
            .collect::<Vec<_>>()
    };
    json!({
        "info": run_info_json(r),
        "data": {
            "metrics": r.metrics.iter().map(|(k, p)| metric_json(k, p)).collect::<Vec<_>>(),
            "params": kv(&r.params),
            "tags": kv(&r.tags),
        },
        "inputs": {},
    })
}

/// A run, or MLflow's 404.
pub fn load_run(ctx: &AppState, id: &str) -> MlflowResult<RunRow> {
    ctx.service
        .with_tracking(|t| t.run(id))?
        .ok_or_else(|| MlflowError::not_found(format!("Run with id={id} not found")))
}

/// A run the caller may write: their own (the daemon's own account may write
/// any), and with a job's token only that job's run and the runs nested under
/// it. An admin manages the queue but never writes as someone else, so an
/// admin's token cannot put words, metrics or files in another user's run.
pub fn writable_run(ctx: &AppState, caller: &scope::Writer, id: &str) -> MlflowResult<()> {
    let user = ctx
        .service
        .with_tracking(|t| t.run_user(id))?
        .ok_or_else(|| MlflowError::not_found(format!("Run with id={id} not found")))?;
    if caller.owner || caller.user == user {
        return scope::may_write(ctx, caller, id);
    }
    Err(MlflowError::denied(format!(
        "run {id} belongs to {user}; only its user may change it, and you are {}",
        caller.user
    )))
}

/// An opaque page token: the offset of the next page.
pub fn page_token(offset: usize) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{{\"offset\":{offset}}}"))
}

pub fn parse_page_token(token: Option<&str>) -> MlflowResult<usize> {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Ok(0);
    };
    use base64::Engine;
    let bad = || {
        MlflowError::invalid(format!(
            "Invalid page token {token:?}: pass back the next_page_token of the previous page"
        ))
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    v.get("offset")
        .and_then(Value::as_u64)
        .map(|o| o as usize)
        .ok_or_else(bad)
}

/// A new run id: 32 hex digits, the first a letter, so it never reads as a job's number.
pub fn new_run_id() -> MlflowResult<String> {
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes).map_err(|e| {
        MlflowError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            format!("no randomness for a run id: {e}"),
        )
    })?;
    let mut id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let first = b"abcdef"[(bytes[0] % 6) as usize] as char;
    id.replace_range(0..1, &first.to_string());
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_garbage_is_refused() {
        assert_eq!(parse_page_token(Some(&page_token(1234))).unwrap(), 1234);
        assert_eq!(parse_page_token(None).unwrap(), 0);
        assert!(parse_page_token(Some("!!")).is_err());
        assert!(parse_page_token(Some("eyJ4IjoxfQ")).is_err());
    }

    #[test]
    fn run_ids_are_hex_and_never_numbers() {
        for _ in 0..50 {
            let id = new_run_id().unwrap();
            assert_eq!(id.len(), 32);
            assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
            assert!(id.parse::<u64>().is_err());
        }
    }

    #[test]
    fn integers_and_values_arrive_in_every_spelling() {
        #[derive(Debug, Deserialize)]
        struct T {
            #[serde(default, deserialize_with = "de_i64")]
            n: Option<i64>,
            #[serde(default, deserialize_with = "de_value")]
            v: Option<f64>,
        }
        let t: T = body(br#"{"n": "1700000000000", "v": "NaN"}"#).unwrap();
        assert_eq!(t.n, Some(1_700_000_000_000));
        assert!(t.v.unwrap().is_nan());
        let t: T = body(br#"{"n": 5, "v": "-Infinity"}"#).unwrap();
        assert_eq!((t.n, t.v), (Some(5), Some(f64::NEG_INFINITY)));
        let e = body::<T>(br#"{"n": "five"}"#).unwrap_err();
        assert!(e.message.contains("'n'"), "{}", e.message);
        let e = body::<T>(b"{not json").unwrap_err();
        assert_eq!(e.code, "MALFORMED_REQUEST");
    }
}
