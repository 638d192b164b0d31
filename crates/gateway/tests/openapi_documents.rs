//! Published OpenAPI documents import (SPEC §21): Petstore (3.0 and 3.1, from the npm package
//! `@readme/oas-examples`) and GitHub's REST API (3.0.3, 1,200+ operations, from
//! `@octokit/openapi`), both installed by `scripts/test.sh` under `ONCERPC_OPENAPI_DIR`. Every
//! operation is a method or a note saying why not; every method is registered (its params
//! schema compiles) with a tool name model APIs take. The GitHub import's time and memory are
//! printed, not judged. Outside CI missing packages skip with a printed reason.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::test_config;
use oncerpc_flows::openapi::OpenApiConfig;

fn document(path: &str) -> Option<PathBuf> {
    Some(common::prism::tools_dir()?.join("node_modules").join(path))
}

fn cfg(name: &str, spec: &Path) -> OpenApiConfig {
    toml::from_str(&format!("name = {name:?}\nspec = {:?}", spec.display().to_string())).unwrap()
}

/// Operations in the document, counted from its JSON here, not by the importer.
fn operations(spec: &Path) -> usize {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(spec).unwrap()).unwrap();
    doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| {
            ["get", "put", "post", "delete", "options", "head", "patch", "trace"]
                .iter()
                .filter(|m| item.get(**m).is_some())
                .count()
        })
        .sum()
}

/// Kilobytes of the process's peak resident memory (Linux), for the printout.
fn peak_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn import_into_an_app(doc: OpenApiConfig) -> (oncerpc::App, usize) {
    let mut config = test_config();
    config.openapi.push(doc);
    let client = common::http_client();
    let mut expanded = config.clone();
    let yields = oncerpc::openapi::expand(&mut expanded, &client).await.expect("imports");
    let methods = yields[0].methods.len();
    let app = oncerpc::App::new(config).await.expect("the app is built with every method");
    (app, methods + yields[0].notes.len())
}

#[tokio::test]
async fn petstore_3_0_and_3_1_import_every_operation() {
    for version in ["3.0", "3.1"] {
        let Some(spec) = document(&format!("@readme/oas-examples/{version}/json/petstore.json")) else {
            return;
        };
        let import =
            oncerpc_flows::openapi::load(&cfg("petstore", &spec), &common::http_client()).await.unwrap();
        assert_eq!(
            import.methods.len() + import.notes.len(),
            operations(&spec),
            "{version}: {:?}",
            import.notes
        );
        assert_eq!(operations(&spec), 20);
        // uploadFile sends a file (multipart in 3.0, octet-stream in 3.1): left out, with a note saying why.
        assert_eq!(import.notes.len(), 1, "{:?}", import.notes);
        assert!(
            import.notes[0].contains("uploadFile")
                && import.notes[0].contains("only JSON and application/x-www-form-urlencoded"),
            "{:?}",
            import.notes
        );
        let add = import.methods.iter().find(|m| m.name == "petstore.addPet").expect("addPet");
        assert_eq!(add.kind, oncerpc_core::Kind::Command);
        assert_eq!(add.params_schema["properties"]["body"]["properties"]["name"]["type"], "string");
        let find = import.methods.iter().find(|m| m.name == "petstore.findPetsByStatus").unwrap();
        assert_eq!(find.kind, oncerpc_core::Kind::Query);
        let (app, all) = import_into_an_app(cfg("petstore", &spec)).await;
        assert_eq!(all, 20);
        assert_eq!(
            app.dispatcher.registry().names().iter().filter(|n| n.starts_with("petstore.")).count(),
            19
        );
    }
}

#[tokio::test]
async fn githubs_rest_api_imports_and_its_cost_is_printed() {
    let Some(spec) = document("@octokit/openapi/generated/api.github.com.json") else { return };
    let before = peak_kb();
    let started = Instant::now();
    let (app, all) = import_into_an_app(cfg("github", &spec)).await;
    let took = started.elapsed();
    assert_eq!(all, operations(&spec), "every operation is a method or a note");
    let names = app.dispatcher.registry().names();
    let github: Vec<&&str> = names.iter().filter(|n| n.starts_with("github.")).collect();
    assert!(github.len() * 10 > all * 9, "most operations take JSON: {} of {all}", github.len());
    for n in &github {
        assert!(oncerpc_mcp::names::is_model_safe(&oncerpc_mcp::names::model_safe(n)), "{n}");
    }
    eprintln!(
        "github: {} operations, {} methods, imported and registered in {took:?}; peak memory {:?} KB -> {:?} KB",
        all,
        github.len(),
        before,
        peak_kb()
    );
}
