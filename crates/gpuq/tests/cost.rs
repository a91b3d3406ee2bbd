//! Costs, budgets, autostop, schedules and advice, end to end on a real daemon.

mod common;

use common::{eventually, Daemon};
use serde_json::{json, Value};
use std::time::Duration;

fn me(d: &Daemon) -> String {
    d.json(&["whoami", "--json"])["user"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The cost of an attempt as the contract defines it: rate × time, half up to the micro-dollar.
fn expected_micros(attempt: &Value) -> i64 {
    let rate = attempt["rate_per_hour"].as_i64().unwrap() as i128;
    let ms =
        (attempt["ended_at"].as_i64().unwrap() - attempt["started_at"].as_i64().unwrap()) as i128;
    ((rate * ms + 1_800_000) / 3_600_000) as i64
}

#[test]
fn costs_are_exact_and_every_view_agrees() {
    let d = Daemon::start_with_config("sim:2", "[cost]\ngpu_hour = 36.0\ncpu_job_hour = 3.6\n");
    let gpu_job = d.submit(&["--gpus", "2", "--", "sleep", "1"]);
    let cpu_job = d.submit(&["--", "sleep", "0.5"]);
    d.wait(gpu_job);
    d.wait(cpu_job);
    let mut total = 0;
    for (id, rate) in [(gpu_job, 72_000_000), (cpu_job, 3_600_000)] {
        let shown = d.show(id);
        let attempt = &shown["attempts"][0];
        assert_eq!(
            attempt["rate_per_hour"],
            json!(rate),
            "2 GPUs × $36, or the CPU-job rate"
        );
        let cost = shown["cost"].as_i64().unwrap();
        assert_eq!(cost, expected_micros(attempt), "job {id}");
        total += cost;
    }
    let by_job = d.json(&["cost", "--by", "job", "--json"]);
    for row in by_job["rows"].as_array().unwrap() {
        let id: u64 = row["key"].as_str().unwrap().parse().unwrap();
        assert_eq!(
            row["cost"],
            d.show(id)["cost"],
            "report and show agree for job {id}"
        );
    }
    for by in ["user", "job", "day", "project", "user,day", "project,day"] {
        let r = d.json(&["cost", "--by", by, "--json"]);
        assert_eq!(r["total"].as_i64(), Some(total), "--by {by}");
        assert_eq!(r["by"], by);
        if by.ends_with(",day") {
            // One row per day and name, keyed DAY/NAME.
            for row in r["rows"].as_array().unwrap() {
                let key = row["key"].as_str().unwrap();
                let (day, name) = key.split_once('/').unwrap_or_else(|| panic!("{key}"));
                assert_eq!(day.len(), 10, "{key}");
                assert!(!name.is_empty(), "{key}");
            }
        }
        let sum: i64 = r["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["cost"].as_i64().unwrap())
            .sum();
        assert_eq!(sum, total, "--by {by}: rows add up to the total");
    }
    let table = d.ok(&["ls"]);
    assert!(table.contains("COST"), "{table}");
    let csv = d.ok(&["cost", "--format", "csv"]);
    assert!(
        csv.starts_with("group,key,cost_usd,gpu_hours_allocated,gpu_hours_used,attempts\n"),
        "{csv}"
    );
    let md = d.ok(&["cost", "--format", "md"]);
    assert!(
        md.contains("## By user") && md.contains("## By project"),
        "{md}"
    );
    let bad = d.gpuq(&["cost", "--since", "last tuesday"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("since"));

    // A node without a price shows none, never $0.
    let free = Daemon::start("sim:1");
    let id = free.submit(&["--gpus", "1", "--", "true"]);
    free.wait(id);
    assert!(free.show(id)["cost"].is_null());
    assert!(free.ok(&["show", &id.to_string()]).contains("no price"));
    let r = free.json(&["cost", "--json"]);
    assert!(
        r["total"].is_null() && r["pricing"].as_str().unwrap().contains("no price"),
        "{r}"
    );
}

#[test]
fn a_budget_refuses_what_it_cannot_pay_then_holds_and_stops_at_100_percent() {
    // $3600 per GPU-hour is a dollar a second: the budget runs out while we watch.
    let probe = Daemon::start("none");
    let user = me(&probe);
    drop(probe);
    let d = Daemon::start_with_config(
        "sim:1",
        &format!(
            "[cost]\ngpu_hour = 3600.0\n[[budgets]]\nuser = \"{user}\"\namount = 4.0\naction = \"stop\"\nalert_at = [50, 100]\n"
        ),
    );
    // Admission by worst case: 10 s at $1/s is more than the $4 left.
    let refused = d.gpuq(&[
        "submit",
        "--gpus",
        "1",
        "--time-limit",
        "10s",
        "--",
        "sleep",
        "1",
    ]);
    assert_eq!(refused.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&refused.stderr).to_string();
    assert!(
        msg.contains("may cost up to $10.00") && msg.contains("$4.00 left this month"),
        "{msg}"
    );
    assert!(msg.contains("--time-limit"), "says what to do: {msg}");

    let running = d.submit(&["--gpus", "1", "--", "sleep", "120"]);
    let queued = d.submit(&["--gpus", "1", "--", "sleep", "1"]);
    d.wait_running(running);
    let stopped = d.wait(running);
    assert_eq!(stopped["state"], "cancelled");
    assert!(
        stopped["reason"].as_str().unwrap().contains("budget"),
        "{stopped}"
    );
    assert!(eventually(Duration::from_secs(10), || d.show(queued)
        ["held_by"]
        == "budget"));
    let kinds: Vec<String> = d
        .json(&["alerts", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "budget")
        .map(|a| a["message"].as_str().unwrap().to_string())
        .collect();
    assert!(
        kinds.iter().any(|m| m.contains("alert at 50%")),
        "{kinds:?}"
    );
    assert!(
        kinds
            .iter()
            .any(|m| m.contains("alert at 100%") && m.contains("action: stop")),
        "{kinds:?}"
    );
    let again = d.gpuq(&["submit", "--", "true"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("is spent"));
    let budget = &d.json(&["cost", "--json"])["budgets"][0];
    assert_eq!(budget["exhausted"], true);
    assert!(budget["spent"].as_i64().unwrap() >= 4_000_000);
    let metrics = d.get("/metrics");
    assert!(
        metrics.contains(&format!(
            "gpuq_budget_limit_dollars{{scope=\"user\",name=\"{user}\",period=\"month\"}} 4"
        )),
        "{metrics}"
    );

    // The admin raises the budget: the jobs the budget held run; a user's own hold would stay.
    let mut d = d;
    let config = std::fs::read_to_string(d.path().join("gpuq.toml")).unwrap();
    std::fs::write(
        d.path().join("gpuq.toml"),
        config.replace("amount = 4.0", "amount = 1000.0"),
    )
    .unwrap();
    d.restart();
    assert_eq!(d.wait(queued)["state"], "succeeded");
}

#[test]
fn autostop_acts_only_after_the_node_is_idle_and_dry_run_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("stopped");
    let d = Daemon::start_with_config(
        "sim:1",
        &format!(
            "[telemetry]\ninterval = \"100ms\"\n[autostop]\nidle_after = \"2s\"\nwarn_before = \"1s\"\ncommand = \"echo idle > {}\"\n",
            marker.display()
        ),
    );
    // A busy job keeps the node awake.
    let busy = d.submit(&[
        "--gpus",
        "1",
        "--env",
        "GPUQ_SIM_UTIL=90",
        "--",
        "sleep",
        "60",
    ]);
    d.wait_running(busy);
    std::thread::sleep(Duration::from_secs(3));
    assert!(!marker.exists(), "a busy node was stopped");
    // A job holding the GPU at 0% does not: the node counts as idle.
    d.ok(&["cancel", &busy.to_string()]);
    d.wait(busy);
    let idle = d.submit(&[
        "--gpus",
        "1",
        "--env",
        "GPUQ_SIM_UTIL=0",
        "--",
        "sleep",
        "60",
    ]);
    d.wait_running(idle);
    assert!(
        eventually(Duration::from_secs(10), || marker.exists()),
        "{}",
        d.daemon_log()
    );
    let alerts = d.json(&["alerts", "--json"]);
    let idle_msgs: Vec<&str> = alerts
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "node_idle")
        .map(|a| a["message"].as_str().unwrap())
        .collect();
    assert!(
        idle_msgs[0].contains("will run `echo idle"),
        "warned first: {idle_msgs:?}"
    );
    assert!(
        idle_msgs.iter().any(|m| m.contains("ran `echo idle")),
        "{idle_msgs:?}"
    );

    // Off, then a dry run: alerts say what would run, nothing runs.
    assert!(d.ok(&["autostop", "off"]).contains("off"));
    std::fs::remove_file(&marker).unwrap();
    let status = d.ok(&["autostop", "1s", "--dry-run"]);
    assert!(status.contains("dry run"), "{status}");
    assert!(eventually(Duration::from_secs(10), || d
        .json(&["alerts", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["message"]
            .as_str()
            .unwrap()
            .contains("(dry run): would run"))));
    std::thread::sleep(Duration::from_millis(500));
    assert!(!marker.exists(), "a dry run ran the command");
    d.ok(&["cancel", &idle.to_string()]);
}

#[test]
fn schedules_submit_recurring_jobs_and_list_their_next_runs() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("tick.yaml");
    std::fs::write(&spec, "name: tick\ncommand: [\"true\"]\n").unwrap();
    let d = Daemon::start_with_config(
        "none",
        &format!(
            "[cost]\ntimezone = \"Asia/Shanghai\"\n\
             [[schedules]]\nname = \"every-second\"\ncron = \"* * * * * *\"\naction = \"submit\"\nspec = \"{}\"\n\
             [[schedules]]\nname = \"night\"\ncron = \"0 22 * * 1-5\"\naction = \"drain\"\n",
            spec.display()
        ),
    );
    let listed = d.json(&["schedules", "--json"]);
    assert_eq!(listed[1]["name"], "night");
    let next = listed[1]["next_local"].as_array().unwrap();
    assert_eq!(next.len(), 3);
    assert!(
        next.iter()
            .all(|t| t.as_str().unwrap().contains(" 22:00:00 CST")),
        "{next:?}"
    );
    assert!(eventually(Duration::from_secs(10), || {
        d.json(&["ls", "--json"])
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["name"] == "tick" && j["state"] == "succeeded")
            .count()
            >= 2
    }));
    assert!(d.ok(&["schedules"]).contains("every-second"));
    // A bad cron is refused at start, naming the schedule and the field.
    let bad = std::process::Command::new(common::GPUQ)
        .args(["server", "--gpus", "none", "--config"])
        .arg({
            let f = dir.path().join("bad.toml");
            std::fs::write(
                &f,
                "[[schedules]]\nname = \"x\"\ncron = \"0 25 * * *\"\naction = \"drain\"\n",
            )
            .unwrap();
            f
        })
        .env("GPUQ_HOME", dir.path())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let e = String::from_utf8_lossy(&bad.stderr);
    assert!(
        e.contains("schedules[0] (x).cron") && e.contains("hour 25"),
        "{e}"
    );
}

#[test]
fn advice_names_cheaper_cards_and_the_figures_behind_its_hints() {
    let d = Daemon::start_with_config(
        "sim:1xA100:80",
        "[telemetry]\ninterval = \"100ms\"\n[cost]\ngpu_hour = 2.0\n",
    );
    let id = d.submit(&[
        "--gpus",
        "1",
        "--env",
        "GPUQ_SIM_UTIL=40",
        "--env",
        "GPUQ_SIM_MEMORY_MIB=9216",
        "--",
        "sleep",
        "2",
    ]);
    d.wait(id);
    let a = d.json(&["advise", &id.to_string(), "--json"]);
    let hints: Vec<&str> = a["hints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert!(
        hints
            .iter()
            .any(|h| h.contains("averaged 40%") && h.contains("num_workers")),
        "{hints:?}"
    );
    assert!(
        hints
            .iter()
            .any(|h| h.contains("peak memory 9.0 of 80 GiB")),
        "{hints:?}"
    );
    let options = a["options"].as_array().unwrap();
    assert!(!options.is_empty(), "{a}");
    assert!(
        options
            .iter()
            .all(|o| o["memory_gib"].as_u64().unwrap() >= 11),
        "{options:?}"
    );
    assert!(a["basis"].as_str().unwrap().contains("A100-80GB"), "{a}");
    let text = d.ok(&["advise", &id.to_string()]);
    assert!(text.contains("cheapest run first"), "{text}");
}

/// POSTs `body` to /v1/autostop with the daemon's token: (status, reply).
fn post_autostop(d: &Daemon, body: &str) -> (u16, Value) {
    let out = std::process::Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}", "-X", "POST", "-H"])
        .arg(format!("authorization: Bearer {}", d.token().trim()))
        .args([
            "-H",
            "content-type: application/json",
            "--data-binary",
            body,
        ])
        .arg(format!("{}/v1/autostop", d.url))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (reply, code) = text.rsplit_once('\n').unwrap();
    (
        code.trim().parse().unwrap(),
        serde_json::from_str(reply).unwrap_or(Value::String(reply.into())),
    )
}

#[test]
fn an_autostop_change_keeps_what_it_does_not_name_and_refuses_unknown_fields() {
    let d = Daemon::start_with_config(
        "sim:1",
        "[autostop]\nidle_after = \"1h\"\nwarn_before = \"10m\"\ncommand = \"true\"\ndry_run = true\n",
    );
    let shown = |s: &Value| {
        (
            s["idle_after"].as_str().map(str::to_string),
            s["dry_run"].as_bool(),
            s["command"].as_str().map(str::to_string),
        )
    };
    let is =
        |after: &str, dry: bool| (Some(after.to_string()), Some(dry), Some("true".to_string()));
    // Changing the idle time alone keeps the config's dry run and command.
    let (code, s) = post_autostop(&d, r#"{"idle_after":"2h"}"#);
    assert_eq!(code, 200, "{s}");
    assert_eq!(shown(&s), is("2h", true), "{s}");
    assert_eq!(s["warn_before"], "10m", "{s}");
    // A misspelt field is refused by name, and nothing changes.
    let (code, s) = post_autostop(&d, r#"{"idle_after":"3h","dryrun":false}"#);
    assert_eq!(code, 400, "{s}");
    assert!(s["error"].as_str().unwrap().contains("dryrun"), "{s}");
    assert_eq!(shown(&d.json(&["autostop", "--json"])), is("2h", true));
    // The command line changes only what it is given.
    let s = d.json(&["autostop", "--dry-run=false", "--json"]);
    assert_eq!(shown(&s), is("2h", false), "{s}");
    let s = d.json(&["autostop", "30m", "--json"]);
    assert_eq!(shown(&s), is("30m", false), "{s}");
    // Off, then on again: what gpuq.toml says comes back; nothing to keep is no default.
    assert!(d.ok(&["autostop", "off"]).contains("off"));
    let (code, s) = post_autostop(&d, r#"{"dry_run":false}"#);
    assert_eq!(code, 400, "{s}");
    assert!(s["error"].as_str().unwrap().contains("idle_after"), "{s}");
    let s = d.json(&["autostop", "45m", "--json"]);
    assert_eq!(shown(&s), is("45m", true), "{s}");
}
