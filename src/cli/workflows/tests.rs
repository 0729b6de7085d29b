use super::line_diff;

#[test]
fn a_line_diff_keeps_the_common_lines_and_marks_the_rest() {
    assert_eq!(
        line_diff("a\nb\nc", "a\nx\nc\nd"),
        vec![" a", "+x", "-b", " c", "+d"]
    );
    assert_eq!(line_diff("", "a"), vec!["+a"]);
    assert_eq!(line_diff("a", ""), vec!["-a"]);
    assert!(
        line_diff("same\nlines", "same\nlines")
            .iter()
            .all(|l| l.starts_with(' '))
    );
}
