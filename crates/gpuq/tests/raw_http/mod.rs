//! A bare HTTP/1.1 client over a TCP socket: it sends any bytes with any
//! headers, which a well-behaved client (curl, reqwest) would not.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    /// Every header, names in lower case, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The first header called `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// Sends one request on a fresh connection and reads the whole reply.
pub fn request(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let host = url.strip_prefix("http://").expect("an http:// URL");
    let mut stream = TcpStream::connect(host).expect("the daemon accepts connections");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    // A refusing server may stop reading early; its reply is still there to read.
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|_| stream.write_all(body));
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse(&raw).unwrap_or_else(|| panic!("not an HTTP reply: {:?}", String::from_utf8_lossy(&raw)))
}

/// POSTs `body` as JSON with the daemon's token.
pub fn post_json(url: &str, token: &str, path: &str, body: &[u8]) -> Reply {
    let auth = format!("Bearer {token}");
    request(
        url,
        "POST",
        path,
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        body,
    )
}

pub fn get(url: &str, token: &str, path: &str) -> Reply {
    let auth = format!("Bearer {token}");
    request(url, "GET", path, &[("authorization", &auth)], b"")
}

fn parse(raw: &[u8]) -> Option<Reply> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut content_type = String::new();
    let mut chunked = false;
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        headers.push((name.clone(), value.to_string()));
        if name == "content-type" {
            content_type = value.to_string();
        }
        if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
            chunked = true;
        }
    }
    let rest = &raw[end + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Some(Reply {
        status,
        content_type,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}
