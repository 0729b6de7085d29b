//! The architecture's invariants, checked on the source: `ARCHITECTURE.md`'s table
//! "Who may use whom" lists, for each top-level module, the modules it may use; a
//! `crate::` path to any other fails here. No module may reach itself through others
//! (no cycles), and within a module no submodule may either (so `server::rest` and
//! `server::mcp` stay two adapters over shared helpers, not one knot).
//!
//! Comments and test code are not dependencies: only code outside `//` lines,
//! `#[cfg(test)]` sections and `tests.rs` files counts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `path` (or `path` itself), tests excluded.
fn rust_files(path: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if path.is_file() {
        out.push(path.to_path_buf());
    } else if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for entry in entries {
            out.extend(rust_files(&entry));
        }
    }
    out.retain(|f| {
        f.extension().is_some_and(|e| e == "rs")
            && f.file_name().is_some_and(|n| n != "tests.rs")
            && !f.components().any(|c| c.as_os_str() == "tests")
    });
    out
}

/// A file's code: without comment lines and without its `#[cfg(test)]` part.
fn code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names `prefix` is followed by in `text` (`crate::board::x` -> `board`).
fn names_after(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices(prefix) {
        let before = text[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = text[i + prefix.len()..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

/// The modules directly under `dir` (files and folders), `mod.rs` and `lib.rs` aside.
fn modules_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| {
            let path = e.ok()?.path();
            let name = path.file_name()?.to_str()?.to_string();
            let name = name.strip_suffix(".rs").map(str::to_string).unwrap_or(name);
            (!matches!(name.as_str(), "mod" | "lib" | "main" | "tests")).then_some(name)
        })
        .collect()
}

/// The files of module `name` under `dir`: `name.rs` and everything in `name/`.
fn files_of(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut files = rust_files(&dir.join(format!("{name}.rs")));
    files.extend(rust_files(&dir.join(name)));
    files
}

/// Top-level module -> the top-level modules its code names.
fn crate_graph() -> Graph {
    let modules = modules_in(&src());
    modules
        .iter()
        .map(|m| {
            let used: BTreeSet<String> = files_of(&src(), m)
                .iter()
                .flat_map(|f| names_after(&code(f), "crate::"))
                .filter(|d| d != m && modules.contains(d))
                .collect();
            (m.clone(), used)
        })
        .collect()
}

/// Within `module`: submodule -> its sibling submodules that it names
/// (`crate::module::x`, and `super::x` from the submodule's own file).
fn module_graph(module: &str) -> Graph {
    let dir = src().join(module);
    let subs = modules_in(&dir);
    let prefix = format!("crate::{module}::");
    subs.iter()
        .map(|s| {
            let mut used = BTreeSet::new();
            for f in files_of(&dir, s) {
                let text = code(&f);
                used.extend(names_after(&text, &prefix));
                let own_file = f == dir.join(format!("{s}.rs")) || f == dir.join(s).join("mod.rs");
                if own_file {
                    used.extend(names_after(&text, "super::"));
                }
            }
            used.retain(|d| d != s && subs.contains(d));
            (s.clone(), used)
        })
        .collect()
}

/// A cycle in `graph`, if there is one, as the path around it.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_string());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

/// `ARCHITECTURE.md`'s table "Who may use whom": module -> the modules it may use.
fn allowed() -> Graph {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .expect("read ARCHITECTURE.md");
    let section = doc
        .split("## Who may use whom")
        .nth(1)
        .expect("ARCHITECTURE.md has a section \"## Who may use whom\"");
    let section = section.split("\n## ").next().unwrap_or_default();
    let mut table = Graph::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let module = cells[1].trim_matches('`').to_string();
        let may: BTreeSet<String> = cells[2]
            .split(',')
            .map(|c| c.trim().trim_matches('`').to_string())
            .filter(|c| !c.is_empty() && c != "—")
            .collect();
        table.insert(module, may);
    }
    table
}

#[test]
fn every_module_uses_only_what_architecture_md_allows() {
    let actual = crate_graph();
    let allowed = allowed();
    let mut problems = Vec::new();
    for (module, used) in &actual {
        let Some(may) = allowed.get(module) else {
            problems.push(format!(
                "`{module}` is not in ARCHITECTURE.md's table \"Who may use whom\""
            ));
            continue;
        };
        for dep in used.difference(may) {
            problems.push(format!(
                "`{module}` uses `crate::{dep}`, which ARCHITECTURE.md does not allow it"
            ));
        }
    }
    for module in allowed.keys().filter(|m| !actual.contains_key(*m)) {
        problems.push(format!(
            "ARCHITECTURE.md lists `{module}`, which is not a module of the crate"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_module_reaches_itself_through_others() {
    let graph = crate_graph();
    assert!(graph.len() > 10, "found too few modules: {graph:?}");
    if let Some(found) = cycle(&graph) {
        panic!(
            "modules depend on each other in a cycle: {}",
            found.join(" -> ")
        );
    }
}

#[test]
fn no_submodule_reaches_itself_through_its_siblings() {
    let mut checked = 0;
    for module in modules_in(&src()) {
        if !src().join(&module).is_dir() {
            continue;
        }
        let graph = module_graph(&module);
        checked += graph.len();
        if let Some(found) = cycle(&graph) {
            panic!(
                "submodules of `{module}` depend on each other in a cycle: {}",
                found.join(" -> ")
            );
        }
    }
    assert!(checked > 20, "found too few submodules ({checked})");
}

#[test]
fn the_checker_sees_a_cycle_and_a_comment_is_not_a_dependency() {
    let mut graph = Graph::new();
    graph.insert("a".into(), ["b".to_string()].into());
    graph.insert("b".into(), ["c".to_string()].into());
    graph.insert("c".into(), BTreeSet::new());
    assert_eq!(cycle(&graph), None);
    graph.insert("c".into(), ["a".to_string()].into());
    assert_eq!(
        cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let text = "use crate::store::X;\n// crate::server is named here only\nfoo_crate::board";
    let kept: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(names_after(&kept, "crate::"), ["store".to_string()].into());
}
