//! The dashboard's files, embedded at build time (see build.rs), each kept
//! gzip-compressed once at first use with its ETag.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::sync::OnceLock;

include!(concat!(env!("OUT_DIR"), "/dashboard_assets.rs"));

/// Files served without a session: the login page and what it loads.
pub const PUBLIC: &[&str] = &["login.html", "login.js", "app.css"];

pub struct Asset {
    pub body: &'static [u8],
    pub gzip: Vec<u8>,
    pub etag: String,
    pub content_type: &'static str,
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        _ => "text/plain; charset=utf-8",
    }
}

fn table() -> &'static HashMap<&'static str, Asset> {
    static TABLE: OnceLock<HashMap<&'static str, Asset>> = OnceLock::new();
    TABLE.get_or_init(|| {
        FILES
            .iter()
            .map(|(name, body)| {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                // Writing to a Vec cannot fail.
                let _ = gz.write_all(body);
                let gzip = gz.finish().unwrap_or_default();
                let digest = Sha256::digest(body);
                let etag = format!(
                    "\"{}\"",
                    digest[..12]
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>()
                );
                let asset = Asset {
                    body,
                    gzip,
                    etag,
                    content_type: content_type(name),
                };
                (*name, asset)
            })
            .collect()
    })
}

/// The file at `name` (a path under `dashboard/`), if there is one.
pub fn get(name: &str) -> Option<&'static Asset> {
    table().get(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dashboard_is_embedded_and_small() {
        for name in ["index.html", "login.html", "login.js", "app.js", "app.css"] {
            assert!(get(name).is_some(), "{name} is not embedded");
        }
        // Everything but the login page's own files is at most the first load.
        let app: usize = FILES
            .iter()
            .filter(|(name, _)| !name.starts_with("login") && !name.starts_with("vendor/LICENSE"))
            .map(|(name, _)| get(name).unwrap().gzip.len())
            .sum();
        assert!(
            app < 200 * 1024,
            "the dashboard is {app} bytes gzip-compressed; the budget is 200 KB"
        );
    }

    #[test]
    fn compressed_copies_decompress_to_the_file() {
        use std::io::Read;
        let asset = get("index.html").unwrap();
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&asset.gzip[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, asset.body);
        assert_eq!(content_type("a/b.js"), "text/javascript; charset=utf-8");
    }
}
