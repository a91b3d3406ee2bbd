//! Cost arithmetic, exact: money is an integer number of micro-dollars, and an
//! attempt's cost over any window is a difference of one rounded cumulative
//! function, so the parts of an attempt (by day, by budget period, inside a
//! report's window) always add up to exactly its whole.

use crate::Millis;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// An amount of money in micro-dollars (10⁻⁶ USD).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(transparent)]
pub struct Micros(pub i64);

const MS_PER_HOUR: i128 = 3_600_000;

impl Micros {
    pub const ZERO: Micros = Micros(0);

    /// Parses a decimal dollar amount exactly ("1.29", "0.000001", "32"); at most 6 decimals.
    pub fn parse_dollars(s: &str) -> Option<Micros> {
        let s = s.trim().trim_start_matches('$');
        let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
        if whole.is_empty() && frac.is_empty() || frac.len() > 6 {
            return None;
        }
        if !whole.chars().all(|c| c.is_ascii_digit()) || !frac.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let whole: i64 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let frac: i64 = format!("{frac:0<6}").parse().ok()?;
        whole.checked_mul(1_000_000)?.checked_add(frac).map(Micros)
    }

    /// From a float dollar amount in a config file, rounded to the micro-dollar.
    pub fn from_dollars(d: f64) -> Option<Micros> {
        (d.is_finite() && (0.0..9e12).contains(&d)).then(|| Micros((d * 1e6).round() as i64))
    }

    /// Every digit: `12.345678` (for CSV and machine readers).
    pub fn exact(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let v = self.0.unsigned_abs();
        format!("{sign}{}.{:06}", v / 1_000_000, v % 1_000_000)
    }

    pub fn dollars(self) -> f64 {
        self.0 as f64 / 1e6
    }

    pub fn saturating_sub(self, other: Micros) -> Micros {
        Micros(self.0.saturating_sub(other.0))
    }
}

impl std::ops::Add for Micros {
    type Output = Micros;
    fn add(self, o: Micros) -> Micros {
        Micros(self.0.saturating_add(o.0))
    }
}

impl std::ops::AddAssign for Micros {
    fn add_assign(&mut self, o: Micros) {
        *self = *self + o;
    }
}

impl std::iter::Sum for Micros {
    fn sum<I: Iterator<Item = Micros>>(iter: I) -> Micros {
        iter.fold(Micros::ZERO, |a, b| a + b)
    }
}

/// `$12.34`; amounts under a dollar keep four decimals (`$0.0042`) so small jobs
/// do not all read `$0.00`. Rounded half away from zero.
impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let v = self.0.unsigned_abs();
        if v < 1_000_000 && v != 0 {
            let q = (v + 50) / 100;
            write!(f, "{sign}${}.{:04}", q / 10_000, q % 10_000)
        } else {
            let q = (v + 5_000) / 10_000;
            write!(f, "{sign}${}.{:02}", q / 100, q % 100)
        }
    }
}

/// The cost of `elapsed_ms` at `rate_per_hour`, rounded half up to the micro-dollar.
pub fn cumulative(rate_per_hour: Micros, elapsed_ms: Millis) -> Micros {
    let num = rate_per_hour.0.max(0) as i128 * elapsed_ms.max(0) as i128;
    Micros(((num + MS_PER_HOUR / 2) / MS_PER_HOUR).min(i64::MAX as i128) as i64)
}

/// The part of an attempt (`start`..`end`, charged at `rate_per_hour`) that falls in
/// `from`..`until`. Parts over adjacent windows add up to exactly the whole.
pub fn cost_within(
    rate_per_hour: Micros,
    start: Millis,
    end: Millis,
    from: Millis,
    until: Millis,
) -> Micros {
    let a = from.clamp(start, end.max(start));
    let b = until.clamp(start, end.max(start));
    if b <= a {
        return Micros::ZERO;
    }
    Micros(cumulative(rate_per_hour, b - start).0 - cumulative(rate_per_hour, a - start).0)
}

/// The most a job can cost: its time limit at its rate.
pub fn worst_case(rate_per_hour: Micros, time_limit_ms: u64) -> Micros {
    cumulative(rate_per_hour, time_limit_ms.min(i64::MAX as u64) as i64)
}

/// The rate of an attempt: GPUs × the node's GPU-hour price, or the CPU-job rate
/// for a job without GPUs. `None`: the node has no price for it.
pub fn attempt_rate(
    gpus: u32,
    gpu_hour: Option<Micros>,
    cpu_job_hour: Option<Micros>,
) -> Option<Micros> {
    if gpus == 0 {
        cpu_job_hour
    } else {
        gpu_hour.map(|p| Micros(p.0.saturating_mul(gpus as i64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_prints_money_exactly() {
        assert_eq!(Micros::parse_dollars("1.29"), Some(Micros(1_290_000)));
        assert_eq!(Micros::parse_dollars("$32.7726"), Some(Micros(32_772_600)));
        assert_eq!(Micros::parse_dollars(".5"), Some(Micros(500_000)));
        assert_eq!(
            Micros::parse_dollars("0.0000001"),
            None,
            "beyond a micro-dollar"
        );
        for bad in ["", ".", "1,5", "-3", "1e3", "abc"] {
            assert_eq!(Micros::parse_dollars(bad), None, "{bad}");
        }
        assert_eq!(Micros(38_400_000).to_string(), "$38.40");
        assert_eq!(Micros(12_105_000).to_string(), "$12.11");
        assert_eq!(Micros(4_200).to_string(), "$0.0042");
        assert_eq!(Micros(0).to_string(), "$0.00");
        assert_eq!(Micros(12_000_005).exact(), "12.000005");
    }

    #[test]
    fn an_hour_on_two_gpus_costs_twice_the_gpu_hour() {
        let rate = attempt_rate(2, Micros::parse_dollars("1.29"), None).unwrap();
        assert_eq!(cumulative(rate, 3_600_000), Micros(2_580_000));
        // One second at $1.29/GPU-hour on 2 GPUs: 716.67 µ$ → 717.
        assert_eq!(cumulative(rate, 1000), Micros(717));
        assert_eq!(
            attempt_rate(0, Some(Micros(1)), None),
            None,
            "CPU job, no CPU price"
        );
        assert_eq!(
            worst_case(Micros(4_800_000), 8 * 3_600_000),
            Micros(38_400_000)
        );
    }

    proptest! {
        #[test]
        fn parts_over_any_cut_points_add_up_to_the_whole(
            rate in 0i64..100_000_000,
            start in 0i64..1_000_000_000,
            len in 0i64..100_000_000,
            mut cuts in proptest::collection::vec(0i64..1_200_000_000, 0..8),
        ) {
            let end = start + len;
            cuts.push(i64::MIN / 2);
            cuts.push(i64::MAX / 2);
            cuts.sort();
            let parts: Micros = cuts.windows(2).map(|w| cost_within(Micros(rate), start, end, w[0], w[1])).sum();
            prop_assert_eq!(parts, cumulative(Micros(rate), len));
            prop_assert!(cuts.windows(2).all(|w| cost_within(Micros(rate), start, end, w[0], w[1]).0 >= 0));
        }

        #[test]
        fn parsing_any_text_never_panics(s in ".{0,20}") {
            let _ = Micros::parse_dollars(&s);
        }

        #[test]
        fn printed_dollars_parse_back_within_display_precision(v in 0i64..10_000_000_000) {
            let shown = Micros(v).to_string();
            let back = Micros::parse_dollars(&shown).unwrap();
            prop_assert!((back.0 - v).abs() <= 5_000, "{} -> {}", v, shown);
        }
    }
}
