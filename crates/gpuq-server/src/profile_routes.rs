//! `gpuq profile ID`: `POST /v1/jobs/{id}/profile` asks a running job for a
//! `torch.profiler` capture of its next steps (a request file in the job's
//! control directory, the daemon's own, which the SDK watches); `GET` reads
//! the answer the job wrote in its outputs (`profiles/profile-<n>.done` and
//! the summary beside it), with the job user's rights. And `GET
//! /v1/jobs/{id}/cpu`, a running job's CPU use, for `gpuq doctor ID`.

use super::identity::Caller;
use super::routes::{authorize, parse_body, ApiError, ApiResult, AppState};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use gpuq_api::profile::{ProfileRequest, ProfileStatus};
use gpuq_core::{JobId, JobState};

/// The most steps one capture may take (a trace grows with every step).
const MAX_STEPS: u32 = 500;
/// The most of a summary or a done marker read back.
const MAX_READ: u64 = 256 * 1024;

fn request_path(ctx: &AppState, id: JobId) -> std::path::PathBuf {
    gpuq_exec::JobDir::new(ctx.service.home(), id)
        .control_dir()
        .join("profile.json")
}

pub async fn request(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<JobId>,
    body: axum::body::Bytes,
) -> ApiResult<Json<ProfileStatus>> {
    let req: ProfileRequest = parse_body(&body, "profile request")?;
    let job = authorize(&ctx, &caller, id, "profile")?;
    if job.state != JobState::Running {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "job {id} is {}: only a running job can be profiled",
                job.state
            ),
        ));
    }
    if req.steps == 0 || req.steps > MAX_STEPS {
        return Err(ApiError::field(
            StatusCode::BAD_REQUEST,
            format!("steps: {} is not from 1 to {MAX_STEPS}", req.steps),
            "steps".into(),
        ));
    }
    let number = gpuq_api::home::now_ms();
    let text = serde_json::json!({"id": number, "steps": req.steps}).to_string();
    let path = request_path(&ctx, id);
    let dir = path.parent().expect("a control directory").to_path_buf();
    if !dir.is_dir() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("job {id} started before gpuq could profile jobs, or runs elsewhere (Slurm): it has no control directory"),
        ));
    }
    gpuq_exec::layout::write_atomically(&path, text.as_bytes()).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot write the request: {e}"),
        )
    })?;
    // Readable by the job's user (the directory is 0755, the daemon's).
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644));
    Ok(Json(ProfileStatus {
        job: id,
        request: number,
        steps: req.steps,
        done: false,
        trace: None,
        summary: None,
    }))
}

pub async fn status(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, number)): Path<(JobId, i64)>,
) -> ApiResult<Json<ProfileStatus>> {
    let job = authorize(&ctx, &caller, id, "read the profile of")?;
    let outputs = gpuq_exec::JobDir::new(ctx.service.home(), id)
        .outputs()
        .join("profiles");
    let account = ctx
        .identity
        .job_account(&job.user)
        .map_err(|e| ApiError::new(StatusCode::FORBIDDEN, e))?;
    let (done, summary) = tokio::task::spawn_blocking(move || {
        let done: Option<serde_json::Value> = read_output(
            &outputs.join(format!("profile-{number}.done")),
            account.as_ref(),
        )
        .and_then(|t| serde_json::from_str(&t).ok());
        let summary = done.as_ref().and_then(|_| {
            read_output(
                &outputs.join(format!("profile-{number}.txt")),
                account.as_ref(),
            )
        });
        (done, summary)
    })
    .await
    .unwrap_or((None, None));
    Ok(Json(ProfileStatus {
        job: id,
        request: number,
        steps: done.as_ref().and_then(|d| d["steps"].as_u64()).unwrap_or(0) as u32,
        done: done.is_some(),
        trace: done
            .as_ref()
            .and_then(|d| d["trace"].as_str().map(str::to_string)),
        summary,
    }))
}

/// A file of the job's outputs (its user's): read with that user's rights,
/// bounded, never through a link.
fn read_output(path: &std::path::Path, account: Option<&gpuq_exec::RunAs>) -> Option<String> {
    let bytes = match account {
        Some(a) => {
            gpuq_exec::safe_fs::read_as(path, a, MAX_READ, std::time::Duration::from_secs(5))
                .ok()?
        }
        None => {
            use std::io::Read;
            use std::os::unix::fs::OpenOptionsExt;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(path)
                .ok()?;
            if !f.metadata().ok()?.is_file() {
                return None;
            }
            let mut buf = Vec::new();
            f.take(MAX_READ).read_to_end(&mut buf).ok()?;
            buf
        }
    };
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// `GET /v1/jobs/{id}/cpu`: everyone may see it, as everyone sees the queue.
pub async fn cpu(
    State(ctx): State<AppState>,
    Path(id): Path<JobId>,
) -> ApiResult<Json<gpuq_api::JobCpu>> {
    ctx.service.job(id)?;
    match ctx.service.job_cpu(id).await? {
        Some(c) => Ok(Json(c)),
        None => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("job {id} is not running on this node: its CPU use cannot be read here"),
        )),
    }
}
