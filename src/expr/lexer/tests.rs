use super::*;

fn tokens(src: &str, comments: CommentEnd) -> Vec<Token> {
    let mut lexer = Lexer::new(src, 0, comments);
    std::iter::from_fn(|| lexer.next_token()).collect()
}

fn literals(src: &str) -> Vec<&str> {
    tokens(src, CommentEnd::Newline)
        .into_iter()
        .filter_map(|t| match t {
            Token::Literal { start, end, .. } => Some(&src[start..end]),
            _ => None,
        })
        .collect()
}

#[test]
fn string_literals_of_every_form_are_single_tokens() {
    assert_eq!(literals(r#"'a$b' + "c}}d""#), vec!["'a$b'", "\"c}}d\""]);
    assert_eq!(literals(r"'it\'s $x'"), vec![r"'it\'s $x'"]);
    assert_eq!(literals(r"r'\' + $x"), vec![r"r'\'"]);
    assert_eq!(literals("'''a'b\n$c''' + x"), vec!["'''a'b\n$c'''"]);
    assert_eq!(literals("b'\\x00' + R\"x\""), vec!["b'\\x00'", "R\"x\""]);
    // `abr` is an identifier, so the quote after it starts a plain literal.
    assert_eq!(literals(r"abr'\''"), vec![r"'\''"]);
}

#[test]
fn unterminated_literals_say_so() {
    let toks = tokens("'abc", CommentEnd::Newline);
    assert_eq!(
        toks,
        vec![Token::Literal {
            start: 0,
            end: 4,
            terminated: false
        }]
    );
    let toks = tokens("'ab\nc'", CommentEnd::Newline);
    assert!(matches!(
        toks[0],
        Token::Literal {
            end: 3,
            terminated: false,
            ..
        }
    ));
}

#[test]
fn comments_end_at_newline_or_at_braces_in_templates() {
    let toks = tokens("x // a }} b\ny", CommentEnd::Newline);
    assert!(toks.contains(&Token::Comment { start: 2, end: 11 }));
    let toks = tokens("x // a }} b\ny", CommentEnd::NewlineOrBraces);
    assert!(toks.contains(&Token::Comment { start: 2, end: 7 }));
}

#[test]
fn non_ascii_characters_are_whole_tokens() {
    let toks = tokens("é$", CommentEnd::Newline);
    assert_eq!(
        toks,
        vec![
            Token::Char { pos: 0, ch: 'é' },
            Token::Char { pos: 2, ch: '$' }
        ]
    );
}
