use super::*;
use crate::log::Upcaster;
use serde_json::json;

fn raw(payload: RawJson, metadata: RawMetadata) -> RawEvent {
    RawEvent {
        position: 7,
        stream_type: "task".into(),
        stream_id: "t1".into(),
        version: 3,
        event_type: "task.queued".into(),
        event_version: 1,
        payload,
        metadata,
        recorded_at: DateTime::<Utc>::UNIX_EPOCH,
    }
}

#[test]
fn decodes_text_and_parsed_json() {
    let e = raw(
        RawJson::Text("{\"a\":1}".into()),
        RawMetadata::Decoded(Ok(Metadata::actor("ada"))),
    )
    .decode(&Upcasters::default())
    .unwrap();
    assert_eq!(e.payload, json!({"a": 1}));
    assert_eq!(e.metadata.actor.as_deref(), Some("ada"));
    assert_eq!(e.stream, StreamRef::new(StreamType::Task, "t1"));
}

#[test]
fn corrupt_rows_name_the_event() {
    let err = raw(
        RawJson::Text("{not json".into()),
        RawMetadata::Text("{}".into()),
    )
    .decode(&Upcasters::default())
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "corrupt event task/t1#3 task.queued (position 7): payload is not valid JSON"
        ),
        "{text}"
    );
    for metadata in [
        RawMetadata::Text("[1]".into()),
        RawMetadata::Decoded(Err("invalid type: sequence".into())),
    ] {
        let err = raw(RawJson::Text("{}".into()), metadata)
            .decode(&Upcasters::default())
            .unwrap_err();
        assert!(
            err.to_string().contains("metadata has the wrong shape"),
            "{err}"
        );
    }
    let err = raw(RawJson::Text("{}".into()), RawMetadata::Text("{".into()))
        .decode(&Upcasters::default())
        .unwrap_err();
    assert!(
        err.to_string().contains("metadata is not valid JSON"),
        "{err}"
    );
    let mut bad_type = raw(RawJson::Text("{}".into()), RawMetadata::Text("{}".into()));
    bad_type.stream_type = "job".into();
    let err = bad_type.decode(&Upcasters::default()).unwrap_err();
    assert!(err.to_string().contains("job/t1#3"), "{err}");
}

#[test]
fn upcasts_on_the_way_out() {
    fn add_flag(mut v: Value) -> Result<Value, String> {
        v["flag"] = json!(true);
        Ok(v)
    }
    let ups = Upcasters::new(vec![Upcaster {
        event_type: "task.queued",
        from_version: 1,
        upcast: add_flag,
    }]);
    let e = raw(RawJson::Parsed(json!({})), RawMetadata::Text("{}".into()))
        .decode(&ups)
        .unwrap();
    assert_eq!((e.event_version, e.payload), (2, json!({"flag": true})));
}
