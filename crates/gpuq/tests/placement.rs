//! Placement on heterogeneous GPUs: model and memory constraints, and the best
//! interconnect for multi-GPU jobs (simulated topology: islands of four).

mod common;
use common::*;
use std::time::Duration;

fn gpus_of(job: &serde_json::Value) -> Vec<u64> {
    job["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect()
}

#[test]
fn gpu_type_and_memory_choose_the_right_cards() {
    let d = Daemon::start("sim:2xA100:80,2xL4:24");
    let l4 = d.submit(&[
        "--gpus",
        "1",
        "--gpu-type",
        "l4",
        "--",
        "sh",
        "-c",
        "echo $CUDA_VISIBLE_DEVICES",
    ]);
    assert_eq!(gpus_of(&d.wait(l4)), [2]);
    let big = d.submit(&["--gpus", "2", "--gpu-mem", "40G", "--", "true"]);
    assert_eq!(gpus_of(&d.wait(big)), [0, 1]);
    let refused = d.gpuq(&["submit", "--gpus", "1", "--gpu-type", "H100", "--", "true"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr(&refused)
            .contains("gpu_type: no node has 1 such GPU; the GPUs here are: Simulated A100"),
        "{}",
        stderr(&refused)
    );
    let bad = d.gpuq(&["submit", "--gpus", "1", "--gpu-mem", "lots", "--", "true"]);
    let zero = d.gpuq(&["submit", "--gpu-type", "L4", "--", "true"]);
    assert!(stderr(&zero).contains("add --gpus 1"), "{}", stderr(&zero));
    assert!(
        stderr(&bad).contains("--gpu-mem: invalid memory size"),
        "{}",
        stderr(&bad)
    );
    let yaml = tempfile::NamedTempFile::with_suffix(".yaml").unwrap();
    std::fs::write(
        yaml.path(),
        "command: [\"true\"]\ngpus: 1\ngpu_type: A100\ngpu_mem: 80G\n",
    )
    .unwrap();
    let from_file = d.submit(&[yaml.path().to_str().unwrap()]);
    assert_eq!(gpus_of(&d.wait(from_file)).len(), 1);
}

#[test]
fn a_two_gpu_job_stays_inside_one_linked_island() {
    let d = Daemon::start("sim:8");
    let holders: Vec<u64> = (0..3)
        .map(|_| d.submit(&["--gpus", "1", "--", "sleep", "5"]))
        .collect();
    assert!(eventually(Duration::from_secs(10), || holders
        .iter()
        .all(|&h| d.show(h)["state"] == "running")));
    let pair = d.submit(&["--gpus", "2", "--", "true"]);
    assert_eq!(
        gpus_of(&d.wait(pair)),
        [4, 5],
        "GPU 3 is free but sits in the other island"
    );
    let ids: Vec<String> = holders.iter().map(u64::to_string).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    d.ok(&[&["cancel"], ids.as_slice()].concat());
}
