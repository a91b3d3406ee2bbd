//! The dashboard's logins: `POST /v1/login-links` (what `gpuq dashboard` asks
//! for), `POST /auth/login`, `GET /auth/session`, `POST /auth/logout`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A single-use login link for the dashboard.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LoginLink {
    /// Open in a browser: `http://HOST:PORT/login#code=…` (the code stays in the fragment, out of logs).
    pub url: String,
    /// Who the link logs in.
    pub user: String,
    /// Epoch ms after which the link no longer works.
    pub expires_at: i64,
}

/// `POST /auth/login`: one of the two.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    /// The code of a login link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// An API token (`gpuq token create`, or the daemon's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// A browser session.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SessionInfo {
    pub user: String,
    pub admin: bool,
    /// Epoch ms when the session ends.
    pub expires_at: i64,
    /// Given once, at login: the page sends it as `X-CSRF-Token` with every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csrf: Option<String>,
}

/// `POST /auth/link`: whose a login link is (the page asks before it logs in).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LinkInfo {
    pub user: String,
}

/// `POST /v1/dashboard-sessions/end`: whose browser sessions to end.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndSessions {
    /// This user's (default: the caller's own). Another user's: admins only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Everyone's (admins only).
    #[serde(default)]
    pub all: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SessionsEnded {
    pub ended: usize,
}
