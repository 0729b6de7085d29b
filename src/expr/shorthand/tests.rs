use super::*;

fn cel(src: &str) -> String {
    match translate(src) {
        Ok(t) => t.text,
        Err(e) => panic!("{src}: {e}"),
    }
}

#[test]
fn references_become_plain_cel() {
    assert_eq!(cel("$inputs.repo"), "inputs.repo");
    assert_eq!(cel("$steps.build.status"), "steps.build.status");
    assert_eq!(
        cel("$steps.build-app.status"),
        "steps[\"build-app\"].status"
    );
    assert_eq!(cel("$prev.output"), "prev.output");
    assert_eq!(cel("$env.HOME"), "env.HOME");
    assert_eq!(cel("$build.status"), "steps[\"build\"].status");
    assert_eq!(cel("$build-app.status"), "steps[\"build-app\"].status");
    assert_eq!(cel("size($inputs)"), "size(inputs)");
    assert_eq!(cel("$inputs.in"), "inputs[\"in\"]");
}

#[test]
fn a_condition_is_translated_around_its_operators() {
    assert_eq!(
        cel("$step_1.status == 'succeeded' && $inputs.count > 3"),
        "steps[\"step_1\"].status == 'succeeded' && inputs.count > 3"
    );
    assert_eq!(cel("$inputs.count-1 > 3"), "inputs.count-1 > 3");
    assert_eq!(cel("$build-.x"), "steps[\"build\"]-.x");
}

#[test]
fn dollars_in_literals_and_comments_are_untouched() {
    assert_eq!(cel("'$inputs.x' + \"$y.z\""), "'$inputs.x' + \"$y.z\"");
    assert_eq!(cel("r'\\' + $a.b"), "r'\\' + steps[\"a\"].b");
    assert_eq!(
        cel("'it\\'s $x.y' + $x.y"),
        "'it\\'s $x.y' + steps[\"x\"].y"
    );
    assert_eq!(
        cel("1 // $not.this\n + $a.b"),
        "1 // $not.this\n + steps[\"a\"].b"
    );
}

#[test]
fn a_lone_or_glued_dollar_is_an_error_at_its_offset() {
    assert_eq!(translate("1 + $").unwrap_err().offset, 4);
    assert_eq!(translate("1 + $5").unwrap_err().offset, 4);
    assert_eq!(translate("a$b.c").unwrap_err().offset, 1);
}

#[test]
fn offsets_map_back_through_the_translation() {
    let t = translate("$build-app.status == )").unwrap();
    // `steps["build-app"].status == )`: the `)` is at 28 in CEL, 21 as written.
    let at = t.text.find(')').unwrap();
    assert_eq!(t.source_offset(at), 21);
    assert_eq!(t.source_offset(0), 0);
    assert_eq!(t.source_offset(t.text.len()), 22);
    assert_eq!(t.source_offset_of_position(1, at as isize + 1), 21);
}

#[test]
fn positions_on_later_lines_and_after_wide_characters() {
    let t = translate("'é'\n + )").unwrap();
    assert_eq!(t.source_offset_of_position(2, 4), 8);
    assert_eq!(t.source_offset_of_position(1, 4), 4);
    // Past the end clamps to the end.
    assert_eq!(t.source_offset_of_position(9, 1), 9);
}

#[test]
fn whole_references() {
    let w = |s: &str| whole_reference(s).map(|t| t.text);
    assert_eq!(w("$inputs.repo").as_deref(), Some("inputs.repo"));
    assert_eq!(
        w("$build-app.outputs.some-key").as_deref(),
        Some("steps[\"build-app\"].outputs[\"some-key\"]")
    );
    assert_eq!(
        w("$inputs.items[0].name").as_deref(),
        Some("inputs.items[0].name")
    );
    assert_eq!(w("$HOME"), None);
    assert_eq!(w("$5.00"), None);
    assert_eq!(w("$inputs.repo now"), None);
    assert_eq!(w("$inputs.x[a]"), None);
    assert_eq!(w("x$inputs.repo"), None);
}
