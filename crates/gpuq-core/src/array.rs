//! Job arrays: the `--array` spec (Slurm's syntax) and the `ID.K` reference to
//! one task of an array.
//!
//! `0-99` is the indices 0 to 99; `1,3,5-7` a list of indices and ranges;
//! `0-99:2` every second index of the range (a step); `%8` at the end (`0-99%8`)
//! lets at most 8 tasks run at once. Indices are 0 to [`MAX_INDEX`], at most
//! [`MAX_TASKS`] of them, each once. Pure: no IO.

use crate::JobId;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The largest index a task may have.
pub const MAX_INDEX: u32 = 1_000_000;
/// The most tasks one array may have (a daemon's config may set fewer).
pub const MAX_TASKS: usize = 10_000;

/// What `--array` asks for: the tasks' indices, ascending and distinct, and
/// how many of them may run at once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ArraySpec {
    indices: Vec<u32>,
    limit: Option<u32>,
}

/// An `--array` value that cannot be accepted, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid array {input:?}: {why}; write it like 0-99, 0-99%8 (at most 8 at once), 1,3,5-7 or 0-99:2 (every second)")]
pub struct ArrayError {
    pub input: String,
    pub why: String,
}

impl ArraySpec {
    /// The indices, ascending: one task each.
    pub fn indices(&self) -> &[u32] {
        &self.indices
    }

    /// Most tasks running at once (`%N`); `None`: no limit of its own.
    pub fn limit(&self) -> Option<u32> {
        self.limit
    }

    /// The number of tasks.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Never true for a parsed spec (an array has at least one task).
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// A spec of these indices (sorted and made distinct here); `None` when
    /// there are none, or one is out of range, or there are too many.
    pub fn from_indices(mut indices: Vec<u32>, limit: Option<u32>) -> Option<Self> {
        indices.sort_unstable();
        indices.dedup();
        let ok = !indices.is_empty()
            && indices.len() <= MAX_TASKS
            && indices.iter().all(|&i| i <= MAX_INDEX)
            && limit.is_none_or(|l| l >= 1);
        ok.then_some(Self { indices, limit })
    }
}

fn number(text: &str, what: &str) -> Result<u32, String> {
    if text.is_empty() {
        return Err(format!("{what} is missing"));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} {text:?} is not a whole number"));
    }
    match text.parse::<u64>() {
        Ok(n) if n <= MAX_INDEX as u64 => Ok(n as u32),
        _ => Err(format!(
            "{what} {text} is larger than {MAX_INDEX}, the largest index"
        )),
    }
}

impl FromStr for ArraySpec {
    type Err = ArrayError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |why: String| ArrayError {
            input: input.to_string(),
            why,
        };
        let text = input.trim();
        if text.is_empty() {
            return Err(err("it is empty".into()));
        }
        let (list, limit) = match text.split_once('%') {
            None => (text, None),
            Some((list, limit)) => {
                let limit = limit.trim();
                if limit.is_empty() || !limit.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err(format!(
                        "the limit after % must be a whole number of tasks, not {limit:?}"
                    )));
                }
                match limit.parse::<u32>() {
                    Ok(0) => return Err(err("%0 would let no task run; give at least %1".into())),
                    Ok(n) => (list, Some(n.min(MAX_TASKS as u32))),
                    Err(_) => (list, Some(MAX_TASKS as u32)),
                }
            }
        };
        // Count first: a range of a million indices is refused without being expanded.
        let mut ranges = Vec::new();
        let mut count: u64 = 0;
        for item in list.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(err(
                    "an index is missing (two commas, or one at an end)".into()
                ));
            }
            let (range, step) = match item.split_once(':') {
                None => (item, 1),
                Some((range, step)) => {
                    let step = number(step.trim(), "the step").map_err(&err)?;
                    if step == 0 {
                        return Err(err(format!("{item}: the step must be at least 1")));
                    }
                    if !range.contains('-') {
                        return Err(err(format!(
                            "{item}: a step goes with a range, e.g. 0-99:2"
                        )));
                    }
                    (range, step)
                }
            };
            let (first, last) = match range.split_once('-') {
                None => {
                    let i = number(range.trim(), "the index").map_err(&err)?;
                    (i, i)
                }
                Some((a, b)) => {
                    let a = number(a.trim(), "the range's start").map_err(&err)?;
                    let b = number(b.trim(), "the range's end").map_err(&err)?;
                    if a > b {
                        return Err(err(format!(
                            "{item}: the range ends before it starts; write {b}-{a}"
                        )));
                    }
                    (a, b)
                }
            };
            count += ((last - first) / step) as u64 + 1;
            if count > MAX_TASKS as u64 {
                return Err(err(format!(
                    "more than {MAX_TASKS} tasks; an array has at most {MAX_TASKS} (split it, or use a step)"
                )));
            }
            ranges.push((first, last, step));
        }
        let mut indices: Vec<u32> = Vec::with_capacity(count as usize);
        for (first, last, step) in ranges {
            indices.extend((first..=last).step_by(step as usize));
        }
        indices.sort_unstable();
        if let Some(w) = indices.windows(2).find(|w| w[0] == w[1]) {
            return Err(err(format!("index {} is given twice", w[0])));
        }
        Ok(ArraySpec { indices, limit })
    }
}

/// The name of task `index` of an array named `name`: `name[index]`.
pub fn task_name(name: &str, index: u32) -> String {
    format!("{name}[{index}]")
}

/// The array's name from a task's (`name[3]` → `name`).
pub fn array_name(task: &str) -> &str {
    match task.strip_suffix(']').and_then(|t| t.rsplit_once('[')) {
        Some((name, k)) if !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => task,
    }
}

/// Indices written compactly, as `--array` reads them: runs with a common
/// step become `a-b` or `a-b:s`; `[0, 1, 2, 5, 7, 9]` is `0-2,5-9:2`.
pub fn compact(indices: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let first = indices[i];
        if i + 1 == indices.len() {
            parts.push(first.to_string());
            break;
        }
        let step = indices[i + 1].saturating_sub(first);
        let mut j = i + 1;
        while j + 1 < indices.len() && indices[j + 1].checked_sub(indices[j]) == Some(step) {
            j += 1;
        }
        let run = j - i + 1;
        if step == 0 || (run == 2 && step > 1) {
            // Not a run: the first stands alone and the next starts over.
            parts.push(first.to_string());
            i += 1;
            continue;
        }
        let last = indices[j];
        parts.push(if step == 1 {
            format!("{first}-{last}")
        } else {
            format!("{first}-{last}:{step}")
        });
        i = j + 1;
    }
    parts.join(",")
}

impl fmt::Display for ArraySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&compact(&self.indices))?;
        if let Some(l) = self.limit {
            write!(f, "%{l}")?;
        }
        Ok(())
    }
}

impl Serialize for ArraySpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ArraySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ArraySpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array spec such as \"0-99%8\"")
            }
            // `array: 5` in YAML is one task, index 5.
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ArraySpec, E> {
                v.to_string().parse().map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ArraySpec, E> {
                v.to_string().parse().map_err(E::custom)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ArraySpec, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl JsonSchema for ArraySpec {
    fn schema_name() -> String {
        "ArraySpec".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        let mut s = schemars::schema::SchemaObject {
            instance_type: Some(schemars::schema::SingleOrVec::Vec(vec![
                schemars::schema::InstanceType::String,
                schemars::schema::InstanceType::Integer,
            ])),
            ..Default::default()
        };
        s.metadata().description = Some(format!(
            "A job array, in Slurm's syntax: indices and ranges (`0-99`, `1,3,5-7`, `0-99:2` for every \
             second), then optionally `%N`, the most tasks running at once; an integer is one index. \
             Indices 0 to {MAX_INDEX}, at most {MAX_TASKS} tasks."
        ));
        s.metadata().examples = vec!["0-99%8".into(), "1,3,5-7".into()];
        s.into()
    }
}

/// A job as the command line names it: `12` (a job, or a whole array by its
/// id) or `12.7` (task 7 of array 12; `12_7`, Slurm's form, is read too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobRef {
    Job(JobId),
    Task { array: JobId, index: u32 },
}

/// A job reference that is neither `ID` nor `ID.K`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not a job id; give a job's number (see gpuq ls), or ID.K for task K of array ID"
)]
pub struct JobRefError {
    pub input: String,
}

impl FromStr for JobRef {
    type Err = JobRefError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = || JobRefError {
            input: input.to_string(),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let text = input.trim();
        match text.split_once(['.', '_']) {
            None if digits(text) => text.parse().map(JobRef::Job).map_err(|_| err()),
            Some((a, k)) if digits(a) && digits(k) => Ok(JobRef::Task {
                array: a.parse().map_err(|_| err())?,
                index: k.parse().map_err(|_| err())?,
            }),
            _ => Err(err()),
        }
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobRef::Job(id) => write!(f, "{id}"),
            JobRef::Task { array, index } => write!(f, "{array}.{index}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(s: &str) -> ArraySpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn reads_slurms_forms() {
        let a = parse("0-99%8");
        assert_eq!((a.len(), a.limit()), (100, Some(8)));
        assert_eq!(a.indices()[..3], [0, 1, 2]);
        assert_eq!(parse("1,3,5-7").indices(), [1, 3, 5, 6, 7]);
        assert_eq!(parse("0-9:3").indices(), [0, 3, 6, 9]);
        assert_eq!(parse("0-10:3%2").indices(), [0, 3, 6, 9]);
        assert_eq!(parse("7").indices(), [7]);
        assert_eq!(parse(" 5-6 , 1 ").indices(), [1, 5, 6]);
        assert_eq!(parse("1000000").indices(), [MAX_INDEX]);
        assert_eq!(parse("0-9%99999999999").limit(), Some(MAX_TASKS as u32));
        assert_eq!(parse(&format!("0-{}", MAX_TASKS - 1)).len(), MAX_TASKS);
    }

    #[test]
    fn mistakes_are_named_with_the_fix() {
        for (bad, says) in [
            ("", "empty"),
            ("5-3", "write 3-5"),
            ("0-99%0", "%1"),
            ("0-99%", "limit after %"),
            ("0-99%x", "limit after %"),
            ("a-b", "not a whole number"),
            ("-1", "start is missing"),
            ("1,,2", "missing"),
            ("1,2,", "missing"),
            ("0-9:0", "at least 1"),
            ("5:2", "goes with a range"),
            ("1,1", "given twice"),
            ("0-5,3-7", "index 3 is given twice"),
            ("0-1000001", "larger than 1000000"),
            ("99999999999", "larger than"),
            ("0-10000", "more than 10000 tasks"),
            ("0-1000000", "more than 10000"),
            ("+3", "not a whole number"),
            ("1.5", "not a whole number"),
        ] {
            let e = bad.parse::<ArraySpec>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
            assert!(e.contains("write it like 0-99"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn compact_form_reads_back() {
        assert_eq!(compact(&[0, 1, 2, 5, 7, 9]), "0-2,5-9:2");
        assert_eq!(compact(&[1, 3, 5, 6, 7]), "1-5:2,6-7");
        assert_eq!(compact(&[4]), "4");
        assert_eq!(compact(&[1, 2]), "1-2");
        assert_eq!(compact(&[1, 5]), "1,5");
        assert_eq!(compact(&[]), "");
        assert_eq!(parse("0-99%8").to_string(), "0-99%8");
        assert_eq!(parse("1,3,5-7").to_string(), "1-5:2,6-7");
    }

    #[test]
    fn yaml_numbers_and_json_strings_deserialize() {
        let a: ArraySpec = serde_json::from_str("\"0-3%2\"").unwrap();
        assert_eq!((a.len(), a.limit()), (4, Some(2)));
        let a: ArraySpec = serde_json::from_str("5").unwrap();
        assert_eq!(a.indices(), [5]);
        let e = serde_json::from_str::<ArraySpec>("\"3-1\"").unwrap_err();
        assert!(e.to_string().contains("write 1-3"), "{e}");
        assert!(serde_json::from_str::<ArraySpec>("-2").is_err());
    }

    #[test]
    fn job_references() {
        assert_eq!("12".parse(), Ok(JobRef::Job(12)));
        assert_eq!(
            "12.7".parse(),
            Ok(JobRef::Task {
                array: 12,
                index: 7
            })
        );
        assert_eq!(
            "12_7".parse(),
            Ok(JobRef::Task {
                array: 12,
                index: 7
            })
        );
        for bad in [
            "",
            "x",
            "12.",
            ".7",
            "12.7.1",
            "-3",
            "12.-1",
            "1e3",
            "99999999999999999999",
        ] {
            let e = bad.parse::<JobRef>().unwrap_err().to_string();
            assert!(e.contains("ID.K"), "{bad:?}: {e}");
        }
        assert_eq!(JobRef::Task { array: 3, index: 0 }.to_string(), "3.0");
    }

    proptest! {
        /// Any text: the parser answers (no panic), and what it accepts is
        /// within bounds, ascending, distinct, and reads back from its display.
        #[test]
        fn any_text_parses_or_is_refused(text in "[0-9,:%\\- ]{0,24}") {
            if let Ok(a) = text.parse::<ArraySpec>() {
                prop_assert!(!a.is_empty() && a.len() <= MAX_TASKS);
                prop_assert!(a.indices().windows(2).all(|w| w[0] < w[1]));
                prop_assert!(a.indices().iter().all(|&i| i <= MAX_INDEX));
                prop_assert!(a.limit().is_none_or(|l| l >= 1));
                let back: ArraySpec = a.to_string().parse().unwrap();
                prop_assert_eq!(back, a);
            }
        }

        /// Any set of indices: its compact form reads back as the same set.
        #[test]
        fn compact_round_trips(mut indices in proptest::collection::vec(0u32..=2000, 1..200), limit in proptest::option::of(1u32..20)) {
            indices.sort_unstable();
            indices.dedup();
            let a = ArraySpec::from_indices(indices.clone(), limit).unwrap();
            let back: ArraySpec = a.to_string().parse().unwrap();
            prop_assert_eq!(back.indices(), &indices[..]);
            prop_assert_eq!(back.limit(), limit);
        }

        /// Ranges with steps expand to exactly the arithmetic progression.
        #[test]
        fn ranges_expand_exactly(first in 0u32..5000, span in 0u32..5000, step in 1u32..50) {
            let last = first + span;
            let a: ArraySpec = format!("{first}-{last}:{step}").parse().unwrap();
            let want: Vec<u32> = (first..=last).step_by(step as usize).collect();
            prop_assert_eq!(a.indices(), &want[..]);
        }

        /// Job references: `ID` and `ID.K` read back from their display; anything else is refused.
        #[test]
        fn job_refs_round_trip(text in "[0-9._a-z]{0,12}") {
            if let Ok(r) = text.parse::<JobRef>() {
                let shown = r.to_string();
                prop_assert_eq!(shown.parse::<JobRef>().unwrap(), r);
            }
        }
    }
}
