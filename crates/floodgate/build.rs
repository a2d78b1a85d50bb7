//! Makes the guide, `docs/limiters.md`, readable by rustdoc as the `guide` module. The crate
//! reads it as `guide.md`, a link to that file in the repository and the file itself in the
//! published package (packaging follows the link), so the crate builds from either. Its links
//! point at source files, so that they work in any Markdown viewer, and carry the item's path
//! as their title: `[`Stage::mode`](../crates/floodgate/src/pipeline.rs "crate::pipeline::Stage::mode")`.
//! The copy rustdoc reads (`OUT_DIR/guide.md`) links the path itself, `(crate::pipeline::Stage::mode)`,
//! which rustdoc resolves and checks.

use std::path::Path;

fn main() {
    let source = "guide.md";
    println!("cargo:rerun-if-changed={source}");
    let text = std::fs::read_to_string(source).expect("guide.md (docs/limiters.md) is readable");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let (before, after) = rest.split_at(at + 2);
        out.push_str(before);
        let Some(end) = after.find(')') else {
            rest = after;
            continue;
        };
        let target = &after[..end];
        match target.split_once(" \"crate::") {
            Some((_, path)) if path.ends_with('"') => {
                out.push_str("crate::");
                out.push_str(&path[..path.len() - 1]);
            }
            _ => out.push_str(target),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    let dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(Path::new(&dir).join("guide.md"), out).expect("OUT_DIR is writable");
}
