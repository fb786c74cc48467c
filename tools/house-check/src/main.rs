//! `house-check`: counts what makes the workspace hard for a newcomer to carry on, so that CI can
//! hold the line the codemap (docs/architecture.md) promises:
//!
//! - **long files**: a source file whose non-test lines (every line but those of `#[cfg(test)]`
//!   items) exceed `--max-file-lines` (800);
//! - **long functions**: a non-test function, method or closure-free `fn` item whose signature and
//!   body span more than `--max-fn-lines` (100) lines;
//! - **import circles**: two sibling modules of one crate that each reach into the other (through
//!   `crate::`, `super::` or `self::` paths, in `use` or in code), directly or round a loop. A
//!   room imports downward only: what two rooms share sits in a third room both import.
//!
//! Test code is left out: `tests/` and `benches/` directories, modules declared `#[cfg(test)]`,
//! `#[test]` functions, and the test-support crates named by `--test-crate` (default `testkit`).
//!
//! Usage: `cargo run -p cowork-house-check -- [--root DIR] [--report]`. Without `--report` the
//! exit code is 1 when anything is over a limit, so CI fails on it; `--report` only prints.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use syn::spanned::Spanned;
use syn::visit::Visit;

/// A module's path inside its crate: `["executor", "harness"]` for `crate::executor::harness`.
type ModPath = Vec<String>;

struct Settings {
    root: PathBuf,
    max_file_lines: usize,
    max_fn_lines: usize,
    test_crates: Vec<String>,
    report_only: bool,
}

fn main() -> ExitCode {
    let settings = match parse_args(std::env::args().skip(1)) {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("house-check: {message}");
            eprintln!(
                "usage: house-check [--root DIR] [--max-file-lines N] [--max-fn-lines N] [--test-crate DIR]... [--report]"
            );
            return ExitCode::from(2);
        }
    };
    match run(&settings) {
        Ok(findings) => {
            print!("{}", findings.render(&settings));
            if findings.is_clean() || settings.report_only {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(message) => {
            eprintln!("house-check: {message}");
            ExitCode::from(2)
        }
    }
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Settings, String> {
    let mut settings = Settings {
        root: PathBuf::from("."),
        max_file_lines: 800,
        max_fn_lines: 100,
        test_crates: Vec::new(),
        report_only: false,
    };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--root" => settings.root = PathBuf::from(value("--root")?),
            "--max-file-lines" => settings.max_file_lines = number(&value("--max-file-lines")?)?,
            "--max-fn-lines" => settings.max_fn_lines = number(&value("--max-fn-lines")?)?,
            "--test-crate" => settings.test_crates.push(value("--test-crate")?),
            "--report" => settings.report_only = true,
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    if settings.test_crates.is_empty() {
        settings.test_crates.push("testkit".to_owned());
    }
    Ok(settings)
}

fn number(text: &str) -> Result<usize, String> {
    text.parse()
        .map_err(|_| format!("'{text}' is not a whole number"))
}

#[derive(Default)]
struct Findings {
    /// (file, non-test lines) over the limit.
    long_files: Vec<(String, usize)>,
    /// (file:line, function name, lines) over the limit.
    long_fns: Vec<(String, String, usize)>,
    /// One entry per circle: the crate, the parent module and the edges that close it.
    circles: Vec<Circle>,
    files_scanned: usize,
    fns_scanned: usize,
}

struct Circle {
    crate_dir: String,
    parent: ModPath,
    /// (from child, to child, one place the reference is made).
    edges: Vec<(String, String, String)>,
}

impl Findings {
    fn is_clean(&self) -> bool {
        self.long_files.is_empty() && self.long_fns.is_empty() && self.circles.is_empty()
    }

    fn render(&self, settings: &Settings) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "house-check: {} non-test files, {} non-test functions",
            self.files_scanned, self.fns_scanned
        );
        let _ = writeln!(
            out,
            "{} files over {} non-test lines",
            self.long_files.len(),
            settings.max_file_lines
        );
        for (file, lines) in &self.long_files {
            let _ = writeln!(out, "  {lines:>5}  {file}");
        }
        let _ = writeln!(
            out,
            "{} functions over {} lines",
            self.long_fns.len(),
            settings.max_fn_lines
        );
        for (place, name, lines) in &self.long_fns {
            let _ = writeln!(out, "  {lines:>5}  {name}  ({place})");
        }
        let _ = writeln!(
            out,
            "{} import circles between modules of one crate",
            self.circles.len()
        );
        for circle in &self.circles {
            let parent = if circle.parent.is_empty() {
                "crate root".to_owned()
            } else {
                circle.parent.join("::")
            };
            let _ = writeln!(out, "  {} ({parent}):", circle.crate_dir);
            for (from, to, place) in &circle.edges {
                let _ = writeln!(out, "    {from} -> {to}  ({place})");
            }
        }
        out
    }
}

fn run(settings: &Settings) -> Result<Findings, String> {
    let mut findings = Findings::default();
    for crate_dir in workspace_members(&settings.root)? {
        if settings.test_crates.contains(&crate_dir) {
            continue;
        }
        let src = settings.root.join(&crate_dir).join("src");
        let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
            .iter()
            .map(|name| src.join(name))
            .filter(|path| path.is_file())
            .collect();
        if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
            let mut bins: Vec<PathBuf> = entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
                .collect();
            bins.sort();
            roots.extend(bins);
        }
        for root_file in roots {
            let mut scan = CrateScan::default();
            scan.file(&root_file, &src, Vec::new(), settings)?;
            findings.files_scanned += scan.files;
            findings.fns_scanned += scan.fns;
            findings
                .circles
                .extend(scan.circles(&crate_dir, &settings.root));
            for (file, lines) in scan.long_files {
                findings
                    .long_files
                    .push((relative(&settings.root, &file), lines));
            }
            findings.long_fns.extend(scan.long_fns);
        }
    }
    findings
        .long_files
        .sort_by_key(|file| std::cmp::Reverse(file.1));
    findings
        .long_fns
        .sort_by_key(|function| std::cmp::Reverse(function.2));
    for (place, _, _) in &mut findings.long_fns {
        *place = place.replace(&format!("{}/", settings.root.display()), "");
    }
    Ok(findings)
}

/// The `members = [...]` of the root manifest (a plain list of directory names).
fn workspace_members(root: &Path) -> Result<Vec<String>, String> {
    let manifest_path = root.join("Cargo.toml");
    let manifest = std::fs::read_to_string(&manifest_path)
        .map_err(|error| format!("{}: {error}", manifest_path.display()))?;
    let start = manifest
        .find("members")
        .ok_or_else(|| format!("{}: no workspace members", manifest_path.display()))?;
    let rest = &manifest[start..];
    let open = rest.find('[').ok_or("members has no list")?;
    let close = rest.find(']').ok_or("members list is not closed")?;
    Ok(rest[open + 1..close]
        .split(',')
        .map(|item| item.trim().trim_matches('"').to_owned())
        .filter(|item| !item.is_empty())
        .collect())
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// One crate target's walk: its module tree, lengths and the references between its modules.
#[derive(Default)]
struct CrateScan {
    files: usize,
    fns: usize,
    long_files: Vec<(PathBuf, usize)>,
    long_fns: Vec<(String, String, usize)>,
    /// Every non-test module of the target.
    modules: BTreeSet<ModPath>,
    /// (from module, to path as written but made absolute, place).
    references: Vec<(ModPath, ModPath, String)>,
}

impl CrateScan {
    /// Walks `path`, the file of module `module`; `dir` is where its `mod x;` children live.
    fn file(
        &mut self,
        path: &Path,
        dir: &Path,
        module: ModPath,
        settings: &Settings,
    ) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("{}: {error}", path.display()))?;
        let syntax = syn::parse_file(&text)
            .map_err(|error| format!("{}: cannot parse: {error}", path.display()))?;
        self.files += 1;
        let mut test_lines = 0;
        self.items(&syntax.items, path, dir, &module, settings, &mut test_lines)?;
        let lines = text.lines().count().saturating_sub(test_lines);
        if lines > settings.max_file_lines {
            self.long_files.push((path.to_owned(), lines));
        }
        Ok(())
    }

    fn items(
        &mut self,
        items: &[syn::Item],
        path: &Path,
        dir: &Path,
        module: &ModPath,
        settings: &Settings,
        test_lines: &mut usize,
    ) -> Result<(), String> {
        self.modules.insert(module.clone());
        for item in items {
            if is_test_item(item) {
                let span = item.span();
                *test_lines += span.end().line + 1 - span.start().line;
                continue;
            }
            if let syn::Item::Mod(item_mod) = item {
                let mut child = module.clone();
                child.push(item_mod.ident.to_string());
                match &item_mod.content {
                    Some((_, inner)) => {
                        let child_dir = dir.join(item_mod.ident.to_string());
                        self.items(inner, path, &child_dir, &child, settings, test_lines)?;
                    }
                    None => {
                        let (child_file, child_dir) = child_file(dir, item_mod)?;
                        self.file(&child_file, &child_dir, child, settings)?;
                    }
                }
                continue;
            }
            let mut visitor = ItemVisitor {
                scan: self,
                path,
                module,
                max_fn_lines: settings.max_fn_lines,
            };
            visitor.visit_item(item);
        }
        Ok(())
    }

    /// The circles among the children of each module, found as strongly connected components.
    fn circles(&self, crate_dir: &str, root: &Path) -> Vec<Circle> {
        // parent -> (from child -> (to child -> first place))
        let mut edges: BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, String>>> =
            BTreeMap::new();
        for (from, written, place) in &self.references {
            let Some(target) = self.resolve(written) else {
                continue;
            };
            let common = from
                .iter()
                .zip(target.iter())
                .take_while(|(a, b)| a == b)
                .count();
            if common == from.len() || common == target.len() {
                // One is an ancestor of the other: a parent's own items, or a child it declares.
                continue;
            }
            let parent = from[..common].to_vec();
            edges
                .entry(parent)
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .entry(target[common].clone())
                .or_insert_with(|| place.replace(&format!("{}/", root.display()), ""));
        }
        let mut circles = Vec::new();
        for (parent, graph) in &edges {
            for component in strongly_connected(graph) {
                let members: BTreeSet<&String> = component.iter().collect();
                let mut circle_edges = Vec::new();
                for from in &component {
                    for (to, place) in graph.get(from).into_iter().flatten() {
                        if members.contains(to) {
                            circle_edges.push((from.clone(), to.clone(), place.clone()));
                        }
                    }
                }
                circles.push(Circle {
                    crate_dir: crate_dir.to_owned(),
                    parent: parent.clone(),
                    edges: circle_edges,
                });
            }
        }
        circles
    }

    /// The deepest known module a path names (the path without its item, function or type).
    fn resolve(&self, written: &ModPath) -> Option<ModPath> {
        (1..=written.len())
            .rev()
            .map(|len| written[..len].to_vec())
            .find(|prefix| self.modules.contains(prefix))
    }
}

/// Where `mod name;` declared in a module whose children live in `dir` is written.
fn child_file(dir: &Path, item_mod: &syn::ItemMod) -> Result<(PathBuf, PathBuf), String> {
    let name = item_mod.ident.to_string();
    if let Some(explicit) = path_attribute(&item_mod.attrs) {
        let file = dir.join(explicit);
        let child_dir = file.with_extension("");
        return Ok((file, child_dir));
    }
    let flat = dir.join(format!("{name}.rs"));
    if flat.is_file() {
        return Ok((flat, dir.join(&name)));
    }
    let nested = dir.join(&name).join("mod.rs");
    if nested.is_file() {
        return Ok((nested, dir.join(&name)));
    }
    Err(format!(
        "module '{name}' declared under {} has neither {name}.rs nor {name}/mod.rs",
        dir.display()
    ))
}

fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| {
        if !attr.path().is_ident("path") {
            return None;
        }
        match &attr.meta {
            syn::Meta::NameValue(syn::MetaNameValue {
                value:
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(text),
                        ..
                    }),
                ..
            }) => Some(text.value()),
            _ => None,
        }
    })
}

/// `#[cfg(test)]` (or a `cfg` that needs `test`), `#[test]`, `#[tokio::test]`.
fn is_test_attrs(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        if path
            .segments
            .last()
            .is_some_and(|last| last.ident == "test")
        {
            return true;
        }
        if !path.is_ident("cfg") {
            return false;
        }
        let tokens = match &attr.meta {
            syn::Meta::List(list) => list.tokens.to_string(),
            _ => return false,
        };
        let tokens = tokens.replace(' ', "");
        (tokens == "test" || tokens.starts_with("all(test,") || tokens.contains(",test)"))
            && !tokens.contains("not(test")
    })
}

fn is_test_item(item: &syn::Item) -> bool {
    let attrs = match item {
        syn::Item::Mod(item) => &item.attrs,
        syn::Item::Fn(item) => &item.attrs,
        syn::Item::Impl(item) => &item.attrs,
        syn::Item::Use(item) => &item.attrs,
        syn::Item::Struct(item) => &item.attrs,
        syn::Item::Enum(item) => &item.attrs,
        syn::Item::Const(item) => &item.attrs,
        syn::Item::Static(item) => &item.attrs,
        syn::Item::Trait(item) => &item.attrs,
        syn::Item::Type(item) => &item.attrs,
        syn::Item::Macro(item) => &item.attrs,
        _ => return false,
    };
    is_test_attrs(attrs)
}

/// Visits one non-module item: measures its functions and records its module references.
struct ItemVisitor<'a> {
    scan: &'a mut CrateScan,
    path: &'a Path,
    module: &'a ModPath,
    max_fn_lines: usize,
}

impl ItemVisitor<'_> {
    fn function(&mut self, name: String, sig: &syn::Signature, block: &syn::Block) {
        self.scan.fns += 1;
        let start = sig.span().start().line;
        let end = block.span().end().line;
        let lines = end + 1 - start;
        if lines > self.max_fn_lines {
            let place = format!("{}:{start}", self.path.display());
            self.scan.long_fns.push((place, name, lines));
        }
    }

    fn reference(&mut self, segments: Vec<String>, line: usize) {
        let Some(absolute) = absolute_path(self.module, &segments) else {
            return;
        };
        let place = format!("{}:{line}", self.path.display());
        self.scan
            .references
            .push((self.module.clone(), absolute, place));
    }
}

/// `crate::a::b` → `[a, b]`; `super::x` and `self::x` relative to `module`; anything else (an
/// external crate, a name in scope) is not a module reference.
fn absolute_path(module: &ModPath, segments: &[String]) -> Option<ModPath> {
    let first = segments.first()?;
    match first.as_str() {
        "crate" => Some(segments[1..].to_vec()),
        "self" => {
            let mut path = module.clone();
            path.extend(segments[1..].iter().cloned());
            Some(path)
        }
        "super" => {
            let mut path = module.clone();
            let mut rest = segments;
            while rest.first().is_some_and(|segment| segment == "super") {
                path.pop()?;
                rest = &rest[1..];
            }
            path.extend(rest.iter().cloned());
            Some(path)
        }
        _ => None,
    }
}

fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_paths(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let mut full = prefix.clone();
            if name.ident != "self" {
                full.push(name.ident.to_string());
            }
            out.push(full);
        }
        syn::UseTree::Rename(rename) => {
            let mut full = prefix.clone();
            if rename.ident != "self" {
                full.push(rename.ident.to_string());
            }
            out.push(full);
        }
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(group) => {
            for item in &group.items {
                use_paths(item, prefix, out);
            }
        }
    }
}

impl<'ast> Visit<'ast> for ItemVisitor<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if is_test_item(item) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if is_test_attrs(&item.attrs) {
            return;
        }
        self.function(item.sig.ident.to_string(), &item.sig, &item.block);
        syn::visit::visit_item_fn(self, item);
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if is_test_attrs(&item.attrs) {
            return;
        }
        self.function(item.sig.ident.to_string(), &item.sig, &item.block);
        syn::visit::visit_impl_item_fn(self, item);
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = &item.default {
            self.function(item.sig.ident.to_string(), &item.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, item);
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let line = item.span().start().line;
        let mut paths = Vec::new();
        use_paths(&item.tree, &mut Vec::new(), &mut paths);
        for path in paths {
            self.reference(path, line);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path
            .segments
            .iter()
            .map(|segment| segment.ident.to_string())
            .collect();
        self.reference(segments, path.span().start().line);
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // Paths inside macro calls (format!, vec!, …) are tokens, not syntax: read the ones
        // that start with crate::, super:: or self:: off the token stream.
        let tokens: Vec<String> = mac
            .tokens
            .clone()
            .into_iter()
            .map(|token| token.to_string())
            .collect();
        let line = mac.span().start().line;
        let mut index = 0;
        while index < tokens.len() {
            if matches!(tokens[index].as_str(), "crate" | "super" | "self") {
                let mut segments = vec![tokens[index].clone()];
                let mut next = index + 1;
                while next + 2 < tokens.len() + 1
                    && tokens.get(next).is_some_and(|t| t == ":")
                    && tokens.get(next + 1).is_some_and(|t| t == ":")
                {
                    match tokens.get(next + 2) {
                        Some(ident) if is_ident(ident) => segments.push(ident.clone()),
                        _ => break,
                    }
                    next += 3;
                }
                if segments.len() > 1 {
                    self.reference(segments, line);
                }
                index = next;
            } else {
                index += 1;
            }
        }
        syn::visit::visit_macro(self, mac);
    }
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && token.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// Tarjan's strongly connected components of size > 1 (and self-loops are impossible here).
fn strongly_connected(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn connect<'g>(state: &mut State<'g>, node: &'g str) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        let graph = state.graph;
        for next in graph.get(node).into_iter().flat_map(|edges| edges.keys()) {
            let next = next.as_str();
            if !state.index.contains_key(next) {
                connect(state, next);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            connect(&mut state, node);
        }
    }
    state.found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> Vec<String> {
        text.split("::").map(str::to_owned).collect()
    }

    #[test]
    fn relative_paths_are_made_absolute_from_their_module() {
        let module = path("executor::harness");
        assert_eq!(
            absolute_path(&module, &path("super::replay_pack::run")),
            Some(path("executor::replay_pack::run"))
        );
        assert_eq!(
            absolute_path(&module, &path("super::super::job_run")),
            Some(path("job_run"))
        );
        assert_eq!(
            absolute_path(&module, &path("self::spawn")),
            Some(path("executor::harness::spawn"))
        );
        assert_eq!(
            absolute_path(&module, &path("crate::a::b")),
            Some(path("a::b"))
        );
        assert_eq!(absolute_path(&module, &path("serde::Serialize")), None);
        assert_eq!(absolute_path(&Vec::new(), &path("super::x")), None);
    }

    #[test]
    fn a_loop_of_siblings_is_one_circle_and_a_chain_is_none() {
        let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")] {
            graph
                .entry(from.to_owned())
                .or_default()
                .insert(to.to_owned(), String::new());
        }
        assert_eq!(
            strongly_connected(&graph),
            vec![path("a::b::c").into_iter().collect::<Vec<_>>()]
                .into_iter()
                .map(|mut component| {
                    component.sort();
                    component
                })
                .collect::<Vec<_>>()
        );
        graph.remove("c");
        assert!(strongly_connected(&graph).is_empty());
    }

    #[test]
    fn test_only_code_is_recognised_by_its_attributes() {
        let test_mod: syn::Item = syn::parse_quote! { #[cfg(test)] mod tests {} };
        let test_fn: syn::Item = syn::parse_quote! { #[tokio::test] async fn t() {} };
        let all_test: syn::Item = syn::parse_quote! { #[cfg(all(test, unix))] fn f() {} };
        let not_test: syn::Item = syn::parse_quote! { #[cfg(not(test))] fn f() {} };
        let plain: syn::Item = syn::parse_quote! { fn f() {} };
        assert!(is_test_item(&test_mod) && is_test_item(&test_fn) && is_test_item(&all_test));
        assert!(!is_test_item(&not_test) && !is_test_item(&plain));
    }
}
