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
        /// Merge domains defined more than once, as `serve --merge-domains` (FLOODGATE_MERGE_DOMAINS
        /// and MERGE_DOMAIN_CONFIG as for serve).
        #[arg(long)]
        merge_domains: bool,
        // Checked against this store, as `serve` would run it (nothing is sent to it): a
        // config using an algorithm the store cannot run is refused.
        #[command(flatten)]
        store: floodgate_server::cli::StoreArg,
    },
}

/// `floodgate serve` under envoyproxy/ratelimit's entry point name: the command line is only
/// `serve`'s arguments (upstream's image runs `/bin/ratelimit` with none).
#[derive(Parser, Debug)]
#[command(
    name = "ratelimit",
    version,
    about = "Floodgate serving as envoyproxy/ratelimit: settings from upstream's environment variables"
)]
struct AsRatelimit {
    #[command(flatten)]
    serve: runtime::ServeArgs,
}

fn main() -> ExitCode {
    let env = floodgate_server::environment::Environment::from_process();
    // Invoked as `ratelimit` (a link or a copy named so), it serves, as upstream's binary.
    let as_ratelimit = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_owned()))
        .is_some_and(|n| n == floodgate_server::environment::upstream::ENTRY_POINT);
    let command = if as_ratelimit {
        Command::Serve(AsRatelimit::parse().serve)
    } else {
        Cli::parse().command
    };
    let present =
        as_ratelimit || floodgate_server::environment::upstream::Upstream::present(&env, false);
    let logging = match runtime::Logging::read(&env, present) {
        Ok(logging) => logging,
        Err(e) => return fail(&e.to_string(), 2),
    };
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&logging.filter)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr);
    if logging.json {
        subscriber.json().init();
    } else {
        subscriber
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    match command {
        Command::Serve(args) => match runtime::serve(args, env, as_ratelimit) {
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
        } => match check_config(&path, merge_domains, store.or_env()) {
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
    let env = floodgate_server::environment::Environment::from_process();
    let overrides = config::Overrides {
        merge_domains,
        response_headers: false,
        defaults: config::Defaults {
            merge_domains: ["FLOODGATE_MERGE_DOMAINS", "MERGE_DOMAIN_CONFIG"]
                .iter()
                .find_map(|name| env.bool(name).transpose())
                .transpose()
                .map_err(CheckError::Environment)?,
            ..config::Defaults::default()
        },
        without_example: false,
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
    // The listeners' TLS files, read as `serve` reads them.
    floodgate_server::service::ListenersTls::load(&config.tls)?;
    Ok(())
}

/// Why `check-config` failed.
#[derive(Debug, thiserror::Error)]
enum CheckError {
    #[error(transparent)]
    Config(#[from] config::ConfigFileError),
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Environment(floodgate_server::environment::EnvError),
    #[error("TLS: {0}")]
    Tls(#[from] floodgate_server::connections::tls::TlsError),
}

fn fail(message: &str, code: u8) -> ExitCode {
    eprintln!("floodgate: {message}");
    ExitCode::from(code)
}
