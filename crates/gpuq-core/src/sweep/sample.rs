//! Drawing trial parameters: a SplitMix64 generator, no `rand` dependency, so
//! the stream is fixed by this file alone and a seed replays the same trials
//! on every build.

use super::Parameter;
use serde_json::Value;
use std::collections::BTreeMap;

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough for
/// sampling hyperparameters; not for anything adversarial.
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), from the top 53 bits (a double's mantissa).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n) for n ≥ 1, by the multiply-shift method (no modulo
    /// loop; the bias is below 2^-64·n, far under anything a sweep notices).
    fn below(&mut self, n: u128) -> u128 {
        (u128::from(self.next_u64()) * n) >> 64
    }
}

/// FNV-1a of the parameter name, so each parameter has its own stream: adding
/// a parameter to a sweep does not change the values drawn for the others.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn stream(seed: u64, trial_index: u64, name: &str) -> SplitMix64 {
    // Mix each input through the generator so nearby seeds and indices give
    // unrelated streams.
    let a = SplitMix64::new(seed).next_u64();
    let b = SplitMix64::new(a ^ trial_index).next_u64();
    SplitMix64::new(b ^ name_hash(name))
}

fn draw(p: &Parameter, rng: &mut SplitMix64) -> Value {
    match p {
        Parameter::Uniform(lo, hi) => float(lo + rng.next_f64() * (hi - lo)),
        Parameter::LogUniform(lo, hi) => {
            let (l, h) = (lo.ln(), hi.ln());
            // exp can round to just above hi; clamp keeps the bound honest.
            float((l + rng.next_f64() * (h - l)).exp().clamp(*lo, *hi))
        }
        Parameter::Int(lo, hi) => {
            // i128 so the full i64 range does not overflow.
            let span = (i128::from(*hi) - i128::from(*lo) + 1) as u128;
            let v = i128::from(*lo) + rng.below(span) as i128;
            Value::from(v as i64)
        }
        Parameter::Choice(values) | Parameter::Grid(values) => {
            values[rng.below(values.len() as u128) as usize].clone()
        }
    }
}

fn float(x: f64) -> Value {
    // Validated bounds are finite, so the value is too; Null only guards a
    // spec that skipped validation.
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// The parameters of random-search trial `trial_index`: every parameter drawn
/// independently (a grid parameter gives a random one of its values).
pub fn sample(
    params: &BTreeMap<String, Parameter>,
    trial_index: u64,
    seed: u64,
) -> BTreeMap<String, Value> {
    params
        .iter()
        .map(|(name, p)| (name.clone(), draw(p, &mut stream(seed, trial_index, name))))
        .collect()
}

/// Points in the cartesian product of the grid parameters; None on overflow.
pub fn grid_size(params: &BTreeMap<String, Parameter>) -> Option<u64> {
    params.values().try_fold(1u64, |n, p| match p {
        Parameter::Grid(values) => n.checked_mul(values.len() as u64),
        _ => Some(n),
    })
}

/// Every point of the grid, in a stable order: parameters by name, the last
/// name varying fastest, each one's values in file order. A non-grid
/// parameter is sampled per point, as for random trial number `point`.
pub fn grid_points(
    params: &BTreeMap<String, Parameter>,
    seed: u64,
) -> Vec<BTreeMap<String, Value>> {
    let grids: Vec<(&String, &Vec<Value>)> = params
        .iter()
        .filter_map(|(name, p)| match p {
            Parameter::Grid(values) => Some((name, values)),
            _ => None,
        })
        .collect();
    let mut points = vec![BTreeMap::new()];
    for (name, values) in grids {
        points = points
            .into_iter()
            .flat_map(|point| {
                values.iter().map(move |v| {
                    let mut p = point.clone();
                    p.insert(name.clone(), v.clone());
                    p
                })
            })
            .collect();
    }
    for (i, point) in points.iter_mut().enumerate() {
        for (name, p) in params {
            if !matches!(p, Parameter::Grid(_)) {
                point.insert(name.clone(), draw(p, &mut stream(seed, i as u64, name)));
            }
        }
    }
    points
}
