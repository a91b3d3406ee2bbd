//! Downsampling a metric's history for a chart.
//!
//! A run may log a million points of one metric; a chart shows a few hundred.
//! The store keeps, next to the raw points, a rollup per bucket of
//! [`ROLLUP_POINTS`] consecutive points (count, first and last step, the lowest
//! and the highest value with their steps). A chart of a long history is built
//! from those rollups, so reading it costs a few thousand rows, not a million.
//! Each chart bucket is drawn by its lowest and its highest point (min/max per
//! bucket): spikes and dips survive, which averaging or striding would hide.

/// Raw points per stored rollup.
pub const ROLLUP_POINTS: u64 = 256;

/// One point of a metric: its step, time (epoch ms) and value (may be NaN or infinite).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub step: i64,
    pub time: i64,
    pub value: f64,
}

/// A summary of consecutive points, in the order they were logged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rollup {
    pub n: u64,
    pub first: Point,
    pub last: Point,
    /// Lowest and highest non-NaN point; `None` when every value was NaN.
    pub min: Option<Point>,
    pub max: Option<Point>,
}

impl Rollup {
    pub fn of(p: Point) -> Self {
        let extreme = (!p.value.is_nan()).then_some(p);
        Self {
            n: 1,
            first: p,
            last: p,
            min: extreme,
            max: extreme,
        }
    }

    /// Adds the points that follow this rollup's.
    pub fn merge(&mut self, later: &Rollup) {
        self.n += later.n;
        self.last = later.last;
        self.min = pick(self.min, later.min, |a, b| b.value < a.value);
        self.max = pick(self.max, later.max, |a, b| b.value > a.value);
    }

    pub fn add(&mut self, p: Point) {
        self.merge(&Rollup::of(p));
    }
}

fn pick(
    a: Option<Point>,
    b: Option<Point>,
    b_wins: impl Fn(&Point, &Point) -> bool,
) -> Option<Point> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if b_wins(&x, &y) { y } else { x }),
        (x, y) => x.or(y),
    }
}

/// At most `max_points` points showing `points` (in logged order): every point
/// when they fit, else the lowest and highest of each of `max_points / 2`
/// buckets, plus the first and last point. Output is ordered by step.
pub fn min_max(points: &[Point], max_points: usize) -> Vec<Point> {
    if points.len() <= max_points.max(2) {
        return sorted(points.to_vec());
    }
    let rollups: Vec<Rollup> = points.iter().map(|p| Rollup::of(*p)).collect();
    from_rollups(&rollups, max_points)
}

/// The same view built from stored rollups (in logged order) instead of raw points.
pub fn from_rollups(rollups: &[Rollup], max_points: usize) -> Vec<Point> {
    let total: u64 = rollups.iter().map(|r| r.n).sum();
    if rollups.is_empty() || total == 0 {
        return Vec::new();
    }
    // Two points per bucket, and room for the first and last point.
    let buckets = (max_points.saturating_sub(2) / 2).max(1) as u64;
    let per_bucket = total.div_ceil(buckets).max(1);
    let mut out = Vec::with_capacity(max_points);
    out.push(rollups[0].first);
    let mut current: Option<Rollup> = None;
    let mut seen = 0u64;
    let flush = |r: Rollup, out: &mut Vec<Point>| {
        let mut pair: Vec<Point> = r.min.into_iter().chain(r.max).collect();
        pair.dedup();
        out.extend(pair);
    };
    for r in rollups {
        match current.as_mut() {
            Some(c) => c.merge(r),
            None => current = Some(*r),
        }
        seen += r.n;
        if seen >= per_bucket {
            flush(current.take().expect("set above"), &mut out);
            seen = 0;
        }
    }
    if let Some(c) = current {
        flush(c, &mut out);
    }
    out.push(rollups[rollups.len() - 1].last);
    let mut out = sorted(out);
    out.dedup();
    out.truncate(max_points.max(2));
    out
}

/// Points by step, then time; a NaN-safe total order on values breaks ties.
fn sorted(mut points: Vec<Point>) -> Vec<Point> {
    points.sort_by(|a, b| {
        (a.step, a.time)
            .cmp(&(b.step, b.time))
            .then(a.value.total_cmp(&b.value))
    });
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(n: i64, f: impl Fn(i64) -> f64) -> Vec<Point> {
        (0..n)
            .map(|i| Point {
                step: i,
                time: 1_000 + i,
                value: f(i),
            })
            .collect()
    }

    #[test]
    fn a_short_history_is_returned_whole() {
        let pts = series(10, |i| i as f64);
        assert_eq!(min_max(&pts, 100), pts);
    }

    #[test]
    fn a_spike_survives_downsampling() {
        let pts = series(100_000, |i| if i == 54_321 { 99.0 } else { 1.0 });
        let out = min_max(&pts, 200);
        assert!(out.len() <= 200, "{}", out.len());
        assert!(out.iter().any(|p| p.step == 54_321 && p.value == 99.0));
        assert_eq!(out.first().unwrap().step, 0);
        assert_eq!(out.last().unwrap().step, 99_999);
        assert!(out.windows(2).all(|w| w[0].step <= w[1].step));
    }

    #[test]
    fn rollups_give_the_same_extremes_as_raw_points() {
        let pts = series(10_000, |i| ((i as f64) / 37.0).sin() * (i % 97) as f64);
        let rollups: Vec<Rollup> = pts
            .chunks(ROLLUP_POINTS as usize)
            .map(|c| {
                let mut r = Rollup::of(c[0]);
                c[1..].iter().for_each(|p| r.add(*p));
                r
            })
            .collect();
        let chart = from_rollups(&rollups, 100);
        let max = pts.iter().map(|p| p.value).fold(f64::MIN, f64::max);
        let min = pts.iter().map(|p| p.value).fold(f64::MAX, f64::min);
        assert!(chart.iter().any(|p| p.value == max));
        assert!(chart.iter().any(|p| p.value == min));
        assert!(chart.len() <= 100);
    }

    #[test]
    fn nan_values_are_kept_out_of_extremes_but_a_nan_only_bucket_is_not_lost() {
        let mut r = Rollup::of(Point {
            step: 0,
            time: 0,
            value: f64::NAN,
        });
        assert_eq!(r.min, None);
        r.add(Point {
            step: 1,
            time: 1,
            value: f64::INFINITY,
        });
        assert_eq!(r.max.unwrap().value, f64::INFINITY);
        assert_eq!(r.n, 2);
        let all_nan = series(1_000, |_| f64::NAN);
        let out = min_max(&all_nan, 10);
        // First and last point still mark the extent of the history.
        assert_eq!(out.len(), 2);
    }
}
