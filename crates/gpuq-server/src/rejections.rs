//! Every error reply in the API's JSON shape ([`ErrorBody`]), those axum makes
//! itself included: a body over the limit (413), a body its JSON extractor
//! refuses (malformed, wrong types, no JSON content type), a bad path or query,
//! an unknown endpoint or method. Handlers' own errors are JSON already and
//! pass through untouched.

use axum::extract::Request;
use axum::http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use gpuq_api::ErrorBody;
use gpuq_core::limits;

/// Largest request body the daemon reads: above a submit request at every
/// field limit (a job's env is at most 1 MiB, its command 512 KiB, its
/// reproducibility record 1 MiB).
pub const MAX_BODY: usize = 4 * 1024 * 1024;
/// axum's rejection texts are a line or two; more is not read.
const MAX_REJECTION_TEXT: usize = 16 * 1024;

pub async fn json_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    if path.starts_with("/sessions/") {
        // A notebook's JupyterLab answers in its own shapes (its error pages).
        return resp;
    }
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, MAX_REJECTION_TEXT)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let allow = parts
        .headers
        .get(ALLOW)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let (status, error) = explain(status, &text, &method, &path, &allow);
    let mut out = if crate::mlflow::is_mlflow_path(&path) {
        let code = crate::mlflow::MlflowError::code_for(status);
        (status, Json(crate::mlflow::MlflowError::body(code, &error))).into_response()
    } else {
        (status, Json(ErrorBody { error, field: None })).into_response()
    };
    for (name, value) in &parts.headers {
        if name != CONTENT_TYPE && name != CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// The status to answer and the message, from axum's status and text.
fn explain(
    status: StatusCode,
    text: &str,
    method: &Method,
    path: &str,
    allow: &str,
) -> (StatusCode, String) {
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "the request body is larger than {}, the most the daemon reads; keep large data in files \
             (a job's env takes at most {} a variable and {} in all)",
            limits::human_bytes(MAX_BODY),
            limits::human_bytes(limits::MAX_ARG_STRLEN),
            limits::human_bytes(limits::MAX_ENV_TOTAL),
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => format!(
            "send the body as JSON with the header `Content-Type: application/json` ({text})"
        ),
        // axum's JSON extractor: well-formed JSON of the wrong shape. A bad body
        // is a 400 everywhere, as it is for submit.
        StatusCode::UNPROCESSABLE_ENTITY => {
            return (
                StatusCode::BAD_REQUEST,
                format!("invalid request body: {text}"),
            )
        }
        StatusCode::NOT_FOUND if text.is_empty() => {
            format!("no such endpoint: {method} {path}; /openapi.json lists them")
        }
        // axum adds the `allow` header after this layer on most routes.
        StatusCode::METHOD_NOT_ALLOWED if allow.is_empty() => {
            format!("{path} does not take {method}; the `allow` header lists what it takes")
        }
        StatusCode::METHOD_NOT_ALLOWED => {
            format!("{path} does not take {method}; it takes {allow}")
        }
        _ if text.starts_with("Failed to parse the request body as JSON") => {
            format!("invalid request body: {text}")
        }
        _ if text.is_empty() => status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_string(),
        _ => format!("{path}: {text}"),
    };
    (status, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rejection_reads_as_a_sentence() {
        let post = Method::POST;
        let (s, m) = explain(StatusCode::PAYLOAD_TOO_LARGE, "", &post, "/v1/jobs", "");
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(m.contains("4 MiB") && m.contains("128 KiB"), "{m}");
        let (s, m) = explain(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Failed to deserialize the JSON body into the target type: missing field `user`",
            &post,
            "/v1/tokens",
            "",
        );
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(m.contains("missing field `user`"), "{m}");
        let (_, m) = explain(StatusCode::NOT_FOUND, "", &post, "/v1/nope", "");
        assert!(m.contains("POST /v1/nope"), "{m}");
        let (_, m) = explain(
            StatusCode::METHOD_NOT_ALLOWED,
            "",
            &Method::DELETE,
            "/v1/info",
            "GET,HEAD",
        );
        assert!(m.contains("DELETE") && m.contains("GET,HEAD"), "{m}");
    }
}
