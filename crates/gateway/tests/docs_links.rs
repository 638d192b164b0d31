//! Offline link check of README.md and every markdown file under docs/ (the mdBook manual: the
//! guides in docs/guide/, the references, docs/benchmarks/): every relative link names a file
//! of the repository (never one outside it), and every `#anchor` names a heading of its target,
//! as GitHub slugs headings. External links (`https:`, `mailto:` …) are not fetched. And the
//! book is the whole manual: docs/SUMMARY.md lists every page under docs/.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The repository root (this crate is `crates/gateway`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// README.md and every markdown file under docs/ (recursively), relative to `root`.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("docs/ entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(path);
            }
        }
    }
    let mut docs = Vec::new();
    walk(&root.join("docs"), &mut docs);
    let mut docs: Vec<PathBuf> =
        docs.into_iter().map(|p| p.strip_prefix(root).expect("under root").to_path_buf()).collect();
    docs.sort();
    let mut files = vec![PathBuf::from("README.md")];
    files.extend(docs);
    files
}

fn parser(text: &str) -> Parser<'_> {
    Parser::new_ext(text, Options::ENABLE_TABLES | Options::ENABLE_FOOTNOTES | Options::ENABLE_STRIKETHROUGH)
}

/// GitHub's heading anchor: lowercased, characters other than letters, digits, `_`, `-` and
/// spaces dropped, spaces made `-`; a repeated slug gets `-1`, `-2`, … in order.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown text's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut heading: Option<String> = None;
    for event in parser(text) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                out.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
                *n += 1;
            }
            _ => {}
        }
    }
    out
}

/// The destinations of a markdown text's links and images.
fn links(text: &str) -> Vec<String> {
    parser(text)
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some(dest_url.to_string())
            }
            _ => None,
        })
        .collect()
}

/// `a/./b/../c` → `a/c`, without touching the file system; `None` when it climbs above the start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Every broken link of `files` (paths relative to `root`), one message each.
fn check(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    let read = |p: &Path| std::fs::read_to_string(root.join(p));
    for file in files {
        let text = read(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        for dest in links(&text) {
            let is_external = dest.split_once(':').is_some_and(|(scheme, _)| {
                !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            });
            if is_external {
                continue;
            }
            let (path, anchor) = dest.split_once('#').unwrap_or((&dest, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                let joined = file.parent().unwrap_or(Path::new("")).join(path);
                match normalize(&joined) {
                    Some(t) => t,
                    None => {
                        broken.push(format!("{}: {dest}: points outside the repository", file.display()));
                        continue;
                    }
                }
            };
            if !root.join(&target).exists() {
                broken.push(format!("{}: {dest}: no such file {}", file.display(), target.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            let Ok(target_text) = read(&target) else {
                broken.push(format!("{}: {dest}: #{anchor} into a file that is not text", file.display()));
                continue;
            };
            if !anchors(&target_text).contains(anchor) {
                broken.push(format!(
                    "{}: {dest}: no heading #{anchor} in {}",
                    file.display(),
                    target.display()
                ));
            }
        }
    }
    broken
}

#[test]
fn readme_and_docs_have_no_broken_links() {
    let root = repo_root();
    let files = markdown_files(&root);
    assert!(files.len() > 5, "README.md and docs/*.md: {files:?}");
    let broken = check(&root, &files);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The pages docs/SUMMARY.md links, relative to docs/.
fn summary_pages(root: &Path) -> BTreeSet<PathBuf> {
    let text = std::fs::read_to_string(root.join("docs/SUMMARY.md")).expect("docs/SUMMARY.md");
    links(&text).into_iter().map(PathBuf::from).collect()
}

#[test]
fn the_book_lists_every_page_under_docs() {
    let root = repo_root();
    let listed = summary_pages(&root);
    let missing: Vec<String> = markdown_files(&root)
        .into_iter()
        .filter_map(|p| p.strip_prefix("docs").ok().map(Path::to_path_buf))
        .filter(|p| p != Path::new("SUMMARY.md") && !listed.contains(p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(missing.is_empty(), "pages under docs/ that docs/SUMMARY.md does not list: {missing:?}");
    for page in ["guide/production.md", "benchmarks/history.md", "SPEC.md", "BENCHMARKS.md"] {
        assert!(listed.contains(Path::new(page)), "docs/SUMMARY.md lists {page}");
    }
    let book = std::fs::read_to_string(root.join("docs/book.toml")).expect("docs/book.toml");
    assert!(book.contains("src = \".\""), "the book's sources are docs/ itself: {book}");
}

/// The first fenced block of a crate's front page (its `//!` docs), without rustdoc's hidden
/// `# ` lines: what a reader of the rendered docs sees of the doc-test.
fn front_page_example(lib_rs: &str) -> String {
    let docs: Vec<&str> = lib_rs
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let docs = docs.join("\n");
    let block = docs.split("```\n").nth(1).and_then(|rest| rest.split("```").next()).expect("a doc-test");
    block.lines().filter(|l| !(l.starts_with("# ") || *l == "#")).collect::<Vec<_>>().join("\n")
}

/// The guide's Rust example is the doc-tested one: docs/guide/embedding.md shows oncerpc-core's
/// front-page doc-test as it is, so the example a reader copies compiles and passes.
#[test]
fn the_embedding_guide_shows_the_doc_tested_example() {
    let root = repo_root();
    let lib = std::fs::read_to_string(root.join("crates/core/src/lib.rs")).expect("core lib.rs");
    let guide = std::fs::read_to_string(root.join("docs/guide/embedding.md")).expect("embedding guide");
    let shown = guide
        .split("```rust\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .find(|block| block.contains("payments.charge") && block.contains("Dispatcher::new"))
        .expect("the guide's core example");
    assert_eq!(shown.trim_end(), front_page_example(&lib).trim_end(), "docs/guide/embedding.md");
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(slug("1. Protocol (JSON-RPC 2.0, strict)"), "1-protocol-json-rpc-20-strict");
    assert_eq!(slug("`[store]` — idempotency records"), "store--idempotency-records");
    assert_eq!(
        slug("What is not guaranteed, and what to do about it"),
        "what-is-not-guaranteed-and-what-to-do-about-it"
    );
    let a = anchors("# Top\n## `[limits]`\n## Notes\n### Notes\n## Notes\n");
    let want: BTreeSet<String> = ["top", "limits", "notes", "notes-1", "notes-2"].map(String::from).into();
    assert_eq!(a, want);
}

#[test]
fn the_checker_finds_each_kind_of_broken_link() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    std::fs::create_dir(root.join("docs")).unwrap();
    std::fs::write(
        root.join("README.md"),
        "# Sample\n\n## Good part\n\n\
         [ok file](docs/A.md) [ok anchor](docs/A.md#section-two) [ok local](#good-part) \
         [ok dir](docs) [web](https://example.com/x#y) [mail](mailto:a@example.com)\n\n\
         [missing file](docs/NOPE.md) [missing anchor](docs/A.md#section-three) \
         [missing local](#bad-part) [outside](../outside/NOTES.md)\n\n\
         | table | [in a table](docs/GONE.md) |\n|---|---|\n",
    )
    .unwrap();
    std::fs::write(root.join("docs/A.md"), "# A\n\n## Section two\n\n[back](../README.md#sample)\n").unwrap();
    let broken = check(root, &[PathBuf::from("README.md"), PathBuf::from("docs/A.md")]);
    assert_eq!(
        broken,
        [
            "README.md: docs/NOPE.md: no such file docs/NOPE.md",
            "README.md: docs/A.md#section-three: no heading #section-three in docs/A.md",
            "README.md: #bad-part: no heading #bad-part in README.md",
            "README.md: ../outside/NOTES.md: points outside the repository",
            "README.md: docs/GONE.md: no such file docs/GONE.md",
        ],
        "{broken:#?}"
    );
}
