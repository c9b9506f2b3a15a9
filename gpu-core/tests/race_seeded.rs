//! The seeded race suite (`tests/races/`): six programs with one known cross-stream memory bug
//! each, as traces, and their fixed twins (`recorded_*`: two of them as gpu-recorder writes them,
//! footprints narrowed to NVTX regions and to PyTorch's own blocks). Each trace says what must be found
//! (`# expect: KIND EARLIER LATER`, the lines of the two operations) or `# expect: clean`;
//! every bug is found with exactly its two operations, every twin is clean, and no trace has a
//! lifetime defect.

use std::path::Path;

use gpu_core::token::{Finding, RaceKind, StreamingChecker};

/// What a trace expects: (kind, earlier line, later line) for each race, none when clean.
fn expected(text: &str, name: &str) -> Vec<(RaceKind, usize, usize)> {
    let mut races = Vec::new();
    let mut said = false;
    for line in text.lines() {
        let Some(expect) = line.strip_prefix("# expect: ") else {
            continue;
        };
        said = true;
        let words: Vec<&str> = expect.split_whitespace().collect();
        if words == ["clean"] {
            continue;
        }
        let [kind, earlier, later] = words[..] else {
            panic!("{name}: `# expect: KIND EARLIER LATER`, found `{line}`");
        };
        let kind = match kind {
            "reuse" => RaceKind::Reuse,
            "write-read" => RaceKind::WriteRead,
            "write-write" => RaceKind::WriteWrite,
            "read-write" => RaceKind::ReadWrite,
            "use-after-free" => RaceKind::UseAfterFree,
            "free-while-in-use" => RaceKind::FreeWhileInUse,
            other => panic!("{name}: unknown race kind `{other}`"),
        };
        races.push((kind, earlier.parse().unwrap(), later.parse().unwrap()));
    }
    assert!(said, "{name} says nothing of what it expects");
    races
}

#[test]
fn every_seeded_bug_is_found_with_its_two_operations_and_every_fixed_twin_is_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/races");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".trace"))
        .collect();
    names.sort();
    let bugs: Vec<&String> = names
        .iter()
        .filter(|n| !n.ends_with(".fixed.trace"))
        .collect();
    assert!(bugs.len() >= 6, "{names:?}");
    for bug in &bugs {
        let twin = bug.replace(".trace", ".fixed.trace");
        assert!(names.contains(&twin), "{bug} has no fixed twin");
    }
    for name in &names {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let mut checker = StreamingChecker::new();
        let (mut races, mut printed, mut defects) = (Vec::new(), Vec::new(), Vec::new());
        checker
            .check_text(text.as_bytes(), &mut |report| match report.finding() {
                Finding::Race(race) => {
                    races.push((race.kind, race.earlier.position, race.later.position));
                    printed.push(report.to_string());
                }
                Finding::Defect(_) => defects.push(report.to_string()),
                Finding::AliveAtExit { .. } => {}
            })
            .unwrap();
        checker.finish(&mut |report| {
            if let Finding::Defect(_) = report.finding() {
                defects.push(report.to_string());
            }
        });
        assert_eq!(defects, Vec::<String>::new(), "{name}");
        assert_eq!(races, expected(&text, name), "{name}: {printed:#?}");
        if name.ends_with(".fixed.trace") {
            assert!(races.is_empty(), "{name}");
        } else {
            assert!(!races.is_empty(), "{name}");
        }
    }
}
