//! Async HTTP client for the gpuq API.

use crate::*;
use gpuq_core::JobState;
use reqwest::StatusCode;

mod arrays;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot reach the gpuq daemon at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The daemon refused the request; `status` 4xx means bad input.
    #[error("{message}")]
    Refused {
        status: u16,
        message: String,
        field: Option<String>,
    },
    #[error("unexpected answer from the daemon: {0}")]
    Protocol(String),
}

impl ApiError {
    /// True when the request itself was wrong (unknown job, bad spec…): exit status 2.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, ApiError::Refused { status, .. } if (400..500).contains(status))
    }
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

/// One piece of a log.
#[derive(Debug, Clone)]
pub struct LogChunk {
    pub data: Vec<u8>,
    pub next_offset: u64,
    pub attempt: u32,
    /// The attempt ended and nothing is left to read.
    pub complete: bool,
}

impl Client {
    pub fn new(base: &str, token: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("HTTP client builds"),
            base: base.trim_end_matches('/').to_string(),
            token: token.to_string(),
        }
    }

    /// A client that talks to the daemon over its unix socket: the kernel tells
    /// the daemon who we are, so no token is needed.
    pub fn unix(socket: &std::path::Path, token: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .unix_socket(socket.to_path_buf())
                .build()
                .expect("HTTP client builds"),
            base: "http://gpuq.local".to_string(),
            token: token.to_string(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn unreachable(&self, e: reqwest::Error) -> ApiError {
        let mut reason = e.to_string();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(&e);
        while let Some(s) = src {
            reason = s.to_string();
            src = s.source();
        }
        ApiError::Unreachable {
            url: self.base.clone(),
            reason,
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, ApiError> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(self.refusal(resp).await)
    }

    /// The daemon's refusal, from its error body.
    async fn refusal(&self, resp: reqwest::Response) -> ApiError {
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let (message, field) = match serde_json::from_str::<ErrorBody>(&text) {
            Ok(b) => (b.error, b.field),
            Err(_) if status == StatusCode::UNAUTHORIZED => (
                "the daemon refused the token (401); check GPUQ_TOKEN or $GPUQ_HOME/token"
                    .to_string(),
                None,
            ),
            Err(_) => (format!("HTTP {status}: {text}"), None),
        };
        ApiError::Refused {
            status: status.as_u16(),
            message,
            field,
        }
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ApiError> {
        let resp = self.send(req).await?;
        resp.json()
            .await
            .map_err(|e| ApiError::Protocol(e.to_string()))
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn health(&self) -> Result<(), ApiError> {
        // Through `send`: a daemon that answers but refuses (too many connections
        // of this account) says why, in its own words.
        self.send(self.http.get(self.url("/health")))
            .await
            .map(drop)
    }

    pub async fn info(&self) -> Result<ServerInfo, ApiError> {
        self.json(self.http.get(self.url("/v1/info"))).await
    }

    pub async fn submit(&self, req: &SubmitRequest) -> Result<Job, ApiError> {
        self.json(self.http.post(self.url("/v1/jobs")).json(req))
            .await
    }

    pub async fn create_sweep(
        &self,
        req: &crate::sweep::SweepRequest,
    ) -> Result<crate::sweep::SweepDetail, ApiError> {
        self.json(self.http.post(self.url("/v1/sweeps")).json(req))
            .await
    }

    pub async fn sweeps(&self) -> Result<Vec<crate::sweep::SweepSummary>, ApiError> {
        self.json(self.http.get(self.url("/v1/sweeps"))).await
    }

    pub async fn sweep(&self, id: i64) -> Result<crate::sweep::SweepDetail, ApiError> {
        self.json(self.http.get(self.url(&format!("/v1/sweeps/{id}"))))
            .await
    }

    pub async fn cancel_sweep(&self, id: i64) -> Result<crate::sweep::SweepDetail, ApiError> {
        self.json(self.http.post(self.url(&format!("/v1/sweeps/{id}/cancel"))))
            .await
    }

    pub async fn list(
        &self,
        states: &[JobState],
        limit: Option<u32>,
    ) -> Result<Vec<Job>, ApiError> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if !states.is_empty() {
            query.push((
                "state",
                states
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            ));
        }
        if let Some(l) = limit {
            query.push(("limit", l.to_string()));
        }
        self.json(self.http.get(self.url("/v1/jobs")).query(&query))
            .await
    }

    pub async fn job(&self, id: JobId) -> Result<JobDetail, ApiError> {
        self.json(self.http.get(self.url(&format!("/v1/jobs/{id}"))))
            .await
    }

    /// `GET /v1/jobs/{id}/repro`: what the job was submitted from and ran on.
    pub async fn repro(&self, id: JobId) -> Result<crate::repro::ReproView, ApiError> {
        self.json(self.http.get(self.url(&format!("/v1/jobs/{id}/repro"))))
            .await
    }

    /// `POST /v1/jobs/{id}/rerun`: the job's spec, directory and environment submitted again.
    pub async fn rerun(
        &self,
        id: JobId,
        req: &crate::repro::RerunRequest,
    ) -> Result<Job, ApiError> {
        self.json(
            self.http
                .post(self.url(&format!("/v1/jobs/{id}/rerun")))
                .json(req),
        )
        .await
    }

    pub async fn cancel(&self, id: JobId) -> Result<Job, ApiError> {
        self.job_action(id, "cancel").await
    }

    /// `action`: cancel, requeue, hold or release.
    pub async fn job_action(&self, id: JobId, action: &str) -> Result<Job, ApiError> {
        self.json(self.http.post(self.url(&format!("/v1/jobs/{id}/{action}"))))
            .await
    }

    pub async fn explain(&self, id: JobId) -> Result<Explanation, ApiError> {
        self.json(self.http.get(self.url(&format!("/v1/jobs/{id}/explain"))))
            .await
    }

    /// Why each queued job waits (one scheduling pass for all of them).
    pub async fn explain_queued(&self) -> Result<Vec<Explanation>, ApiError> {
        self.json(self.http.get(self.url("/v1/explain"))).await
    }

    pub async fn whoami(&self) -> Result<WhoAmI, ApiError> {
        self.json(self.http.get(self.url("/v1/whoami"))).await
    }

    pub async fn create_token(&self, user: &str) -> Result<TokenCreated, ApiError> {
        self.json(self.http.post(self.url("/v1/tokens")).json(&TokenRequest {
            user: user.to_string(),
        }))
        .await
    }

    /// `POST /v1/login-links`: a single-use dashboard login link for the caller.
    pub async fn login_link(&self) -> Result<crate::web::LoginLink, ApiError> {
        self.json(self.http.post(self.url("/v1/login-links"))).await
    }

    /// `GET /v1/sessions/{id}`: an interactive session's status.
    pub async fn session(&self, id: u64) -> Result<crate::sessions::SessionStatus, ApiError> {
        self.json(self.http.get(self.url(&format!("/v1/sessions/{id}"))))
            .await
    }

    /// `GET /v1/sessions`: the running sessions.
    pub async fn sessions(&self) -> Result<Vec<crate::sessions::SessionStatus>, ApiError> {
        self.json(self.http.get(self.url("/v1/sessions"))).await
    }

    /// `GET /v1/jobs/{id}/attach`, upgraded: a shell's terminal stream (frames
    /// of `gpuq_exec::terminal` up, the terminal's output down).
    pub async fn attach(&self, id: u64) -> Result<reqwest::Upgraded, ApiError> {
        let resp = self
            .http
            .get(self.url(&format!("/v1/jobs/{id}/attach")))
            .header(reqwest::header::CONNECTION, "upgrade")
            .header(reqwest::header::UPGRADE, crate::sessions::TERMINAL_PROTOCOL)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
            return Err(self.refusal(resp).await);
        }
        resp.upgrade()
            .await
            .map_err(|e| ApiError::Protocol(format!("the terminal stream did not open: {e}")))
    }

    /// `GET /v1/jobs/{id}/cpu`.
    /// `GET /v1/envs`.
    pub async fn envs(&self) -> Result<Vec<crate::envs::EnvView>, ApiError> {
        self.json(self.http.get(self.url("/v1/envs"))).await
    }

    /// `GET /v1/envs/{key}/log`.
    pub async fn env_log(&self, key: &str) -> Result<String, ApiError> {
        let resp = self
            .send(self.http.get(self.url(&format!("/v1/envs/{key}/log"))))
            .await?;
        resp.text()
            .await
            .map_err(|e| ApiError::Protocol(e.to_string()))
    }

    pub async fn job_cpu(&self, id: u64) -> Result<crate::JobCpu, ApiError> {
        self.json(self.http.get(self.url(&format!("/v1/jobs/{id}/cpu"))))
            .await
    }

    /// `POST /v1/jobs/{id}/profile`.
    pub async fn profile(
        &self,
        id: u64,
        steps: u32,
    ) -> Result<crate::profile::ProfileStatus, ApiError> {
        self.json(
            self.http
                .post(self.url(&format!("/v1/jobs/{id}/profile")))
                .json(&crate::profile::ProfileRequest { steps }),
        )
        .await
    }

    /// `GET /v1/jobs/{id}/profile/{request}`.
    pub async fn profile_status(
        &self,
        id: u64,
        request: i64,
    ) -> Result<crate::profile::ProfileStatus, ApiError> {
        self.json(
            self.http
                .get(self.url(&format!("/v1/jobs/{id}/profile/{request}"))),
        )
        .await
    }

    /// `POST /v1/dashboard-sessions/end`.
    pub async fn end_dashboard_sessions(
        &self,
        which: &crate::web::EndSessions,
    ) -> Result<crate::web::SessionsEnded, ApiError> {
        self.json(
            self.http
                .post(self.url("/v1/dashboard-sessions/end"))
                .json(which),
        )
        .await
    }

    pub async fn tokens(&self) -> Result<Vec<TokenInfo>, ApiError> {
        self.json(self.http.get(self.url("/v1/tokens"))).await
    }

    pub async fn revoke_token(&self, id: i64) -> Result<(), ApiError> {
        self.send(self.http.post(self.url(&format!("/v1/tokens/{id}/revoke"))))
            .await
            .map(|_| ())
    }

    pub async fn usage(&self) -> Result<Usage, ApiError> {
        self.json(self.http.get(self.url("/v1/usage"))).await
    }

    pub async fn queue(&self) -> Result<QueueStatus, ApiError> {
        self.json(self.http.get(self.url("/v1/queue"))).await
    }

    pub async fn set_drained(&self, drained: bool) -> Result<QueueStatus, ApiError> {
        let action = if drained { "drain" } else { "undrain" };
        self.json(self.http.post(self.url(&format!("/v1/queue/{action}"))))
            .await
    }

    /// Waits (long poll) up to `timeout_s` for the job to end; returns it in whatever state it is then.
    pub async fn wait(&self, id: JobId, timeout_s: u64) -> Result<Job, ApiError> {
        let url = self.url(&format!("/v1/jobs/{id}/wait"));
        self.json(self.http.get(url).query(&[("timeout", timeout_s)]))
            .await
    }

    /// Reads a job's log from `offset`. With `follow`, the daemon holds the request
    /// until there is something new or the attempt ended.
    pub async fn log(
        &self,
        id: JobId,
        attempt: Option<u32>,
        offset: u64,
        follow: bool,
    ) -> Result<LogChunk, ApiError> {
        let mut query = vec![
            ("offset", offset.to_string()),
            ("follow", follow.to_string()),
        ];
        if let Some(a) = attempt {
            query.push(("attempt", a.to_string()));
        }
        let resp = self
            .send(
                self.http
                    .get(self.url(&format!("/v1/jobs/{id}/log")))
                    .query(&query),
            )
            .await?;
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let next_offset = header(HEADER_LOG_OFFSET)
            .and_then(|v| v.parse().ok())
            .unwrap_or(offset);
        let attempt = header(HEADER_LOG_ATTEMPT)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let complete = header(HEADER_LOG_COMPLETE).as_deref() == Some("true");
        let data = resp
            .bytes()
            .await
            .map_err(|e| ApiError::Protocol(e.to_string()))?
            .to_vec();
        Ok(LogChunk {
            data,
            next_offset,
            attempt,
            complete,
        })
    }

    pub async fn gpus(&self) -> Result<Vec<GpuStatus>, ApiError> {
        self.json(self.http.get(self.url("/v1/gpus"))).await
    }

    pub async fn gpu_history(&self, since: i64) -> Result<Vec<crate::GpuHistory>, ApiError> {
        self.json(
            self.http
                .get(self.url(&format!("/v1/gpus/history?since={since}"))),
        )
        .await
    }

    pub async fn alerts(&self, limit: u32) -> Result<Vec<gpuq_core::alerts::Alert>, ApiError> {
        self.json(
            self.http
                .get(self.url(&format!("/v1/alerts?limit={limit}"))),
        )
        .await
    }

    /// Follows `GET /v1/events` (server-sent events) and calls `on_item` for each
    /// item until it returns false or the daemon closes the stream. `after`:
    /// a cursor from an earlier item (`None`: from now on); `job`: one job's only.
    pub async fn follow_events(
        &self,
        after: Option<&str>,
        job: Option<JobId>,
        mut on_item: impl FnMut(&str, crate::FeedItem) -> bool,
    ) -> Result<(), ApiError> {
        let mut query = Vec::new();
        if let Some(a) = after {
            query.push(("after", a.to_string()));
        }
        if let Some(j) = job {
            query.push(("job", j.to_string()));
        }
        let mut resp = self
            .send(self.http.get(self.url("/v1/events")).query(&query))
            .await?;
        let mut buf = String::new();
        let mut id = String::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.unreachable(e))? {
            buf.push_str(&String::from_utf8_lossy(&chunk));
            // One SSE field per line; an event ends at a blank line.
            while let Some(end) = buf.find('\n') {
                let line: String = buf.drain(..=end).collect();
                let line = line.trim_end_matches(['\n', '\r']);
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    let item: crate::FeedItem = serde_json::from_str(v.trim())
                        .map_err(|e| ApiError::Protocol(format!("bad event: {e}")))?;
                    if !on_item(&id, item) {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// `GET /v1/cost`: `query` holds by, since, until or month.
    pub async fn cost(&self, query: &[(&str, String)]) -> Result<crate::CostReport, ApiError> {
        self.json(self.http.get(self.url("/v1/cost")).query(query))
            .await
    }

    pub async fn autostop(&self) -> Result<crate::AutostopStatus, ApiError> {
        self.json(self.http.get(self.url("/v1/autostop"))).await
    }

    pub async fn set_autostop(
        &self,
        req: &crate::AutostopRequest,
    ) -> Result<crate::AutostopStatus, ApiError> {
        self.json(self.http.post(self.url("/v1/autostop")).json(req))
            .await
    }

    pub async fn schedules(&self) -> Result<Vec<crate::ScheduleInfo>, ApiError> {
        self.json(self.http.get(self.url("/v1/schedules"))).await
    }

    pub async fn advice(&self, id: JobId) -> Result<crate::Advice, ApiError> {
        self.json(self.http.get(self.url(&format!("/v1/jobs/{id}/advice"))))
            .await
    }

    /// `GET /v1/jobs/{id}/metrics`
    pub async fn job_metrics(
        &self,
        id: JobId,
        key: Option<&str>,
        max_points: usize,
    ) -> Result<crate::tracking::JobMetrics, ApiError> {
        let mut query = vec![("max_points", max_points.to_string())];
        if let Some(k) = key {
            query.push(("key", k.to_string()));
        }
        self.json(
            self.http
                .get(self.url(&format!("/v1/jobs/{id}/metrics")))
                .query(&query),
        )
        .await
    }

    /// `GET /v1/jobs/{id}/run`
    pub async fn job_run(&self, id: JobId) -> Result<crate::tracking::RunSummary, ApiError> {
        self.json(self.http.get(self.url(&format!("/v1/jobs/{id}/run"))))
            .await
    }

    pub async fn prices(
        &self,
        gpu: Option<&str>,
    ) -> Result<Vec<gpuq_core::catalog::InstancePrice>, ApiError> {
        let query: Vec<(&str, &str)> = gpu.map(|g| ("gpu", g)).into_iter().collect();
        self.json(self.http.get(self.url("/v1/prices")).query(&query))
            .await
    }
}
