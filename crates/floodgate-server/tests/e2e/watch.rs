//! `serve --watch`: a Floodgate configuration file or directory is reloaded when its files
//! change, with no signal (on by default for a directory, `FLOODGATE_WATCH=true` for a file).
//! Real `floodgate serve` processes.

use crate::common;

use common::serve::{config_file, eventually, serve};

fn domain(name: &str, limit: u32) -> String {
    format!(
        "domain: {name}\ndescriptors:\n  - key: user\n    rate_limit: {{unit: hour, requests_per_unit: {limit}}}\n"
    )
}

#[tokio::test]
async fn a_watched_file_is_reloaded_when_written() {
    let (_dir, path) = config_file(&domain("edge", 3));
    let node = serve(&path, "memory", &[("FLOODGATE_WATCH", "true")]);
    let client = reqwest::Client::new();
    node.until_listed(&client, "edge.user: unit=HOUR requests_per_unit=3")
        .await;
    // Written in place, then replaced by a rename, as editors do.
    std::fs::write(&path, domain("edge", 4)).unwrap();
    node.until_listed(&client, "requests_per_unit=4").await;
    let next = path.with_extension("new");
    std::fs::write(&next, domain("edge", 5)).unwrap();
    std::fs::rename(&next, &path).unwrap();
    node.until_listed(&client, "requests_per_unit=5").await;
}

#[tokio::test]
async fn a_directory_is_watched_by_default() {
    let (dir, path) = config_file(&domain("first", 1));
    let node = serve(&dir.0, "memory", &[]);
    let client = reqwest::Client::new();
    node.until_listed(&client, "first.user").await;
    std::fs::write(dir.0.join("second.yaml"), domain("second", 2)).unwrap();
    node.until_listed(&client, "second.user: unit=HOUR requests_per_unit=2")
        .await;
    std::fs::remove_file(&path).unwrap();
    eventually("a removed file is forgotten", || async {
        !node.rlconfig(&client).await.contains("first.user")
    })
    .await;
}
