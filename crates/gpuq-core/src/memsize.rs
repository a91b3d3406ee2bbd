//! GPU memory sizes as users write them ("40G", "24GB", "81920M"), kept in MiB.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A memory size: `40G` (GiB), `512M` (MiB), with an optional `B`/`iB`; a bare number means GiB.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
#[schemars(with = "String")]
pub struct MemSize {
    mib: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid memory size {0:?}; write it like 40G, 24GB or 512M")]
pub struct MemSizeError(pub String);

impl MemSize {
    pub fn from_mib(mib: u64) -> Self {
        Self { mib }
    }
    pub fn mib(self) -> u64 {
        self.mib
    }
}

impl FromStr for MemSize {
    type Err = MemSizeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || MemSizeError(s.to_string());
        let t = s.trim().to_ascii_uppercase();
        let t = t
            .strip_suffix("IB")
            .or_else(|| t.strip_suffix('B'))
            .unwrap_or(&t);
        let (num, factor) = match t.strip_suffix('T') {
            Some(n) => (n, 1024 * 1024),
            None => match t.strip_suffix('G') {
                Some(n) => (n, 1024),
                None => match t.strip_suffix('M') {
                    Some(n) => (n, 1),
                    None => (t, 1024),
                },
            },
        };
        let value: f64 = num.trim().parse().map_err(|_| err())?;
        if !(value.is_finite() && value > 0.0 && value * factor as f64 <= 1e9) {
            return Err(err());
        }
        let mib = (value * factor as f64).round() as u64;
        if mib == 0 {
            return Err(err());
        }
        Ok(Self { mib })
    }
}

impl TryFrom<String> for MemSize {
    type Error = MemSizeError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<MemSize> for String {
    fn from(m: MemSize) -> String {
        m.to_string()
    }
}

impl fmt::Display for MemSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mib.is_multiple_of(1024) {
            write!(f, "{}G", self.mib / 1024)
        } else {
            write!(f, "{}M", self.mib)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_people_write() {
        for (s, mib) in [
            ("40G", 40960),
            ("24GB", 24576),
            ("80GiB", 81920),
            ("512M", 512),
            ("16", 16384),
            ("1.5G", 1536),
        ] {
            assert_eq!(s.parse::<MemSize>().unwrap().mib(), mib, "{s}");
        }
        for bad in ["", "G", "-1G", "lots", "0G", "1e20G", "0.4M"] {
            assert!(bad.parse::<MemSize>().is_err(), "{bad}");
        }
        assert_eq!(MemSize::from_mib(40960).to_string(), "40G");
    }
}
