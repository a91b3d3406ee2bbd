//! Human durations as users write them ("90s", "2h", "1h30m"), kept as milliseconds.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A positive duration written like `30s`, `15m`, `2h` or `1h30m` (a bare number means seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DurationSpec {
    millis: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {why}; write it like 30s, 15m, 2h or 1h30m")]
pub struct DurationError {
    pub input: String,
    pub why: String,
}

/// Longest duration accepted: ten years is far beyond any time limit and keeps
/// every millisecond sum comfortably inside `i64`.
const MAX_MILLIS: u64 = 10 * 365 * 24 * 3600 * 1000;

impl DurationSpec {
    pub fn from_millis(millis: u64) -> Self {
        Self { millis }
    }
    pub fn from_secs(secs: u64) -> Self {
        Self {
            millis: secs.saturating_mul(1000),
        }
    }
    pub fn as_millis(self) -> u64 {
        self.millis
    }
    pub fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.millis)
    }
}

impl FromStr for DurationSpec {
    type Err = DurationError;
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| DurationError {
            input: input.to_string(),
            why: why.to_string(),
        };
        let text = input.trim();
        if text.is_empty() {
            return Err(err("it is empty"));
        }
        let millis: u64 = if text.bytes().all(|b| b.is_ascii_digit()) {
            let secs: u64 = text.parse().map_err(|_| err("the number is too large"))?;
            secs.checked_mul(1000)
                .ok_or_else(|| err("the number is too large"))?
        } else {
            let d = humantime::parse_duration(text).map_err(|e| err(&e.to_string()))?;
            u64::try_from(d.as_millis()).map_err(|_| err("it is too long"))?
        };
        if millis == 0 {
            return Err(err("it must be longer than zero"));
        }
        if millis > MAX_MILLIS {
            return Err(err("it is longer than ten years"));
        }
        Ok(Self { millis })
    }
}

impl fmt::Display for DurationSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = std::time::Duration::from_millis(self.millis);
        write!(
            f,
            "{}",
            humantime::format_duration(d).to_string().replace(' ', "")
        )
    }
}

impl Serialize for DurationSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for DurationSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A visitor rather than an untagged enum: format errors keep their line and column.
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = DurationSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 30s, 15m, 2h or a number of seconds")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<DurationSpec, E> {
                v.to_string().parse().map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<DurationSpec, E> {
                v.to_string().parse().map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<DurationSpec, E> {
                Err(E::custom(format!(
                    "invalid duration {v}: write it like 30s, 15m, 2h or 1h30m"
                )))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DurationSpec, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl JsonSchema for DurationSpec {
    fn schema_name() -> String {
        "Duration".into()
    }
    fn json_schema(_: &mut schemars::gen::SchemaGenerator) -> schemars::schema::Schema {
        let mut s = schemars::schema::SchemaObject {
            instance_type: Some(schemars::schema::SingleOrVec::Vec(vec![
                schemars::schema::InstanceType::String,
                schemars::schema::InstanceType::Integer,
            ])),
            ..Default::default()
        };
        s.metadata().description = Some(
            "A positive duration: `30s`, `15m`, `2h`, `1h30m`, or an integer number of seconds."
                .into(),
        );
        s.metadata().examples = vec!["2h".into(), "30s".into()];
        s.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!("30s".parse::<DurationSpec>().unwrap().as_millis(), 30_000);
        assert_eq!("2h".parse::<DurationSpec>().unwrap().as_millis(), 7_200_000);
        assert_eq!(
            "1h30m".parse::<DurationSpec>().unwrap().as_millis(),
            5_400_000
        );
        assert_eq!("45".parse::<DurationSpec>().unwrap().as_millis(), 45_000);
    }

    #[test]
    fn rejects_bad_input_with_a_hint() {
        for bad in [
            "",
            "0",
            "0s",
            "abc",
            "-5m",
            "3 parsecs",
            "99999999999999999999",
            "20000d",
        ] {
            let e = bad.parse::<DurationSpec>().unwrap_err();
            assert!(e.to_string().contains("write it like"), "{bad}: {e}");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in ["30s", "2h", "1h 30m", "100ms"] {
            let d: DurationSpec = s.parse().unwrap();
            assert_eq!(d.to_string().parse::<DurationSpec>().unwrap(), d);
        }
    }
}
