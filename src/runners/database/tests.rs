use super::*;

/// Encode like Postgres: words, big-endian.
fn numeric(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
    let mut out = Vec::new();
    for w in [ndigits, weight as u16, sign, dscale] {
        out.extend_from_slice(&w.to_be_bytes());
    }
    for d in digits {
        out.extend_from_slice(&d.to_be_bytes());
    }
    out
}

#[test]
fn numeric_binary_is_decoded_exactly() {
    // 12.340 -> digits [12, 3400], weight 0, dscale 3
    assert_eq!(
        numeric_text(&numeric(2, 0, 0, 3, &[12, 3400])).unwrap(),
        "12.340"
    );
    // -0.0001 -> digits [1], weight -1, dscale 4
    assert_eq!(
        numeric_text(&numeric(1, -1, 0x4000, 4, &[1])).unwrap(),
        "-0.0001"
    );
    // 10000 -> digits [1], weight 1
    assert_eq!(numeric_text(&numeric(1, 1, 0, 0, &[1])).unwrap(), "10000");
    // 123456789.5 -> [1, 2345, 6789, 5000], weight 2, dscale 1
    assert_eq!(
        numeric_text(&numeric(4, 2, 0, 1, &[1, 2345, 6789, 5000])).unwrap(),
        "123456789.5"
    );
    // 0.00000012 -> [12], weight -2 (0.0000|0012), dscale 8
    assert_eq!(
        numeric_text(&numeric(1, -2, 0, 8, &[12])).unwrap(),
        "0.00000012"
    );
    // zero: no digits
    assert_eq!(numeric_text(&numeric(0, 0, 0, 2, &[])).unwrap(), "0.00");
    assert_eq!(numeric_text(&numeric(0, 0, 0xC000, 0, &[])).unwrap(), "NaN");
    assert!(numeric_text(&[0, 3, 0]).is_err(), "short input is an error");
    assert!(
        numeric_text(&numeric(3, 0, 0, 0, &[1])).is_err(),
        "missing digits"
    );
}

#[test]
fn sql_errors_are_classified() {
    assert_eq!(postgres_class("42601"), ErrorClass::Validation); // syntax error
    assert_eq!(postgres_class("23505"), ErrorClass::Validation); // unique violation
    assert_eq!(postgres_class("57014"), ErrorClass::Timeout);
    assert_eq!(postgres_class("40001"), ErrorClass::Dependency);
    assert_eq!(postgres_class("40P01"), ErrorClass::Dependency);
    assert_eq!(postgres_class("53300"), ErrorClass::Dependency);
    assert_eq!(postgres_class("08006"), ErrorClass::Network);
    assert_eq!(postgres_class("28P01"), ErrorClass::Authentication);
    assert_eq!(sqlite_class(1), ErrorClass::Validation); // SQLITE_ERROR
    assert_eq!(sqlite_class(2067), ErrorClass::Validation); // CONSTRAINT_UNIQUE
    assert_eq!(sqlite_class(9), ErrorClass::Timeout);
    assert_eq!(sqlite_class(5), ErrorClass::Dependency);
    assert_eq!(sqlite_class(517), ErrorClass::Dependency); // BUSY_SNAPSHOT
}

#[test]
fn postgres_statements_carry_their_parameter_types() {
    let text = |params: Value| {
        let params = params.as_array().cloned().unwrap_or_default();
        postgres_statement_text("SELECT $1 -- note", &Param::all(&params).expect("params"))
    };
    assert_eq!(text(json!([])), "SELECT $1 -- note");
    let int = text(json!([1000]));
    let float = text(json!([12.5]));
    assert_eq!(int, "SELECT $1 -- note\n/* awl params: i */");
    assert_eq!(float, "SELECT $1 -- note\n/* awl params: f */");
    assert_eq!(
        text(json!([null, true, "*/ DROP", {"a": 1}, [1]])),
        "SELECT $1 -- note\n/* awl params: n,b,s,j,j */",
        "values never reach the text"
    );
}

#[test]
fn params_are_checked_and_typed() {
    let values = json!([null, false, -7, 9_223_372_036_854_775_807_i64, 2.5, "x", [1], {"a": 1}]);
    let values = values.as_array().cloned().expect("array");
    assert_eq!(
        Param::all(&values).expect("params"),
        [
            Param::Null,
            Param::Bool(false),
            Param::Int(-7),
            Param::Int(i64::MAX),
            Param::Float(2.5),
            Param::Text("x"),
            Param::Json(&json!([1])),
            Param::Json(&json!({"a": 1})),
        ]
    );
    let too_big = [json!(1), json!(u64::MAX)];
    let err = Param::all(&too_big).expect_err("beyond i64");
    assert_eq!(err.class, ErrorClass::Validation);
    assert!(err.message.contains("params[1]"), "{}", err.message);
}

#[test]
fn non_finite_floats_become_strings() {
    assert_eq!(f64_json(1.5), json!(1.5));
    assert_eq!(f64_json(f64::NAN), json!("NaN"));
    assert_eq!(f64_json(f64::INFINITY), json!("Infinity"));
    assert_eq!(f64_json(f64::NEG_INFINITY), json!("-Infinity"));
}

#[test]
fn unknown_connections_are_named() {
    let mut config = RunnersConfig::default();
    config
        .connections
        .insert("main".into(), "sqlite::memory:".into());
    config
        .connections
        .insert("reports".into(), "postgres://x/y".into());
    let dbs = Databases::new(&config);
    let err = dbs.get("nope").err().expect("unknown");
    assert_eq!(err.class, ErrorClass::Validation);
    assert!(err.message.contains("`nope`"), "{}", err.message);
    assert!(err.message.contains("`main`, `reports`"), "{}", err.message);
}

#[test]
fn urls_of_other_databases_are_refused_without_quoting_them() {
    let mut config = RunnersConfig::default();
    config
        .connections
        .insert("m".into(), "mysql://root:hunter2@db/x".into());
    let dbs = Databases::new(&config);
    let err = dbs.get("m").expect("known").pool().err().expect("refused");
    assert_eq!(err.class, ErrorClass::Validation);
    assert!(!err.message.contains("hunter2"), "{}", err.message);
}
