//! Other users' strings never drive the reader's terminal: a job's command,
//! params, metric names and log holding escape sequences (window title, OSC 52
//! clipboard, clear screen, a one-byte C1 CSI, bidirectional overrides) come
//! out of every command escaped; `--json` keeps the exact values.

mod common;
use common::*;
use std::process::Output;
use std::time::Duration;

const TITLE: &str = "\x1b]0;PWNED-TITLE\x07";
const CLIPBOARD: &str = "\x1b]52;c;cm0gLXJmIH4K\x07";
const CLEAR: &str = "\x1b[2J";
const BIDI: &str = "\u{202e}txt.exe\u{2066}";
const C1_CSI: &str = "\u{9b}31m";

fn attack() -> String {
    format!("{TITLE}{CLIPBOARD}{CLEAR}{BIDI}{C1_CSI}")
}

/// No byte a terminal would act on: ESC, BEL, C1 CSI, bidi controls.
fn assert_harmless(what: &str, out: &Output) {
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let text = String::from_utf8_lossy(bytes);
        for (name, bad) in [
            ("ESC", '\x1b'),
            ("BEL", '\x07'),
            ("C1 CSI", '\u{9b}'),
            ("RLO", '\u{202e}'),
            ("LRI", '\u{2066}'),
        ] {
            assert!(
                !text.contains(bad),
                "{what} ({stream}): a raw {name} reached the terminal: {text:?}"
            );
        }
    }
}

/// The escaped spelling of the attack shows instead.
fn assert_shows_escaped(what: &str, out: &Output) {
    let text = stdout(out);
    assert!(
        text.contains("\\x1b]0;PWNED-TITLE\\x07"),
        "{what}: no escaped title sequence in {text:?}"
    );
}

/// A job whose command, param, metric name and log carry the attack; it fails,
/// so an alert names it too.
fn hostile_job(d: &Daemon) -> u64 {
    let metric = r#"{"step": 1, "\u001b]0;PWNED-TITLE\u0007loss\u202e": 0.5}"#;
    let attack = attack();
    // The attack first, so that listings which cut the command still show it.
    let script = format!(
        ": '{attack}'; printf '%s\\n' \"$1\" >> \"$GPUQ_METRICS_FILE\"; \
         printf 'log %s\\n' \"$2\"; sleep 1; exit 3"
    );
    // With the reproducibility capture on (`show --repro` prints the command),
    // from a directory outside any checkout (the daemon's home).
    let param = format!("note={attack}");
    let args = [
        "submit", "--param", &param, "--", "sh", "-c", &script, "sh", metric, &attack,
    ];
    let out = d
        .cmd(&args)
        .current_dir(d.path())
        .env_remove("GPUQ_NO_REPRO")
        .env("XDG_CACHE_HOME", d.path().join("user-cache"))
        .output()
        .unwrap();
    succeeded(&out).trim().parse().unwrap()
}

#[test]
fn hostile_strings_are_shown_escaped_by_every_command() {
    let d = Daemon::start("sim:2");
    // Names and projects with control characters are refused at the door.
    for flag in ["--name", "--project"] {
        let out = d.gpuq(&["submit", flag, &attack(), "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("control character"),
            "{}",
            stderr(&out)
        );
        assert_harmless(&format!("submit {flag}"), &out);
    }
    let id = hostile_job(&d);
    let other = d.submit(&["--param", "note=plain", "--", "true"]);
    let end = d.wait(id);
    assert_eq!(end["state"], "failed", "{end}");
    d.wait(other);
    let sid = id.to_string();
    let cases: Vec<(&str, Vec<String>, bool)> = vec![
        ("ls", vec!["ls".into()], true),
        ("show", vec!["show".into(), sid.clone()], true),
        ("explain", vec!["explain".into(), sid.clone()], false),
        (
            "compare",
            vec!["compare".into(), sid.clone(), other.to_string()],
            true,
        ),
        // Metric names with control characters are dropped at ingestion.
        ("metrics", vec!["metrics".into(), sid.clone()], false),
        (
            "show --repro",
            vec!["show".into(), "--repro".into(), sid.clone()],
            true,
        ),
        (
            "events",
            vec![
                "events".into(),
                "--job".into(),
                sid.clone(),
                "--after".into(),
                "0.0".into(),
                "-n".into(),
                "3".into(),
            ],
            false,
        ),
        ("alerts", vec!["alerts".into()], false),
    ];
    for (what, args, escaped) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = output_within(&mut d.cmd(&args), Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{what} did not finish"));
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        assert_harmless(what, &out);
        if *escaped {
            assert_shows_escaped(what, &out);
        }
    }
    // JSON stays exact: the very characters, escaped the JSON way.
    let json = d.json(&["show", "--json", &sid]);
    assert_eq!(json["spec"]["params"]["note"], attack(), "{json}");
}

/// Your own job's log is yours: printed raw (colours work). Someone else's is
/// shown escaped, unless asked for `--raw`.
#[cfg(feature = "system-tests")]
#[test]
fn another_users_log_is_shown_escaped_and_your_own_raw() {
    const MATE: &str = "gpuqtestc";
    ensure_user(MATE);
    let d = Daemon::start("sim:2");
    let argv = [
        "sh",
        "-c",
        "printf 'log %s\\n' \"$0\"; printf 'raw \\233 byte\\n'",
        &attack(),
    ];
    let theirs = d.submit_as(MATE, 0, &argv);
    let mut mine_args = vec!["--"];
    mine_args.extend_from_slice(&argv);
    let mine = d.submit(&mine_args);
    for id in [theirs, mine] {
        assert_eq!(d.wait(id)["state"], "succeeded", "{}", d.log(id));
    }
    let out = d.gpuq(&["logs", &theirs.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_harmless("logs of another user's job", &out);
    assert_shows_escaped("logs of another user's job", &out);
    assert!(
        stdout(&out).contains("raw \\x9b byte"),
        "a lone C1 byte is spelled out: {}",
        stdout(&out)
    );
    let raw = d.gpuq(&["logs", "--raw", &theirs.to_string()]);
    assert!(raw
        .stdout
        .windows(TITLE.len())
        .any(|w| w == TITLE.as_bytes()));
    let own = d.gpuq(&["logs", &mine.to_string()]);
    assert!(
        own.stdout
            .windows(TITLE.len())
            .any(|w| w == TITLE.as_bytes()),
        "your own log is raw: {}",
        stdout(&own)
    );
}
