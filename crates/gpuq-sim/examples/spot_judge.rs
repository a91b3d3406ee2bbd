//! Judges the slack-aware policy (or greedy, `V=greedy`) window by window on
//! many data directories in the spot format, at deadline ratios 1.2, 1.5 and
//! 2.0, against the exact optimum of every window (cached under
//! /tmp/spot-optima by directory name, work, ratio and windows: the optima
//! are the slow part, minutes per directory; delete the cache when the data
//! of a directory change).
//!
//!   cargo run --release -p gpuq-sim --example spot_judge -- DIR@WORK_H ...
//!   (W=windows per ratio, default 20)
//!
//! Same windows as `gpuq sim --spot DIR --windows W`, a transfer of $1 per
//! move (50 GB at $0.02/GB) and a restart of 0.2 h.
use gpuq_core::spot::*;
use gpuq_sim::spot::format;
use std::io::Write;
use std::path::Path;

/// A line on stdout; a closed pipe ends nothing badly.
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// Bad input: the reason on stderr and exit status 2.
fn refuse(why: String) -> ! {
    let _ = writeln!(std::io::stderr(), "spot_judge: {why}");
    std::process::exit(2)
}

fn windows_of(dir: &str, job: &Job, windows: usize) -> Vec<SpotEnv> {
    let t = format::load(Path::new(dir), None).unwrap_or_else(|e| refuse(e.to_string()));
    let len = (job.deadline_h * 3600.0 / t.tick_s + 1e-9).floor() as usize;
    let Some(last) = t.rows().checked_sub(len).filter(|_| len > 0) else {
        refuse(format!(
            "{dir}: {} rows, a deadline of {} h needs {len} (and at least one)",
            t.rows(),
            job.deadline_h
        ))
    };
    (0..windows)
        .map(|i| {
            let start = ((i as f64 * last as f64) / (windows - 1) as f64).round() as usize;
            gpuq_sim::spot::window_env(&t, start, len, 1.0)
        })
        .collect()
}

fn optima(envs: &[SpotEnv], job: &Job, cache: &str) -> Vec<f64> {
    if let Ok(s) = std::fs::read_to_string(cache) {
        return s
            .lines()
            .map(|l| l.parse().expect("cached optimum"))
            .collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let res: Vec<std::sync::Mutex<f64>> = envs.iter().map(|_| std::sync::Mutex::new(0.0)).collect();
    std::thread::scope(|s| {
        for _ in 0..std::thread::available_parallelism().map_or(1, |n| n.get()) {
            s.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(e) = envs.get(k) else { break };
                let cost = offline_optimum(e, job).map(|o| o.cost);
                *res[k].lock().unwrap() = cost.unwrap_or_else(|e| refuse(e.to_string()));
            });
        }
    });
    let v: Vec<f64> = res.into_iter().map(|m| m.into_inner().unwrap()).collect();
    let _ = std::fs::create_dir_all("/tmp/spot-optima");
    let _ = std::fs::write(
        cache,
        v.iter().map(|x| format!("{x}\n")).collect::<String>(),
    );
    v
}

fn main() {
    let windows: usize = match std::env::var("W") {
        Err(_) => 20,
        Ok(w) => match w.parse() {
            Ok(n) if n >= 2 => n,
            _ => refuse(format!("W={w}: expected a number of windows >= 2")),
        },
    };
    let greedy = std::env::var("V").is_ok_and(|v| v == "greedy");
    let (mut worst_all, mut overs, mut means) = (0.0f64, 0, Vec::new());
    for spec in std::env::args().skip(1) {
        let Some((dir, work)) = spec.split_once('@') else {
            refuse(format!(
                "{spec}: expected DIR@WORK_H, e.g. /tmp/spot20/synA@40"
            ))
        };
        let work_h: f64 = match work.parse() {
            Ok(h) if h > 0.0 && f64::is_finite(h) => h,
            _ => refuse(format!("{spec}: WORK_H must be hours > 0, e.g. 40")),
        };
        let name = dir.trim_end_matches('/').rsplit('/').next().unwrap_or(dir);
        for ratio in [1.2, 1.5, 2.0] {
            let job = Job {
                work_h,
                deadline_h: work_h * ratio,
                restart_h: 0.2,
            };
            let envs = windows_of(dir, &job, windows);
            let opts = optima(
                &envs,
                &job,
                &format!("/tmp/spot-optima/{name}_{work_h}_{ratio}_{windows}"),
            );
            let xs: Vec<f64> = envs
                .iter()
                .zip(&opts)
                .map(|(e, opt)| {
                    let mut p: Box<dyn SpotPolicy> = if greedy {
                        Box::new(Greedy)
                    } else {
                        Box::new(SlackAware::default())
                    };
                    let o = simulate(e, &job, p.as_mut()).unwrap();
                    assert!(o.met_deadline && o.cost >= opt - 1e-6, "{name} r={ratio}");
                    o.cost / opt
                })
                .collect();
            let worst = xs.iter().copied().fold(0.0, f64::max);
            let mean = xs.iter().sum::<f64>() / xs.len() as f64;
            let over: Vec<usize> = (0..xs.len()).filter(|&k| xs[k] > 1.5).collect();
            say!(
                "{name:>10} r={ratio} mean {mean:.3} worst {worst:.3} windows over 1.5x: {over:?}"
            );
            worst_all = worst_all.max(worst);
            overs += over.len();
            means.push(mean);
        }
    }
    say!(
        "all: mean of means {:.4}, worst {worst_all:.3}, windows over 1.5x: {overs}",
        means.iter().sum::<f64>() / means.len().max(1) as f64
    );
}
