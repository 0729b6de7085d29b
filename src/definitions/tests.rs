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
