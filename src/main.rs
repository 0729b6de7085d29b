//! The `awl` binary: parse the command line and hand over to [`awl::cli`].

#![forbid(unsafe_code)]

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    awl::cli::main().await
}
