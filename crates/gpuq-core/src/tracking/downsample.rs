//! Downsampling a metric's history for a chart.
