//! Embeds the dashboard (`dashboard/`, plain files: no Node, no bundler) in the
//! binary: one `include_bytes!` per file, listed in `$OUT_DIR/dashboard_assets.rs`.

use std::path::{Path, PathBuf};

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("dashboard");
    // A directory: cargo rebuilds when any file under it changes. (Cargo reads
    // a build script's stdout: println! is the protocol here, not output.)
    #[allow(clippy::disallowed_macros)]
    {
        println!("cargo:rerun-if-changed={}", root.display());
    }
    let mut files = Vec::new();
    if root.is_dir() {
        collect(&root, &root, &mut files);
    }
    files.sort();
    let mut out = String::from("pub(super) static FILES: &[(&str, &[u8])] = &[\n");
    for (name, path) in &files {
        out.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            path.display().to_string()
        ));
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("dashboard_assets.rs");
    std::fs::write(dest, out).unwrap();
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, files);
        } else {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            files.push((rel, path));
        }
    }
}
