//! The `floodgate` command.
fn main() {}
