//! Registering files in the log and loading them back.

use super::*;
use crate::store::{StoreLocation, StoreOptions};

const PARENT: &str = "name: parent\nversion: \"1.0.0\"\nsteps:\n  - {id: go, type: shell, command: [\"true\"]}\n  - {id: sub, type: workflow, workflow: ./child.awl.yaml}\n";
const CHILD: &str = "name: child\nversion: \"2.0.0\"\nsteps: [{id: x, tool: noop}]\n";

fn checkout(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("parent.awl.yaml"), PARENT).unwrap();
    std::fs::write(dir.join("child.awl.yaml"), CHILD).unwrap();
    dir.join("parent.awl.yaml")
}

/// A fresh embedded store in a temporary folder (kept while the folder lives).
async fn temp_store() -> (tempfile::TempDir, EventStore) {
    let db = tempfile::tempdir().unwrap();
    let store = EventStore::open(
        &StoreLocation::sqlite(db.path().join("awl.db")),
        StoreOptions::default(),
    )
    .await
    .unwrap();
    (db, store)
}

#[tokio::test]
async fn a_file_registers_the_same_version_from_any_folder() {
    let (_db, store) = temp_store().await;
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = register_file(&store, &checkout(a.path()), "ada", Utc::now())
        .await
        .unwrap();
    let second = register_file(&store, &checkout(b.path()), "bob", Utc::now())
        .await
        .unwrap();
    assert_eq!(first.content_hash, second.content_hash);
    // The sub-workflow path became a reference to the registered child.
    let definitions = Definitions::default();
    let parent = definitions.get(&store, "parent", "1.0.0").await.unwrap();
    let sub = serde_json::to_value(&parent.steps[1]).unwrap();
    assert_eq!(sub["workflow"], "child@2.0.0");
    // One version event per workflow: the second registration changed nothing.
    let events = store
        .read_page(0, 100, &crate::log::EventFilter::default())
        .await
        .unwrap()
        .0;
    let registered: Vec<&str> = events.iter().map(|e| e.stream.id.as_str()).collect();
    assert_eq!(registered, vec!["child", "parent"]);
}

#[tokio::test]
async fn a_workflow_that_includes_itself_is_refused() {
    let (_db, store) = temp_store().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loop.awl.yaml");
    std::fs::write(
        &path,
        "name: loop\nversion: \"1.0.0\"\nsteps: [{id: again, type: workflow, workflow: ./loop.awl.yaml}]\n",
    )
    .unwrap();
    match register_file(&store, &path, "ada", Utc::now()).await {
        Err(DefinitionError::Invalid(d)) => {
            assert!(d.to_string().contains("includes itself"), "{d}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A registry with one tool of the tools directory, `shout`, whose body is `echo WORD`.
fn directory_tool(word: &str) -> KnownTools {
    let shout: crate::workflow::model::ToolDefinition = serde_json::from_value(serde_json::json!({
        "name": "shout",
        "type": "shell",
        "timeout_seconds": 5,
        "cost_usd": 0.5,
        "inputs": {"text": {"type": "string", "required": true}},
        "command": ["echo", word, "${{ inputs.text }}"],
    }))
    .unwrap();
    let mut known = KnownTools::default();
    known.declared.insert("shout".into(), Arc::new(shout));
    known.external.insert("py__add".into());
    known
}

const USES_SHOUT: &str = "name: loud\nversion: \"1.0.0\"\nsteps:\n  - {id: a, tool: shout, inputs: {text: hi}}\n  - {id: b, tool: py__add, inputs: {a: 1, b: 2}}\n";

#[tokio::test]
async fn a_directory_tool_a_file_names_is_registered_with_the_version() {
    let (_db, store) = temp_store().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loud.awl.yaml");
    std::fs::write(&path, USES_SHOUT).unwrap();
    match register_file(&store, &path, "ada", Utc::now()).await {
        Err(DefinitionError::Invalid(d)) => {
            assert!(d.to_string().contains("unknown tool `shout`"), "{d}")
        }
        other => panic!("without the registry the tool is unknown: {other:?}"),
    }
    let registered = register_file_with(&store, &path, "ada", Utc::now(), &directory_tool("HEY"))
        .await
        .unwrap();
    // The version carries the directory's declaration, loaded back as the file's own;
    // the MCP tool is not copied (it is called by name).
    let loaded = Definitions::default()
        .get(&store, "loud", "1.0.0")
        .await
        .unwrap();
    assert_eq!(loaded.tools.len(), 1);
    assert_eq!(
        &loaded.tools[0],
        &**directory_tool("HEY").declared.get("shout").unwrap()
    );
    assert_eq!(registered.workflow.tools, loaded.tools);

    // The directory changed: the same version is other content now, refused.
    match register_file_with(&store, &path, "ada", Utc::now(), &directory_tool("HO")).await {
        Err(DefinitionError::Refused(_)) => {}
        other => panic!("a changed directory tool is a change of the version: {other:?}"),
    }
    // Unchanged, it registers again as the same version.
    let again = register_file_with(&store, &path, "ada", Utc::now(), &directory_tool("HEY"))
        .await
        .unwrap();
    assert_eq!(again.content_hash, registered.content_hash);
}

#[tokio::test]
async fn a_tool_the_file_declares_wins_over_the_directory_s() {
    let (_db, store) = temp_store().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("own.awl.yaml");
    std::fs::write(
        &path,
        "name: own\nversion: \"1.0.0\"\ntools:\n  - {name: shout, type: shell, command: [echo, mine]}\nsteps:\n  - {id: a, tool: shout}\n",
    )
    .unwrap();
    register_file_with(&store, &path, "ada", Utc::now(), &directory_tool("HEY"))
        .await
        .unwrap();
    let loaded = Definitions::default()
        .get(&store, "own", "1.0.0")
        .await
        .unwrap();
    assert_eq!(loaded.tools.len(), 1, "{:?}", loaded.tools);
    let body = serde_json::to_value(&loaded.tools[0]).unwrap();
    assert_eq!(body["command"], serde_json::json!(["echo", "mine"]));
}
