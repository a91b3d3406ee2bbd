//! HTTP handlers: one small function per endpoint, each a thin shell over the service.

use super::identity::Caller;
use super::service::{Service, ServiceError};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use gpuq_api::{
    ErrorBody, JobDetail, ServerInfo, HEADER_LOG_ATTEMPT, HEADER_LOG_COMPLETE, HEADER_LOG_OFFSET,
};
use gpuq_core::{JobId, JobState};
use gpuq_store::{ListFilter, StoreError};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

pub type AppState = Arc<AppContext>;

pub struct AppContext {
    /// Becomes true when the daemon stops: long-lived streams end.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    pub service: Arc<Service>,
    pub token: String,
    pub info: ServerInfo,
    pub identity: Arc<super::identity::Identity>,
    /// The dashboard's address and session cookie.
    pub web: super::web::WebConfig,
}

pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    /// MLflow's error shape instead of the API's (for its clients' paths).
    mlflow: bool,
}

impl ApiError {
    /// An error for an MLflow client: `{"error_code", "message"}`.
    pub fn mlflow(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            mlflow: true,
            ..Self::new(status, message)
        }
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn new(status: StatusCode, error: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorBody {
                error: error.into(),
                field: None,
            },
            mlflow: false,
        }
    }

    /// An error blamed on one field of the request.
    pub fn field(status: StatusCode, error: impl Into<String>, field: String) -> Self {
        Self {
            status,
            body: ErrorBody {
                error: error.into(),
                field: Some(field),
            },
            mlflow: false,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.mlflow {
            let code = super::mlflow::MlflowError::code_for(self.status);
            let body = super::mlflow::MlflowError::body(code, &self.body.error);
            return (self.status, Json(body)).into_response();
        }
        (self.status, Json(self.body)).into_response()
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::BadSpec(s) => Self {
                status: StatusCode::BAD_REQUEST,
                body: ErrorBody {
                    error: s.to_string(),
                    field: Some(s.field),
                },
                mlflow: false,
            },
            ServiceError::NoSuchJob(_) | ServiceError::NotFound(_) => {
                Self::new(StatusCode::NOT_FOUND, e.to_string())
            }
            ServiceError::Forbidden(_) => Self::new(StatusCode::FORBIDDEN, e.to_string()),
            ServiceError::Conflict(_) => Self::new(StatusCode::CONFLICT, e.to_string()),
            ServiceError::Quota(_) => Self::new(StatusCode::TOO_MANY_REQUESTS, e.to_string()),
            ServiceError::Budget(_) => Self::new(StatusCode::PAYMENT_REQUIRED, e.to_string()),
            ServiceError::Store(StoreError::DiskFull) => {
                Self::new(StatusCode::INSUFFICIENT_STORAGE, e.to_string())
            }
            ServiceError::Store(_) => Self::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

pub async fn health() -> &'static str {
    "ok"
}

pub async fn openapi() -> Json<serde_json::Value> {
    Json(gpuq_api::openapi::document())
}

pub async fn info(State(ctx): State<AppState>) -> Json<ServerInfo> {
    Json(ctx.info.clone())
}

pub async fn submit(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<gpuq_core::Job>)> {
    let req = parse_body(&body, "submit request")?;
    Ok((StatusCode::CREATED, Json(ctx.service.submit(req, &caller)?)))
}

/// Parsed here rather than by axum's extractor, so a bad body gets the API's
/// error shape, with serde's words for what is wrong and the field's path.
pub(crate) fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> ApiResult<T> {
    let bad = |field: String, e: serde_json::Error| match field.as_str() {
        "." => ApiError::new(StatusCode::BAD_REQUEST, format!("invalid {what}: {e}")),
        _ => ApiError::field(
            StatusCode::BAD_REQUEST,
            format!("invalid {what}: {field}: {e}"),
            field,
        ),
    };
    let mut json = serde_json::Deserializer::from_slice(body);
    let req = serde_path_to_error::deserialize(&mut json)
        .map_err(|e| bad(e.path().to_string(), e.into_inner()))?;
    json.end().map_err(|e| bad(".".into(), e))?;
    Ok(req)
}

/// Environment values are the owner's: others (not admins) see them masked.
pub(crate) fn redact(mut job: gpuq_core::Job, caller: &Caller) -> gpuq_core::Job {
    if !(caller.admin || caller.user == job.user) {
        gpuq_api::repro::hide_values(&mut job.spec.env);
    }
    job
}

/// Refuses an action on someone else's job unless the caller is an admin.
pub(crate) fn authorize(
    ctx: &AppContext,
    caller: &Caller,
    id: JobId,
    action: &str,
) -> ApiResult<gpuq_core::Job> {
    let job = ctx.service.job(id)?;
    if caller.admin || caller.user == job.user {
        return Ok(job);
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "job {id} belongs to {}; only its owner or an admin (`admins` in gpuq.toml) may {action} it, and you are {}",
            job.user, caller.user
        ),
    ))
}

#[derive(Deserialize)]
pub struct ListQuery {
    /// Comma-separated states.
    pub(crate) state: Option<String>,
    pub(crate) limit: Option<u32>,
    pub(crate) user: Option<String>,
    pub(crate) project: Option<String>,
    /// Paging, newest first: jobs older than this id.
    pub(crate) before: Option<JobId>,
    /// Paging back: jobs newer than this id.
    pub(crate) after: Option<JobId>,
}

/// `?state=queued,running&user=U&project=P&limit=N&before=ID` as the store takes it.
pub(crate) fn list_filter(q: &ListQuery) -> ApiResult<ListFilter> {
    let mut states = Vec::new();
    for s in q
        .state
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
    {
        states.push(s.parse::<JobState>().map_err(|e| {
            ApiError::field(StatusCode::BAD_REQUEST, e.to_string(), "state".into())
        })?);
    }
    let label = |v: &Option<String>, field: &str| -> ApiResult<Option<String>> {
        match v.as_deref() {
            None | Some("") => Ok(None),
            Some(text) => {
                gpuq_core::limits::check_label(text, field).map_err(ServiceError::from)?;
                Ok(Some(text.to_string()))
            }
        }
    };
    Ok(ListFilter {
        states,
        limit: q.limit,
        user: label(&q.user, "user")?,
        project: label(&q.project, "project")?,
        before: q.before,
        after: q.after,
    })
}

/// `GET /v1/jobs`: newest first, a page at a time with `limit` and `before`
/// (or `after`); the `x-total-count` header says how many match the filter.
pub async fn list(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ListQuery>,
) -> ApiResult<(
    [(axum::http::HeaderName, String); 1],
    Json<Vec<gpuq_core::Job>>,
)> {
    let filter = list_filter(&q)?;
    let (jobs, total) = ctx
        .service
        .with_store(|s| Ok((s.list(&filter)?, s.count(&filter)?)))?;
    let now = gpuq_api::home::now_ms();
    Ok((
        [(
            axum::http::HeaderName::from_static("x-total-count"),
            total.to_string(),
        )],
        Json(
            jobs.into_iter()
                .map(|mut j| {
                    ctx.service.add_live_state(&mut j, now);
                    redact(j, &caller)
                })
                .collect(),
        ),
    ))
}

pub async fn show(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<JobDetail>> {
    // Everyone may see the queue; environment values stay with the owner.
    let mut job = redact(ctx.service.job(id)?, &caller);
    ctx.service
        .add_live_state(&mut job, gpuq_api::home::now_ms());
    let (mut attempts, events) = ctx
        .service
        .with_store(|s| Ok((s.attempts(id)?, s.events(id)?)))?;
    let gpu_usage = ctx.service.job_gpu_usage(&job, &attempts);
    ctx.service.add_running_attempt_usage(&job, &mut attempts);
    ctx.service
        .add_running_attempt_host_usage(&job, &mut attempts);
    let resources = Some(ctx.service.resources_of(&job.spec));
    let memory_limit_mib = Some(ctx.service.memory_limit_of(&job.spec));
    Ok(Json(JobDetail {
        job,
        attempts,
        events,
        gpu_usage,
        resources,
        memory_limit_mib,
    }))
}

pub async fn cancel(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<gpuq_core::Job>> {
    authorize(&ctx, &caller, id, "cancel")?;
    Ok(Json(ctx.service.cancel(id, &caller.user)?))
}

pub async fn requeue(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<gpuq_core::Job>> {
    authorize(&ctx, &caller, id, "requeue")?;
    Ok(Json(ctx.service.requeue(id, &caller.user)?))
}

pub async fn hold(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<gpuq_core::Job>> {
    authorize(&ctx, &caller, id, "hold")?;
    Ok(Json(ctx.service.hold(id, true, &caller.user)?))
}

pub async fn release(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<gpuq_core::Job>> {
    authorize(&ctx, &caller, id, "release")?;
    Ok(Json(ctx.service.hold(id, false, &caller.user)?))
}

pub fn require_admin(caller: &Caller, what: &str) -> ApiResult<()> {
    if caller.admin {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "only an admin (`admins` in gpuq.toml) may {what}; you are {}",
                caller.user
            ),
        ))
    }
}

pub async fn create_token(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    credential: Option<Extension<super::auth::Credential>>,
    Json(req): Json<gpuq_api::TokenRequest>,
) -> ApiResult<(StatusCode, Json<gpuq_api::TokenCreated>)> {
    require_admin(&caller, "create tokens")?;
    if credential.is_some_and(|Extension(c)| c == super::auth::Credential::Browser) {
        // A token outlives the session: a stolen session must not become one.
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "tokens are made with `gpuq token create`, not from a browser session",
        ));
    }
    if req.user.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "user: give the user the token acts as",
        ));
    }
    gpuq_core::limits::check_label(&req.user, "user").map_err(ServiceError::from)?;
    if !ctx.identity.may_act_for(&caller, &req.user) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "only the daemon's owner ({}) may make a token for another user; you are {}",
                ctx.identity.owner, caller.user
            ),
        ));
    }
    // A token acts as its user: only for an account jobs may run as.
    ctx.identity
        .job_account(&req.user)
        .map_err(|why| ApiError::new(StatusCode::BAD_REQUEST, format!("user: {why}")))?;
    let token = super::identity::new_token()
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e))?;
    let id = ctx
        .service
        .create_token(&req.user, &super::identity::hash_token(&token))?;
    Ok((
        StatusCode::CREATED,
        Json(gpuq_api::TokenCreated {
            id,
            user: req.user,
            token,
        }),
    ))
}

pub async fn list_tokens(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<Vec<gpuq_api::TokenInfo>>> {
    require_admin(&caller, "list tokens")?;
    let tokens = ctx.service.with_store(|s| s.tokens())?;
    Ok(Json(
        tokens
            .into_iter()
            .map(|t| gpuq_api::TokenInfo {
                id: t.id,
                user: t.user,
                created_at: t.created_at,
                revoked_at: t.revoked_at,
            })
            .collect(),
    ))
}

pub async fn revoke_token(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<i64>,
) -> ApiResult<StatusCode> {
    require_admin(&caller, "revoke tokens")?;
    if ctx.service.revoke_token(id)? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("token {id} does not exist or is already revoked"),
        ))
    }
}

pub async fn whoami(Extension(caller): Extension<Caller>) -> Json<gpuq_api::WhoAmI> {
    Json(gpuq_api::WhoAmI {
        user: caller.user,
        admin: caller.admin,
    })
}

pub async fn explain(
    State(ctx): State<AppState>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<gpuq_api::Explanation>> {
    Ok(Json(gpuq_api::Explanation {
        id,
        explanation: ctx.service.explain(id)?,
    }))
}

#[derive(Deserialize)]
pub struct ExplainQuery {
    /// Comma-separated job ids: only these (a page of the queue); default every queued job.
    ids: Option<String>,
}

pub async fn explain_queued(
    State(ctx): State<AppState>,
    Query(q): Query<ExplainQuery>,
) -> ApiResult<Json<Vec<gpuq_api::Explanation>>> {
    let wanted: Option<std::collections::HashSet<JobId>> = match q.ids.as_deref() {
        None | Some("") => None,
        Some(text) => Some(
            text.split(',')
                .map(|id| {
                    id.trim().parse::<JobId>().map_err(|_| {
                        ApiError::field(
                            StatusCode::BAD_REQUEST,
                            format!("ids: {id:?} is not a job id; give ids separated by commas"),
                            "ids".into(),
                        )
                    })
                })
                .collect::<ApiResult<_>>()?,
        ),
    };
    let mut all: Vec<gpuq_api::Explanation> = ctx
        .service
        .explain_queued()?
        .into_iter()
        .filter(|(id, _)| wanted.as_ref().is_none_or(|w| w.contains(id)))
        .map(|(id, explanation)| gpuq_api::Explanation { id, explanation })
        .collect();
    all.sort_by_key(|e| e.id);
    Ok(Json(all))
}

pub async fn usage(State(ctx): State<AppState>) -> ApiResult<Json<gpuq_api::Usage>> {
    Ok(Json(ctx.service.usage()?))
}

pub async fn queue(State(ctx): State<AppState>) -> Json<gpuq_api::QueueStatus> {
    Json(gpuq_api::QueueStatus {
        drained: ctx.service.drained(),
    })
}

pub async fn drain(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<gpuq_api::QueueStatus>> {
    require_admin(&caller, "drain the queue")?;
    ctx.service.set_drained(true)?;
    Ok(queue(State(ctx)).await)
}

pub async fn undrain(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Json<gpuq_api::QueueStatus>> {
    require_admin(&caller, "undrain the queue")?;
    ctx.service.set_drained(false)?;
    Ok(queue(State(ctx)).await)
}

#[derive(Deserialize)]
pub struct WaitQuery {
    /// Seconds to hold the request at most (default 30, at most 300).
    timeout: Option<u64>,
}

pub async fn wait(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
    Query(q): Query<WaitQuery>,
) -> ApiResult<Json<gpuq_core::Job>> {
    let deadline =
        tokio::time::Instant::now() + Duration::from_secs(q.timeout.unwrap_or(30).min(300));
    let mut changes = ctx.service.subscribe();
    loop {
        changes.borrow_and_update();
        let job = ctx.service.job(id)?;
        if job.state.is_terminal() {
            return Ok(Json(redact(job, &caller)));
        }
        if tokio::time::timeout_at(deadline, changes.changed())
            .await
            .is_err()
        {
            return Ok(Json(redact(job, &caller)));
        }
    }
}

#[derive(Deserialize)]
pub struct LogQuery {
    attempt: Option<u32>,
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    follow: bool,
    /// Start at most this many bytes before the end (a page opening a long log).
    tail: Option<u64>,
}

/// Largest piece of log returned by one request.
const LOG_CHUNK: u64 = 1 << 20;
/// How long a follow request is held when nothing new arrives.
const FOLLOW_HOLD: Duration = Duration::from_secs(20);
/// The job writes its log directly; a held follow request looks at the file this often.
const FOLLOW_CHECK: Duration = Duration::from_millis(50);

pub async fn log(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
    Query(q): Query<LogQuery>,
) -> ApiResult<Response> {
    authorize(&ctx, &caller, id, "read the log of")?;
    let deadline = tokio::time::Instant::now() + FOLLOW_HOLD;
    let mut changes = ctx.service.subscribe();
    loop {
        changes.borrow_and_update();
        // Read the state before the file: if the attempt had ended, the file is complete.
        let job = ctx.service.job(id)?;
        let attempt = q.attempt.unwrap_or(job.attempt);
        if attempt > job.attempt || (attempt == 0 && job.attempt == 0) {
            if q.attempt.is_some()
                && !(job.state == JobState::Queued || job.state == JobState::Running)
            {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("job {id} has no attempt {attempt}"),
                ));
            }
            // Not started yet.
            if job.state.is_terminal() {
                return Ok(log_response(Vec::new(), q.offset, attempt, true));
            }
        } else {
            let ended = attempt < job.attempt || job.state != JobState::Running;
            let path = ctx.service.log_path(id, attempt);
            let offset = match q.tail {
                Some(tail) => {
                    let len = tokio::fs::metadata(&path).await.map_or(0, |m| m.len());
                    q.offset.max(len.saturating_sub(tail))
                }
                None => q.offset,
            };
            let data = read_from(&path, offset).await;
            if !data.is_empty() || ended || !q.follow {
                let complete = ended && data.len() < LOG_CHUNK as usize;
                let next = offset + data.len() as u64;
                return Ok(log_response(data, next, attempt, complete));
            }
        }
        if !q.follow {
            return Ok(log_response(Vec::new(), q.offset, attempt, false));
        }
        let wait = tokio::time::timeout(FOLLOW_CHECK, changes.changed());
        if tokio::time::Instant::now() >= deadline {
            return Ok(log_response(Vec::new(), q.offset, attempt, false));
        }
        let _ = wait.await;
    }
}

async fn read_from(path: &std::path::Path, offset: u64) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let Ok(mut f) = tokio::fs::File::open(path).await else {
        return Vec::new();
    };
    if f.seek(std::io::SeekFrom::Start(offset)).await.is_err() {
        return Vec::new();
    }
    let mut buf = Vec::new();
    let _ = f.take(LOG_CHUNK).read_to_end(&mut buf).await;
    buf
}

fn log_response(data: Vec<u8>, next: u64, attempt: u32, complete: bool) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        "content-type",
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(HEADER_LOG_OFFSET, HeaderValue::from(next));
    headers.insert(HEADER_LOG_ATTEMPT, HeaderValue::from(attempt));
    headers.insert(
        HEADER_LOG_COMPLETE,
        HeaderValue::from_static(if complete { "true" } else { "false" }),
    );
    (headers, data).into_response()
}

pub async fn gpus(State(ctx): State<AppState>) -> ApiResult<Json<Vec<gpuq_api::GpuStatus>>> {
    Ok(Json(ctx.service.gpu_status()?))
}

#[derive(Deserialize)]
pub struct HistoryQuery {
    /// Epoch ms; default: everything kept.
    since: Option<i64>,
    /// Points per GPU at most (runs summarised); default: every point kept.
    max_points: Option<usize>,
}

const MAX_HISTORY_POINTS: usize = 20_000;

pub async fn gpu_history(
    State(ctx): State<AppState>,
    Query(q): Query<HistoryQuery>,
) -> ApiResult<Json<Vec<gpuq_api::GpuHistory>>> {
    let mut history = ctx.service.gpu_history(q.since.unwrap_or(0));
    if let Some(max) = q.max_points {
        if !(2..=MAX_HISTORY_POINTS).contains(&max) {
            return Err(ApiError::field(
                StatusCode::BAD_REQUEST,
                format!("max_points {max}: give 2 to {MAX_HISTORY_POINTS}"),
                "max_points".into(),
            ));
        }
        for gpu in &mut history {
            gpu.points = gpuq_core::telemetry::downsample(&gpu.points, max);
        }
    }
    Ok(Json(history))
}

#[derive(Deserialize)]
pub struct AlertsQuery {
    limit: Option<u32>,
}

pub async fn alerts(
    State(ctx): State<AppState>,
    Query(q): Query<AlertsQuery>,
) -> ApiResult<Json<Vec<gpuq_core::alerts::Alert>>> {
    Ok(Json(
        ctx.service.alerts(q.limit.unwrap_or(100).min(10_000))?,
    ))
}
