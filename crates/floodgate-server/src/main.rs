//! The `floodgate` command. `main` does five things: parse the command line, start logging
//! (and, for `serve`, traces), run the subcommand, map its error to an exit status. Everything
//! else lives in the library.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use floodgate_server::environment::upstream::ENTRY_POINT;
use floodgate_server::{bench, replay, runtime, simulate};

// A decision allocates a few small, short-lived blocks (the decoded request, the response);
// mimalloc's per-thread free lists serve them faster than glibc's malloc (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Floodgate: rate limiting and load shedding.
#[derive(Parser, Debug)]
#[command(
    name = "floodgate",
    version,
    about = "Floodgate: rate limiting and load shedding. `serve` answers allow-or-refuse decisions \
             over HTTP JSON and Envoy's rate-limit gRPC API (and runs in place of \
             envoyproxy/ratelimit); the other commands check a configuration, replay recorded \
             traffic, simulate traffic against limiters and measure a store.",
    after_help = "Bad arguments and unusable environment settings exit with status 2; a run that fails, 1."
)]
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
    /// drives it (or, with --rlqs, running serve nodes' Rate Limit Quota Service from gRPC
    /// streams behaving as Envoys): a short summary, then one JSON line.
    Bench(bench::Args),
    /// Validates a config file (Floodgate's or envoyproxy/ratelimit's format), a directory of
    /// them as `serve --config DIR` reads it, or (--upstream) envoyproxy/ratelimit's runtime
    /// directory as the drop-in reads it, without serving; then prints what it holds.
    CheckConfig(runtime::check::CheckArgs),
}

/// `floodgate serve` under envoyproxy/ratelimit's entry point name, its settings all from
/// upstream's environment variables: as upstream's binary, it reads no command-line argument
/// (deployments pass some: Envoy AI Gateway's `--quotaRateLimitServiceAddr=…`), and one
/// start-up line names those it ignores.
#[derive(Parser, Debug)]
#[command(name = "ratelimit")]
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
        .is_some_and(|n| n == ENTRY_POINT);
    let (command, ignored) = if as_ratelimit {
        let ignored: Vec<_> = std::env::args_os().skip(1).collect();
        let serve = AsRatelimit::parse_from([ENTRY_POINT]).serve;
        (Command::Serve(serve), ignored)
    } else {
        (Cli::parse().command, Vec::new())
    };
    let present =
        as_ratelimit || floodgate_server::environment::upstream::Upstream::present(&env, false);
    let logging = match runtime::Logging::read(&env, present) {
        Ok(logging) => logging,
        Err(e) => return fail(&e.to_string(), 2),
    };
    if let Err(e) = runtime::settings::store_from_env(&env) {
        return fail(&e, 2);
    }
    // Traces are for `serve` only; their exporter's layer goes into the one subscriber.
    let traces = match &command {
        Command::Serve(_) => match runtime::start_traces(&env) {
            Ok(traces) => traces,
            Err(e) => return fail(&e.to_string(), e.exit_code()),
        },
        _ => None,
    };
    logging.install(traces.as_ref());
    runtime::announce_ignored_arguments(&ignored);
    if let Some(traces) = &traces {
        traces.announce();
    }
    match command {
        Command::Serve(args) => {
            let served = runtime::serve(args, env, as_ratelimit);
            if let Some(traces) = traces {
                traces.shutdown();
            }
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e.to_string(), e.exit_code()),
            }
        }
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
        Command::CheckConfig(args) => match runtime::check::check(&args, env) {
            Ok(checked) => {
                print!("{checked}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e.to_string(), e.exit_code()),
        },
    }
}

fn fail(message: &str, code: u8) -> ExitCode {
    eprintln!("floodgate: {message}");
    ExitCode::from(code)
}
