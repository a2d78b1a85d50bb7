//! A server that allows `--rate` requests per second and announces it in every dialect the
//! polite client reads, one per path family (see `server.rs`): the other end of
//! `polite_client`'s benchmark.
//!
//! ```text
//! cargo run --release --example limited_server -- --port 8080 --rate 50
//! cargo run --release --example polite_client -- --url http://127.0.0.1:8080/ietf/ \
//!     --rate 400 --duration 30 --concurrency 64
//! ```

mod server;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use clap::Parser;
use floodgate::SystemClock;

/// Command-line arguments.
#[derive(Parser)]
struct Args {
    /// The loopback port to listen on.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Requests allowed per second per path family.
    #[arg(long, default_value_t = 50)]
    rate: u64,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let server =
        server::LimitedServer::start(addr, args.rate, Arc::new(SystemClock::new())).await?;
    println!(
        "{} requests/s per family at {}/{{ietf,x,retry-after,none,hostile/<kind>}}/",
        args.rate,
        server.url("").trim_end_matches('/')
    );
    tokio::signal::ctrl_c().await?;
    for family in ["ietf", "x", "retry-after", "none"] {
        let (allowed, refused) = server.counts(family);
        println!("{family}: {allowed} allowed, {refused} refused");
    }
    Ok(())
}
