//! Job traces: the Philly format, and gpuq's own (CSV or JSON lines).
//!
//! gpuq's trace format, one job per row (CSV with this header, or one JSON
//! object per line with these keys):
//!
//! ```text
//! submit,duration,gpus,user,priority,preemptible
//! 0,3600,1,alice,normal,false
//! 120,600,4,bob,high,true
//! ```
//!
//! `submit` and `duration` are seconds (submit relative to any origin), `gpus`
//! a count, `user` a group for fair share and fairness figures, `priority`
//! `low|normal|high` (default normal), `preemptible` true/false (default false).

use gpuq_core::Priority;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// Seconds from the trace's first submit.
    pub submit_s: f64,
    pub duration_s: f64,
    pub gpus: u32,
    pub user: String,
    pub priority: Priority,
    pub preemptible: bool,
}

/// What is wrong with a trace, and where: `line` 0 is the file as a whole.
#[derive(Debug)]
pub struct TraceError {
    pub file: String,
    pub line: usize,
    pub why: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(f, "cannot read {}: {}", self.file, self.why),
            n => write!(f, "{} line {n}: {}", self.file, self.why),
        }
    }
}

impl std::error::Error for TraceError {}

/// Reads a trace file, recognising Philly's header or gpuq's formats.
pub fn read(path: &std::path::Path) -> Result<Vec<TraceJob>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|e| TraceError {
        file: path.display().to_string(),
        line: 0,
        why: io_reason(&e),
    })?;
    parse(&text, &path.display().to_string())
}

/// "No such file or directory", without the " (os error 2)" a user has no use for.
pub fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The longest a job may run, and the longest a trace may span: 100 years in
/// seconds (the replay's clock counts milliseconds and samples the cluster
/// every hour; a time past this is a unit mistake, not a workload).
const LONGEST_S: f64 = 100.0 * 365.25 * 86_400.0;

/// A duration as read (`what` names the field), or why it cannot be one.
fn duration_of(d: f64, what: &str) -> Result<f64, String> {
    if !d.is_finite() {
        return Err(format!("{what} {d} must be a finite number of seconds"));
    }
    if d > LONGEST_S {
        return Err(format!(
            "{what} {d:e} s is more than 100 years: {what} is in seconds"
        ));
    }
    Ok(d)
}

pub fn parse(text: &str, file: &str) -> Result<Vec<TraceJob>, TraceError> {
    let err = |line: usize, why: String| TraceError {
        file: file.to_string(),
        line,
        why,
    };
    let first = text.lines().next().unwrap_or("").trim();
    let mut jobs = if first.starts_with("timestamp,duration,num_gpus") {
        philly(text, &err)?
    } else if first.starts_with('{') {
        json_lines(text, &err)?
    } else if first.starts_with("submit,duration,gpus") {
        gpuq_csv(text, &err)?
    } else {
        return Err(err(
            1,
            "unknown trace format: expected Philly's header (timestamp,duration,num_gpus,…), \
             gpuq's CSV header (submit,duration,gpus,user,priority,preemptible) or JSON lines"
                .into(),
        ));
    };
    if jobs.is_empty() {
        return Err(err(1, "the trace has no jobs".into()));
    }
    // Stable order by submit time; times relative to the first.
    jobs.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    let origin = jobs[0].submit_s;
    for j in &mut jobs {
        j.submit_s -= origin;
    }
    let span = jobs.last().map_or(0.0, |j| j.submit_s);
    if span > LONGEST_S {
        return Err(err(
            0,
            format!("its submit times span {span:e} s, more than 100 years: submit is in seconds"),
        ));
    }
    Ok(jobs)
}

fn philly(
    text: &str,
    err: &dyn Fn(usize, String) -> TraceError,
) -> Result<Vec<TraceJob>, TraceError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 5 {
            return Err(err(i + 1, format!("{} fields, expected 5", f.len())));
        }
        let submit =
            civil_seconds(f[0]).ok_or_else(|| err(i + 1, format!("timestamp {:?}", f[0])))?;
        let duration: f64 = f[1]
            .parse()
            .map_err(|_| err(i + 1, format!("duration {:?}", f[1])))?;
        let duration = duration_of(duration, "duration").map_err(|why| err(i + 1, why))?;
        let gpus: u32 = f[2]
            .parse()
            .map_err(|_| err(i + 1, format!("num_gpus {:?}", f[2])))?;
        out.push(TraceJob {
            submit_s: submit,
            duration_s: duration.max(0.0),
            gpus,
            // The hashed virtual cluster: Philly's groups.
            user: f[4].trim().to_string(),
            priority: Priority::Normal,
            preemptible: false,
        });
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    submit: f64,
    duration: f64,
    gpus: u32,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    priority: Option<Priority>,
    #[serde(default)]
    preemptible: Option<bool>,
}

fn from_row(
    r: Row,
    line: usize,
    err: &dyn Fn(usize, String) -> TraceError,
) -> Result<TraceJob, TraceError> {
    if !(r.submit.is_finite() && r.duration.is_finite() && r.duration >= 0.0) {
        return Err(err(
            line,
            "submit and duration must be finite; duration ≥ 0".into(),
        ));
    }
    duration_of(r.duration, "duration").map_err(|why| err(line, why))?;
    Ok(TraceJob {
        submit_s: r.submit,
        duration_s: r.duration,
        gpus: r.gpus,
        user: r.user.unwrap_or_else(|| "-".into()),
        priority: r.priority.unwrap_or_default(),
        preemptible: r.preemptible.unwrap_or(false),
    })
}

fn json_lines(
    text: &str,
    err: &dyn Fn(usize, String) -> TraceError,
) -> Result<Vec<TraceJob>, TraceError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: Row = serde_json::from_str(line).map_err(|e| err(i + 1, e.to_string()))?;
        out.push(from_row(row, i + 1, err)?);
    }
    Ok(out)
}

fn gpuq_csv(
    text: &str,
    err: &dyn Fn(usize, String) -> TraceError,
) -> Result<Vec<TraceJob>, TraceError> {
    let mut lines = text.lines().enumerate();
    let (_, header) = lines.next().expect("checked non-empty");
    let keys: Vec<&str> = header.split(',').map(str::trim).collect();
    let mut out = Vec::new();
    for (i, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let values: Vec<&str> = line.split(',').map(str::trim).collect();
        if values.len() != keys.len() {
            return Err(err(
                i + 1,
                format!("{} fields, the header has {}", values.len(), keys.len()),
            ));
        }
        let mut obj = serde_json::Map::new();
        for (k, v) in keys.iter().zip(values) {
            if v.is_empty() {
                continue; // an empty field takes its default
            }
            let value = match *k {
                "user" | "priority" => serde_json::Value::String(v.to_string()),
                _ => serde_json::from_str(v)
                    .map_err(|_| err(i + 1, format!("{k} {v:?} is not a number or boolean")))?,
            };
            obj.insert(k.to_string(), value);
        }
        let row: Row = serde_json::from_value(serde_json::Value::Object(obj))
            .map_err(|e| err(i + 1, e.to_string()))?;
        out.push(from_row(row, i + 1, err)?);
    }
    Ok(out)
}

/// `YYYY-MM-DD HH:MM:SS` as seconds since 1970 (UTC; only differences matter).
fn civil_seconds(s: &str) -> Option<f64> {
    let (date, time) = s.trim().split_once(' ')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':').map(|x| x.parse::<i64>());
    let (hh, mm, ss) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    Some(unix_seconds(y, m, day, hh, mm, ss) as f64)
}

/// Seconds since 1970-01-01 00:00 UTC of a civil date and time (no checks).
pub(crate) fn unix_seconds(y: i64, m: i64, day: i64, hh: i64, mm: i64, ss: i64) -> i64 {
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + hh * 3600 + mm * 60 + ss
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_philly_and_gpuq_formats() {
        let philly = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n2017-10-09 06:13:03,2951.0,2,5902.0,6214e9\n";
        let jobs = parse(philly, "p.csv").unwrap();
        assert_eq!(jobs[0].user, "6214e9", "sorted by submit");
        assert_eq!(jobs[1].submit_s, 48.0 * 60.0 + 52.0);
        assert_eq!(jobs[0].gpus, 2);
        let csv =
            "submit,duration,gpus,user,priority,preemptible\n10,60,1,ana,high,true\n0,5,2,bo,,\n";
        let jobs = parse(csv, "t.csv").unwrap();
        assert_eq!(
            (jobs[0].user.as_str(), jobs[0].priority),
            ("bo", Priority::Normal)
        );
        assert_eq!(
            (jobs[1].priority, jobs[1].preemptible),
            (Priority::High, true)
        );
        let jl = "{\"submit\": 0, \"duration\": 5, \"gpus\": 1, \"user\": \"x\"}\n";
        assert_eq!(parse(jl, "t.jsonl").unwrap()[0].duration_s, 5.0);
    }

    #[test]
    fn bad_traces_name_the_line() {
        // Times past 100 years are a unit mistake: named, not replayed for ever.
        let e = parse("submit,duration,gpus\n0,1e300,1\n", "t.csv").unwrap_err();
        assert!(
            e.to_string()
                .contains("line 2: duration 1e300 s is more than 100 years"),
            "{e}"
        );
        let e = parse("submit,duration,gpus\n0,10,1\n1e18,10,1\n", "t.csv").unwrap_err();
        assert!(e.to_string().contains("span 1e18 s"), "{e}");
        let philly =
            "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,inf,1,1,c\n";
        assert!(parse(philly, "p.csv")
            .unwrap_err()
            .to_string()
            .contains("finite"));
        let e = parse("submit,duration,gpus\n0,abc,1\n", "t.csv").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(parse("hello\n", "t")
            .unwrap_err()
            .why
            .contains("unknown trace format"));
        let e = parse(
            "{\"submit\": 0, \"duration\": 1, \"gpus\": 1, \"color\": 2}\n",
            "t",
        )
        .unwrap_err();
        assert!(e.why.contains("color"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(s in "(submit,duration,gpus\n|timestamp,duration,num_gpus,gpu_time,cluster\n|\\{)?[ -~\n]{0,200}") {
            let _ = parse(&s, "fuzz");
        }
    }
}
