//! The OpenAPI 3.0 document of the API: paths written here, schemas generated
//! from the Rust types, so the document cannot drift from the code. A test
//! keeps `docs/openapi.json` equal to it.

use crate::{
    ErrorBody, Explanation, FeedItem, GpuHistory, GpuStatus, JobDetail, QueueStatus, ServerInfo,
    SubmitRequest, TokenCreated, TokenInfo, TokenRequest, Usage, WhoAmI,
};
use gpuq_core::{Job, JobSpec};
use schemars::gen::{SchemaGenerator, SchemaSettings};
use serde_json::{json, Value};

fn schemas() -> Value {
    let mut gen = SchemaGenerator::new(SchemaSettings::openapi3());
    gen.subschema_for::<SubmitRequest>();
    gen.subschema_for::<Job>();
    gen.subschema_for::<JobDetail>();
    gen.subschema_for::<JobSpec>();
    gen.subschema_for::<GpuStatus>();
    gen.subschema_for::<ServerInfo>();
    gen.subschema_for::<ErrorBody>();
    gen.subschema_for::<QueueStatus>();
    gen.subschema_for::<Explanation>();
    gen.subschema_for::<Usage>();
    gen.subschema_for::<TokenRequest>();
    gen.subschema_for::<TokenCreated>();
    gen.subschema_for::<TokenInfo>();
    gen.subschema_for::<WhoAmI>();
    gen.subschema_for::<GpuHistory>();
    gen.subschema_for::<FeedItem>();
    gen.subschema_for::<gpuq_core::alerts::Alert>();
    gen.subschema_for::<crate::CostReport>();
    gen.subschema_for::<crate::AutostopStatus>();
    gen.subschema_for::<crate::AutostopRequest>();
    gen.subschema_for::<crate::ScheduleInfo>();
    gen.subschema_for::<crate::Advice>();
    gen.subschema_for::<gpuq_core::catalog::InstancePrice>();
    gen.subschema_for::<crate::tracking::JobMetrics>();
    gen.subschema_for::<crate::tracking::RunSummary>();
    gen.subschema_for::<crate::repro::ReproView>();
    gen.subschema_for::<crate::repro::RerunRequest>();
    gen.subschema_for::<crate::sweep::SweepRequest>();
    gen.subschema_for::<crate::sweep::SweepSummary>();
    gen.subschema_for::<crate::sweep::SweepDetail>();
    gen.subschema_for::<crate::sweep::RungAnswer>();
    gen.subschema_for::<crate::arrays::ArrayDetail>();
    gen.subschema_for::<crate::arrays::ListRow>();
    gen.subschema_for::<crate::web::LoginLink>();
    gen.subschema_for::<crate::sessions::SessionStatus>();
    gen.subschema_for::<crate::profile::ProfileRequest>();
    gen.subschema_for::<crate::profile::ProfileStatus>();
    gen.subschema_for::<crate::JobCpu>();
    gen.subschema_for::<crate::envs::EnvView>();
    gen.subschema_for::<crate::web::LoginRequest>();
    gen.subschema_for::<crate::web::SessionInfo>();
    gen.subschema_for::<crate::web::LinkInfo>();
    gen.subschema_for::<crate::web::EndSessions>();
    gen.subschema_for::<crate::web::SessionsEnded>();
    serde_json::to_value(gen.definitions()).expect("schemas serialize")
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn json_body(schema: Value, description: &str) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema } } })
}

fn errors() -> Value {
    let e = |d: &str| json_body(schema_ref("ErrorBody"), d);
    json!({
        "400": e("Bad input; `field` names the offending field"),
        "401": e("Missing or wrong token"),
        "403": e("Not the job's owner, nor an admin"),
        "404": e("No such job"),
    })
}

fn with_errors(ok_code: &str, ok: Value) -> Value {
    let mut responses = errors();
    responses[ok_code] = ok;
    responses
}

fn id_param() -> Value {
    json!({ "name": "id", "in": "path", "required": true, "schema": { "type": "integer", "format": "uint64" } })
}

/// Telemetry, alerts, the event stream and the Prometheus endpoint.
fn telemetry_paths() -> Value {
    json!({
            "/v1/gpus/history": { "get": {
                "summary": "Each GPU's telemetry over time: recent readings at full rate, older ones as one-minute summaries (24 h kept)",
                "parameters": [ { "name": "since", "in": "query", "schema": { "type": "integer", "format": "int64" }, "description": "Epoch ms; default everything kept" },
                                { "name": "max_points", "in": "query", "schema": { "type": "integer", "minimum": 2, "maximum": 20000 }, "description": "Points per GPU at most, consecutive points summarised (mean utilisation and power, peak memory and temperature); default every point" } ],
                "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("GpuHistory") }), "Per GPU, oldest point first"))
            }},
            "/v1/alerts": { "get": {
                "summary": "The latest alerts, oldest first",
                "parameters": [ { "name": "limit", "in": "query", "schema": { "type": "integer" }, "description": "Default 100, at most 10000" } ],
                "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("Alert") }), "Alerts"))
            }},
            "/v1/events": { "get": {
                "summary": "Server-sent events: every job event and alert as it is committed. SSE `event:` is `job` or `alert`, `data:` a FeedItem, `id:` a cursor to resume from (Last-Event-ID header or `after`)",
                "parameters": [
                    { "name": "after", "in": "query", "schema": { "type": "string" }, "description": "Cursor from an earlier event's id; 0.0 replays everything; default: from now on" },
                    { "name": "job", "in": "query", "schema": { "type": "integer", "format": "uint64" }, "description": "Only this job's events and alerts" }
                ],
                "responses": with_errors("200", { let mut r = json_body(schema_ref("FeedItem"), "A stream of FeedItem objects"); r["content"] = json!({ "text/event-stream": { "schema": schema_ref("FeedItem") } }); r })
            }},
            "/metrics": { "get": {
                "summary": "Prometheus text format: dcgm-exporter's GPU series (DCGM_FI_DEV_*, labels gpu, UUID, device, modelName, Hostname, hpc_job) and gpuq_* scheduler series",
                "responses": with_errors("200", json!({ "description": "Metrics", "content": { "text/plain": { "schema": { "type": "string" } } } }))
            }}
    })
}

/// Cost accounting, budgets, autostop, schedules and advice.
fn cost_paths() -> Value {
    json!({
        "/v1/cost": { "get": {
            "summary": "Cost grouped by user, project, job or day in a window (default: this month), with the budgets' current state. Money is in micro-dollars (integers); absent cost = no price, not $0",
            "parameters": [
                { "name": "by", "in": "query", "schema": { "type": "string", "enum": ["user", "project", "job", "day", "user,day", "project,day"] }, "description": "user,day and project,day: one row per day and user (project), keyed DAY/NAME" },
                { "name": "since", "in": "query", "schema": { "type": "string" }, "description": "Epoch ms, a date (2026-11-01, local midnight), a month (2026-11) or a span ago (7d)" },
                { "name": "until", "in": "query", "schema": { "type": "string" } },
                { "name": "month", "in": "query", "schema": { "type": "string" }, "description": "A whole month, e.g. 2026-11" }
            ],
            "responses": with_errors("200", json_body(schema_ref("CostReport"), "The report"))
        }},
        "/v1/autostop": {
            "get": { "summary": "The idle-stop setting and whether the node is idle", "responses": with_errors("200", json_body(schema_ref("AutostopStatus"), "Autostop")) },
            "post": {
                "summary": "Set or turn off the idle stop (admins); persisted, overrides [autostop] in gpuq.toml",
                "requestBody": { "required": true, "content": { "application/json": { "schema": schema_ref("AutostopRequest") } } },
                "responses": with_errors("200", json_body(schema_ref("AutostopStatus"), "Autostop"))
            }
        },
        "/v1/schedules": { "get": {
            "summary": "Cron schedules and their next runs",
            "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("ScheduleInfo") }), "Schedules"))
        }},
        "/v1/prices": { "get": {
            "summary": "The price catalog in use: built-in rows (each with its source and date) and the cost.catalog overrides",
            "parameters": [ { "name": "gpu", "in": "query", "schema": { "type": "string" }, "description": "Only this GPU model, e.g. A100-80GB" } ],
            "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("InstancePrice") }), "Catalog rows"))
        }},
        "/v1/jobs/{id}/advice": { "get": {
            "summary": "Right-sizing advice from the job's telemetry and the price catalog",
            "parameters": [ id_param() ],
            "responses": with_errors("200", json_body(schema_ref("Advice"), "Advice"))
        }}
    })
}

/// A job's tracked run. MLflow's own REST API (2.0) is served too, under
/// `/api/2.0/mlflow/` and `/api/2.0/mlflow-artifacts/`, in MLflow's shapes (see docs/tracking.md).
fn tracking_paths() -> Value {
    json!({
        "/v1/jobs/{id}/metrics": { "get": {
            "summary": "The job's metrics: each one's latest value and its history for a chart (every point, or the lowest and highest of each bucket when there are more than max_points)",
            "parameters": [
                id_param(),
                { "name": "key", "in": "query", "schema": { "type": "string" }, "description": "Only this metric (404 when the run has no such metric)" },
                { "name": "max_points", "in": "query", "schema": { "type": "integer", "default": 500, "minimum": 2, "maximum": 20000 } }
            ],
            "responses": with_errors("200", json_body(schema_ref("JobMetrics"), "Metrics"))
        }},
        "/v1/jobs/{id}/run": { "get": {
            "summary": "The job's tracked run: experiment, status, params, tags and each metric's latest value",
            "parameters": [ id_param() ],
            "responses": with_errors("200", json_body(schema_ref("RunSummary"), "The run"))
        }}
    })
}

/// Sweeps (docs/sweeps.md).
fn sweep_paths() -> Value {
    let id = json!({ "name": "id", "in": "path", "required": true, "schema": { "type": "integer" }, "description": "The sweep's id" });
    json!({
        "/v1/sweeps": {
            "post": {
                "summary": "Start a sweep: its trials are jobs of the caller's (or, for the daemon's owner, the named user's); the first trials are queued before it answers",
                "requestBody": { "required": true, "content": { "application/json": { "schema": schema_ref("SweepRequest") } } },
                "responses": with_errors("201", json_body(schema_ref("SweepDetail"), "The sweep"))
            },
            "get": {
                "summary": "Every sweep, newest first",
                "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("SweepSummary") }), "Sweeps"))
            }
        },
        "/v1/sweeps/{id}": { "get": {
            "summary": "A sweep and its trials, best first: params, state, rung, last metric, GPU-hours and cost",
            "parameters": [ id.clone() ],
            "responses": with_errors("200", json_body(schema_ref("SweepDetail"), "The sweep"))
        }},
        "/v1/jobs/{id}/rung": { "post": {
            "summary": "A running sweep trial that logged its rung's step asks whether it trains on in place (promoted at once into the slot it would free) or pauses; called by the SDK's should_stop() with the job's GPUQ_TRIAL_TOKEN",
            "parameters": [ id_param() ],
            "responses": with_errors("200", json_body(schema_ref("RungAnswer"), "The answer"))
        }},
        "/v1/sweeps/{id}/cancel": { "post": {
            "summary": "Cancel a sweep (its owner or an admin): no more trials; queued and paused trials are cancelled, running ones stopped",
            "parameters": [ id ],
            "responses": with_errors("200", json_body(schema_ref("SweepDetail"), "The sweep"))
        }}
    })
}

/// Interactive sessions (docs/sessions.md).
fn session_paths() -> Value {
    let id = id_param();
    json!({
        "/v1/sessions": { "get": {
            "summary": "Running interactive sessions (notebooks and shells): readiness, clients, busy kernels, idle since, the idle stop due",
            "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("SessionStatus") }), "Sessions"))
        }},
        "/v1/sessions/{id}": { "get": {
            "summary": "One job's session, running or not (404 for a job that is not a session)",
            "parameters": [ id ],
            "responses": with_errors("200", json_body(schema_ref("SessionStatus"), "The session"))
        }},
        "/v1/jobs/{id}/profile": { "post": {
            "summary": "Ask a running job (its owner or an admin) for a torch.profiler capture of its next `steps` steps; the job's SDK sees the request in its control directory (GPUQ_CONTROL_DIR) within a second of its next gpuq.should_stop()",
            "parameters": [ id_param() ],
            "requestBody": { "required": true, "content": { "application/json": { "schema": schema_ref("ProfileRequest") } } },
            "responses": with_errors("200", json_body(schema_ref("ProfileStatus"), "The request, not yet done"))
        }},
        "/v1/envs": { "get": {
            "summary": "The cached Python environments, most recently used first: state, owner, packages, size, and the queued or running jobs that need each",
            "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("EnvView") }), "The environments"))
        }},
        "/v1/envs/{key}/log": { "get": {
            "summary": "The last build's log of an environment (its user or an admin), as text",
            "parameters": [ { "name": "key", "in": "path", "required": true, "schema": { "type": "string" } } ],
            "responses": with_errors("200", json!({ "description": "The log", "content": { "text/plain": { "schema": { "type": "string" } } } }))
        }},
        "/v1/jobs/{id}/cpu": { "get": {
            "summary": "A running job's CPU use over one second (its process group and session on this node), for `gpuq doctor ID`; 409 for a job not running here",
            "parameters": [ id_param() ],
            "responses": with_errors("200", json_body(schema_ref("JobCpu"), "Its CPU use"))
        }},
        "/v1/jobs/{id}/profile/{request}": { "get": {
            "summary": "A capture's state: done, the trace file in the job's outputs, the top operators as text (read with the job user's rights)",
            "parameters": [ id_param(), { "name": "request", "in": "path", "required": true, "schema": { "type": "integer" } } ],
            "responses": with_errors("200", json_body(schema_ref("ProfileStatus"), "The capture"))
        }},
        "/v1/jobs/{id}/attach": { "get": {
            "summary": "A shell's terminal: an HTTP upgrade (`Connection: upgrade`, `Upgrade: gpuq-terminal`) to a byte stream; up: frames [kind u8][length u16 BE][payload] (0: input, 1: rows and columns as two u16 BE), down: the terminal's output. Only the job's user, with their own credentials (not a job's token or a browser session); 503 while the terminal is not up yet, 409 for a job that is not a running shell",
            "parameters": [ id_param() ],
            "responses": with_errors("101", json!({ "description": "Switched to the terminal stream" }))
        }},
        "/sessions/{id}/{path}": { "get": {
            "summary": "A notebook's JupyterLab (every method, and its WebSockets), proxied after gpuq's auth: only the job's user; a browser with the dashboard's session cookie from this origin (a navigation from elsewhere is a GET at most). Not logged in, a browser is sent to /login, which comes back",
            "parameters": [ id, { "name": "path", "in": "path", "required": true, "schema": { "type": "string" } } ],
            "responses": { "200": { "description": "JupyterLab's answer" }, "303": { "description": "To the login page" }, "401": { "description": "Not logged in" }, "403": { "description": "Not the notebook's user, or a page of another origin" }, "503": { "description": "JupyterLab is starting" } }
        }}
    })
}

/// The dashboard's logins (docs/dashboard.md).
fn web_paths() -> Value {
    json!({
        "/v1/login-links": { "post": {
            "summary": "A single-use dashboard login link for the caller, valid two minutes (what `gpuq dashboard` asks for; at most 20 unused per user); refused to a browser session and to a job's token. A link asked for with a per-user token makes a session that ends when that token is revoked",
            "responses": with_errors("200", json_body(schema_ref("LoginLink"), "The link"))
        }},
        "/v1/dashboard-sessions/end": { "post": {
            "summary": "End browser sessions: the caller's own, a named user's or everyone's (admins)",
            "requestBody": { "required": true, "content": { "application/json": { "schema": schema_ref("EndSessions") } } },
            "responses": with_errors("200", json_body(schema_ref("SessionsEnded"), "How many ended"))
        }},
        "/auth/link": { "post": {
            "summary": "Whose a login link's code is, without using it up (the login page asks before it logs in); JSON only, same origin only",
            "security": [],
            "requestBody": { "required": true, "content": { "application/json": { "schema": schema_ref("LoginRequest") } } },
            "responses": with_errors("200", json_body(schema_ref("LinkInfo"), "The link's user"))
        }},
        "/auth/login": { "post": {
            "summary": "Trade a login link's code or an API token for a browser session: sets an HttpOnly, SameSite=Strict cookie and returns the CSRF secret the page sends as X-CSRF-Token with every request (requests with the cookie but without it get 403). JSON only (415 otherwise); refused from another origin",
            "security": [],
            "requestBody": { "required": true, "content": { "application/json": { "schema": schema_ref("LoginRequest") } } },
            "responses": with_errors("200", json_body(schema_ref("SessionInfo"), "The session, with csrf"))
        }},
        "/auth/session": { "get": {
            "summary": "The browser session's user (cookie and X-CSRF-Token)",
            "security": [],
            "responses": with_errors("200", json_body(schema_ref("SessionInfo"), "The session"))
        }},
        "/auth/logout": { "post": {
            "summary": "End the browser session (cookie and X-CSRF-Token) and clear its cookie",
            "security": [],
            "responses": { "204": { "description": "Logged out" } }
        }}
    })
}

/// Reproducibility: what a job was submitted from, and running it again.
fn repro_paths() -> Value {
    json!({
        "/v1/jobs/{id}/repro": { "get": {
            "summary": "What the job was submitted from (git commit, branch, capped diff, untracked names, Python and its packages or lock hash, command, environment with secrets hidden) and what each attempt ran on (node, GPUs, driver and CUDA version). Environment values are the owner's: others (not admins) see them hidden",
            "parameters": [ id_param() ],
            "responses": with_errors("200", json_body(schema_ref("ReproView"), "The record"))
        }},
        "/v1/jobs/{id}/rerun": { "post": {
            "summary": "Submit the job's spec again, with its working directory and recorded environment (the job's owner or an admin); the body carries a fresh capture",
            "parameters": [ id_param() ],
            "requestBody": { "required": false, "content": { "application/json": { "schema": schema_ref("RerunRequest") } } },
            "responses": with_errors("201", json_body(schema_ref("Job"), "The new job"))
        }}
    })
}

/// Job arrays: a submit with `spec.array` queues one job per index under one
/// id (the first task's); these act on all of an array's tasks at once.
fn array_paths() -> Value {
    let array = |d: &str| json_body(schema_ref("ArrayDetail"), d);
    let action = |summary: &str, conflict: &str| {
        json!({ "post": {
            "summary": summary,
            "parameters": [ id_param() ],
            "responses": {
                "200": array("The array; `acted_on` lists the tasks acted on"),
                "403": json_body(schema_ref("ErrorBody"), "Not the array's owner, nor an admin"),
                "404": json_body(schema_ref("ErrorBody"), "No such array (a plain job, or no job)"),
                "409": json_body(schema_ref("ErrorBody"), conflict)
            }
        }})
    };
    json!({
        "/v1/arrays/{id}": { "get": {
            "summary": "An array: its tasks counted by state and, unless tasks=false, every task (a Job each, with array_id and array_index), by index",
            "parameters": [ id_param(), { "name": "tasks", "in": "query", "schema": { "type": "boolean", "default": true } } ],
            "responses": with_errors("200", array("The array"))
        }},
        "/v1/arrays/{id}/tasks/{index}": { "get": {
            "summary": "Task `index` of array `id` (what the command line calls ID.K)",
            "parameters": [ id_param(), { "name": "index", "in": "path", "required": true, "schema": { "type": "integer", "format": "uint32" } } ],
            "responses": with_errors("200", json_body(schema_ref("Job"), "The task"))
        }},
        "/v1/arrays/{id}/cancel": action("Cancel every task that has not ended: queued ones at once, running ones by the stop protocol", "Every task already ended"),
        "/v1/arrays/{id}/hold": action("Hold every queued task that is not held", "No task is queued and free to hold"),
        "/v1/arrays/{id}/release": action("Release every held task", "No task is held"),
        "/v1/arrays/{id}/requeue": action("Queue again every task that ended without success (failed, cancelled, lost), each with a fresh retry budget; succeeded, queued and running tasks are left as they are", "No task ended without success"),
        "/v1/arrays/{id}/wait": { "get": {
            "summary": "Long poll: answers when every task has ended, or after `timeout` seconds, with the array (without its tasks)",
            "parameters": [ id_param(), { "name": "timeout", "in": "query", "schema": { "type": "integer", "default": 30, "maximum": 300 } } ],
            "responses": with_errors("200", array("The array"))
        }},
        "/v1/listing": { "get": {
            "summary": "The jobs as `gpuq ls` shows them, newest first: each plain job, and each array as one row (its first task, with `array`); `state` keeps the arrays with a task in one of those states, and `limit` counts rows",
            "parameters": [
                { "name": "state", "in": "query", "description": "Comma-separated states", "schema": { "type": "string" } },
                { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 0 } }
            ],
            "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("ListRow") }), "Rows"))
        }}
    })
}

/// The whole document.
pub fn document() -> Value {
    let job = schema_ref("Job");
    let jobs = json!({ "type": "array", "items": schema_ref("Job") });
    let mut doc = json!({
        "openapi": "3.0.3",
        "info": {
            "title": "gpuq API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The only way into a gpuq daemon: the CLI, the SDK and tests use these endpoints. \
                Every endpoint but /health needs `Authorization: Bearer <token>` (the local token is in $GPUQ_HOME/token). \
                Times are epoch milliseconds."
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": schemas()
        },
        "security": [ { "bearer": [] } ],
        "x-gpuq-identity": "Over the unix socket $GPUQ_HOME/gpuq.sock the caller is the peer's uid (no token needed); over TCP, the bearer token's user. Only a job's owner or an admin may cancel, requeue, hold, release or rerun it or read its log (403 otherwise); others see its environment's values as `(hidden)`.",
        "paths": {
            "/health": { "get": {
                "summary": "Liveness; needs no token", "security": [],
                "responses": { "200": { "description": "ok", "content": { "text/plain": { "schema": { "type": "string" } } } } }
            }},
            "/openapi.json": { "get": {
                "summary": "This document",
                "responses": { "200": json_body(json!({ "type": "object" }), "The OpenAPI document") }
            }},
            "/v1/info": { "get": {
                "summary": "Daemon version, node, GPUs and job slots",
                "responses": with_errors("200", json_body(schema_ref("ServerInfo"), "Daemon information"))
            }},
            "/v1/jobs": {
                "post": {
                    "summary": "Submit a job",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": schema_ref("SubmitRequest") } } },
                    "responses": {
                        "201": json_body(job.clone(), "The queued job"),
                        "400": json_body(schema_ref("ErrorBody"), "Invalid spec or request (malformed JSON, a field over its limit: see docs/ARCHITECTURE.md, Input limits); `field` names the field"),
                        "401": json_body(schema_ref("ErrorBody"), "Missing or wrong token"),
                        "413": json_body(schema_ref("ErrorBody"), "The body is over 4 MiB; nothing was written"),
                        "507": json_body(schema_ref("ErrorBody"), "The disk holding the database is full; nothing was written")
                    }
                },
                "get": {
                    "summary": "List jobs, newest first",
                    "parameters": [
                        { "name": "state", "in": "query", "description": "Comma-separated states", "schema": { "type": "string" } },
                        { "name": "user", "in": "query", "schema": { "type": "string" } },
                        { "name": "project", "in": "query", "schema": { "type": "string" } },
                        { "name": "limit", "in": "query", "schema": { "type": "integer", "minimum": 0 } },
                        { "name": "before", "in": "query", "description": "Paging: only jobs with a smaller id (the last id of the page before)", "schema": { "type": "integer" } },
                        { "name": "after", "in": "query", "description": "Paging back: only jobs with a larger id (still answered newest first)", "schema": { "type": "integer" } }
                    ],
                    "responses": with_errors("200", json_body(jobs, "Jobs"))
                }
            },
            "/v1/jobs/{id}": { "get": {
                "summary": "One job with its attempts and history",
                "parameters": [ id_param() ],
                "responses": with_errors("200", json_body(schema_ref("JobDetail"), "The job"))
            }},
            "/v1/jobs/{id}/cancel": { "post": {
                "summary": "Cancel: a queued job at once, a running one by the stop protocol (SIGTERM, grace, SIGKILL)",
                "parameters": [ id_param() ],
                "responses": {
                    "200": json_body(job.clone(), "The job (still running while it stops)"),
                    "404": json_body(schema_ref("ErrorBody"), "No such job"),
                    "409": json_body(schema_ref("ErrorBody"), "The job already ended")
                }
            }},
            "/v1/jobs/{id}/requeue": { "post": {
                "summary": "Requeue: a running job is stopped by the stop protocol and queued again; an ended one is queued again with a fresh retry budget",
                "parameters": [ id_param() ],
                "responses": {
                    "200": json_body(job.clone(), "The job"),
                    "404": json_body(schema_ref("ErrorBody"), "No such job"),
                    "409": json_body(schema_ref("ErrorBody"), "The job is already queued")
                }
            }},
            "/v1/jobs/{id}/hold": { "post": {
                "summary": "Hold a queued job: it does not start until released",
                "parameters": [ id_param() ],
                "responses": {
                    "200": json_body(job.clone(), "The job"),
                    "404": json_body(schema_ref("ErrorBody"), "No such job"),
                    "409": json_body(schema_ref("ErrorBody"), "The job is not queued")
                }
            }},
            "/v1/jobs/{id}/release": { "post": {
                "summary": "Release a held job",
                "parameters": [ id_param() ],
                "responses": {
                    "200": json_body(job.clone(), "The job"),
                    "404": json_body(schema_ref("ErrorBody"), "No such job"),
                    "409": json_body(schema_ref("ErrorBody"), "The job is not held")
                }
            }},
            "/v1/jobs/{id}/explain": { "get": {
                "summary": "The rule that holds a queued job back, in a sentence (or what the job is doing)",
                "parameters": [ id_param() ],
                "responses": with_errors("200", json_body(schema_ref("Explanation"), "The explanation"))
            }},
            "/v1/explain": { "get": {
                "summary": "Why each queued job waits, from one scheduling pass",
                "parameters": [ { "name": "ids", "in": "query", "description": "Comma-separated job ids: only these (a page of the queue)", "schema": { "type": "string" } } ],
                "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("Explanation") }), "Explanations"))
            }},
            "/v1/usage": { "get": {
                "summary": "GPU-hours per user and project, and each user's fair-share standing",
                "responses": with_errors("200", json_body(schema_ref("Usage"), "Usage"))
            }},
            "/v1/whoami": { "get": {
                "summary": "The identity the daemon sees for this client (peer credentials on the unix socket, or the token's user)",
                "responses": with_errors("200", json_body(schema_ref("WhoAmI"), "Who you are"))
            }},
            "/v1/tokens": {
                "post": {
                    "summary": "Create an API token for a user (admins only); the secret is returned once and stored hashed",
                    "requestBody": { "required": true, "content": { "application/json": { "schema": schema_ref("TokenRequest") } } },
                    "responses": {
                        "201": json_body(schema_ref("TokenCreated"), "The new token"),
                        "400": json_body(schema_ref("ErrorBody"), "Malformed body, or a user name that is empty, over 200 characters or with control characters"),
                        "401": json_body(schema_ref("ErrorBody"), "Missing or wrong token"),
                        "403": json_body(schema_ref("ErrorBody"), "Not an admin")
                    }
                },
                "get": {
                    "summary": "List tokens (admins only; never the secrets)",
                    "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("TokenInfo") }), "Tokens"))
                }
            },
            "/v1/tokens/{id}/revoke": { "post": {
                "summary": "Revoke a token (admins only)",
                "parameters": [ { "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } } ],
                "responses": {
                    "204": { "description": "Revoked" },
                    "403": json_body(schema_ref("ErrorBody"), "Not an admin"),
                    "404": json_body(schema_ref("ErrorBody"), "No such token")
                }
            }},
            "/v1/queue": { "get": {
                "summary": "Whether the queue is drained",
                "responses": with_errors("200", json_body(schema_ref("QueueStatus"), "Queue status"))
            }},
            "/v1/queue/drain": { "post": {
                "summary": "Stop starting new jobs (maintenance); running jobs continue; kept across restarts",
                "responses": with_errors("200", json_body(schema_ref("QueueStatus"), "Queue status"))
            }},
            "/v1/queue/undrain": { "post": {
                "summary": "Start jobs again",
                "responses": with_errors("200", json_body(schema_ref("QueueStatus"), "Queue status"))
            }},
            "/v1/jobs/{id}/wait": { "get": {
                "summary": "Long poll: answers when the job has ended, or after `timeout` seconds with the job as it is",
                "parameters": [ id_param(), { "name": "timeout", "in": "query", "schema": { "type": "integer", "default": 30, "maximum": 300 } } ],
                "responses": with_errors("200", json_body(job, "The job"))
            }},
            "/v1/jobs/{id}/log": { "get": {
                "summary": "Read an attempt's log from a byte offset; with follow=true the request is held until there is more or the attempt ended",
                "parameters": [
                    id_param(),
                    { "name": "attempt", "in": "query", "description": "Default: the latest", "schema": { "type": "integer" } },
                    { "name": "offset", "in": "query", "schema": { "type": "integer", "default": 0 } },
                    { "name": "follow", "in": "query", "schema": { "type": "boolean", "default": false } },
                    { "name": "tail", "in": "query", "description": "Start at most this many bytes before the log's end (the header x-gpuq-log-offset then says where the reply ends)", "schema": { "type": "integer", "minimum": 0 } }
                ],
                "responses": with_errors("200", json!({
                    "description": "Raw log bytes. Headers: x-gpuq-log-offset (next offset), x-gpuq-log-attempt, x-gpuq-log-complete (true when the attempt ended and all was read)",
                    "content": { "application/octet-stream": { "schema": { "type": "string", "format": "binary" } } }
                }))
            }},
            "/v1/gpus": { "get": {
                "summary": "GPUs, their latest telemetry reading and processes, and the jobs holding them",
                "responses": with_errors("200", json_body(json!({ "type": "array", "items": schema_ref("GpuStatus") }), "GPUs"))
            }}

        }
    });
    for more in [
        telemetry_paths(),
        cost_paths(),
        tracking_paths(),
        repro_paths(),
        sweep_paths(),
        array_paths(),
        web_paths(),
        session_paths(),
    ] {
        if let (Some(paths), Value::Object(more)) = (doc["paths"].as_object_mut(), more) {
            paths.extend(more);
        }
    }
    doc
}

/// JSON Schema of the job spec file (`gpuq submit job.yaml`).
pub fn job_spec_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(JobSpec)).expect("schema serializes")
}
