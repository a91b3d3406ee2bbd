//! `gpuq dashboard`: a single-use login link to the web dashboard, opened in a
//! browser when this session has a display, printed otherwise.

use super::CmdResult;
use gpuq_api::Client;
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct DashboardArgs {
    /// Print the link instead of opening a browser (for another machine, or `ssh -L`).
    #[arg(long)]
    print_url: bool,
    /// Print the link as JSON (url, user, expires_at).
    #[arg(long)]
    json: bool,
    /// End your dashboard sessions in every browser instead (with --user, that
    /// user's; with --all, everyone's: admins).
    #[arg(long)]
    end_sessions: bool,
    /// With --end-sessions: this user's sessions (admins).
    #[arg(long, requires = "end_sessions")]
    user: Option<String>,
    /// With --end-sessions: every user's sessions (admins).
    #[arg(long, requires = "end_sessions", conflicts_with = "user")]
    all: bool,
}

pub async fn run(client: &Client, args: DashboardArgs) -> CmdResult {
    if args.end_sessions {
        let ended = client
            .end_dashboard_sessions(&gpuq_api::web::EndSessions {
                user: args.user,
                all: args.all,
            })
            .await?;
        if args.json {
            super::output::print_json(&ended);
        } else {
            outln!("ended {} dashboard session(s)", ended.ended);
        }
        return Ok(0);
    }
    let link = client.login_link().await?;
    if args.json {
        super::output::print_json(&link);
        return Ok(0);
    }
    if args.print_url {
        outln!("{}", link.url);
        return Ok(0);
    }
    if has_display() {
        match open_in_browser(&link.url) {
            Ok(()) => {
                outln!(
                    "opened the dashboard as {} in your browser (the link works once, for 2 minutes); \
                     if nothing opened: gpuq dashboard --print-url",
                    link.user
                );
                return Ok(0);
            }
            Err(e) => errln!("gpuq: could not open a browser ({e}); here is the link instead"),
        }
    }
    outln!("{}", link.url);
    let port = link
        .url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|host| host.rsplit(':').next())
        .unwrap_or("PORT");
    errln!(
        "open it in a browser within 2 minutes (it works once, and logs you in as {}); \
         from another machine: ssh -L {port}:127.0.0.1:{port} this-host, then open it there",
        link.user
    );
    Ok(0)
}

fn has_display() -> bool {
    std::env::var_os("BROWSER").is_some()
        || std::env::var_os("DISPLAY").is_some()
        || std::env::var_os("WAYLAND_DISPLAY").is_some()
}

/// Opens a private page that forwards to the link: the code never appears in
/// a command line, which every local user can read in `ps`.
fn open_in_browser(url: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let mut name = [0u8; 8];
    getrandom::getrandom(&mut name).map_err(|e| std::io::Error::other(e.to_string()))?;
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!(
            "gpuq-dashboard-{}",
            name.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let page = dir.join("open.html");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&page)?;
    let escaped = url
        .replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;");
    write!(
        file,
        "<!doctype html><meta http-equiv=\"refresh\" content=\"0;url={escaped}\"><a href=\"{escaped}\">gpuq dashboard</a>"
    )?;
    let opener = std::env::var("BROWSER").unwrap_or_else(|_| "xdg-open".to_string());
    std::process::Command::new(opener)
        .arg(&page)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    remove_later(&dir);
    Ok(())
}

/// The page is useless once its link expires: a detached shell removes it
/// then (in its own session, so closing the terminal does not stop it).
fn remove_later(dir: &std::path::Path) {
    use std::os::unix::process::CommandExt;
    let mut cleanup = std::process::Command::new("sh");
    cleanup
        .args(["-c", "sleep 150; rm -rf -- \"$1\"", "sh"])
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches only the child.
    unsafe {
        cleanup.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let _ = cleanup.spawn();
}
