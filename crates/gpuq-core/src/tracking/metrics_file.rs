//! The job's metrics file (`GPUQ_METRICS_FILE`): one JSON object per line,
//! `{"step": 10, "loss": 0.41, "time": 1700000000.5}`, as `gpuq.log()` writes it.
//!
//! Every other key with a number is a metric; `null` (how the SDK writes NaN and
//! infinities, which JSON lacks) is NaN; the strings "NaN", "Infinity" and
//! "-Infinity" are taken too; a nested object's numbers become `outer/inner`
//! metrics. A line that is not a JSON object is skipped and counted, never fatal:
//! the file is the user's and may hold anything.

use serde_json::Value;

/// One metric point read from a line.
#[derive(Debug, Clone, PartialEq)]
pub struct FilePoint {
    pub key: String,
    pub value: f64,
    /// `None`: the line had no step (the metric's next step is used).
    pub step: Option<i64>,
    /// Epoch ms; `None`: the line had no time (the time it was read is used).
    pub time: Option<i64>,
}

/// What a chunk of lines held.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    pub points: Vec<FilePoint>,
    /// Lines that were not a JSON object of metrics.
    pub skipped: usize,
}

/// Nesting deeper than this is not flattened.
const MAX_DEPTH: usize = 4;
/// Longest metric name kept (MLflow's limit).
const MAX_KEY_LEN: usize = 250;

/// Parses complete lines (without their newline).
pub fn parse_lines<'a>(lines: impl IntoIterator<Item = &'a [u8]>) -> Parsed {
    let mut out = Parsed::default();
    for line in lines {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(map)) => {
                let step = map.get("step").and_then(integer);
                let time = map.get("time").and_then(seconds_to_ms);
                let before = out.points.len();
                for (k, v) in &map {
                    if k == "step" || k == "time" {
                        continue;
                    }
                    flatten(k, v, 0, step, time, &mut out.points);
                }
                if out.points.len() == before && !map.contains_key("step") {
                    out.skipped += 1;
                }
            }
            _ => out.skipped += 1,
        }
    }
    out
}

fn flatten(
    key: &str,
    v: &Value,
    depth: usize,
    step: Option<i64>,
    time: Option<i64>,
    out: &mut Vec<FilePoint>,
) {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return;
    }
    let value = match v {
        Value::Number(n) => n.as_f64(),
        Value::Null => Some(f64::NAN),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        Value::Object(inner) if depth < MAX_DEPTH => {
            for (k, v) in inner {
                flatten(&format!("{key}/{k}"), v, depth + 1, step, time, out);
            }
            None
        }
        _ => None,
    };
    if let Some(value) = value {
        out.push(FilePoint {
            key: key.to_string(),
            value,
            step,
            time,
        });
    }
}

fn integer(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| {
        let f = v.as_f64()?;
        (f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e18).then_some(f as i64)
    })
}

/// The SDK writes Unix seconds (a float); a value already in milliseconds is kept.
fn seconds_to_ms(v: &Value) -> Option<i64> {
    let f = v.as_f64().filter(|f| f.is_finite() && *f >= 0.0)?;
    // Seconds since 1970 stay below 1e11 until the year 5138; milliseconds are above it.
    Some(if f < 1.0e11 {
        (f * 1000.0) as i64
    } else {
        f as i64
    })
}

/// Splits a chunk read from the file into complete lines and the length they
/// take; the rest (a line still being written) is left for the next read,
/// unless `all` (the attempt ended) or it is longer than `max_line`, in which
/// case it is taken (and skipped as bad if it does not parse).
pub fn complete_lines(chunk: &[u8], all: bool, max_line: usize) -> (Vec<&[u8]>, usize) {
    let mut lines = Vec::new();
    let mut used = 0;
    while let Some(pos) = chunk[used..].iter().position(|&b| b == b'\n') {
        lines.push(&chunk[used..used + pos]);
        used += pos + 1;
    }
    let rest = chunk.len() - used;
    if rest > 0 && (all || rest > max_line) {
        lines.push(&chunk[used..]);
        used = chunk.len();
    }
    (lines, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_lines_become_points() {
        let p = parse_lines([
            br#"{"step": 10, "loss": 0.41, "acc": 0.9, "time": 1700000000.5}"#.as_slice(),
            br#"{"loss": null, "val": {"loss": 1.5, "deep": {"x": 2}}}"#.as_slice(),
            br#"{"step": 11, "note": "text", "flag": true, "lr": "Infinity"}"#.as_slice(),
        ]);
        assert_eq!(p.skipped, 0);
        let loss = p.points.iter().find(|x| x.key == "loss").unwrap();
        assert_eq!(
            (loss.key.as_str(), loss.step, loss.time),
            ("loss", Some(10), Some(1_700_000_000_500))
        );
        assert!(p
            .points
            .iter()
            .any(|x| x.key == "loss" && x.value.is_nan() && x.step.is_none()));
        assert!(p
            .points
            .iter()
            .any(|x| x.key == "val/deep/x" && x.value == 2.0));
        assert!(p
            .points
            .iter()
            .any(|x| x.key == "lr" && x.value == f64::INFINITY));
        assert!(!p.points.iter().any(|x| x.key == "note" || x.key == "flag"));
    }

    #[test]
    fn garbage_is_counted_not_fatal() {
        let p = parse_lines([
            b"not json".as_slice(),
            b"[1,2]".as_slice(),
            b"".as_slice(),
            br#"{"x": 1}"#.as_slice(),
        ]);
        assert_eq!(p.skipped, 2);
        assert_eq!(p.points.len(), 1);
    }

    #[test]
    fn a_half_written_line_waits_unless_the_attempt_ended() {
        let chunk = b"{\"a\":1}\n{\"a\":2}\n{\"a\":";
        let (lines, used) = complete_lines(chunk, false, 1024);
        assert_eq!((lines.len(), used), (2, 16));
        let (lines, used) = complete_lines(chunk, true, 1024);
        assert_eq!((lines.len(), used), (3, chunk.len()));
        // A line longer than the limit is taken so the reader never sticks on it.
        let (lines, used) = complete_lines(b"xxxxxxxx", false, 4);
        assert_eq!((lines.len(), used), (1, 8));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let (lines, used) = complete_lines(&bytes, false, 64);
            proptest::prop_assert!(used <= bytes.len());
            let _ = parse_lines(lines);
        }
    }
}
