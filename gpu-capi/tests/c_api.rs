//! Builds the C test program (tests/c/api_test.c, which includes the header twice) and a C++
//! translation unit (tests/c/header_test.cpp) with the `cc` crate's compilers against this
//! crate's staticlib and the committed header, runs them on the host backend, and checks that
//! every one of their checks passed (they print each failure, with the library's last error).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The staticlib cargo built with this test: `cargo test` leaves the library's artefacts in
/// the `deps/` folder beside the test binary (it copies them up one level only for `cargo
/// build`).
fn staticlib() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .expect("the test binary lives in <target>/<profile>/deps")
        .join("libgpu_capi.a")
}

/// The language a test program is written in, and how its compiler is asked for it.
#[derive(Clone, Copy)]
enum Language {
    C,
    Cpp,
}

/// Compiles `source` (under tests/c/) with warnings as errors, links it against the
/// staticlib, and returns the executable's path, in a folder of its own under `name`.
fn build(language: Language, source: &str, name: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let staticlib = staticlib();
    assert!(
        staticlib.exists(),
        "{} is missing: cargo builds it with the library",
        staticlib.display()
    );
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gpu-capi-{name}"));
    std::fs::create_dir_all(&out).unwrap();
    let program = out.join(name);
    let target = env!("GPU_CAPI_TARGET");
    let compiler = cc::Build::new()
        .cpp(matches!(language, Language::Cpp))
        .target(target)
        .host(target)
        .opt_level(0)
        .cargo_metadata(false)
        .warnings_into_errors(true)
        .get_compiler();
    let mut build = compiler.to_command();
    match language {
        Language::C => build.args(["-std=c11", "-D_POSIX_C_SOURCE=200809L"]),
        Language::Cpp => build.args(["-std=c++11", "-Wpedantic"]),
    };
    build
        .args(["-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(manifest.join("tests/c").join(source))
        .arg(&staticlib)
        // What a Rust staticlib needs from the system on Linux (`--print native-static-libs`).
        .args([
            "-lpthread",
            "-ldl",
            "-lm",
            "-lrt",
            "-lgcc_s",
            "-lutil",
            "-lc",
        ])
        .arg("-o")
        .arg(&program);
    let built = build.output().unwrap_or_else(|e| {
        panic!(
            "the compiler {} does not run: {e}",
            compiler.path().display()
        )
    });
    assert!(
        built.status.success(),
        "{source} does not build:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    program
}

/// Runs a built test program with `args` on the backend it chooses itself (the variable that
/// names one is removed), prints its output, and returns it with stdout and stderr as text.
fn run(program: &Path, args: &[&Path]) -> (Output, String, String) {
    let run = Command::new(program)
        .args(args)
        .env_remove("GPU_RUNTIME_BACKEND")
        .env_remove("GPU_RUNTIME_TRACE")
        .output()
        .expect("the test program runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    println!("{stdout}{stderr}");
    (run, stdout, stderr)
}

#[test]
fn the_c_program_exercises_the_whole_api_on_the_host_backend() {
    let program = build(Language::C, "api_test.c", "api_test");
    let trace = program.with_file_name("trace.txt");
    let (run, stdout, stderr) = run(&program, &[&trace]);
    assert!(run.status.success(), "C checks failed:\n{stderr}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    assert!(
        stderr.contains("0 defect(s)"),
        "the shutdown prints the checker's verdict on the trace: {stderr}"
    );
}

#[test]
fn the_header_compiles_as_cpp_and_its_functions_link_and_run() {
    let program = build(Language::Cpp, "header_test.cpp", "header_test");
    let (run, stdout, stderr) = run(&program, &[]);
    assert!(run.status.success(), "C++ checks failed:\n{stderr}");
    assert!(stdout.contains(": 0 failed"), "{stdout}");
}
