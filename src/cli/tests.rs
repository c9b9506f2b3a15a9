//! The shared command-line pieces: the line reader's results, its memory and its work (both
//! checked structurally, by the buffer's size and counted bytes, never by timing), the error
//! display, the command line's stops and the error budget.

use super::*;

/// Hands out at most `step` bytes per read, to cut lines anywhere.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

/// `len` bytes made on the fly: `head`, then `fill` repeated, then `tail`, at most `step`
/// bytes a read (a pipe's 64 KiB, say), without holding them.
struct Generated {
    head: &'static [u8],
    fill: u8,
    tail: &'static [u8],
    len: u64,
    at: u64,
    step: usize,
}

impl Generated {
    /// `len` bytes in all, read 64 KiB at a time (a pipe's size).
    fn new(head: &'static [u8], fill: u8, tail: &'static [u8], len: u64) -> Self {
        Generated {
            head,
            fill,
            tail,
            len,
            at: 0,
            step: 1 << 16,
        }
    }
}

impl Read for Generated {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.step.min(buf.len()) as u64).min(self.len - self.at) as usize;
        let tail_at = self.len - self.tail.len() as u64;
        for (i, byte) in buf[..n].iter_mut().enumerate() {
            let at = self.at + i as u64;
            *byte = if at < self.head.len() as u64 {
                self.head[at as usize]
            } else if at >= tail_at {
                self.tail[(at - tail_at) as usize]
            } else {
                self.fill
            };
        }
        self.at += n as u64;
        Ok(n)
    }
}

/// Every line of `reader` (text, or the error's line number as `Err`).
fn lines<R: Read>(mut reader: LineReader<R>) -> Vec<Result<(u64, String), u64>> {
    let mut all = Vec::new();
    loop {
        match reader.next_line() {
            Ok(None) => return all,
            Ok(Some(line)) => all.push(Ok((
                line.number,
                String::from_utf8_lossy(line.text).into_owned(),
            ))),
            Err(ReadError::TooLong { line, .. }) => all.push(Err(line)),
            Err(ReadError::Io(e)) => panic!("{e}"),
        }
    }
}

#[test]
fn lines_cut_anywhere_read_whole_with_comments_dropped_and_numbers_kept() {
    let text = b"a b\n\n# only a comment\nc # and a comment\nlast";
    for step in [1, 2, 3, 5, 1 << 20] {
        let reader = LineReader::new(Trickle { bytes: text, step }, 100).with_comments(b'#');
        let expected = [(1, "a b"), (2, ""), (3, ""), (4, "c "), (5, "last")];
        let expected: Vec<_> = expected.map(|(n, t)| Ok((n, t.to_string()))).into();
        assert_eq!(lines(reader), expected, "step {step}");
    }
    // Without comments the `#` is text.
    let reader = LineReader::new(
        Trickle {
            bytes: b"x # y\n",
            step: 2,
        },
        100,
    );
    assert_eq!(lines(reader), vec![Ok((1, "x # y".to_string()))]);
    // A last comment without a break is a line; an empty input has none.
    let reader = LineReader::new(&b"a\n# end"[..], 100).with_comments(b'#');
    assert_eq!(lines(reader), vec![Ok((1, "a".into())), Ok((2, "".into()))]);
    assert!(lines(LineReader::new(&b""[..], 100)).is_empty());
}

#[test]
fn a_line_over_the_limit_is_refused_skipped_and_counted() {
    let text =
        b"short\n0123456789a # a long comment is fine\n0123456789abc\nafter\ntoo long at end";
    for step in [1, 4, 1 << 20] {
        let reader = LineReader::new(Trickle { bytes: text, step }, 12).with_comments(b'#');
        assert_eq!(
            lines(reader),
            vec![
                Ok((1, "short".to_string())),
                Ok((2, "0123456789a ".to_string())),
                Err(3),
                Ok((4, "after".to_string())),
                Err(5),
            ],
            "step {step}"
        );
    }
}

#[test]
fn a_huge_comment_line_streams_through_the_initial_buffer() {
    // 256 MiB of comment between two calls: the buffer never grows.
    const HUGE: u64 = 256 << 20;
    let input = Generated::new(b"first\n# ", b'c', b"\nsecond\n", HUGE);
    let mut reader = LineReader::new(input, 1 << 10).with_comments(b'#');
    let mut seen = Vec::new();
    while let Some(line) = reader.next_line().unwrap() {
        seen.push((line.number, line.text.to_vec()));
    }
    assert_eq!(
        seen,
        vec![(1, b"first".to_vec()), (2, vec![]), (3, b"second".to_vec())]
    );
    assert_eq!(reader.capacity(), LineReader::<Generated>::INITIAL_CAPACITY);
    assert!(
        reader.searched <= HUGE,
        "{} bytes searched",
        reader.searched
    );
}

#[test]
fn a_long_line_through_a_pipe_is_searched_once_and_bounds_the_buffer() {
    // A 32 MiB line read 64 KiB at a time (a pipe's size): the old reader searched the whole
    // line again after every read, 32 MiB * 512 reads / 2 = 8 GiB of searching.
    const LONG: u64 = 32 << 20;
    let input = Generated::new(b"", b'n', b"\nnext\n", LONG);
    let limit = 40 << 20;
    let mut reader = LineReader::new(input, limit);
    let line = reader.next_line().unwrap().unwrap();
    assert_eq!((line.number, line.text.len() as u64), (1, LONG - 6));
    let line = reader.next_line().unwrap().unwrap();
    assert_eq!((line.number, line.text), (2, &b"next"[..]));
    assert!(reader.next_line().unwrap().is_none());
    assert!(
        reader.searched <= LONG,
        "{} bytes searched",
        reader.searched
    );
    assert!(reader.moved <= LONG, "{} bytes moved", reader.moved);
    assert!(reader.capacity() <= 2 * limit, "{}", reader.capacity());
}

#[test]
fn a_line_over_the_limit_does_not_grow_the_buffer_past_twice_the_limit() {
    let input = Generated::new(b"", b'n', b"\nok\n", 8 << 20);
    let limit = 100_000;
    let mut reader = LineReader::new(input, limit);
    assert!(matches!(
        reader.next_line(),
        Err(ReadError::TooLong {
            line: 1,
            limit: 100_000
        })
    ));
    let line = reader.next_line().unwrap().unwrap();
    assert_eq!((line.number, line.text), (2, &b"ok"[..]));
    assert!(reader.capacity() <= 2 * limit, "{}", reader.capacity());
}

#[test]
fn fields_are_shown_with_invisible_characters_escaped_and_long_ones_cut() {
    let shown = |bytes: &[u8]| Shown(bytes).to_string();
    assert_eq!(shown(b"plain words"), "`plain words`");
    assert_eq!(
        shown("\u{feff}stream_create".as_bytes()),
        "`\\u{feff}stream_create`"
    );
    assert_eq!(shown(b"a\tb\rc\x1b[0m\\"), "`a\\tb\\rc\\u{1b}[0m\\\\`");
    assert_eq!(shown(b"bad \xff\xfe utf-8"), "`bad \\xff\\xfe utf-8`");
    assert_eq!(
        shown("zero\u{200b}width\u{a0}nbsp".as_bytes()),
        "`zero\\u{200b}width\\u{a0}nbsp`"
    );
    let long = "x".repeat(200_000);
    assert_eq!(
        shown(long.as_bytes()),
        format!("`{}...` (200000 bytes)", "x".repeat(Shown::MAX_CHARS))
    );
    let exactly = "é".repeat(Shown::MAX_CHARS);
    assert_eq!(shown(exactly.as_bytes()), format!("`{exactly}`"));
}

#[test]
fn errors_name_the_file_and_line() {
    let at = |line| {
        Located {
            file: "t.trace",
            line,
            message: "wrong",
        }
        .to_string()
    };
    assert_eq!(at(7), "t.trace:7: wrong");
    assert_eq!(at(0), "t.trace: wrong");
}

const TOOL: Tool = Tool {
    name: "t",
    usage: "t [--flag] FILE",
    help: "Does things.\n",
};

fn stopped(args: &[&str]) -> (u8, String, String) {
    let mut parser = lexopt::Parser::from_args(args.iter().copied());
    let stop = loop {
        match parser.next() {
            Ok(Some(lexopt::Arg::Long("flag") | lexopt::Arg::Value(_))) => continue,
            Ok(Some(other)) => break TOOL.common(other),
            Ok(None) => panic!("no stop in {args:?}"),
            Err(e) => break Stop::from(e),
        }
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = TOOL.stop_to(stop, &mut out, &mut err);
    let text = |bytes| String::from_utf8(bytes).unwrap();
    (status, text(out), text(err))
}

#[test]
fn help_and_version_exit_zero_and_unknown_options_two_with_the_usage() {
    assert_eq!(
        stopped(&["--help"]),
        (
            0,
            "usage: t [--flag] FILE\n\nDoes things.\n".into(),
            "".into()
        )
    );
    assert_eq!(stopped(&["f", "-h"]).0, 0);
    let version = format!("t {}\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(stopped(&["-V"]), (0, version.clone(), "".into()));
    assert_eq!(stopped(&["--version"]).1, version);
    let (status, out, err) = stopped(&["--flag", "--frob"]);
    assert_eq!((status, out.as_str()), (USAGE_ERROR, ""));
    assert_eq!(
        err,
        "t: invalid option '--frob'\nusage: t [--flag] FILE\n(`t --help` says more)\n"
    );
    let (status, _, err) = stopped(&["--flag=3"]);
    assert_eq!(status, USAGE_ERROR);
    assert!(
        err.starts_with("t: unexpected argument for option '--flag'"),
        "{err}"
    );
}

#[test]
fn the_budget_stops_after_its_errors() {
    let mut budget = ErrorBudget::new(2);
    assert!(budget.take() && !budget.spent());
    assert!(budget.take() && budget.spent());
    assert!(!budget.take());
    assert_eq!(budget.reported(), 3);
    // At least one error is always reported.
    let mut none = ErrorBudget::new(0);
    assert!(none.take() && none.spent());
}
