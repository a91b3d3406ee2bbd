//! The published documents in docs/ must equal what the code generates.
//! Regenerate with `GPUQ_UPDATE_DOCS=1 cargo test -p gpuq-api --test docs`.

use std::path::PathBuf;

fn check(name: &str, value: serde_json::Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(name);
    let text = serde_json::to_string_pretty(&value).unwrap() + "\n";
    if std::env::var_os("GPUQ_UPDATE_DOCS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let published = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        published == text,
        "docs/{name} is stale: run GPUQ_UPDATE_DOCS=1 cargo test -p gpuq-api --test docs"
    );
}

#[test]
fn openapi_document_is_current() {
    check("openapi.json", gpuq_api::openapi::document());
}

#[test]
fn job_spec_schema_is_current() {
    check("job-spec.schema.json", gpuq_api::openapi::job_spec_schema());
}

#[test]
fn every_documented_path_has_a_summary_and_responses() {
    let doc = gpuq_api::openapi::document();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            assert!(op["summary"].is_string(), "{method} {path}");
            assert!(
                op["responses"].as_object().is_some_and(|r| !r.is_empty()),
                "{method} {path}"
            );
        }
    }
}
