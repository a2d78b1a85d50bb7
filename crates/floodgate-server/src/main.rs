//! The `floodgate` command: parse the command line, run the subcommand, map errors to an exit
//! status. Everything else lives in the subcommands' modules.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use floodgate_server::replay;

/// Floodgate: rate limiting and load shedding.
#[derive(Parser, Debug)]
#[command(name = "floodgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replays a JSON-lines trace of requests (stdin) against one limiter and writes one JSON
    /// decision per line (stdout), in order.
    Replay(replay::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => replay::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floodgate: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
