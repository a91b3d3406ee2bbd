//! `gpuq shell [-- CMD]`: a shell (or CMD) on a real terminal, on reserved
//! GPUs, like `srun --pty bash`. This terminal goes raw and every key goes to
//! the job's terminal (Ctrl-C and Ctrl-D included); its size follows this
//! window's; the job's exit status is gpuq's. Closing this terminal hangs the
//! session up, and its GPUs are freed.

use super::session_args::SessionArgs;
use super::{job_exit_status, parse_id, CliError, CmdResult};
use gpuq_api::Client;
use gpuq_core::session::SessionKind;
use gpuq_exec::pty::WindowSize;
use gpuq_exec::terminal::{frame, resize_frame, FRAME_INPUT};
use std::io::Write;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(clap::Args, Debug)]
pub struct ShellArgs {
    #[command(flatten)]
    session: SessionArgs,
    /// Attach to a running shell of yours (it gets this terminal; the one it had is let go).
    #[arg(long, value_name = "ID", conflicts_with = "command")]
    attach: Option<String>,
    /// What runs on the terminal (default: $SHELL, else /bin/bash).
    #[arg(last = true)]
    command: Vec<String>,
}

/// This terminal in raw mode while it lives; put back as it was on drop.
struct RawMode(Option<libc::termios>);

impl RawMode {
    fn enter() -> Self {
        // SAFETY: isatty/tcgetattr/tcsetattr on fd 0 with a termios of our own.
        unsafe {
            if libc::isatty(0) != 1 {
                return Self(None);
            }
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return Self(None);
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            if libc::tcsetattr(0, libc::TCSANOW, &raw) != 0 {
                return Self(None);
            }
            Self(Some(saved))
        }
    }
    fn active(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            // SAFETY: restores the settings read in enter().
            unsafe { libc::tcsetattr(0, libc::TCSANOW, saved) };
        }
    }
}

/// This terminal's size, if stdin or stdout is one.
fn window_size() -> Option<WindowSize> {
    for fd in [1, 0] {
        // SAFETY: TIOCGWINSZ fills our winsize.
        unsafe {
            let mut ws: libc::winsize = std::mem::zeroed();
            if libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0 {
                return Some(WindowSize {
                    rows: ws.ws_row,
                    cols: ws.ws_col,
                });
            }
        }
    }
    None
}

pub async fn run(client: &Client, args: ShellArgs) -> CmdResult {
    let id = match &args.attach {
        Some(id) => parse_id(id)?,
        None => {
            let mut spec = args.session.spec(SessionKind::Shell, "shell")?;
            let command = if args.command.is_empty() {
                vec![std::env::var("SHELL")
                    .ok()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "/bin/bash".into())]
            } else {
                args.command.clone()
            };
            spec.command = Some(command);
            let job = super::session_args::submit(client, spec).await?;
            errln!("gpuq: shell job {} queued", job.id);
            job.id
        }
    };
    if let super::session_args::Up::Ended(_) = super::session_args::wait_ready(client, id).await? {
        // Over before it was attached to (a short command): what it printed, and its status.
        let log = super::session_args::log_text(client, id).await;
        let _ = std::io::stdout().write_all(&log);
        let end = client.job(id).await?;
        return Ok(job_exit_status(&end.job));
    }
    let mut stream = attach_retrying(client, id, Duration::from_secs(30)).await?;
    errln!("gpuq: attached to job {id} (closing this terminal ends it)");
    let raw = RawMode::enter();
    let mut keys = read_keys(raw.active());
    loop {
        relay(stream, &mut keys).await;
        // The job's end closes the stream; so does a daemon restart, after
        // which the terminal waits for us a while (HANGUP_GRACE).
        let job = client.wait(id, 2).await;
        if job.as_ref().is_ok_and(|j| j.state.is_terminal()) {
            break;
        }
        errln!("\r\ngpuq: lost the connection to job {id}'s terminal; attaching again\r");
        match attach_retrying(client, id, RECONNECT_FOR).await {
            Ok(s) => stream = s,
            Err(e) if e.code == 2 => break,
            Err(e) => {
                drop(raw);
                return Err(e);
            }
        }
    }
    drop(raw);
    let end = loop {
        let j = client.wait(id, 60).await?;
        if j.state.is_terminal() {
            break j;
        }
    };
    errln!(
        "gpuq: job {} {} ({})",
        end.id,
        end.state,
        end.reason.as_deref().unwrap_or("")
    );
    Ok(job_exit_status(&end))
}

/// How long a lost connection is tried again: within the terminal's grace.
const RECONNECT_FOR: Duration = Duration::from_secs(12);

/// Keys come from a thread of their own: a read of stdin cannot be
/// cancelled, and must not keep gpuq waiting at its end.
fn read_keys(tty: bool) -> tokio::sync::mpsc::Receiver<Vec<u8>> {
    let (keys_tx, keys) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 4096];
        let mut stdin = std::io::stdin().lock();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    // Piped input ended: end of input for the job too (its terminal's Ctrl-D).
                    if !tty {
                        let _ = keys_tx.blocking_send(vec![4]);
                    }
                    return;
                }
                Ok(n) => {
                    if keys_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    keys
}

/// Copies keys and window sizes to the terminal and its output here, until
/// the stream ends.
async fn relay(stream: gpuq_api::TerminalStream, keys: &mut tokio::sync::mpsc::Receiver<Vec<u8>>) {
    let (mut from_job, mut to_job) = tokio::io::split(stream);
    if let Some(size) = window_size() {
        to_job.write_all(&resize_frame(size)).await.ok();
    }
    let input = async move {
        let mut resized =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change()).ok();
        loop {
            tokio::select! {
                k = keys.recv() => match k {
                    Some(k) => if to_job.write_all(&frame(FRAME_INPUT, &k)).await.is_err() { return },
                    None => std::future::pending::<()>().await,
                },
                Some(()) = async { match resized.as_mut() { Some(r) => r.recv().await, None => None } } => {
                    if let Some(size) = window_size() {
                        if to_job.write_all(&resize_frame(size)).await.is_err() { return }
                    }
                }
            }
        }
    };
    let output = async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut out = std::io::stdout();
        loop {
            match from_job.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if out.write_all(&buf[..n]).and_then(|_| out.flush()).is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::select! {
        _ = output => {}
        _ = input => {}
    }
}

/// The terminal comes up a moment after the job starts.
/// (A daemon that restarts does not answer for a moment either.)
async fn attach_retrying(
    client: &Client,
    id: u64,
    within: Duration,
) -> Result<gpuq_api::TerminalStream, CliError> {
    let deadline = std::time::Instant::now() + within;
    loop {
        match client.attach(id).await {
            Ok(s) => return Ok(s),
            Err(
                gpuq_api::ApiError::Refused { status: 503, .. }
                | gpuq_api::ApiError::Unreachable { .. },
            ) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
