//! The crash test: 500 short jobs while the daemon is killed with SIGKILL at
//! random moments (at least 20 times) and restarted. Every job must run exactly
//! once (each appends its id to a file) and end in the right state with the
//! right exit code.

mod common;
use common::*;
use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const JOBS: usize = 500;
const MIN_KILLS: usize = 20;

/// A small deterministic generator, so a failing run can be replayed from its seed.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn client(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(GPUQ)
        .args(args)
        .env("GPUQ_HOME", home)
        .env_remove("GPUQ_URL")
        .env("GPUQ_NO_AUTOSTART", "1")
        .output()
        .unwrap()
}

#[test]
fn no_job_is_lost_or_run_twice_when_the_daemon_is_killed_at_random() {
    let seed = std::env::var("GPUQ_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("crash test seed: {seed} (replay with GPUQ_CRASH_SEED={seed})");
    let mut rng = Lcg(seed);
    let mut d = Daemon::start("none");
    let home = d.path().to_path_buf();
    let ran = home.join("ran.txt");

    let done = Arc::new(AtomicBool::new(false));
    let submitter = {
        let (home, ran, done) = (home.clone(), ran.clone(), done.clone());
        std::thread::spawn(move || {
            for i in 0..JOBS {
                let script = format!(
                    "echo $GPUQ_JOB_ID >> {}; sleep 0.0{}; exit {}",
                    ran.display(),
                    i % 4,
                    if i.is_multiple_of(5) { 3 } else { 0 }
                );
                let (name, key) = (format!("crash-{i}"), format!("crash-test-{i}"));
                let args = [
                    "submit",
                    "--name",
                    &name,
                    "--idempotency-key",
                    &key,
                    "--",
                    "sh",
                    "-c",
                    &script,
                ];
                let deadline = Instant::now() + Duration::from_secs(60);
                // The daemon may be down, or die after committing but before answering:
                // resubmitting with the same key is safe.
                while !client(&home, &args).status.success() {
                    assert!(Instant::now() < deadline, "job {i} could not be submitted");
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            done.store(true, Ordering::SeqCst);
        })
    };

    let mut kills = 0;
    while !done.load(Ordering::SeqCst) || kills < MIN_KILLS {
        std::thread::sleep(Duration::from_millis(30 + rng.next() % 300));
        d.restart();
        kills += 1;
    }
    submitter.join().unwrap();
    eprintln!("daemon killed {kills} times");

    let deadline = Instant::now() + Duration::from_secs(120);
    let jobs: Vec<serde_json::Value> = loop {
        let out = client(&home, &["ls", "--all", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let jobs: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        if jobs.len() == JOBS
            && jobs
                .iter()
                .all(|j| ["succeeded", "failed"].contains(&j["state"].as_str().unwrap()))
        {
            break jobs;
        }
        assert!(
            Instant::now() < deadline,
            "jobs did not all end: {:?}",
            jobs.iter()
                .filter(|j| j["state"] != "succeeded" && j["state"] != "failed")
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(100));
    };

    let mut runs: HashMap<u64, usize> = HashMap::new();
    for line in std::fs::read_to_string(&ran).unwrap().lines() {
        *runs.entry(line.trim().parse().unwrap()).or_default() += 1;
    }
    assert_eq!(jobs.len(), JOBS, "one job per submit, none duplicated");
    for job in &jobs {
        let id = job["id"].as_u64().unwrap();
        let i: usize = job["name"]
            .as_str()
            .unwrap()
            .strip_prefix("crash-")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            runs.get(&id),
            Some(&1),
            "job {id} (#{i}) ran {:?} times",
            runs.get(&id)
        );
        let (state, code) = if i.is_multiple_of(5) {
            ("failed", 3)
        } else {
            ("succeeded", 0)
        };
        assert_eq!(
            (job["state"].as_str(), job["exit_code"].as_i64()),
            (Some(state), Some(code)),
            "{job}"
        );
    }
    assert_eq!(runs.len(), JOBS, "no job ran that was not submitted");
    let restarted = jobs
        .iter()
        .filter(|j| j["attempt"].as_u64() > Some(1))
        .count();
    eprintln!(
        "{restarted} jobs needed a second attempt (their first was committed but never spawned)"
    );
}
