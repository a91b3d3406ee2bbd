//! The `mlflow-artifacts` proxy: PUT, GET, DELETE of a file and listing a
//! directory, under `runs/<run id>/…`. A job's run keeps its artifacts in the
//! job's outputs directory (`$GPUQ_HOME/jobs/<id>/outputs`, next to what the job
//! writes there itself); a run made through the API in `$GPUQ_HOME/runs/<id>/artifacts`.
//!
//! A root daemon writes into directories the job's user owns, so every path is
//! walked one component at a time from an open directory, never through a link,
//! only to regular files owned by that user; what it creates is given to that
//! user. An upload goes to a temporary name first and is renamed into place
//! complete, so a reader never sees half a file.
//! Only the run's user (or the daemon's own account) reads and writes its
//! artifacts: they are that user's files.

use super::{load_run, query_one, query_pairs, MlflowError, MlflowResult};
use crate::identity::Caller;
use crate::routes::AppState;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::StreamExt;
use gpuq_exec::safe_fs::{Dir, EntryKind};
use gpuq_store::tracking::RunRow;
use serde_json::{json, Value};
use std::io::{Read, Write};

/// How often (in bytes written) an upload looks at the disk's free space again.
const RESERVE_CHECK: u64 = 16 << 20;
const MAX_DEPTH: usize = 32;
const MAX_LISTED: usize = 10_000;
const CHUNK: usize = 256 * 1024;

/// A path under a run's artifacts, checked component by component.
struct Target {
    run: RunRow,
    /// Components below the run's artifact root (empty: the root itself).
    parts: Vec<String>,
}

fn parse(ctx: &AppState, caller: &Caller, path: &str) -> MlflowResult<Target> {
    let mut parts = path.split('/').filter(|p| !p.is_empty());
    let (Some("runs"), Some(run_id)) = (parts.next(), parts.next()) else {
        return Err(MlflowError::invalid(format!(
            "artifact path {path:?}: gpuq keeps artifacts under runs/<run id>/… (use the run's artifact_uri)"
        )));
    };
    let rest: Vec<String> = parts.map(str::to_string).collect();
    if rest.len() > MAX_DEPTH {
        return Err(MlflowError::invalid(format!(
            "artifact path {path:?} is nested more than {MAX_DEPTH} levels"
        )));
    }
    for p in &rest {
        if p == "." || p == ".." || p.contains('\0') || p.len() > 255 {
            return Err(MlflowError::invalid(format!(
                "artifact path {path:?}: {p:?} is not a plain name (no '.', '..' or NUL; at most 255 bytes)"
            )));
        }
    }
    let run = load_run(ctx, run_id)?;
    // A run's artifacts are its user's files (a job's outputs directory is
    // theirs, mode 0700): an admin manages the queue, not other people's files.
    if !(caller.owner || caller.user == run.user) {
        return Err(MlflowError::denied(format!(
            "the artifacts of run {run_id} belong to {}; only they may read or write them, and you are {}",
            run.user, caller.user
        )));
    }
    Ok(Target { run, parts: rest })
}

fn io(e: std::io::Error, what: &str) -> MlflowError {
    match e.kind() {
        std::io::ErrorKind::NotFound => MlflowError::not_found(format!("{what}: no such artifact")),
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::InvalidInput => {
            MlflowError::denied(format!("{what}: {e}"))
        }
        _ if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::ENOTDIR) => {
            MlflowError::denied(format!(
                "{what}: a link or a file is in the way; links are not followed"
            ))
        }
        _ if e.raw_os_error() == Some(libc::ENOSPC) => MlflowError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "INTERNAL_ERROR",
            format!("{what}: the disk is full"),
        ),
        _ => MlflowError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            format!("{what}: {e}"),
        ),
    }
}

/// The run's artifact root, opened (and, for a write, made) without following links.
/// Returns it with the account its files belong to.
fn root(ctx: &AppState, run: &RunRow, create: bool) -> std::io::Result<(Dir, (u32, u32))> {
    let home = ctx.service.home();
    match run.job {
        Some(job) => {
            let jobs = Dir::open(&home.join("jobs"))?;
            let job_dir = if create {
                jobs.dir_or_make(&job.to_string(), 0o711, None)?
            } else {
                jobs.dir(&job.to_string())?
            };
            let outputs = if create {
                job_dir.dir_or_make("outputs", 0o700, None)?
            } else {
                job_dir.dir("outputs")?
            };
            let owner = outputs.owner_and_group()?;
            Ok((outputs, owner))
        }
        None => {
            let home_dir = Dir::open(home)?;
            let runs = if create {
                home_dir.dir_or_make("runs", 0o700, None)?
            } else {
                home_dir.dir("runs")?
            };
            let run_dir = if create {
                runs.dir_or_make(&run.id, 0o700, None)?
            } else {
                runs.dir(&run.id)?
            };
            let artifacts = if create {
                run_dir.dir_or_make("artifacts", 0o700, None)?
            } else {
                run_dir.dir("artifacts")?
            };
            let owner = artifacts.owner_and_group()?;
            Ok((artifacts, owner))
        }
    }
}

/// The directory holding `parts`' last component, walked (and made) from the root.
fn parent(root: Dir, parts: &[String], create: bool, owner: (u32, u32)) -> std::io::Result<Dir> {
    let mut dir = root;
    for p in &parts[..parts.len().saturating_sub(1)] {
        dir = if create {
            dir.dir_or_make(p, 0o700, Some(owner))?
        } else {
            dir.dir(p)?
        };
    }
    Ok(dir)
}

pub async fn upload(
    State(ctx): State<AppState>,
    caller: super::scope::Writer,
    Path(path): Path<String>,
    body: Body,
) -> MlflowResult<Json<Value>> {
    let t = parse(&ctx, &caller, &path)?;
    super::scope::may_write(&ctx, &caller, &t.run.id)?;
    let Some(name) = t.parts.last().cloned() else {
        return Err(MlflowError::invalid(
            "give the artifact's file name after runs/<run id>/",
        ));
    };
    let what = format!("artifact {}", t.parts.join("/"));
    // The daemon may write as root, into blocks kept for root: the reserve is
    // looked at before and while the upload is written.
    super::check_reserve(&ctx, &what, 0)?;
    let max = ctx.service.output_config().artifact_max_size;
    let max_bytes = max.mib().saturating_mul(1 << 20);
    let (root, owner) = root(&ctx, &t.run, true).map_err(|e| io(e, &what))?;
    let dir = parent(root, &t.parts, true, owner).map_err(|e| io(e, &what))?;
    let tmp = format!(".{name}.upload-{}", super::new_run_id()?);
    let mut file = dir
        .create_new(&tmp, Some(owner))
        .map_err(|e| io(e, &what))?;
    let mut stream = body.into_data_stream();
    let mut written = 0u64;
    let mut checked = 0u64;
    let result: MlflowResult<()> = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk
                .map_err(|e| MlflowError::invalid(format!("{what}: the upload broke off: {e}")))?;
            written += chunk.len() as u64;
            if written > max_bytes {
                return Err(MlflowError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "INVALID_PARAMETER_VALUE",
                    format!(
                        "{what} is larger than {max}, the most one artifact may be ([output] \
                         artifact_max_size in gpuq.toml)"
                    ),
                ));
            }
            if written - checked >= RESERVE_CHECK {
                checked = written;
                super::check_reserve(&ctx, &what, RESERVE_CHECK)?;
            }
            tokio::task::block_in_place(|| file.write_all(&chunk)).map_err(|e| io(e, &what))?;
        }
        tokio::task::block_in_place(|| file.sync_data()).map_err(|e| io(e, &what))?;
        Ok(())
    }
    .await;
    drop(file);
    if let Err(e) = result {
        let _ = dir.remove(&tmp);
        return Err(e);
    }
    // A directory of that name is not replaced by a file.
    if dir.dir(&name).is_ok() {
        let _ = dir.remove(&tmp);
        return Err(MlflowError::invalid(format!(
            "{what}: a directory of that name exists"
        )));
    }
    dir.rename(&tmp, &name).map_err(|e| {
        let _ = dir.remove(&tmp);
        io(e, &what)
    })?;
    Ok(Json(json!({})))
}

pub async fn download(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(path): Path<String>,
) -> MlflowResult<Response> {
    let t = parse(&ctx, &caller, &path)?;
    let Some(name) = t.parts.last().cloned() else {
        return Err(MlflowError::invalid(
            "give the artifact's path after runs/<run id>/",
        ));
    };
    let what = format!("artifact {}", t.parts.join("/"));
    let (root, (uid, _)) = root(&ctx, &t.run, false).map_err(|e| io(e, &what))?;
    let dir = parent(root, &t.parts, false, (uid, 0)).map_err(|e| io(e, &what))?;
    let mut file = dir
        .open_regular(&name, Some(uid))
        .map_err(|e| io(e, &what))?;
    let len = file.metadata().map_err(|e| io(e, &what))?.len();
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(4);
    tokio::task::spawn_blocking(move || loop {
        let mut buf = vec![0u8; CHUNK];
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                buf.truncate(n);
                if tx.blocking_send(Ok(buf)).is_err() {
                    break;
                }
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                break;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, len.to_string()),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

pub async fn list(
    State(ctx): State<AppState>,
    Extension(caller): Extension<Caller>,
    RawQuery(q): RawQuery,
) -> MlflowResult<Json<Value>> {
    let pairs = query_pairs(q.as_deref());
    let path = query_one(&pairs, "path").unwrap_or("");
    let t = parse(&ctx, &caller, path)?;
    let what = format!("artifact directory {}", t.parts.join("/"));
    let (root, _) = match root(&ctx, &t.run, false) {
        Ok(r) => r,
        // Nothing logged yet: an empty listing, as MLflow answers.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Json(json!({ "files": [] })))
        }
        Err(e) => return Err(io(e, &what)),
    };
    let mut dir = root;
    for p in &t.parts {
        dir = match dir.dir(p) {
            Ok(d) => d,
            // A file, or nothing: MLflow lists nothing for either.
            Err(_) => return Ok(Json(json!({ "files": [] }))),
        };
    }
    let entries = dir.entries().map_err(|e| io(e, &what))?;
    let files: Vec<Value> = entries
        .into_iter()
        // Uploads in progress are not artifacts yet.
        .filter(|e| !(e.name.starts_with('.') && e.name.contains(".upload-")))
        .filter_map(|e| match e.kind {
            EntryKind::File => Some(json!({"path": e.name, "is_dir": false, "file_size": e.size})),
            EntryKind::Dir => Some(json!({"path": e.name, "is_dir": true})),
            EntryKind::Other => None,
        })
        .take(MAX_LISTED)
        .collect();
    Ok(Json(json!({ "files": files })))
}

pub async fn remove(
    State(ctx): State<AppState>,
    caller: super::scope::Writer,
    Path(path): Path<String>,
) -> MlflowResult<Json<Value>> {
    let t = parse(&ctx, &caller, &path)?;
    super::scope::may_write(&ctx, &caller, &t.run.id)?;
    let Some(name) = t.parts.last().cloned() else {
        return Err(MlflowError::invalid(
            "give the artifact's path after runs/<run id>/ (a run's whole artifact root is not deleted)",
        ));
    };
    let what = format!("artifact {}", t.parts.join("/"));
    let (root, owner) = root(&ctx, &t.run, false).map_err(|e| io(e, &what))?;
    let dir = parent(root, &t.parts, false, owner).map_err(|e| io(e, &what))?;
    tokio::task::block_in_place(|| dir.remove_all(&name, MAX_DEPTH)).map_err(|e| io(e, &what))?;
    Ok(Json(json!({})))
}
