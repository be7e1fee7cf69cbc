//! Import loops between the modules of a crate (one module per source file), for the tests
//! that keep each crate free of them (issue #43). Every path a module names (`use` trees and
//! paths in code, through `crate::`, `super::`, `self::` or a child module's name) is resolved
//! to the longest module prefix it names, items re-exported by the crate root are followed to
//! their module, and each strongly connected component of more than one module is a loop.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;
fn modules(src: &Path) -> BTreeMap<Module, String> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<PathBuf> = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let mut m: Module = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if m.last().is_some_and(|l| l == "mod") || m == ["lib"] || m == ["main"] {
                m.pop();
            }
            if m.first().is_some_and(|f| f == "bin") {
                continue; // binaries are crates of their own
            }
            let text = std::fs::read_to_string(&path).expect("readable source");
            out.insert(m, strip_inline_modules(&strip_comments(&text)));
        }
    }
    out
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['/', '"']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("//") {
            rest = tail.find('\n').map_or("", |j| &tail[j..]);
        } else if tail.starts_with("/*") {
            rest = tail.find("*/").map_or("", |j| &tail[j + 2..]);
        } else if tail.starts_with('"') {
            // Skip a string literal (escapes included).
            let bytes = tail.as_bytes();
            let mut j = 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            rest = tail.get(j + 1..).unwrap_or("");
        } else {
            out.push('/');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Remove inline `mod name { ... }` bodies (unit tests): their paths are relative to
/// themselves, and they are not the file module's dependencies.
fn strip_inline_modules(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("mod ") {
        let boundary = i == 0 || !rest[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let after = &rest[i + 4..];
        let name_end = ident_end(after.trim_start());
        let tail = after.trim_start()[name_end..].trim_start();
        out.push_str(&rest[..i]);
        if boundary && name_end > 0 && tail.starts_with('{') {
            let mut depth = 0;
            let mut end = tail.len();
            for (j, c) in tail.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = j + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rest = &tail[end..];
        } else {
            out.push_str("mod ");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn ident_end(s: &str) -> usize {
    s.find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len())
}

/// Expand the path starting at `s` (`a::b::{c, d::e}`) into full segment lists.
fn parse_path(s: &str, prefix: &[String], out: &mut Vec<Module>) {
    let mut segs = prefix.to_vec();
    let mut rest = s.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' | ',' if depth == 1 => {
                        parse_path(&group[start..i], &segs, out);
                        start = i + 1;
                        if c == '}' {
                            return;
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            return;
        }
        let end = ident_end(rest);
        if end == 0 {
            break;
        }
        let seg = &rest[..end];
        if seg != "self" || segs.is_empty() {
            segs.push(seg.to_string());
        }
        rest = &rest[end..];
        match rest.trim_start().strip_prefix("::") {
            Some(r) => rest = r.trim_start(),
            None => break,
        }
    }
    if !segs.is_empty() {
        out.push(segs);
    }
}

/// Every path the module's code names: `use` trees, and `crate::` / `super::` / `self::` /
/// child-module paths anywhere.
fn paths_of(text: &str, children: &BTreeSet<String>) -> Vec<Module> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let boundary = i == 0 || {
            let c = bytes[i - 1] as char;
            !(c.is_alphanumeric() || c == '_' || c == ':')
        };
        if boundary && bytes[i].is_ascii_alphabetic() {
            let end = i + ident_end(&text[i..]);
            let word = &text[i..end];
            if word == "use" {
                let stmt_end = text[end..].find(';').map_or(text.len(), |j| end + j);
                parse_path(&text[end..stmt_end], &[], &mut out);
                i = stmt_end;
                continue;
            }
            let named = matches!(word, "crate" | "super" | "self") || children.contains(word);
            if named && text[end..].starts_with("::") {
                parse_path(&text[i..], &[], &mut out);
            }
            i = end;
        } else {
            i += text[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// The module a path names from `from`, or None for other crates and the standard library.
fn resolve(
    from: &Module,
    path: &Module,
    mods: &BTreeMap<Module, String>,
    root_items: &BTreeMap<String, Module>,
) -> Option<Module> {
    let mut abs: Module = match path[0].as_str() {
        "crate" => Vec::new(),
        "self" => from.clone(),
        "super" => {
            let mut m = from.clone();
            m.pop();
            m
        }
        first => {
            let mut child = from.clone();
            child.push(first.to_string());
            if !mods.contains_key(&child) {
                return None;
            }
            from.clone()
        }
    };
    let mut rest = &path[if matches!(path[0].as_str(), "crate" | "self" | "super") {
        1
    } else {
        0
    }..];
    while rest.first().is_some_and(|s| s == "super") {
        abs.pop();
        rest = &rest[1..];
    }
    abs.extend(rest.iter().cloned());
    let mut m = abs.clone();
    while !mods.contains_key(&m) {
        m.pop();
    }
    if m.is_empty()
        && let Some(target) = abs.first().and_then(|name| root_items.get(name))
    {
        return Some(target.clone());
    }
    Some(m)
}

/// Import loops of the crate whose sources are at `src`, each as its modules.
pub fn loops(src: &Path) -> Vec<Vec<String>> {
    let mods = modules(src);
    let children = |m: &Module| -> BTreeSet<String> {
        mods.keys()
            .filter(|k| k.len() == m.len() + 1 && k.starts_with(m))
            .map(|k| k[m.len()].clone())
            .collect()
    };
    // Items the crate root re-exports (`pub use a::b::Item`): a path through the root to them
    // means the module they come from.
    let root: Module = Vec::new();
    let mut root_items = BTreeMap::new();
    for p in paths_of(&mods[&root], &children(&root)) {
        if let Some(m) = resolve(&root, &p, &mods, &BTreeMap::new())
            && !m.is_empty()
            && let Some(last) = p.last()
        {
            root_items.insert(last.clone(), m);
        }
    }
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, text) in &mods {
        if m.is_empty() {
            continue; // the root only declares and re-exports
        }
        for p in paths_of(text, &children(m)) {
            if let Some(to) = resolve(m, &p, &mods, &root_items)
                && !to.is_empty()
                && to != *m
            {
                edges.entry(m.clone()).or_default().insert(to);
            }
        }
    }
    cycles(&edges)
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, (usize, usize)>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.index[w].1.min(self.index[v].1);
                    self.index.get_mut(v).expect("visited").1 = low;
                } else if self.on_stack.contains(w) {
                    let low = self.index[w].0.min(self.index[v].1);
                    self.index.get_mut(v).expect("visited").1 = low;
                }
            }
            if self.index[v].0 == self.index[v].1 {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    scc.push(w.join("::"));
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.found.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.found
}

/// The `src` directory of the workspace crate in `crates/<name>`.
pub fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
        .join("src")
}

/// Panics, naming them, if the modules of `crates/<name>` import each other in a loop.
pub fn assert_no_loops(name: &str) {
    let found = loops(&crate_src(name));
    assert!(found.is_empty(), "import loops in {name}: {found:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_finds_a_loop() {
        let dir = std::env::temp_dir().join(format!("gantry-module-graph-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a")).expect("temp dir");
        let files = [
            ("lib.rs", "pub mod a;\npub mod b;\npub use b::Thing;\n"),
            (
                "a/mod.rs",
                "mod inner;\nuse crate::Thing; // via the root\n",
            ),
            (
                "a/inner.rs",
                "pub fn f() {}\nmod tests {\n    use super::super::b::Thing;\n}\n",
            ),
            (
                "b.rs",
                "pub struct Thing;\nfn g() { crate::a::inner::f() }\n",
            ),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text).expect("write");
        }
        assert!(loops(&dir).is_empty(), "a -> b -> a::inner is no loop");
        std::fs::write(
            dir.join("a/inner.rs"),
            "use super::super::b::{self, Thing};\n",
        )
        .expect("write");
        let found = loops(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(found, vec![vec!["a::inner".to_string(), "b".to_string()]]);
    }
}
