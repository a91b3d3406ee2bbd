//! Bad input is refused at the door, naming the field and the fix: over the
//! API with HTTP 400 (413 for a body over the limit) in the JSON error shape,
//! from the CLI with exit status 2; and a refused request writes nothing.

mod common;
mod raw_http;

use common::{stderr, Daemon};
use raw_http::{post_json, request, Reply};
use serde_json::json;
use std::process::Command;

fn submit_body(env: serde_json::Value) -> Vec<u8> {
    json!({
        "spec": { "command": ["true"] },
        "cwd": "/tmp",
        "env": env,
        "user": "",
    })
    .to_string()
    .into_bytes()
}

/// Asserts an error reply in the API's shape; returns its message.
fn error_of(reply: &Reply, status: u16) -> String {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert!(
        reply.content_type.starts_with("application/json"),
        "{}: {}",
        reply.content_type,
        reply.text()
    );
    let body = reply.json().expect("a JSON body");
    body["error"]
        .as_str()
        .expect("an error message")
        .to_string()
}

fn job_count(d: &Daemon) -> usize {
    serde_json::from_str::<Vec<serde_json::Value>>(&d.get("/v1/jobs"))
        .unwrap()
        .len()
}

#[test]
fn the_api_refuses_what_exec_would_refuse_and_writes_nothing() {
    let d = Daemon::start("sim:4");
    let token = d.token();
    let post = |body: &[u8]| post_json(&d.url, &token, "/v1/jobs", body);

    let reply = post(&submit_body(json!({ "FOO": "a\u{0}b" })));
    let e = error_of(&reply, 400);
    assert!(e.contains("env.FOO") && e.contains("NUL"), "{e}");
    assert_eq!(reply.json().unwrap()["field"], "env.FOO");

    let e = error_of(
        &post(&submit_body(json!({ "FOO": "x".repeat(1_900_000) }))),
        400,
    );
    assert!(
        e.contains("env.FOO") && e.contains("1.8 MiB") && e.contains("128 KiB"),
        "{e}"
    );

    let many: serde_json::Map<String, serde_json::Value> = (0..100_000)
        .map(|i| (format!("V{i}"), json!("1")))
        .collect();
    let e = error_of(&post(&submit_body(many.into())), 400);
    assert!(e.contains("100000 variables") && e.contains("4096"), "{e}");

    let e = error_of(&post(&submit_body(json!({ "A=B": "1" }))), 400);
    assert!(e.contains('='), "{e}");

    // The spec's own fields, sent as JSON.
    let body = json!({"spec": {"command": ["true", "a\u{0}"]}, "cwd": "/tmp", "user": ""});
    let e = error_of(&post(body.to_string().as_bytes()), 400);
    assert!(e.starts_with("command: argument 1"), "{e}");
    let body = json!({"spec": {"run": "echo", "name": "a\nb"}, "cwd": "/tmp", "user": ""});
    assert!(error_of(&post(body.to_string().as_bytes()), 400).starts_with("name: "));

    // Over the body limit: 413, still in the JSON shape.
    let big = submit_body(json!({ "FOO": "x".repeat(5 << 20) }));
    let path = d.path().join("big.json");
    std::fs::write(&path, &big).unwrap();
    let out = Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", "-X", "POST", "-H"])
        .arg(format!("authorization: Bearer {token}"))
        .arg("--data-binary")
        .arg(format!("@{}", path.display()))
        .arg(format!("{}/v1/jobs", d.url))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    assert_eq!(code, "413", "{text}");
    let body: serde_json::Value = serde_json::from_str(body).expect("a JSON 413");
    assert!(body["error"].as_str().unwrap().contains("4 MiB"), "{body}");

    // axum's own rejections, on the other JSON endpoints.
    let e = error_of(&post_json(&d.url, &token, "/v1/tokens", b"{\"user\":"), 400);
    assert!(e.starts_with("invalid request body"), "{e}");
    let e = error_of(
        &post_json(&d.url, &token, "/v1/tokens", b"{\"user\":5}"),
        400,
    );
    assert!(e.contains("invalid type"), "{e}");
    let auth = format!("Bearer {token}");
    let reply = request(
        &d.url,
        "POST",
        "/v1/autostop",
        &[("authorization", &auth), ("content-type", "text/plain")],
        b"{}",
    );
    assert!(error_of(&reply, 415).contains("Content-Type: application/json"));
    let e = error_of(
        &post_json(&d.url, &token, "/v1/tokens", b"{\"user\":\"a\\u0000\"}"),
        400,
    );
    assert!(e.starts_with("user: "), "{e}");
    let body = br#"{"idle_after":"1h","command":"a\u0000"}"#;
    assert!(error_of(&post_json(&d.url, &token, "/v1/autostop", body), 400).contains("NUL"));
    let reply = request(
        &d.url,
        "GET",
        "/v1/jobs/abc",
        &[("authorization", &auth)],
        b"",
    );
    assert!(error_of(&reply, 400).contains("abc"));
    let reply = request(&d.url, "GET", "/v1/nope", &[("authorization", &auth)], b"");
    assert!(error_of(&reply, 404).contains("/v1/nope"));

    assert_eq!(job_count(&d), 0, "a refused submit wrote a job");
    let tokens: Vec<serde_json::Value> = serde_json::from_str(&d.get("/v1/tokens")).unwrap();
    assert!(tokens.is_empty(), "a refused token request wrote one");
}

#[test]
fn the_cli_refuses_with_exit_2_naming_the_variable() {
    let d = Daemon::start("sim:4");
    // One --env can never exceed exec's limit (it is an argument of gpuq itself);
    // together they can.
    let values: Vec<String> = (0..12)
        .map(|i| format!("V{i}={}", "x".repeat(100_000)))
        .collect();
    let mut args = vec!["submit"];
    for v in &values {
        args.extend(["--env", v.as_str()]);
    }
    args.extend(["--", "true"]);
    let out = d.gpuq(&args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("env: ") && stderr(&out).contains("in all"),
        "{}",
        stderr(&out)
    );

    let spec = d.path().join("job.yaml");
    std::fs::write(&spec, "command: [\"true\"]\nenv:\n  FOO: \"a\\0b\"\n").unwrap();
    let out = d.gpuq(&["submit", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("env.FOO") && stderr(&out).contains("NUL"));
    let huge = format!(
        "command: [\"true\"]\nenv:\n  FOO: {}\n",
        "x".repeat(2_000_000)
    );
    std::fs::write(&spec, huge).unwrap();
    let out = d.gpuq(&["submit", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("env.FOO") && stderr(&out).contains("1.9 MiB"),
        "{}",
        stderr(&out)
    );

    let mut big_env = String::from("command: [\"true\"]\nenv:\n");
    for i in 0..12 {
        big_env.push_str(&format!("  V{i}: {}\n", "x".repeat(100_000)));
    }
    std::fs::write(&spec, big_env).unwrap();
    let out = d.gpuq(&["submit", spec.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("in all"), "{}", stderr(&out));

    // The submitter's own environment: each variable fits exec, together too much.
    let mut cmd = d.cmd(&["submit", "--", "true"]);
    for i in 0..11 {
        cmd.env(format!("GPUQTEST_BIG{i}"), "x".repeat(100_000));
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("environment") && stderr(&out).contains("1 MiB"),
        "{}",
        stderr(&out)
    );
    assert_eq!(job_count(&d), 0, "a refused submit wrote a job");
}

#[test]
fn a_variable_that_is_not_utf8_is_left_out_with_a_warning() {
    use std::os::unix::ffi::OsStrExt;
    let d = Daemon::start("sim:4");
    let out = d
        .cmd(&["submit", "--", "true"])
        .env("GPUQTEST_LATIN1", std::ffi::OsStr::from_bytes(b"caf\xe9"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("GPUQTEST_LATIN1 is not UTF-8"),
        "{}",
        stderr(&out)
    );
    assert_eq!(job_count(&d), 1);
}
