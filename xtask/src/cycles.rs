//! `cargo xtask module-cycles`: the import graph of each crate's modules, and any circle in it.
//! Every `crate::`, `super::` and `self::` path (in `use` items and in code) is an edge to the
//! deepest module it names; a crate passes when no two modules reach each other.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use syn::visit::Visit;

use crate::root;

/// A module, by its path from the crate root (empty: the root).
type Module = Vec<String>;

/// Checks every crate of the repository (each `src/lib.rs` or `src/main.rs` git tracks).
pub(crate) fn module_cycles(args: &[String]) -> Result<(), String> {
    if let Some(extra) = args.first() {
        return Err(format!("module-cycles takes no arguments (got {extra})"));
    }
    let listed = Command::new("git")
        .current_dir(root())
        .args(["ls-files", "*src/lib.rs", "*src/main.rs"])
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    let mut sources: Vec<PathBuf> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|file| Path::new(file).parent().map(|dir| root().join(dir)))
        .collect();
    sources.sort();
    sources.dedup();
    let mut circles = Vec::new();
    for source in &sources {
        for circle in crate_circles(source)? {
            circles.push(format!("{}: {}", source.display(), circle.join(" <-> ")));
        }
    }
    if circles.is_empty() {
        println!("module-cycles: no circle in {} crates", sources.len());
        Ok(())
    } else {
        Err(format!("import circles:\n{}", circles.join("\n")))
    }
}

/// The circles among the modules of the crate whose source directory is `source`.
fn crate_circles(source: &Path) -> Result<Vec<Vec<String>>, String> {
    let files = module_files(source)?;
    let mut edges: BTreeMap<Module, Vec<Module>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let parsed =
            syn::parse_file(&text).map_err(|e| format!("cannot parse {}: {e}", file.display()))?;
        let mut paths = Paths::default();
        paths.visit_file(&parsed);
        let mut targets: Vec<Module> = paths
            .0
            .iter()
            .filter_map(|path| absolute(module, path))
            .map(|path| deepest_module(&files, &path))
            .filter(|target| target != module && !target.is_empty())
            .collect();
        targets.sort();
        targets.dedup();
        edges.insert(module.clone(), targets);
    }
    Ok(strongly_connected(&edges)
        .into_iter()
        .filter(|component| component.len() > 1)
        .map(|component| {
            component
                .iter()
                .map(|module| {
                    if module.is_empty() {
                        "crate".to_string()
                    } else {
                        module.join("::")
                    }
                })
                .collect()
        })
        .collect())
}

/// Every module file under `source`, by module path (`a/mod.rs` and `a.rs` are module `a`).
fn module_files(source: &Path) -> Result<BTreeMap<Module, PathBuf>, String> {
    let mut files = BTreeMap::new();
    let mut pending = vec![source.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let relative = path.strip_prefix(source).map_err(|e| e.to_string())?;
                let mut module: Module = relative
                    .with_extension("")
                    .iter()
                    .map(|part| part.to_string_lossy().into_owned())
                    .collect();
                if module
                    .last()
                    .is_some_and(|last| ["mod", "lib", "main"].contains(&last.as_str()))
                {
                    module.pop();
                }
                files.insert(module, path);
            }
        }
    }
    Ok(files)
}

/// The crate-absolute segments of `path` as written in `module`, if it starts at the crate,
/// `super` or `self`.
fn absolute(module: &[String], path: &[String]) -> Option<Module> {
    let (first, rest) = path.split_first()?;
    let mut base: Module = match first.as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => module.get(..module.len().checked_sub(1)?)?.to_vec(),
        _ => return None,
    };
    let mut rest = rest;
    while let Some((next, tail)) = rest.split_first().filter(|(next, _)| *next == "super") {
        let _ = next;
        base.pop()?;
        rest = tail;
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The deepest module of `files` that `path` lies in.
fn deepest_module(files: &BTreeMap<Module, PathBuf>, path: &[String]) -> Module {
    (0..=path.len())
        .rev()
        .map(|length| path[..length].to_vec())
        .find(|prefix| files.contains_key(prefix))
        .unwrap_or_default()
}

/// Every path of a file: of `use` trees (each leaf, spelled out) and of expressions and types.
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl Paths {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(prefix, &path.tree);
                prefix.pop();
            }
            syn::UseTree::Name(name) => self.leaf(prefix, &name.ident),
            syn::UseTree::Rename(rename) => self.leaf(prefix, &rename.ident),
            syn::UseTree::Glob(_) => self.0.push(prefix.clone()),
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }

    fn leaf(&mut self, prefix: &[String], ident: &syn::Ident) {
        let mut path = prefix.to_vec();
        if ident != "self" {
            path.push(ident.to_string());
        }
        self.0.push(path);
    }
}

impl Visit<'_> for Paths {
    fn visit_item_use(&mut self, item: &syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &syn::Path) {
        self.0.push(
            path.segments
                .iter()
                .map(|segment| segment.ident.to_string())
                .collect(),
        );
        syn::visit::visit_path(self, path);
    }
}

/// Tarjan's strongly connected components of `edges`.
fn strongly_connected(edges: &BTreeMap<Module, Vec<Module>>) -> Vec<Vec<Module>> {
    struct Search<'a> {
        edges: &'a BTreeMap<Module, Vec<Module>>,
        index: BTreeMap<&'a Module, (usize, usize)>,
        stack: Vec<&'a Module>,
        components: Vec<Vec<Module>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, node: &'a Module) -> usize {
            let number = self.index.len();
            self.index.insert(node, (number, number));
            self.stack.push(node);
            let mut low = number;
            for next in self.edges.get(node).into_iter().flatten() {
                let next_low = match self.index.get(next) {
                    None => self.visit(next),
                    Some(&(next_number, _)) if self.stack.contains(&next) => next_number,
                    Some(_) => continue,
                };
                low = low.min(next_low);
            }
            self.index.insert(node, (number, low));
            if low == number {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    component.push(top.clone());
                    if top == node {
                        break;
                    }
                }
                self.components.push(component);
            }
            low
        }
    }
    let mut search = Search {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        components: Vec::new(),
    };
    for node in edges.keys() {
        if !search.index.contains_key(node) {
            search.visit(node);
        }
    }
    search.components
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(path: &str) -> Module {
        path.split("::")
            .filter(|part| !part.is_empty())
            .map(String::from)
            .collect()
    }

    #[test]
    fn paths_from_crate_super_and_self_are_made_absolute() {
        let here = module("a::b");
        assert_eq!(
            absolute(&here, &module("crate::c::d")),
            Some(module("c::d"))
        );
        assert_eq!(absolute(&here, &module("super::c")), Some(module("a::c")));
        assert_eq!(
            absolute(&here, &module("super::super::c")),
            Some(module("c"))
        );
        assert_eq!(absolute(&here, &module("self::c")), Some(module("a::b::c")));
        assert_eq!(absolute(&here, &module("std::mem")), None);
        assert_eq!(absolute(&module(""), &module("super::x")), None);
    }

    #[test]
    fn two_modules_reaching_each_other_are_one_circle_and_a_chain_is_none() {
        let edges: BTreeMap<Module, Vec<Module>> = [
            (module("a"), vec![module("b")]),
            (module("b"), vec![module("a"), module("c")]),
            (module("c"), vec![]),
        ]
        .into_iter()
        .collect();
        let mut circles: Vec<_> = strongly_connected(&edges)
            .into_iter()
            .filter(|component| component.len() > 1)
            .collect();
        assert_eq!(circles.len(), 1);
        circles[0].sort();
        assert_eq!(circles[0], vec![module("a"), module("b")]);
    }

    #[test]
    fn use_trees_are_spelled_out_to_each_leaf() {
        let file: syn::File =
            syn::parse_str("use crate::{a::{b, c as d}, e::*, f::{self}};").unwrap();
        let mut paths = Paths::default();
        paths.visit_file(&file);
        assert_eq!(
            paths.0,
            vec![
                module("crate::a::b"),
                module("crate::a::c"),
                module("crate::e"),
                module("crate::f"),
            ]
        );
    }
}
