//! The `floodgate` command. `main` does five things: parse the command line, start logging,
//! load the config, run the subcommand, map its error to an exit status. Everything else lives
//! in the library.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use floodgate_server::store::ServiceStore;
use floodgate_server::{bench, config, replay, runtime, simulate};

// A decision allocates a few small, short-lived blocks (the decoded request, the response);
// mimalloc's per-thread free lists serve them faster than glibc's malloc (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Floodgate: rate limiting and load shedding.
#[derive(Parser, Debug)]
#[command(name = "floodgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serves decisions: the HTTP JSON API and Envoy's rate-limit gRPC API.
    Serve(runtime::ServeArgs),
    /// Replays a JSON-lines trace of requests (stdin) against one limiter and writes one JSON
    /// decision per line (stdout), in order.
    Replay(replay::Args),
    /// Runs generated (or recorded) traffic through several limiters on a simulated clock:
    /// a summary table, and an HTML report with charts (`--out`).
    Simulate(simulate::Args),
    /// Measures a store's decisions per second and latency, driven in-process as the service
    /// drives it: a short summary, then one JSON line.
    Bench(bench::Args),
    /// Validates a config file (Floodgate's or envoyproxy/ratelimit's format), or a directory
    /// of them as `serve --config DIR` reads it, without serving.
    CheckConfig {
        /// The file or directory to check.
        #[arg(value_name = "FILE|DIR")]
        path: PathBuf,
        /// Merge domains defined more than once, as `serve --merge-domains`.
        #[arg(long, env = "FLOODGATE_MERGE_DOMAINS", value_parser = clap::builder::FalseyValueParser::new())]
        merge_domains: bool,
        // Checked against this store, as `serve` would run it (nothing is sent to it): a
        // config using an algorithm the store cannot run is refused.
        #[command(flatten)]
        store: floodgate_server::cli::StoreArg,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Command::Serve(args) => match runtime::serve(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e.to_string(), 1),
        },
        Command::Replay(args) => match replay::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e.to_string(), e.exit_code()),
        },
        Command::Simulate(args) => match simulate::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e.to_string(), e.exit_code()),
        },
        Command::Bench(args) => match bench::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e.to_string(), 2),
        },
        Command::CheckConfig {
            path,
            merge_domains,
            store,
        } => match check_config(&path, merge_domains, store.url) {
            Ok(()) => {
                println!("{}: ok", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e.to_string(), 1),
        },
    }
}

/// Reads the file or directory and builds everything it configures, as `serve` would, over a
/// throwaway store of the kind `serve` would use (a Redis store is not connected to).
fn check_config(
    path: &std::path::Path,
    merge_domains: bool,
    store_url: Option<String>,
) -> Result<(), CheckError> {
    let clock = std::sync::Arc::new(floodgate::CoarseClock::shared());
    let overrides = config::Overrides {
        merge_domains,
        response_headers: false,
    };
    let mut config = config::Config::load_with(path, &overrides)?;
    if store_url.is_some() {
        config.store.url = store_url;
    }
    // A Redis store needs a runtime to be created in; it sends nothing until used.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(CheckError::Runtime)?;
    let _context = runtime.enter();
    let store = ServiceStore::from_config(&config.store)?;
    let served = config.build(store.clone(), clock)?;
    store.check(&served).map_err(|e| config.place(e))?;
    Ok(())
}

/// Why `check-config` failed.
#[derive(Debug, thiserror::Error)]
enum CheckError {
    #[error(transparent)]
    Config(#[from] config::ConfigFileError),
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

fn fail(message: &str, code: u8) -> ExitCode {
    eprintln!("floodgate: {message}");
    ExitCode::from(code)
}
