//! The early stop signal, in Slurm's `--signal` syntax: `USR1@90` sends SIGUSR1
//! 90 seconds before the time limit (and first, when a preemption is decided).

use crate::DurationSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Signals a job may ask for, with their Linux numbers.
const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("USR1", 10),
    ("USR2", 12),
    ("ALRM", 14),
    ("TERM", 15),
    ("URG", 23),
];

/// `SIG@LEAD`: which signal to send first, and how long before the time limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlySignal {
    pub number: i32,
    pub lead: DurationSpec,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid signal {input:?}: {why}; write it like USR1@90 (SIGUSR1, 90 seconds before the time limit)")]
pub struct SignalError {
    pub input: String,
    pub why: String,
}

impl EarlySignal {
    pub fn name(&self) -> &'static str {
        SIGNALS
            .iter()
            .find(|(_, n)| *n == self.number)
            .map(|(s, _)| *s)
            .unwrap_or("?")
    }
}

impl FromStr for EarlySignal {
    type Err = SignalError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| SignalError {
            input: input.to_string(),
            why: why.to_string(),
        };
        let (sig, lead) = input
            .trim()
            .split_once('@')
            .ok_or_else(|| err("the @LEAD part is missing"))?;
        let name = sig.trim().trim_start_matches("SIG");
        let number = match name.parse::<i32>() {
            Ok(n) => SIGNALS.iter().find(|(_, k)| *k == n).map(|(_, k)| *k),
            Err(_) => SIGNALS.iter().find(|(s, _)| *s == name).map(|(_, k)| *k),
        }
        .ok_or_else(|| err("unknown signal (use USR1, USR2, INT, TERM, HUP, QUIT, ALRM or URG)"))?;
        let lead = lead
            .trim()
            .parse::<DurationSpec>()
            .map_err(|e| err(&e.why))?;
        Ok(Self { number, lead })
    }
}

impl fmt::Display for EarlySignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Whole seconds in Slurm's form; anything finer keeps its unit, so the text parses back.
        if self.lead.as_millis().is_multiple_of(1000) {
            write!(f, "{}@{}", self.name(), self.lead.as_millis() / 1000)
        } else {
            write!(f, "{}@{}", self.name(), self.lead)
        }
    }
}

impl Serialize for EarlySignal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for EarlySignal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for EarlySignal {
    fn schema_name() -> String {
        "EarlySignal".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        let mut s = schemars::schema::SchemaObject {
            instance_type: Some(schemars::schema::InstanceType::String.into()),
            ..Default::default()
        };
        s.metadata().description = Some(
            "SIG@SECONDS as in Slurm's --signal: send SIG that long before the time limit, and first on preemption."
                .into(),
        );
        s.metadata().examples = vec!["USR1@90".into()];
        s.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_slurm_syntax() {
        let s: EarlySignal = "USR1@90".parse().unwrap();
        assert_eq!((s.number, s.lead.as_millis()), (10, 90_000));
        assert_eq!(
            "SIGUSR2@2m"
                .parse::<EarlySignal>()
                .unwrap()
                .lead
                .as_millis(),
            120_000
        );
        assert_eq!("12@5".parse::<EarlySignal>().unwrap().name(), "USR2");
        assert_eq!(s.to_string(), "USR1@90");
        let fine: EarlySignal = "USR1@500ms".parse().unwrap();
        assert_eq!(
            fine.to_string().parse::<EarlySignal>().unwrap(),
            fine,
            "round-trips"
        );
    }

    #[test]
    fn refuses_bad_signals_with_the_syntax() {
        for bad in ["USR1", "KILL@5", "USR1@", "USR1@0", "@5", "9@5"] {
            let e = bad.parse::<EarlySignal>().unwrap_err();
            assert!(e.to_string().contains("USR1@90"), "{bad}: {e}");
        }
    }
}
