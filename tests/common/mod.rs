//! What the command-line tools' tests share: running a built tool with arguments and an input
//! on its standard input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// `program` run with `args`, `input` written to its standard input.
pub(crate) fn run_with(program: &str, args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the program starts");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input)
        .expect("the input is written");
    child.wait_with_output().expect("the program ends")
}
