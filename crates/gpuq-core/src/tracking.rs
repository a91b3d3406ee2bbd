//! Experiment tracking's pure parts: MLflow's search syntax for runs and
//! experiments (`search`), and the downsampling of a long metric history for a
//! chart (`downsample`). The store and the MLflow-compatible API call these.

pub mod downsample;
pub mod metrics_file;
pub mod search;
