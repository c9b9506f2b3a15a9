//! `cargo xtask check-links`: every relative link in the repository's Markdown files
//! (`git ls-files '*.md'`) points at a file or directory of the repository, and an anchor
//! (`#heading`, alone or after a Markdown file) at a heading of that file.
//!
//! Links with a scheme (`https:`, `mailto:`, ...) are not followed. A target must lie inside
//! the repository and be tracked by git or new and not ignored, so a link into build output
//! (`target/`) or beside the repository (`../elsewhere`) fails here as it would on a clean clone.
//! Links are read from inline links and images (`[text](dest "title")`, `![alt](<dest>)`) and
//! reference definitions (`[label]: dest`), outside fenced code blocks and code spans.
//! Anchors are GitHub's: a heading's text in lower case, punctuation dropped, spaces as `-`,
//! `-1`, `-2`, ... after repeats (ATX headings, `# ...`, only).

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path};
use std::process::Command;

use crate::root;

/// A link found in a Markdown file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Link {
    /// 1-based line of the link's destination.
    pub line: usize,
    /// The destination as written (angle brackets and title removed).
    pub dest: String,
}

/// Runs `cargo xtask check-links`.
pub(crate) fn check_links(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err("usage: cargo xtask check-links".to_string());
    }
    let root = root();
    let markdown = git_files(&root, &["ls-files", "-z", "--", "*.md"])?;
    let known = Known::new(git_files(
        &root,
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    )?);
    let mut headings: HashMap<String, Option<HashSet<String>>> = HashMap::new();
    let mut anchors_of = |file: &str| -> Option<HashSet<String>> {
        headings
            .entry(file.to_string())
            .or_insert_with(|| {
                std::fs::read_to_string(root.join(file))
                    .ok()
                    .map(|t| anchors(&t))
            })
            .clone()
    };
    let (mut checked, mut broken) = (0usize, Vec::new());
    for file in &markdown {
        let text = std::fs::read_to_string(root.join(file))
            .map_err(|e| format!("cannot read {file}: {e}"))?;
        for link in links(&text) {
            let Some(target) = Target::parse(&link.dest) else {
                continue;
            };
            checked += 1;
            if let Err(why) = target.check(file, &root, &known, &mut anchors_of) {
                broken.push(format!("{file}:{}: ({}) {why}", link.line, link.dest));
            }
        }
    }
    if broken.is_empty() {
        println!(
            "check-links: {checked} relative links in {} Markdown files resolve",
            markdown.len()
        );
        return Ok(());
    }
    for line in &broken {
        eprintln!("{line}");
    }
    Err(format!(
        "{} broken link(s) among {checked} relative links in {} Markdown files",
        broken.len(),
        markdown.len()
    ))
}

/// Paths git lists (`-z` output), relative to the repository root.
fn git_files(root: &Path, args: &[&str]) -> Result<Vec<String>, String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .split('\0')
        .filter(|path| !path.is_empty())
        .map(str::to_string)
        .collect())
}

/// The repository's files (tracked, or new and not ignored) and the directories holding them.
struct Known {
    files: HashSet<String>,
    dirs: HashSet<String>,
}

impl Known {
    fn new(files: Vec<String>) -> Self {
        let mut dirs = HashSet::from([String::new()]);
        for file in &files {
            let mut end = file.len();
            while let Some(slash) = file[..end].rfind('/') {
                if !dirs.insert(file[..slash].to_string()) {
                    break;
                }
                end = slash;
            }
        }
        Self {
            files: files.into_iter().collect(),
            dirs,
        }
    }
}

/// A link's destination, split, when it is one this command checks.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    /// The path (percent-decoded), empty for an anchor into the same file.
    path: String,
    anchor: Option<String>,
}

impl Target {
    /// `None` for links with a scheme (`https:`, `mailto:`, ...): they are not followed.
    fn parse(dest: &str) -> Option<Target> {
        let scheme = dest.find(':').is_some_and(|colon| {
            let name = &dest[..colon];
            name.len() > 1
                && name.starts_with(|c: char| c.is_ascii_alphabetic())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        });
        if scheme {
            return None;
        }
        let (rest, anchor) = match dest.split_once('#') {
            Some((rest, anchor)) => (rest, Some(percent_decode(anchor))),
            None => (dest, None),
        };
        let path = rest.split_once('?').map_or(rest, |(path, _)| path);
        Some(Target {
            path: percent_decode(path),
            anchor,
        })
    }

    /// Resolves the target from `file` (a path relative to the repository root).
    fn check(
        &self,
        file: &str,
        root: &Path,
        known: &Known,
        anchors_of: &mut impl FnMut(&str) -> Option<HashSet<String>>,
    ) -> Result<(), String> {
        let resolved = if self.path.is_empty() {
            if self.anchor.is_none() {
                return Err("empty link".to_string());
            }
            file.to_string()
        } else {
            let base = match self.path.strip_prefix('/') {
                Some(_) => Path::new(""),
                None => Path::new(file).parent().unwrap_or(Path::new("")),
            };
            normalize(&base.join(self.path.trim_start_matches('/')))
                .ok_or("leaves the repository")?
        };
        let is_file = known.files.contains(&resolved) && root.join(&resolved).is_file();
        let is_dir = known.dirs.contains(&resolved) && root.join(&resolved).is_dir();
        if !is_file && !is_dir {
            return Err(format!(
                "{}: no such file or directory in the repository",
                if resolved.is_empty() { "." } else { &resolved }
            ));
        }
        match &self.anchor {
            Some(anchor) if is_file && resolved.ends_with(".md") && !anchor.is_empty() => {
                let found = anchors_of(&resolved).is_some_and(|all| all.contains(anchor));
                if found {
                    Ok(())
                } else {
                    Err(format!("{resolved} has no heading with anchor #{anchor}"))
                }
            }
            _ => Ok(()),
        }
    }
}

/// `path` without `.` and `..` components, as a `/`-separated string; `None` when `..` climbs
/// above the repository root.
fn normalize(path: &Path) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

/// `%XX` escapes decoded (malformed ones are kept as written).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The opening fence of a fenced code block (` ``` ` or `~~~`, at most 3 spaces in): its
/// character and length.
fn fence(line: &str) -> Option<(char, usize)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let c = rest.chars().next().filter(|&c| c == '`' || c == '~')?;
    let len = rest.len() - rest.trim_start_matches(c).len();
    (indent <= 3 && len >= 3).then_some((c, len))
}

/// The lines outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut open: Option<(char, usize)> = None;
    let mut prose = Vec::new();
    for (index, line) in text.lines().enumerate() {
        match (open, fence(line)) {
            (None, Some(found)) => open = Some(found),
            (None, None) => prose.push((index + 1, line)),
            (Some((c, len)), Some((closing, n)))
                if closing == c && n >= len && line.trim().chars().all(|x| x == c) =>
            {
                open = None
            }
            (Some(_), _) => {}
        }
    }
    prose
}

/// Every link destination of a Markdown text: inline links and images, and reference
/// definitions, outside fenced code blocks and code spans.
pub(crate) fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    // Paragraphs (runs of non-blank prose lines), so a code span may continue on a later line.
    let mut paragraph: Vec<(usize, &str)> = Vec::new();
    for (number, line) in prose_lines(text).into_iter().chain([(0, "")]) {
        if !line.trim().is_empty() {
            paragraph.push((number, line));
            continue;
        }
        paragraph_links(&paragraph, &mut found);
        paragraph.clear();
    }
    found
}

fn paragraph_links(lines: &[(usize, &str)], found: &mut Vec<Link>) {
    // Characters with their line numbers; newline between lines.
    let chars: Vec<(char, usize)> = lines
        .iter()
        .flat_map(|&(number, line)| line.chars().chain(['\n']).map(move |c| (c, number)))
        .collect();
    for &(number, line) in lines {
        if let Some(dest) = reference_definition(line) {
            found.push(Link { line: number, dest });
        }
    }
    let run = |at: usize, c: char| chars[at..].iter().take_while(|&&(x, _)| x == c).count();
    let (mut i, mut depth) = (0, 0usize);
    while i < chars.len() {
        match chars[i].0 {
            '\\' => i += 2,
            '`' => {
                let n = run(i, '`');
                // A code span ends at the next run of exactly as many backticks.
                let mut j = i + n;
                let close = loop {
                    match chars.get(j) {
                        None => break None,
                        Some(('`', _)) => {
                            let m = run(j, '`');
                            if m == n {
                                break Some(j + m);
                            }
                            j += m;
                        }
                        Some(_) => j += 1,
                    }
                };
                i = close.unwrap_or(i + n);
            }
            '[' => {
                depth += 1;
                i += 1;
            }
            ']' if depth > 0 => {
                depth -= 1;
                i += 1;
                if chars.get(i).map(|c| c.0) == Some('(')
                    && let Some((dest, line, next)) = destination(&chars, i + 1)
                {
                    found.push(Link { line, dest });
                    i = next;
                }
            }
            _ => i += 1,
        }
    }
}

/// The destination of an inline link whose `(` is just before `start`: its text, line, and the
/// index after the closing `)`.
fn destination(chars: &[(char, usize)], start: usize) -> Option<(String, usize, usize)> {
    let mut i = start;
    while chars.get(i)?.0.is_whitespace() {
        i += 1;
    }
    let line = chars[i].1;
    let mut dest = String::new();
    if chars[i].0 == '<' {
        i += 1;
        loop {
            match chars.get(i)?.0 {
                '>' => break,
                '\n' => return None,
                c => dest.push(c),
            }
            i += 1;
        }
        i += 1;
    } else {
        let mut parens = 0usize;
        loop {
            match chars.get(i)?.0 {
                '\\' if chars.get(i + 1).is_some_and(|c| c.0.is_ascii_punctuation()) => {
                    dest.push(chars[i + 1].0);
                    i += 1;
                }
                '(' => {
                    parens += 1;
                    dest.push('(');
                }
                ')' if parens == 0 => break,
                ')' => {
                    parens -= 1;
                    dest.push(')');
                }
                c if c.is_whitespace() => break,
                c => dest.push(c),
            }
            i += 1;
        }
    }
    // An optional title, then the closing parenthesis.
    while chars.get(i)?.0.is_whitespace() {
        i += 1;
    }
    if let Some(close) = match chars[i].0 {
        '"' | '\'' => Some(chars[i].0),
        '(' => Some(')'),
        _ => None,
    } {
        i += 1;
        while chars.get(i)?.0 != close {
            i += 1;
        }
        i += 1;
        while chars.get(i)?.0.is_whitespace() {
            i += 1;
        }
    }
    (chars[i].0 == ')').then_some((dest, line, i + 1))
}

/// The destination of a reference definition (`[label]: dest`, at most 3 spaces in).
fn reference_definition(line: &str) -> Option<String> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 || !trimmed.starts_with('[') || trimmed.starts_with("[^") {
        return None;
    }
    let close = trimmed.find("]:")?;
    let rest = trimmed[close + 2..].trim_start();
    let dest = match rest.strip_prefix('<') {
        Some(bracketed) => &bracketed[..bracketed.find('>')?],
        None => rest.split_whitespace().next()?,
    };
    Some(dest.to_string())
}

/// The anchors of a Markdown text's ATX headings, as GitHub makes them.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut all = HashSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = heading_text(line) else {
            continue;
        };
        let slug = slug(heading);
        let count = seen.entry(slug.clone()).or_insert(0);
        all.insert(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    all
}

/// The text of an ATX heading line (`## Text ##`).
fn heading_text(line: &str) -> Option<&str> {
    let trimmed = line.trim_start_matches(' ');
    let level = trimmed.len() - trimmed.trim_start_matches('#').len();
    if line.len() - trimmed.len() > 3 || !(1..=6).contains(&level) {
        return None;
    }
    let rest = &trimmed[level..];
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let rest = rest.trim();
    // A closing sequence of `#` after a space is not part of the text.
    let without = rest.trim_end_matches('#');
    Some(if without.is_empty() || without.ends_with([' ', '\t']) {
        without.trim_end()
    } else {
        rest
    })
}

/// GitHub's anchor for a heading: link text kept, destinations dropped, lower case, every
/// character but letters, digits, `_`, `-` and spaces dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](dest)` becomes `text`.
    while let Some(open) = rest.find("](") {
        let close = rest[open..].find(')').map_or(rest.len(), |c| open + c + 1);
        text.push_str(&rest[..open]);
        rest = &rest[close..];
    }
    text.push_str(rest);
    text.chars()
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dests(text: &str) -> Vec<(usize, String)> {
        links(text).into_iter().map(|l| (l.line, l.dest)).collect()
    }

    #[test]
    fn inline_links_images_titles_and_angle_brackets() {
        let text = "See [the docs](docs/README.md) and ![a picture](img/a.png \"title\").\n\
                    [spaced](<a b/c.md>) and [with anchor](x.md#part) and [here](#top)\n\
                    [paren title](p.md (t)) [nested](dir/(x).md) [escaped](a\\)b.md)\n";
        assert_eq!(
            dests(text),
            [
                (1, "docs/README.md".to_string()),
                (1, "img/a.png".to_string()),
                (2, "a b/c.md".to_string()),
                (2, "x.md#part".to_string()),
                (2, "#top".to_string()),
                (3, "p.md".to_string()),
                (3, "dir/(x).md".to_string()),
                (3, "a)b.md".to_string()),
            ]
        );
    }

    #[test]
    fn code_blocks_and_code_spans_hold_no_links() {
        let text = "before [a](a.md)\n\n```rust\nlet x = [b](c);\n```\n\
                    ~~~~\n[d](d.md)\n```\n[still code](e.md)\n~~~~\n\
                    `[f](f.md)` and ``[g](g.md) ` x`` and `span over\n[h](h.md) lines`\n\n\
                    after [i](i.md) and an unclosed ` [j](j.md)\n";
        assert_eq!(
            dests(text),
            [
                (1, "a.md".to_string()),
                (14, "i.md".to_string()),
                (14, "j.md".to_string()),
            ]
        );
    }

    #[test]
    fn reference_definitions_and_what_is_not_a_link() {
        let text = "[label]: docs/x.md \"title\"\n   [other]: <y z.md>\n    [indented]: no.md\n\
                    [^note]: a footnote\na[i] (not a link) and \\[escaped](no.md) and [x] (y)\n\
                    a table | [t](t.md) |\n";
        assert_eq!(
            dests(text),
            [
                (1, "docs/x.md".to_string()),
                (2, "y z.md".to_string()),
                (6, "t.md".to_string()),
            ]
        );
    }

    #[test]
    fn a_link_text_may_hold_brackets_and_code() {
        assert_eq!(
            dests("[`a[0]` and [b]](b.md) [x\ny](two-lines.md)\n"),
            [(1, "b.md".to_string()), (2, "two-lines.md".to_string())]
        );
    }

    #[test]
    fn schemes_are_not_followed_and_paths_split_from_anchors() {
        for external in [
            "https://example.invalid/x",
            "http://x",
            "mailto:someone@example.invalid",
        ] {
            assert_eq!(Target::parse(external), None, "{external}");
        }
        assert_eq!(
            Target::parse("docs/a%20b.md?plain=1#the-part"),
            Some(Target {
                path: "docs/a b.md".to_string(),
                anchor: Some("the-part".to_string())
            })
        );
        assert_eq!(
            Target::parse("#top"),
            Some(Target {
                path: String::new(),
                anchor: Some("top".to_string())
            })
        );
    }

    #[test]
    fn paths_resolve_inside_the_repository_only() {
        assert_eq!(
            normalize(Path::new("docs/../gpu-capi/./README.md")).as_deref(),
            Some("gpu-capi/README.md")
        );
        assert_eq!(normalize(Path::new("docs/..")).as_deref(), Some(""));
        assert_eq!(normalize(Path::new("../shared/spec")), None);
        assert_eq!(normalize(Path::new("docs/../../x")), None);
    }

    #[test]
    fn anchors_follow_github() {
        let text = "# gpu-runtime\n## The lock interval table (`gpu_core::lock_table`)\n\
                    ## Use from C\n## Use from C\n### HIP on NVIDIA GPUs (feature `nvidia`) ###\n\
                    ```\n# not a heading\n```\n#not-a-heading\n## [Linked](x.md) title\n";
        let mut all: Vec<_> = anchors(text).into_iter().collect();
        all.sort();
        assert_eq!(
            all,
            [
                "gpu-runtime",
                "hip-on-nvidia-gpus-feature-nvidia",
                "linked-title",
                "the-lock-interval-table-gpu_corelock_table",
                "use-from-c",
                "use-from-c-1",
            ]
        );
    }

    #[test]
    fn targets_must_be_known_files_or_directories_and_anchors_headings() {
        let root = std::env::temp_dir().join(format!("xtask-links-{}", std::process::id()));
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        std::fs::write(root.join("README.md"), "# Top\n## Use from C\n").unwrap();
        std::fs::write(root.join("docs/runtime.md"), "# Runtime\n").unwrap();
        std::fs::write(root.join("target/built.md"), "# Built\n").unwrap();
        // `target/built.md` is on disk but ignored: git does not list it.
        let known = Known::new(vec!["README.md".to_string(), "docs/runtime.md".to_string()]);
        let mut anchors_of = |file: &str| {
            std::fs::read_to_string(root.join(file))
                .ok()
                .map(|t| anchors(&t))
        };
        let mut check = |file: &str, dest: &str| {
            Target::parse(dest)
                .unwrap()
                .check(file, &root, &known, &mut anchors_of)
        };
        for (file, dest) in [
            ("README.md", "docs/runtime.md"),
            ("README.md", "docs/"),
            ("README.md", "./docs"),
            ("README.md", "#use-from-c"),
            ("docs/runtime.md", "../README.md#top"),
            ("docs/runtime.md", "/README.md"),
            ("docs/runtime.md", "runtime.md#runtime"),
            ("docs/runtime.md", ".."),
        ] {
            assert_eq!(check(file, dest), Ok(()), "{file}: {dest}");
        }
        for (file, dest, why) in [
            ("README.md", "docs/missing.md", "no such file"),
            ("README.md", "target/built.md", "no such file"),
            ("README.md", "#nowhere", "no heading"),
            ("docs/runtime.md", "../README.md#runtime", "no heading"),
            (
                "docs/runtime.md",
                "../../shared/spec/tokens.md",
                "leaves the repository",
            ),
            ("README.md", "", "empty link"),
        ] {
            let error = check(file, dest).unwrap_err();
            assert!(error.contains(why), "{file}: {dest}: {error}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn known_paths_include_every_parent_directory() {
        let known = Known::new(vec!["a/b/c.md".to_string(), "a/d.md".to_string()]);
        for dir in ["", "a", "a/b"] {
            assert!(known.dirs.contains(dir), "{dir}");
        }
        assert!(!known.dirs.contains("a/b/c.md"));
        assert!(known.files.contains("a/d.md"));
    }
}
