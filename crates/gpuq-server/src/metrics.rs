//! `GET /metrics` in the Prometheus text format. GPU series use dcgm-exporter's
//! names and labels (`gpu`, `UUID`, `device`, `modelName`, `Hostname`, and
//! `hpc_job` for the job holding the GPU) so dashboards built for it work
//! unchanged; scheduler series are `gpuq_*`.

use super::routes::{ApiResult, AppState};
use super::service::monitoring::WAIT_BUCKETS;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use std::fmt::Write;

pub async fn metrics(State(ctx): State<AppState>) -> ApiResult<impl IntoResponse> {
    let service = &ctx.service;
    let gpus = service.gpu_status()?;
    let usage = service.usage()?;
    let states = service.state_counts();
    let counters = service.monitor().counters.clone();
    let mut out = String::with_capacity(4096);
    let node = escape(&ctx.info.node);

    type Field = fn(&gpuq_core::telemetry::GpuReading) -> Option<f64>;
    let gpu_series: [(&str, &str, &str, Field); 9] = [
        (
            "DCGM_FI_DEV_GPU_UTIL",
            "gauge",
            "GPU utilization (in %).",
            |r| r.util_percent,
        ),
        (
            "DCGM_FI_DEV_FB_USED",
            "gauge",
            "Framebuffer memory used (in MiB).",
            |r| r.memory_used_mib.map(|v| v as f64),
        ),
        (
            "DCGM_FI_DEV_FB_FREE",
            "gauge",
            "Framebuffer memory free (in MiB).",
            |r| Some(r.memory_total_mib?.saturating_sub(r.memory_used_mib?) as f64),
        ),
        (
            "DCGM_FI_DEV_GPU_TEMP",
            "gauge",
            "GPU temperature (in C).",
            |r| r.temperature_c.map(f64::from),
        ),
        (
            "DCGM_FI_DEV_POWER_USAGE",
            "gauge",
            "Power draw (in W).",
            |r| r.power_w,
        ),
        (
            "DCGM_FI_DEV_SM_CLOCK",
            "gauge",
            "SM clock frequency (in MHz).",
            |r| r.sm_clock_mhz.map(f64::from),
        ),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
            |r| r.energy_j.map(|j| (j * 1000.0).round()),
        ),
        (
            "DCGM_FI_DEV_XID_ERRORS",
            "gauge",
            "Value of the last XID error encountered.",
            |r| Some(r.last_xid as f64),
        ),
        (
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "counter",
            "Total number of double-bit volatile ECC errors.",
            |r| r.ecc_uncorrected.map(|v| v as f64),
        ),
    ];
    for (name, kind, help, field) in gpu_series {
        let mut header_written = false;
        for g in &gpus {
            let Some(value) = g.reading.as_ref().and_then(field) else {
                continue;
            };
            if !header_written {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                header_written = true;
            }
            let job = g.job.map(|j| j.to_string()).unwrap_or_default();
            let _ = writeln!(
                out,
                "{name}{{gpu=\"{}\",UUID=\"{}\",device=\"nvidia{}\",modelName=\"{}\",Hostname=\"{node}\",hpc_job=\"{job}\"}} {value}",
                g.index,
                escape(&g.uuid),
                g.index,
                escape(&g.model),
            );
        }
    }

    let _ = writeln!(
        out,
        "# HELP gpuq_jobs Jobs by state.\n# TYPE gpuq_jobs gauge"
    );
    for (state, n) in &states {
        let _ = writeln!(out, "gpuq_jobs{{state=\"{state}\"}} {n}");
    }
    let held = gpus.iter().filter(|g| g.job.is_some()).count();
    let _ = writeln!(
        out,
        "# HELP gpuq_gpus GPUs by whether a job holds them.\n# TYPE gpuq_gpus gauge\n\
         gpuq_gpus{{state=\"allocated\"}} {held}\ngpuq_gpus{{state=\"free\"}} {}",
        gpus.len() - held
    );
    let _ = writeln!(
        out,
        "# HELP gpuq_job_starts_total Job starts (first attempts) since the daemon started.\n\
         # TYPE gpuq_job_starts_total counter\ngpuq_job_starts_total {}",
        counters.starts
    );
    let _ = writeln!(
        out,
        "# HELP gpuq_job_wait_seconds Time from submit to first start.\n# TYPE gpuq_job_wait_seconds histogram"
    );
    for (bound, n) in WAIT_BUCKETS.iter().zip(counters.wait_buckets) {
        let _ = writeln!(out, "gpuq_job_wait_seconds_bucket{{le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "gpuq_job_wait_seconds_bucket{{le=\"+Inf\"}} {c}\ngpuq_job_wait_seconds_sum {}\ngpuq_job_wait_seconds_count {c}",
        counters.wait_sum_s,
        c = counters.wait_count
    );
    let _ = writeln!(
        out,
        "# HELP gpuq_gpu_seconds_total GPU-seconds held by each user's jobs (running ones up to now).\n\
         # TYPE gpuq_gpu_seconds_total counter"
    );
    for u in &usage.users {
        let _ = writeln!(
            out,
            "gpuq_gpu_seconds_total{{user=\"{}\"}} {}",
            escape(&u.user),
            (u.gpu_hours * 3600.0).round()
        );
    }
    let _ = writeln!(
        out,
        "# HELP gpuq_alerts_total Alerts raised since the daemon started.\n# TYPE gpuq_alerts_total counter"
    );
    for kind in gpuq_core::alerts::AlertKind::ALL {
        let n = counters.alerts.get(kind.as_str()).copied().unwrap_or(0);
        let _ = writeln!(out, "gpuq_alerts_total{{kind=\"{}\"}} {n}", kind.as_str());
    }
    let now = gpuq_api::home::now_ms();
    let costs = {
        let service = service.clone();
        tokio::task::spawn_blocking(move || {
            service.cost_report(super::service::costs::GroupBy::User, 0, now, now)
        })
        .await
        .map_err(|e| {
            super::routes::ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                e.to_string(),
            )
        })??
    };
    let _ = writeln!(
        out,
        "# HELP gpuq_cost_dollars_total What each user's jobs cost (priced time only).\n# TYPE gpuq_cost_dollars_total counter"
    );
    for row in costs.rows.iter().filter(|r| r.cost.is_some()) {
        let _ = writeln!(
            out,
            "gpuq_cost_dollars_total{{user=\"{}\"}} {}",
            escape(&row.key),
            row.cost.unwrap_or_default().dollars()
        );
    }
    let _ = writeln!(
        out,
        "# HELP gpuq_budget_spent_dollars Spent in the budget's current period.\n# TYPE gpuq_budget_spent_dollars gauge\n\
         # HELP gpuq_budget_limit_dollars The budget for its period.\n# TYPE gpuq_budget_limit_dollars gauge"
    );
    for b in &costs.budgets {
        let labels = format!(
            "scope=\"{}\",name=\"{}\",period=\"{}\"",
            b.scope,
            escape(&b.name),
            b.period
        );
        let _ = writeln!(
            out,
            "gpuq_budget_spent_dollars{{{labels}}} {}",
            b.spent.dollars()
        );
        let _ = writeln!(
            out,
            "gpuq_budget_limit_dollars{{{labels}}} {}",
            b.limit.dollars()
        );
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    ))
}

/// Label values escape backslash, quote and newline (the text format's rule).
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
