//! Fuzzing the HTTP API's request bodies against a real daemon: arbitrary
//! bytes, and valid requests with one part mutated (wrong types, huge numbers,
//! deep nesting, odd unicode, broken JSON text). The daemon must never fail
//! (no 5xx, no dropped connection), every refusal must be a 4xx in the JSON
//! error shape (MLflow's on its tracking paths), and only accepted requests may
//! leave anything in the store.
//!
//! The case counts are fixed (see `CASES`); the test prints how many ran and
//! how long they took: `cargo test -p gpuq --test fuzz -- --nocapture`.

mod common;
mod raw_http;

use common::Daemon;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use raw_http::{get, post_json, Reply};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Instant;

/// Cases per endpoint: arbitrary bytes, then mutated valid requests.
const CASES: [(&str, u32, u32); 10] = [
    ("/v1/jobs", 400, 1200),
    ("/v1/sweeps", 200, 500),
    ("/v1/tokens", 200, 400),
    ("/v1/autostop", 200, 400),
    ("/api/2.0/mlflow/runs/log-batch", 200, 600),
    ("/api/2.0/mlflow/runs/search", 200, 600),
    ("/api/2.0/mlflow/experiments/create", 100, 300),
    ("/auth/login", 150, 300),
    ("/auth/link", 100, 200),
    ("/v1/dashboard-sessions/end", 100, 200),
];
/// Stands where a mutation puts raw JSON text (see `Mutation::Raw`).
const PLACEHOLDER: &str = "\u{1}raw\u{1}";

fn baseline(path: &str, run: &str) -> Value {
    match path {
        "/api/2.0/mlflow/runs/log-batch" => json!({
            "run_id": run,
            "metrics": [{"key": "loss", "value": 0.5, "timestamp": 1700000000000i64, "step": 1}],
            "params": [{"key": "lr", "value": "0.1"}],
            "tags": [{"key": "note", "value": "fuzz"}]
        }),
        "/api/2.0/mlflow/runs/search" => json!({
            "experiment_ids": ["0"],
            "filter": "metrics.loss < 1 and params.lr = '0.1' and tags.note LIKE 'f%'",
            "order_by": ["metrics.loss DESC", "attributes.start_time"],
            "max_results": 10,
            "run_view_type": "ACTIVE_ONLY"
        }),
        "/api/2.0/mlflow/experiments/create" => {
            json!({"name": "fuzz", "tags": [{"key": "a", "value": "b"}]})
        }
        "/v1/jobs" => json!({
            "spec": {
                "name": "fuzz", "command": ["true", "--flag"], "gpus": 1, "priority": "normal",
                "retries": 1, "time_limit": "1h", "env": {"A": "1"}, "project": "p",
                "after": [], "preemptible": false, "cwd": "/tmp", "array": "0-2%2"
            },
            "cwd": "/tmp",
            "env": {"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
            "user": ""
        }),
        "/v1/sweeps" => json!({
            "spec": {"name": "fuzz", "command": ["true"], "gpus": 1, "time_limit": "1h", "cwd": "/tmp"},
            "sweep": {
                "parameters": {
                    "lr": {"loguniform": [0.0001, 0.1]},
                    "n": {"int": [1, 4]},
                    "opt": {"choice": ["adam", "sgd"]}
                },
                "metric": {"name": "loss", "goal": "minimize"},
                "searcher": {"name": "asha", "max_trials": 4, "max_concurrent": 2, "max_step": 9, "min_step": 1, "eta": 3}
            },
            "budget": {"gpu_hours": 2},
            "seed": 7,
            "cwd": "/tmp",
            "env": {"PATH": "/usr/bin:/bin"},
            "user": ""
        }),
        "/v1/tokens" => json!({"user": "fuzzer"}),
        // One mutation per case: a changed command keeps the 1h idle time and a
        // changed idle time keeps the harmless command, so nothing odd ever runs.
        "/v1/autostop" => json!({"idle_after": "1h", "command": "true", "dry_run": true}),
        "/auth/login" | "/auth/link" => json!({"code": "not-a-code"}),
        "/v1/dashboard-sessions/end" => json!({"user": "fuzzer"}),
        _ => unreachable!(),
    }
}

fn odd_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,40}",
        ".{0,40}",
        "[\\x00-\\x1f=]{1,8}",
        Just(String::new()),
        Just("\u{0}".to_string()),
        Just("\u{202e}evil\u{200b}".to_string()),
        Just("e\u{301}\u{fe0f}🚀𝕏".to_string()),
        Just("\u{feff}\u{ffff}\u{10ffff}".to_string()),
        Just("../../etc/passwd".to_string()),
        (1usize..300_000).prop_map(|n| "x".repeat(n)),
    ]
}

fn odd_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        Just(json!(1e308)),
        Just(json!(-1)),
        Just(json!(u64::MAX)),
        odd_string().prop_map(Value::from),
    ];
    prop_oneof![
        3 => leaf.clone(),
        1 => prop::collection::vec(leaf.clone(), 0..6).prop_map(Value::from),
        1 => prop::collection::btree_map(odd_string(), leaf, 0..6)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => (1usize..100).prop_map(|depth| (0..depth).fold(json!(1), |v, _| json!([v]))),
    ]
}

/// JSON text no serde_json value serializes to.
fn raw_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(r#""\ud800""#.to_string()),
        Just(r#""\udc00\ud800""#.to_string()),
        Just("1e999999".to_string()),
        Just("-0".to_string()),
        Just("18446744073709551616".to_string()),
        Just("-9223372036854775809".to_string()),
        Just("NaN".to_string()),
        Just("Infinity".to_string()),
        Just("0x10".to_string()),
        Just("'single'".to_string()),
        Just("\"unterminated".to_string()),
        Just("\"\u{0}raw control\"".to_string()),
        (100usize..100_000).prop_map(|n| "[".repeat(n)),
        (100usize..10_000).prop_map(|n| format!("{}1{}", "[".repeat(n), "]".repeat(n))),
        (100usize..10_000).prop_map(|n| "{\"a\":".repeat(n)),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace(Value),
    Remove,
    /// An unknown field next to the chosen one.
    AddUnknown(Value),
    /// The chosen value replaced by raw JSON text.
    Raw(String),
    /// The valid text cut short, or with one byte changed.
    Truncate,
    Byte(u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => odd_value().prop_map(Mutation::Replace),
        1 => Just(Mutation::Remove),
        1 => odd_value().prop_map(Mutation::AddUnknown),
        2 => raw_text().prop_map(Mutation::Raw),
        1 => Just(Mutation::Truncate),
        1 => any::<u8>().prop_map(Mutation::Byte),
    ]
}

/// Every place in `v`: object keys and array indices, parents before children.
fn places(v: &Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let children: Vec<(String, &Value)> = match v {
        Value::Object(m) => m.iter().map(|(k, v)| (k.clone(), v)).collect(),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        _ => return,
    };
    for (key, child) in children {
        at.push(key);
        out.push(at.clone());
        places(child, at, out);
        at.pop();
    }
}

fn apply(base: &Value, place: &[String], m: &Mutation, pick: prop::sample::Index) -> Vec<u8> {
    let text = base.to_string().into_bytes();
    match m {
        Mutation::Truncate => return text[..pick.index(text.len())].to_vec(),
        Mutation::Byte(b) => {
            let mut text = text;
            let i = pick.index(text.len());
            text[i] = *b;
            return text;
        }
        _ => {}
    }
    let mut v = base.clone();
    let (last, parents) = place.split_last().expect("a place");
    let mut parent = &mut v;
    for key in parents {
        parent = match parent {
            Value::Object(o) => o.get_mut(key).unwrap(),
            Value::Array(a) => &mut a[key.parse::<usize>().unwrap()],
            _ => unreachable!(),
        };
    }
    match (parent, m) {
        (Value::Object(o), Mutation::Remove) => {
            o.remove(last);
        }
        (Value::Array(a), Mutation::Remove) => {
            a.remove(last.parse::<usize>().unwrap());
        }
        (Value::Object(o), Mutation::AddUnknown(x)) => {
            o.insert("x_unknown".into(), x.clone());
        }
        (Value::Array(a), Mutation::AddUnknown(x)) => a.push(x.clone()),
        (p, Mutation::Replace(x)) => *slot(p, last) = x.clone(),
        (p, Mutation::Raw(_)) => *slot(p, last) = Value::from(PLACEHOLDER),
        _ => unreachable!(),
    }
    let text = v.to_string();
    match m {
        Mutation::Raw(raw) => text
            .replacen(&Value::from(PLACEHOLDER).to_string(), raw, 1)
            .into_bytes(),
        _ => text.into_bytes(),
    }
}

fn slot<'a>(parent: &'a mut Value, key: &str) -> &'a mut Value {
    match parent {
        Value::Object(o) => o.get_mut(key).unwrap(),
        Value::Array(a) => &mut a[key.parse::<usize>().unwrap()],
        _ => unreachable!(),
    }
}

/// The reply's verdict: accepted (2xx) or refused in the API's shape; anything else fails.
fn judge(reply: &Reply, body: &[u8]) -> Result<bool, TestCaseError> {
    let shown = || String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    if (200..300).contains(&reply.status) {
        return Ok(true);
    }
    prop_assert!(
        (400..500).contains(&reply.status),
        "HTTP {} for {}: {}",
        reply.status,
        shown(),
        reply.text()
    );
    prop_assert!(
        reply.content_type.starts_with("application/json"),
        "HTTP {} as {:?} for {}: {}",
        reply.status,
        reply.content_type,
        shown(),
        reply.text()
    );
    // gpuq's shape (`error`), or MLflow's (`error_code` and `message`) on its paths.
    let error = reply.json().and_then(|v| {
        v["error"]
            .as_str()
            .or(v["error_code"].as_str().and(v["message"].as_str()))
            .map(str::to_string)
    });
    prop_assert!(
        error.is_some_and(|e| !e.is_empty()),
        "no error message: {}",
        reply.text()
    );
    Ok(false)
}

/// A body that would set an autostop command other than the harmless one.
fn unsafe_autostop(body: &[u8]) -> bool {
    serde_json::from_slice::<gpuq_api::AutostopRequest>(body)
        .is_ok_and(|r| r.command.is_some_and(|c| c != "true"))
}

#[derive(Default)]
struct Tally {
    cases: u32,
    /// An MLflow run the tracking requests write to.
    run: String,
    accepted_jobs: BTreeSet<u64>,
    accepted_tokens: u32,
}

fn fuzz_endpoint(d: &Daemon, path: &str, bytes: u32, mutated: u32, tally: &mut Tally) {
    let run = tally.run.clone();
    let token = d.token();
    let send = |body: &[u8], tally: &mut Tally| -> Result<(), TestCaseError> {
        if path == "/v1/autostop" && unsafe_autostop(body) {
            return Ok(());
        }
        let reply = post_json(&d.url, &token, path, body);
        tally.cases += 1;
        if judge(&reply, body)? {
            match path {
                "/v1/jobs" => {
                    let id = reply.json().and_then(|v| v["id"].as_u64());
                    prop_assert!(id.is_some(), "accepted without an id: {}", reply.text());
                    tally.accepted_jobs.extend(id);
                }
                "/v1/sweeps" => {
                    let jobs = reply.json().and_then(|v| {
                        v["trials"].as_array().map(|t| {
                            t.iter()
                                .filter_map(|t| t["job"].as_u64())
                                .collect::<Vec<_>>()
                        })
                    });
                    prop_assert!(jobs.is_some(), "accepted without trials: {}", reply.text());
                    tally.accepted_jobs.extend(jobs.unwrap_or_default());
                }
                "/v1/tokens" => tally.accepted_tokens += 1,
                _ => {}
            }
        }
        Ok(())
    };
    let config = |cases| Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let json_prefix = prop_oneof![
        Just(Vec::new()),
        Just(b"{\"spec\":".to_vec()),
        Just(b"{\"user\":".to_vec()),
        Just(b"{\"idle_after\":\"1h\",\"command\":".to_vec()),
        Just(b"{\"run_id\":".to_vec()),
        Just(b"{\"filter\":".to_vec()),
    ];
    let arbitrary = (json_prefix, prop::collection::vec(any::<u8>(), 0..2048)).prop_map(
        |(mut prefix, tail)| {
            prefix.extend(tail);
            prefix
        },
    );
    let cell = std::cell::RefCell::new(&mut *tally);
    TestRunner::new(config(bytes))
        .run(&arbitrary, |body| send(&body, &mut cell.borrow_mut()))
        .unwrap_or_else(|e| panic!("{path}, arbitrary bytes: {e}"));

    let base = baseline(path, &run);
    let mut all = Vec::new();
    places(&base, &mut Vec::new(), &mut all);
    let near_valid = (
        prop::sample::select(all),
        mutation(),
        any::<prop::sample::Index>(),
    );
    TestRunner::new(config(mutated))
        .run(&near_valid, |(place, m, pick)| {
            let body = apply(&base, &place, &m, pick);
            send(&body, &mut cell.borrow_mut())
        })
        .unwrap_or_else(|e| panic!("{path}, mutated request: {e}"));
}

#[test]
fn request_bodies_are_accepted_or_refused_in_json_never_crash() {
    let d = Daemon::start("sim:4");
    // Nothing accepted may run: the queue holds every job.
    d.ok(&["drain"]);
    let started = Instant::now();
    let mut tally = Tally::default();
    let made = post_json(
        &d.url,
        &d.token(),
        "/api/2.0/mlflow/runs/create",
        br#"{"experiment_id": "0"}"#,
    );
    tally.run = made
        .json()
        .and_then(|v| v["run"]["info"]["run_id"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no run: {}", made.text()));
    for (path, bytes, mutated) in CASES {
        fuzz_endpoint(&d, path, bytes, mutated, &mut tally);
    }
    let elapsed = started.elapsed();
    let token = d.token();
    assert_eq!(
        get(&d.url, &token, "/health").status,
        200,
        "the daemon died"
    );
    let jobs: Vec<Value> = get(&d.url, &token, "/v1/jobs?limit=100000")
        .json()
        .and_then(|v| serde_json::from_value(v).ok())
        .expect("the job list");
    // A submit answers with its job, or an array's first task (whose id is the array's).
    let listed: BTreeSet<u64> = jobs
        .iter()
        .filter(|j| j["array_id"].is_null() || j["array_id"] == j["id"])
        .filter_map(|j| j["id"].as_u64())
        .collect();
    assert_eq!(
        listed, tally.accepted_jobs,
        "only accepted submits are stored"
    );
    for j in &jobs {
        let head = j["array_id"].as_u64().unwrap_or(j["id"].as_u64().unwrap());
        assert!(
            tally.accepted_jobs.contains(&head),
            "a task of an array never accepted: {j}"
        );
    }
    let tokens: Vec<Value> = get(&d.url, &token, "/v1/tokens")
        .json()
        .and_then(|v| serde_json::from_value(v).ok())
        .expect("the token list");
    assert_eq!(tokens.len() as u32, tally.accepted_tokens);
    let search = post_json(
        &d.url,
        &token,
        "/api/2.0/mlflow/runs/search",
        br#"{"experiment_ids": ["0"]}"#,
    );
    assert_eq!(search.status, 200, "{}", search.text());
    let off = post_json(&d.url, &token, "/v1/autostop", br#"{"idle_after":"off"}"#);
    assert_eq!(off.status, 200, "{}", off.text());
    eprintln!(
        "fuzz: {} requests ({} jobs and {} tokens accepted) in {:.1} s",
        tally.cases,
        tally.accepted_jobs.len(),
        tally.accepted_tokens,
        elapsed.as_secs_f64()
    );
}

/// Requests at a session's doors: `/sessions/…` (the notebook proxy) and a
/// shell's attach, with odd paths, methods, credentials, cookies and upgrade
/// headers, against a daemon running one shell session: answered with a
/// refusal or a redirect, never a server error, and the session untouched.
#[test]
fn session_doors_refuse_odd_requests_and_never_crash() {
    let d = Daemon::start("sim:1");
    let user = d.json(&["whoami", "--json"])["user"]
        .as_str()
        .unwrap()
        .to_string();
    let body = json!({"spec": {"command": ["sleep", "300"], "session": {"kind": "shell"}},
        "cwd": "/tmp", "env": {}, "user": user});
    let shell = post_json(&d.url, &d.token(), "/v1/jobs", body.to_string().as_bytes())
        .json()
        .and_then(|v| v["id"].as_u64())
        .expect("a shell session");
    d.wait_running(shell);
    let token = d.token();
    let segment = prop_oneof![
        Just(shell.to_string()),
        Just("0".to_string()),
        Just("99999999999999999999".to_string()),
        "[a-zA-Z0-9%._~-]{0,12}",
    ];
    let tail = "[a-zA-Z0-9%._~/?=&-]{0,40}";
    let method = prop::sample::select(vec![
        "GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD",
    ]);
    let auth = prop_oneof![
        Just(String::new()),
        Just(format!("Bearer {token}")),
        Just("Bearer gpuqjob_1_00".to_string()),
        "[ -~]{0,40}",
    ];
    let extra = prop::sample::select(vec![
        ("upgrade", "websocket"),
        ("upgrade", "gpuq-terminal"),
        ("cookie", "gpuq_session_1=x; _xsrf=y"),
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
        ("accept", "text/html"),
        ("x-nothing", "1"),
    ]);
    let cases = (
        segment,
        tail,
        method,
        auth,
        prop::collection::vec(extra, 0..4),
        any::<bool>(),
    );
    let config = Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    };
    TestRunner::new(config)
        .run(&cases, |(segment, tail, method, auth, extra, attach)| {
            let path = if attach {
                format!("/v1/jobs/{segment}/attach")
            } else {
                format!("/sessions/{segment}/{tail}")
            };
            let mut headers: Vec<(&str, &str)> = extra.clone();
            if !auth.is_empty() {
                headers.push(("authorization", &auth));
            }
            let reply = raw_http::request(&d.url, method, &path, &headers, b"");
            prop_assert!(
                reply.status < 500 || reply.status == 503,
                "{method} {path} {headers:?}: {} {}",
                reply.status,
                reply.text()
            );
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        d.show(shell)["state"],
        "running",
        "the session is untouched"
    );
    assert_eq!(get(&d.url, &token, "/health").status, 200);
    d.ok(&["cancel", &shell.to_string()]);
    d.wait(shell);
}
