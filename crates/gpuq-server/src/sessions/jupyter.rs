//! Talking to a notebook's JupyterLab over its unix socket. The socket lives
//! in the job's session directory, which the job's user owns: the daemon (root
//! on a shared node) opens it without following a link and connects only to a
//! socket that user owns, through the descriptor it checked, so a link or a
//! swapped file never makes it connect to anything else.

use super::super::service::sessions::JUPYTER_SOCKET;
use axum::body::Body;
use gpuq_core::Millis;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Opens `path` with `flags` | O_NOFOLLOW | O_CLOEXEC, relative to `dir` if given.
fn open_nofollow(dir: Option<&OwnedFd>, path: &Path, flags: i32) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    let base = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: openat with a valid C string; the result is checked.
    let fd = unsafe { libc::openat(base, c.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor we just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn stat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: fstat fills the struct for a descriptor we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st)
    }
}

/// Connects to the notebook's JupyterLab. `owner`: the uid the job runs as
/// (`None`: the daemon's own).
pub async fn connect(session_dir: &Path, owner: Option<u32>) -> io::Result<tokio::net::UnixStream> {
    // SAFETY: geteuid cannot fail.
    let uid = owner.unwrap_or_else(|| unsafe { libc::geteuid() });
    let refuse = |what: &str| io::Error::new(io::ErrorKind::PermissionDenied, what.to_string());
    let dir = open_nofollow(None, session_dir, libc::O_PATH | libc::O_DIRECTORY)?;
    let st = stat(&dir)?;
    if st.st_uid != uid {
        return Err(refuse("the session directory is not the job user's"));
    }
    let socket = open_nofollow(Some(&dir), Path::new(JUPYTER_SOCKET), libc::O_PATH)?;
    let st = stat(&socket)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK || st.st_uid != uid {
        return Err(refuse("not a socket of the job's user"));
    }
    // The checked inode itself, by its descriptor: no path is looked up again.
    let path = format!("/proc/self/fd/{}", socket.as_raw_fd());
    let stream = tokio::net::UnixStream::connect(&path).await;
    drop(socket);
    stream
}

/// Sends one request on a new connection; the connection serves an upgrade
/// (a WebSocket) if the answer is one.
pub async fn send(
    session_dir: &Path,
    owner: Option<u32>,
    req: Request<Body>,
) -> io::Result<Response<Incoming>> {
    let stream = connect(session_dir, owner).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(io::Error::other)?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    sender.send_request(req).await.map_err(io::Error::other)
}

/// One kernel, as `GET /api/kernels` shows it.
#[derive(Debug, Clone, Default)]
pub struct KernelLook {
    pub busy: bool,
    pub last_activity: Option<Millis>,
}

#[derive(serde::Deserialize)]
struct KernelJson {
    #[serde(default)]
    execution_state: String,
    #[serde(default)]
    last_activity: Option<String>,
}

/// The notebook's kernels (`base`: its base URL). Errors while JupyterLab does
/// not answer (starting).
pub async fn kernels(
    session_dir: &Path,
    owner: Option<u32>,
    base: &str,
    token: &str,
) -> io::Result<Vec<KernelLook>> {
    use http_body_util::BodyExt;
    let req = Request::get(format!("{base}api/kernels"))
        .header("host", "localhost")
        .header("authorization", format!("token {token}"))
        .body(Body::empty())
        .map_err(io::Error::other)?;
    let look = async {
        let resp = send(session_dir, owner, req).await?;
        if !resp.status().is_success() {
            return Err(io::Error::other(format!(
                "JupyterLab answered {}",
                resp.status()
            )));
        }
        let body = http_body_util::Limited::new(resp.into_body(), 4 << 20)
            .collect()
            .await
            .map_err(|e| io::Error::other(e.to_string()))?
            .to_bytes();
        let kernels: Vec<KernelJson> = serde_json::from_slice(&body).map_err(io::Error::other)?;
        Ok(kernels
            .into_iter()
            .map(|k| KernelLook {
                busy: k.execution_state == "busy",
                last_activity: k.last_activity.as_deref().and_then(parse_time),
            })
            .collect())
    };
    tokio::time::timeout(std::time::Duration::from_secs(5), look)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "JupyterLab did not answer"))?
}

/// JupyterLab's times: RFC 3339 (`2026-12-01T22:40:00.123456Z`).
fn parse_time(s: &str) -> Option<Millis> {
    s.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jupyters_times_are_read() {
        assert_eq!(parse_time("1970-01-01T00:00:01.500000Z"), Some(1500));
        assert_eq!(
            parse_time("2026-12-01T00:00:00+00:00"),
            Some(1_796_083_200_000)
        );
        assert_eq!(parse_time("yesterday"), None);
    }

    #[tokio::test]
    async fn a_link_or_a_strangers_socket_is_never_connected_to() {
        let dir = tempfile::tempdir().unwrap();
        let session = dir.path().join("session");
        std::fs::create_dir(&session).unwrap();
        let elsewhere = dir.path().join("other.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, session.join(JUPYTER_SOCKET)).unwrap();
        // O_PATH | O_NOFOLLOW opens the link itself, which is no socket.
        let e = connect(&session, None).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        std::fs::remove_file(session.join(JUPYTER_SOCKET)).unwrap();
        std::fs::write(session.join(JUPYTER_SOCKET), "not a socket").unwrap();
        let e = connect(&session, None).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        std::fs::remove_file(session.join(JUPYTER_SOCKET)).unwrap();
        let _ours = std::os::unix::net::UnixListener::bind(session.join(JUPYTER_SOCKET)).unwrap();
        connect(&session, None).await.expect("our own socket");
        // Someone else's socket (another uid) is refused.
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        let e = connect(&session, Some(me + 1)).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        // A session directory that is a link is refused too.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&session, &link).unwrap();
        assert!(connect(&link, None).await.is_err());
    }
}
