//! Delivers committed alerts to webhooks: plain JSON, or the incoming-webhook
//! formats of Slack, Feishu and DingTalk (with their optional signatures).
//! Delivery is best effort with a few retries; the alert itself is already in
//! the store and the log, so a webhook that is down loses nothing.

use crate::config::{WebhookConfig, WebhookFormat};
use base64::Engine;
use gpuq_core::alerts::Alert;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::Duration;
use tokio::sync::mpsc;

const ATTEMPTS: u32 = 3;

/// Starts the delivery task; `None` when no webhook is configured.
pub fn spawn(hooks: Vec<WebhookConfig>, node: String) -> Option<mpsc::UnboundedSender<Alert>> {
    if hooks.is_empty() {
        return None;
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<Alert>();
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot build the webhook client: {e}; alerts go to the log only");
            return None;
        }
    };
    tokio::spawn(async move {
        while let Some(alert) = rx.recv().await {
            for hook in &hooks {
                deliver(&client, hook, &alert, &node).await;
            }
        }
    });
    Some(tx)
}

async fn deliver(client: &reqwest::Client, hook: &WebhookConfig, alert: &Alert, node: &str) {
    let now = gpuq_api::home::now_ms();
    let (url, body) = request(hook, alert, node, now);
    for attempt in 1..=ATTEMPTS {
        let sent = client.post(&url).json(&body).send().await;
        match sent {
            Ok(r) if r.status().is_success() => return,
            Ok(r) => tracing::warn!(
                "webhook {} answered {} for alert {} (try {attempt} of {ATTEMPTS})",
                redact(&hook.url),
                r.status(),
                alert.id
            ),
            Err(e) => tracing::warn!(
                "webhook {} failed for alert {}: {e} (try {attempt} of {ATTEMPTS})",
                redact(&hook.url),
                alert.id
            ),
        }
        if attempt < ATTEMPTS {
            tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
        }
    }
}

/// The URL and JSON body for one alert in the hook's format.
pub fn request(
    hook: &WebhookConfig,
    alert: &Alert,
    node: &str,
    now_ms: i64,
) -> (String, serde_json::Value) {
    let a = &alert.alert;
    let text = format!("[gpuq@{node}] {}: {}", a.kind.as_str(), a.message);
    match hook.format {
        WebhookFormat::Json => {
            let mut body = serde_json::to_value(alert).unwrap_or_default();
            body["node"] = node.into();
            (hook.url.clone(), body)
        }
        WebhookFormat::Slack => (hook.url.clone(), serde_json::json!({ "text": text })),
        WebhookFormat::Feishu => {
            let mut body = serde_json::json!({"msg_type": "text", "content": {"text": text}});
            if let Some(secret) = &hook.secret {
                // Feishu: HMAC-SHA256 keyed with "timestamp\nsecret" over an empty message.
                let ts = now_ms / 1000;
                body["timestamp"] = ts.to_string().into();
                body["sign"] = sign(format!("{ts}\n{secret}").as_bytes(), b"").into();
            }
            (hook.url.clone(), body)
        }
        WebhookFormat::Dingtalk => {
            let body = serde_json::json!({"msgtype": "text", "text": {"content": text}});
            let url = match &hook.secret {
                // DingTalk: HMAC-SHA256 keyed with the secret over "timestamp\nsecret", in the query.
                Some(secret) => {
                    let sig = sign(secret.as_bytes(), format!("{now_ms}\n{secret}").as_bytes());
                    let sep = if hook.url.contains('?') { '&' } else { '?' };
                    format!(
                        "{}{sep}timestamp={now_ms}&sign={}",
                        hook.url,
                        sig.replace('+', "%2B")
                            .replace('/', "%2F")
                            .replace('=', "%3D")
                    )
                }
                None => hook.url.clone(),
            };
            (url, body)
        }
    }
}

fn sign(key: &[u8], message: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(message);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// Webhook URLs carry their access token: log the host only.
fn redact(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuq_core::alerts::{AlertKind, NewAlert};

    fn alert() -> Alert {
        Alert {
            id: 3,
            alert: NewAlert {
                at: 1,
                kind: AlertKind::JobIdle,
                job: Some(42),
                user: Some("ana".into()),
                gpu: None,
                message: "job 42 idle".into(),
            },
        }
    }

    fn hook(format: WebhookFormat, secret: Option<&str>) -> WebhookConfig {
        WebhookConfig {
            url: "https://example.test/hook?access_token=T".into(),
            format,
            secret: secret.map(str::to_string),
        }
    }

    #[test]
    fn bodies_follow_each_services_format() {
        let (_, slack) = request(&hook(WebhookFormat::Slack, None), &alert(), "n1", 0);
        assert_eq!(slack["text"], "[gpuq@n1] job_idle: job 42 idle");
        let (_, feishu) = request(&hook(WebhookFormat::Feishu, None), &alert(), "n1", 0);
        assert_eq!(feishu["msg_type"], "text");
        assert_eq!(feishu["content"]["text"], "[gpuq@n1] job_idle: job 42 idle");
        let (url, ding) = request(&hook(WebhookFormat::Dingtalk, None), &alert(), "n1", 0);
        assert_eq!(ding["text"]["content"], "[gpuq@n1] job_idle: job 42 idle");
        assert!(!url.contains("sign="));
        let (_, json) = request(&hook(WebhookFormat::Json, None), &alert(), "n1", 0);
        assert_eq!(
            (json["job"].as_u64(), json["kind"].as_str()),
            (Some(42), Some("job_idle"))
        );
    }

    #[test]
    fn signatures_match_the_documented_algorithms() {
        // Reference values computed independently (Python hmac/hashlib/base64).
        let (_, feishu) = request(
            &hook(WebhookFormat::Feishu, Some("s3cret")),
            &alert(),
            "n1",
            1_700_000_000_000,
        );
        assert_eq!(feishu["timestamp"], "1700000000");
        assert_eq!(feishu["sign"], FEISHU_REF);
        let (url, _) = request(
            &hook(WebhookFormat::Dingtalk, Some("s3cret")),
            &alert(),
            "n1",
            1_700_000_000_000,
        );
        assert!(url
            .starts_with("https://example.test/hook?access_token=T&timestamp=1700000000000&sign="));
        assert!(url.ends_with(DINGTALK_REF), "{url}");
    }

    const FEISHU_REF: &str = "IX3eHI0/v/Td7jqJ0ynSEK3Dq5JY3HUZeoeMgVZeZGo=";
    const DINGTALK_REF: &str = "MT7bXSNfVTPzQMEuLWvmMNbmZSCUY1X6YKn9AxBnLsI%3D";
}
