#!/usr/bin/env bash
# Regenerates the README's pictures in docs/img: a `floodgate simulate` report (and its HTML)
# and the live dashboard 40 s into real traffic, shot in Debian's headless Chromium, and the
# reports of docs/building-your-pipeline.md's worked configurations (`scripts/screenshots.sh
# pipelines`: only those).
# Needs the `chromium` and `chromium-driver` packages (apt-get install chromium chromium-driver).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p floodgate-server --bin floodgate --example screenshots
exec target/debug/examples/screenshots target/debug/floodgate docs/img "$@"
