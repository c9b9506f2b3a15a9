//! Passes the target triple to the tests, which build the C test program for it with `cc`.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=GPU_CAPI_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
