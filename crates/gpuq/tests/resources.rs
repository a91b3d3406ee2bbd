//! CPU cores and memory as resources a job asks for and gets: the flags,
//! the daemon's defaults, `show`, `explain` and the refusals at submit.

mod common;
use common::*;

fn nproc() -> u32 {
    std::thread::available_parallelism().unwrap().get() as u32
}

#[test]
fn a_job_gets_the_cores_and_memory_it_asks_for_or_the_configured_share() {
    let d = Daemon::start_with_config(
        "sim:2",
        "[resources]\ncpus_per_gpu = 1\nmemory_per_gpu = \"1G\"\nmemory_per_cpu = \"3G\"\n",
    );
    let gpu = d.submit(&["--gpus", "1", "--", "true"]);
    let show = d.show(gpu);
    assert_eq!(show["resources"]["cpus"], 1, "{show}");
    assert_eq!(show["resources"]["memory_mib"], 1024, "{show}");
    assert!(show["spec"].get("cpus").is_none(), "not asked: {show}");

    let asked = d.submit(&["--cpus", "1", "--mem", "512M", "--", "true"]);
    let show = d.show(asked);
    assert_eq!(show["spec"]["cpus"], 1);
    assert_eq!(show["spec"]["memory"], "512M");
    assert_eq!(show["resources"]["cpus"], 1);
    assert_eq!(show["resources"]["memory_mib"], 512);
    let text = d.ok(&["show", &asked.to_string()]);
    let line = text.lines().find(|l| l.starts_with("reserved")).unwrap();
    assert!(line.contains("1 core (asked), 512 MiB (asked)"), "{text}");
    let text = d.ok(&["show", &gpu.to_string()]);
    let line = text.lines().find(|l| l.starts_with("reserved")).unwrap();
    assert!(line.contains("1 core (default), 1 GiB (default)"), "{text}");

    // A CPU-only job that asks for nothing reserves nothing.
    let plain = d.submit(&["--", "true"]);
    let show = d.show(plain);
    assert_eq!(show["resources"]["cpus"], 0);
    assert_eq!(show["resources"]["memory_mib"], 0);
    let text = d.ok(&["show", &plain.to_string()]);
    assert!(text.contains("no cores of its own"), "{text}");
    // ... but it runs under a memory limit all the same: memory_per_cpu for
    // its one core, a cap the scheduler does not count.
    assert_eq!(show["memory_limit_mib"], 3072, "{show}");
    assert!(
        text.contains("mem limit    3 GiB (a cap, not reserved"),
        "{text}"
    );
    assert_eq!(d.show(asked)["memory_limit_mib"], 512);

    // The same fields from a spec file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.yaml");
    std::fs::write(&file, "command: [\"true\"]\ncpus: 1\nmemory: 2G\n").unwrap();
    let from_file = d.submit(&[file.to_str().unwrap()]);
    assert_eq!(d.show(from_file)["resources"]["memory_mib"], 2048);
    for id in [gpu, asked, plain, from_file] {
        assert_eq!(d.wait(id)["state"], "succeeded");
    }
    // Where jobs are confined (root), the cap is the limit its cgroup had.
    if let Some(limit) = d.show(plain)["attempts"][0]["host_usage"]["memory_limit_bytes"].as_u64() {
        assert_eq!(limit, 3072 << 20);
    }
}

#[test]
fn what_no_node_could_give_is_refused_at_submit_naming_the_field() {
    let d = Daemon::start("sim:1");
    let refused = |args: &[&str], needles: &[&str]| {
        let mut full = vec!["submit"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--", "true"]);
        let out = d.gpuq(&full);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        for n in needles {
            assert!(err.contains(n), "{args:?}: {err}");
        }
    };
    refused(&["--cpus", "0"], &["cpus", "at least 1"]);
    refused(&["--cpus", "two"], &["--cpus", "whole number"]);
    refused(&["--mem", "8M"], &["memory", "at least 16M"]);
    refused(&["--mem", "lots"], &["--mem", "40G"]);
    let too_many = (nproc() + 1).to_string();
    refused(
        &["--cpus", &too_many],
        &[
            "cpus",
            &format!("the most a node has for jobs is {}", nproc()),
        ],
    );
    refused(&["--mem", "100000G"], &["memory", "ask for at most --mem"]);
    assert_eq!(
        d.json(&["ls", "--json", "--all"]).as_array().unwrap().len(),
        0
    );
}

#[test]
fn a_job_short_of_cores_waits_and_says_so_while_jobs_that_reserve_none_run() {
    let d = Daemon::start("sim:2");
    let all = nproc().to_string();
    let holder = d.submit(&["--cpus", &all, "--", "sleep", "30"]);
    d.wait_running(holder);
    let waiting = d.submit(&["--cpus", "1", "--", "true"]);
    // A CPU-only job without --cpus reserves no core: it never waits for one.
    let plain = d.submit(&["--", "true"]);
    assert_eq!(d.wait(plain)["state"], "succeeded");
    assert_eq!(d.show(waiting)["state"], "queued");
    let why = d.ok(&["explain", &waiting.to_string()]);
    assert!(
        why.contains("needs 1 core free; none is free on this node")
            && why.contains(&format!("reserved by job {holder} (")),
        "{why}"
    );
    d.ok(&["cancel", &holder.to_string()]);
    assert_eq!(d.wait(waiting)["state"], "succeeded");
}
