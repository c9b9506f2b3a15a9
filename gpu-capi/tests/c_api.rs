//! Builds the C test program (tests/c/api_test.c) with the `cc` crate against this crate's
//! staticlib and the committed header, runs it on the host backend, and checks that every one
//! of its checks passed (it prints each failure, with the library's last error).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The staticlib cargo built with this test: `cargo test` leaves the library's artefacts in
/// the `deps/` folder beside the test binary (it copies them up one level only for `cargo
/// build`).
fn staticlib() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .expect("the test binary lives in <target>/<profile>/deps")
        .join("libgpu_capi.a")
}

#[test]
fn the_c_program_exercises_the_whole_api_on_the_host_backend() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let staticlib = staticlib();
    assert!(
        staticlib.exists(),
        "{} is missing: cargo builds it with the library",
        staticlib.display()
    );
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gpu-capi-c-test");
    std::fs::create_dir_all(&out).unwrap();
    let program = out.join("api_test");
    let target = env!("GPU_CAPI_TARGET");
    let compiler = cc::Build::new()
        .target(target)
        .host(target)
        .opt_level(0)
        .cargo_metadata(false)
        .warnings_into_errors(true)
        .get_compiler();
    let mut build = compiler.to_command();
    build
        .args([
            "-std=c11",
            "-D_POSIX_C_SOURCE=200809L",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .arg("-I")
        .arg(manifest.join("include"))
        .arg(manifest.join("tests/c/api_test.c"))
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
    let built = build.output().expect("the C compiler runs");
    assert!(
        built.status.success(),
        "the C test program does not build:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let trace = out.join("trace.txt");
    let run = Command::new(&program)
        .arg(&trace)
        .env_remove("GPU_RUNTIME_BACKEND")
        .output()
        .expect("the C test program runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    println!("{stdout}{stderr}");
    assert!(run.status.success(), "C checks failed:\n{stderr}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    assert!(
        stderr.contains("0 defect(s)"),
        "the shutdown prints the checker's verdict on the trace: {stderr}"
    );
}
