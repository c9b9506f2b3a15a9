//! `cargo xtask bindgen [cuda|hip|hsa ...] [--check]`: regenerates the committed driver bindings
//! (each FFI crate's `src/sys.rs`) from pinned headers, with fixed allow-lists and options.
//!
//! What every library shares lives here: loading libclang, bindgen's options, the function
//! pointer types that replace extern declarations (nothing links a driver: the loaders find each
//! function at run time), the sorted code-to-name table of a result enum, and `--check`. Each
//! library's own parts (where its headers come from, its allow-list, how its loader finds a
//! function) are in [`cuda`], [`cupti`] (the recorder's CUPTI bindings) and [`rocm`].

mod cuda;
mod cupti;
mod rocm;

pub(crate) use rocm::hip_include_dir;

use std::fmt::Write as _;
use std::path::Path;

use quote::ToTokens;

use crate::root;

/// The target the headers are parsed for; the type layouts in the output are this target's.
pub(super) const CLANG_TARGET: &str = "x86_64-unknown-linux-gnu";

/// One library's generated bindings.
struct Generated {
    /// The committed file, relative to the workspace root.
    output: &'static str,
    /// Its new text.
    text: String,
}

/// The libraries `cargo xtask bindgen` knows, by the name the command line uses.
const LIBRARIES: &[&str] = &["cuda", "cupti", "hip", "hsa"];

/// Runs `cargo xtask bindgen [LIBRARY ...] [--check]` (every library when none is named).
pub(crate) fn bindgen(args: &[String]) -> Result<(), String> {
    let usage = || {
        format!(
            "usage: cargo xtask bindgen [{}]... [--check]",
            LIBRARIES.join("|")
        )
    };
    let mut check = false;
    let mut chosen = Vec::new();
    for arg in args {
        match arg.as_str() {
            "--check" => check = true,
            name if LIBRARIES.contains(&name) && !chosen.contains(&name) => chosen.push(name),
            _ => return Err(usage()),
        }
    }
    if chosen.is_empty() {
        chosen.extend_from_slice(LIBRARIES);
    }
    load_libclang()?;
    let root = root();
    for library in chosen {
        let generated = match library {
            "cuda" => cuda::generate(&root)?,
            "cupti" => cupti::generate(&root)?,
            "hip" => rocm::generate(&rocm::HIP)?,
            _ => rocm::generate(&rocm::HSA)?,
        };
        write_or_check(&root, &generated, check)?;
    }
    Ok(())
}

/// Loads libclang (bindgen would panic without it) and says how to get it.
fn load_libclang() -> Result<(), String> {
    clang_sys::load().map_err(|message| {
        format!(
            "libclang is needed to run `cargo xtask bindgen` but could not be loaded: {message}\n\
             install it (Debian/Ubuntu: `apt-get install libclang-dev`), or point LIBCLANG_PATH \
             at the folder holding libclang.so"
        )
    })
}

/// libclang's version as `major.minor`, for the output's header comment.
fn clang_version() -> Result<String, String> {
    let clang = bindgen::clang_version();
    let (major, minor) = clang
        .parsed
        .ok_or_else(|| format!("cannot parse the libclang version {:?}", clang.full))?;
    Ok(format!("{major}.{minor}"))
}

/// bindgen with the options every library's bindings use: Rust 1.85 and edition 2024, `core`
/// types, enums as plain constants, no comments, layout tests, semantic order, no formatting
/// (the output goes through syn and prettyplease).
fn common_builder(header_name: &str, contents: &str) -> Result<bindgen::Builder, String> {
    let rust_target = bindgen::RustTarget::stable(85, 0).map_err(|e| e.to_string())?;
    Ok(bindgen::Builder::default()
        .header_contents(header_name, contents)
        .clang_arg(format!("--target={CLANG_TARGET}"))
        .rust_target(rust_target)
        .rust_edition(bindgen::RustEdition::Edition2024)
        .use_core()
        .ctypes_prefix("::core::ffi")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .generate_comments(false)
        .layout_tests(true)
        .derive_default(true)
        .sort_semantically(true)
        .merge_extern_blocks(true)
        .formatter(bindgen::Formatter::None))
}

/// Takes the extern function declarations out of bindgen's items (they become pointer types);
/// the other items are returned in order.
fn take_functions(
    items: Vec<syn::Item>,
) -> Result<(Vec<syn::Item>, Vec<syn::ForeignItemFn>), String> {
    let mut kept = Vec::new();
    let mut functions = Vec::new();
    for item in items {
        match item {
            syn::Item::ForeignMod(block) => {
                for foreign in block.items {
                    let syn::ForeignItem::Fn(function) = foreign else {
                        return Err(format!(
                            "unexpected extern item in bindgen's output: {}",
                            foreign.to_token_stream()
                        ));
                    };
                    functions.push(function);
                }
            }
            other => kept.push(other),
        }
    }
    Ok((kept, functions))
}

/// `pub type PFN_<name> = unsafe extern "C" fn(<args>) -> <ret>;` for one declared function,
/// with `doc` as its doc comment.
fn pointer_type(name: &str, function: &syn::ForeignItemFn, doc: &str) -> Result<syn::Item, String> {
    let signature = &function.sig;
    if signature.variadic.is_some() {
        return Err(format!("{} is variadic", signature.ident));
    }
    let mut arguments = Vec::new();
    for input in &signature.inputs {
        let syn::FnArg::Typed(argument) = input else {
            return Err(format!("{} has a self argument", signature.ident));
        };
        arguments.push(format!(
            "{}: {}",
            argument.pat.to_token_stream(),
            argument.ty.to_token_stream()
        ));
    }
    let output = match &signature.output {
        syn::ReturnType::Default => String::new(),
        syn::ReturnType::Type(_, ty) => format!(" -> {}", ty.to_token_stream()),
    };
    let text = format!(
        "#[doc = {doc:?}]\npub type PFN_{name} = unsafe extern \"C\" fn({}){output};",
        arguments.join(", ")
    );
    syn::parse_str(&text)
        .map_err(|e| format!("cannot build the pointer type of {}: {e}", signature.ident))
}

/// The value of an integer constant.
fn integer_value(constant: &syn::ItemConst) -> Result<i64, String> {
    match constant.expr.as_ref() {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(value),
            ..
        }) => value.base10_parse::<i64>().map_err(|e| e.to_string()),
        syn::Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            expr,
            ..
        }) => match expr.as_ref() {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(value),
                ..
            }) => value
                .base10_parse::<i64>()
                .map(|v| -v)
                .map_err(|e| e.to_string()),
            other => Err(format!(
                "constant {} is not an integer: {}",
                constant.ident,
                other.to_token_stream()
            )),
        },
        other => Err(format!(
            "constant {} is not an integer literal: {}",
            constant.ident,
            other.to_token_stream()
        )),
    }
}

/// Whether `ty` is the plain path `name`.
fn is_path(ty: &syn::Type, name: &str) -> bool {
    matches!(ty, syn::Type::Path(path) if path.qself.is_none() && path.path.is_ident(name))
}

/// A result enum's codes with their names, sorted by code; where the header gives one code
/// several names (HIP's `hipErrorOutOfMemory` and `hipErrorMemoryAllocation`), the one declared
/// first is kept, as the library's own name function reports it. `constants` are in declaration
/// order.
fn result_codes(constants: Vec<(i64, String)>) -> Vec<(i64, String)> {
    let mut codes = constants;
    // A stable sort keeps declaration order among equal codes.
    codes.sort_by_key(|(code, _)| *code);
    codes.dedup_by_key(|(code, _)| *code);
    codes
}

/// `pub const TABLE: &[(TYPE, &str)] = &[...];` with a doc line, for `result_codes`' output.
fn result_names_table(doc: &str, table: &str, code_type: &str, codes: &[(i64, String)]) -> String {
    let mut text = format!("/// {doc}\npub const {table}: &[({code_type}, &str)] = &[\n");
    for (code, name) in codes {
        let _ = writeln!(text, "    ({code}, \"{name}\"),");
    }
    text.push_str("];\n");
    text
}

/// Writes the output, or (`check`) fails if it differs from the committed file.
fn write_or_check(root: &Path, generated: &Generated, check: bool) -> Result<(), String> {
    crate::write_or_check(
        root,
        generated.output,
        &generated.text,
        check,
        "cargo xtask bindgen",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_codes_are_sorted_and_an_alias_keeps_the_first_declared_name() {
        let declared = vec![
            (0, "hipSuccess".to_string()),
            (2, "hipErrorOutOfMemory".to_string()),
            (2, "hipErrorMemoryAllocation".to_string()),
            (1, "hipErrorInvalidValue".to_string()),
            (-1, "hipErrorTbd".to_string()),
        ];
        assert_eq!(
            result_codes(declared),
            [
                (-1, "hipErrorTbd".to_string()),
                (0, "hipSuccess".to_string()),
                (1, "hipErrorInvalidValue".to_string()),
                (2, "hipErrorOutOfMemory".to_string()),
            ]
        );
    }

    #[test]
    fn integer_values_read_decimal_hex_and_negative_literals() {
        let constants: [(&str, i64); 3] = [
            ("pub const A: t = 4104;", 4104),
            ("pub const B: t = 0x1008;", 0x1008),
            ("pub const C: t = -3;", -3),
        ];
        for (text, value) in constants {
            let constant: syn::ItemConst = syn::parse_str(text).unwrap();
            assert_eq!(integer_value(&constant), Ok(value), "{text}");
        }
        let not_literal: syn::ItemConst = syn::parse_str("pub const D: t = X;").unwrap();
        assert!(integer_value(&not_literal).is_err());
    }
}
