//! gpuq in a real terminal and at the head of a pipe: `gpuq top` in a
//! pseudo-terminal (tmux), and every command ending quietly when its reader
//! goes away, as coreutils do.

mod common;
use common::*;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A tmux server of its own (its own socket), killed when dropped.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// Runs `command` in a detached 120×32 session; None when tmux is missing.
    fn start(dir: &Path, command: &str) -> Option<Self> {
        let t = Tmux {
            socket: dir.join("tmux.sock"),
        };
        let started = t
            .tmux(&[
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                "120",
                "-y",
                "32",
                command,
            ])
            .ok()?;
        assert!(started.status.success(), "tmux: {}", stderr(&started));
        Some(t)
    }

    fn tmux(&self, args: &[&str]) -> std::io::Result<Output> {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
    }

    fn screen(&self) -> String {
        stdout(&self.tmux(&["capture-pane", "-p", "-t", "t"]).unwrap())
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        assert!(self.tmux(&args).unwrap().status.success());
    }

    /// Waits (5 s at most) for the screen to show `text`.
    fn shows(&self, text: &str) -> bool {
        eventually(Duration::from_secs(5), || self.screen().contains(text))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

#[test]
fn top_draws_in_a_real_terminal_takes_keys_and_quits_with_q() {
    let d = Daemon::start("sim:4");
    let id = d.submit(&[
        "--gpus",
        "2",
        "--name",
        "in-top",
        "--",
        "sh",
        "-c",
        "echo hello from the job; sleep 60",
    ]);
    d.wait_running(id);
    let dir = tempfile::tempdir().unwrap();
    let exit_file = dir.path().join("exit");
    let command = format!(
        "GPUQ_HOME='{}' GPUQ_URL='{}' GPUQ_NO_AUTOSTART=1 '{GPUQ}' top 2>'{}'; echo EXIT=$? > '{}'",
        d.path().display(),
        d.url,
        dir.path().join("stderr").display(),
        exit_file.display()
    );
    let Some(t) = Tmux::start(dir.path(), &command) else {
        // Under scripts/test (strict) a missing tmux fails: it installs tmux.
        assert!(
            std::env::var_os("GPUQ_TEST_STRICT").is_none(),
            "tmux is not installed: apt-get install tmux (scripts/test does)"
        );
        eprintln!("SKIPPED: tmux is not installed");
        return;
    };
    assert!(t.shows("in-top"), "the job table: {}", t.screen());
    let screen = t.screen();
    assert!(
        screen.contains(&format!("job {id}")),
        "GPU holders: {screen}"
    );
    assert!(screen.contains("free"), "{screen}");
    assert!(screen.contains("1 running, 0 queued"), "{screen}");

    t.keys(&["s"]);
    assert!(t.shows("s sort (user)"), "s sorts: {}", t.screen());
    t.keys(&["u"]);
    assert!(t.shows("filter by user: _"), "{}", t.screen());
    t.keys(&["-l", "nobody"]);
    t.keys(&["Enter"]);
    assert!(t.shows("[nobody]"), "{}", t.screen());
    assert!(t.shows("0 running"), "nobody's jobs: none: {}", t.screen());
    t.keys(&["a"]);
    assert!(t.shows("1 running"), "a shows everyone's: {}", t.screen());
    t.keys(&["Enter"]);
    assert!(t.shows(&format!("log of job {id}")), "{}", t.screen());
    assert!(t.shows("hello from the job"), "{}", t.screen());
    t.keys(&["Escape"]);
    assert!(t.shows("in-top"), "Esc: back to the jobs: {}", t.screen());

    t.keys(&["q"]);
    let exited = eventually(Duration::from_secs(5), || {
        std::fs::read_to_string(&exit_file).is_ok_and(|s| !s.is_empty())
    });
    let errors = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    assert!(exited, "q quits: {} {errors}", t.screen());
    assert_eq!(
        std::fs::read_to_string(&exit_file).unwrap().trim(),
        "EXIT=0",
        "{errors}"
    );
    assert!(!errors.contains("panicked"), "{errors}");
    d.ok(&["cancel", &id.to_string()]);
}

/// Runs a gpuq command whose stdout is a pipe nobody reads any more.
fn into_a_closed_pipe(d: &Daemon, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    d.cmd(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn every_command_ends_quietly_on_a_closed_pipe() {
    let d = Daemon::start("sim:2");
    let id = d.submit(&["--name", "counter", "--", "seq", "1", "200000"]);
    assert_eq!(d.wait(id)["state"], "succeeded");
    let id = id.to_string();
    let sweep = tempfile::NamedTempFile::with_suffix(".yaml").unwrap();
    std::fs::write(
        sweep.path(),
        "name: s\ncommand: ['true']\nparameters: {x: {uniform: [0, 1]}}\n\
         metric: {name: loss, goal: minimize}\nsearcher: {name: random, max_trials: 2, max_step: 1}\n",
    )
    .unwrap();
    let sweep_id = d.ok(&["sweep", &sweep.path().display().to_string()]);
    let sweep_id = sweep_id.trim();
    let cases: [&[&str]; 11] = [
        &["sweep", "ls"],
        &["sweep", "show", sweep_id],
        &["sweep", "show", sweep_id, "--json"],
        &["ls"],
        &["ls", "--json"],
        &["show", &id],
        &["prices"],
        &["logs", &id],
        &["events", "--json", "--after", "0.0", "-n", "3"],
        &["completions", "bash"],
        &["gpus"],
    ];
    for args in cases {
        let out = into_a_closed_pipe(&d, args);
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).is_empty(), "{args:?}: {}", stderr(&out));
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?} ends as `yes | head -1` does: {:?}",
            out.status
        );
    }

    // The way a user meets it: more output than a pipe holds, read by `head -1`.
    for (args, first) in [
        (format!("logs {id}"), "1"),
        (format!("show {id}"), "job"),
        ("ls".to_string(), "ID"),
        ("prices".to_string(), "INSTANCE"),
    ] {
        let script = format!("'{GPUQ}' {args} | head -1; echo \"status=${{PIPESTATUS[0]}}\" >&2");
        let out = Command::new("bash")
            .args(["-c", &script])
            .env("GPUQ_HOME", d.path())
            .env("GPUQ_URL", &d.url)
            .env("GPUQ_NO_AUTOSTART", "1")
            .output()
            .unwrap();
        assert!(stdout(&out).starts_with(first), "{args}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(!err.contains("panicked"), "{args}: {err}");
        // A log of 1.3 MB cannot fit in the pipe; the others may have been written whole.
        let want: &[&str] = if args.starts_with("logs") {
            &["status=141"]
        } else {
            &["status=141", "status=0"]
        };
        assert!(
            want.contains(&err.trim()),
            "{args}: a closed pipe ends gpuq by SIGPIPE: {err}"
        );
    }
}

#[test]
fn metrics_and_compare_draw_in_a_real_terminal_and_end_quietly_on_a_pipe() {
    let d = Daemon::start("sim:1");
    let write = "for i in $(seq 0 499); do echo \"{\\\"step\\\": $i, \\\"loss\\\": $((1000 - i))}\"; done >> $GPUQ_METRICS_FILE";
    let a = d.submit(&["--param", "lr=0.1", "--", "bash", "-c", write]);
    let b = d.submit(&["--param", "lr=0.2", "--", "bash", "-c", write]);
    assert_eq!(d.wait(a)["state"], "succeeded");
    assert_eq!(d.wait(b)["state"], "succeeded");
    let dir = tempfile::tempdir().unwrap();
    let command = format!(
        "env GPUQ_HOME={} GPUQ_URL={} GPUQ_NO_AUTOSTART=1 {GPUQ} metrics {a} --key loss; sleep 30",
        d.path().display(),
        d.url
    );
    let Some(t) = Tmux::start(dir.path(), &command) else {
        assert!(
            std::env::var_os("GPUQ_TEST_STRICT").is_none(),
            "tmux is missing"
        );
        return;
    };
    assert!(t.shows("loss: latest 501 at step 499"), "{}", t.screen());
    // The header comes before the chart's rows: wait until they are drawn.
    let drawn = |s: &str| s.lines().filter(|l| l.contains('│')).count() >= 10;
    assert!(
        eventually(Duration::from_secs(10), || drawn(&t.screen())),
        "{}",
        t.screen()
    );
    let screen = t.screen();
    assert!(screen.contains("step 499"), "{screen}");
    assert!(screen.lines().all(|l| l.chars().count() <= 120), "{screen}");
    drop(t);
    let (a, b) = (a.to_string(), b.to_string());
    for args in [
        vec!["metrics", a.as_str()],
        vec!["metrics", a.as_str(), "--csv"],
        vec!["compare", a.as_str(), b.as_str()],
    ] {
        let out = into_a_closed_pipe(&d, &args);
        assert!(stderr(&out).is_empty(), "{args:?}: {}", stderr(&out));
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {:?}",
            out.status
        );
    }
    let compared = d.ok(&["compare", &a, &b, "--diff"]);
    assert!(
        compared.contains("*  params.lr") && compared.contains("0.1") && compared.contains("0.2"),
        "{compared}"
    );
    assert!(
        !compared.contains("metrics.loss"),
        "identical rows are left out with --diff: {compared}"
    );
}

/// A job whose command sets the window title (OSC 2), writes the clipboard
/// (OSC 52) and clears the screen: `gpuq ls` in a real terminal leaves all
/// three alone. The same bytes printed raw afterwards do change the title and
/// the clipboard, so the terminal would have shown an attack that got through.
#[test]
fn a_hostile_command_in_ls_leaves_the_title_clipboard_and_screen_alone() {
    let d = Daemon::start("sim:1");
    let attack = "\x1b]2;PWNED-TITLE\x07\x1b]52;c;UFdORUQ=\x07\x1b[2J\x1b[H";
    d.submit(&["--", "sh", "-c", &format!(": '{attack}'; sleep 600")]);
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("raw");
    std::fs::write(&raw, attack).unwrap();
    let at = |name: &str| dir.path().join(name).display().to_string();
    let command = format!(
        "until [ -e '{start}' ]; do sleep 0.05; done; echo BEFORE-MARK; \
         GPUQ_HOME='{home}' GPUQ_URL='{url}' GPUQ_NO_AUTOSTART=1 '{GPUQ}' ls; echo LS-DONE; \
         until [ -e '{go}' ]; do sleep 0.05; done; cat '{raw}'; echo CAT-DONE; sleep 600",
        start = at("start"),
        go = at("go"),
        home = d.path().display(),
        url = d.url,
        raw = raw.display(),
    );
    let Some(t) = Tmux::start(dir.path(), &command) else {
        assert!(
            std::env::var_os("GPUQ_TEST_STRICT").is_none(),
            "tmux is not installed: apt-get install tmux (scripts/test does)"
        );
        eprintln!("SKIPPED: tmux is not installed");
        return;
    };
    // OSC 52 lands in tmux's paste buffers.
    assert!(t
        .tmux(&["set", "-s", "set-clipboard", "on"])
        .unwrap()
        .status
        .success());
    let title = || {
        stdout(
            &t.tmux(&["display", "-p", "-t", "t", "#{pane_title}"])
                .unwrap(),
        )
    };
    let buffers = || stdout(&t.tmux(&["list-buffers"]).unwrap());
    let before = title();
    std::fs::write(at("start"), "").unwrap();
    // Longer than `shows` waits: under load a cold `gpuq ls` can take seconds.
    let done = |text: &str| eventually(Duration::from_secs(30), || t.screen().contains(text));
    assert!(done("LS-DONE"), "{}", t.screen());
    let screen = t.screen();
    assert!(
        screen.contains("BEFORE-MARK"),
        "the screen was cleared: {screen}"
    );
    assert!(
        screen.contains("\\x1b]2;PWNED-TITLE"),
        "shown escaped: {screen}"
    );
    assert_eq!(title(), before, "gpuq ls changed the window title");
    assert_eq!(buffers(), "", "gpuq ls wrote the clipboard");
    // The control: the same bytes raw do act on this terminal.
    std::fs::write(at("go"), "").unwrap();
    assert!(done("CAT-DONE"), "{}", t.screen());
    assert!(
        eventually(Duration::from_secs(5), || title().contains("PWNED-TITLE")),
        "raw, the title changes: {}",
        title()
    );
    assert!(!buffers().is_empty(), "raw, the clipboard is written");
}
