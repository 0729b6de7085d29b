//! YAML to JSON, remembering where every value came from.
//!
//! Workflow files are validated as JSON (against the published JSON Schema, then by
//! the semantic checks), but every problem must be reported at the line and column of
//! the YAML that caused it. So the file is read once into a tree of
//! [`serde_saphyr::Spanned`] nodes, which is turned into a plain
//! [`serde_json::Value`] plus a [`SourceMap`] from JSON pointers (RFC 6901) to
//! positions: the position of each value, and of each mapping key, and the bytes of
//! the file each value was written as.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::Spanned;

/// A line and column in a file, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    pub line: u64,
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

impl Position {
    fn of(location: &serde_saphyr::Location) -> Self {
        Self {
            line: location.line(),
            column: location.column(),
        }
    }
}

/// Where each value (and each mapping key) of a document is, by JSON pointer.
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    values: HashMap<String, Position>,
    keys: HashMap<String, Position>,
    /// The bytes of the source each value was written as (quotes included), for
    /// values that are not aliases.
    spans: HashMap<String, Range<usize>>,
}

impl SourceMap {
    /// The position of the value at `pointer`, or of its closest ancestor that has one.
    pub fn value(&self, pointer: &str) -> Position {
        let mut p = pointer;
        loop {
            if let Some(pos) = self.values.get(p) {
                return *pos;
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => return Position { line: 1, column: 1 },
            }
        }
    }

    /// The position of the key that holds the value at `pointer` (falls back to the
    /// value's position).
    pub fn key(&self, pointer: &str) -> Position {
        self.keys
            .get(pointer)
            .copied()
            .unwrap_or_else(|| self.value(pointer))
    }

    /// The bytes of the source the value at `pointer` was written as: a scalar with
    /// its quotes, a block scalar's content lines. `None` for an alias (`*name`) or
    /// an unknown pointer.
    pub fn span(&self, pointer: &str) -> Option<Range<usize>> {
        self.spans.get(pointer).cloned()
    }
}

/// A YAML document that is not well-formed (or not representable as JSON).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    pub position: Option<Position>,
    pub message: String,
}

/// Parse `source` into JSON and its source map.
///
/// Booleans are YAML 1.2's (`true`, `false`), as editors checking a file against the
/// published schema read them: `no`, `on` or `y` are strings, not YAML 1.1 booleans.
/// A number written with leading zeros (`0755`, `01234`) is kept as the string it
/// is written as, not read as the float `755.0`.
pub fn parse(source: &str) -> Result<(Value, SourceMap), YamlError> {
    let options = serde_saphyr::options! {
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
    };
    let root: Spanned<Node> =
        serde_saphyr::from_str_with_options(source, options).map_err(|e| YamlError {
            position: e.location().map(|l| Position::of(&l)),
            message: message(&e),
        })?;
    let mut map = SourceMap::default();
    let value = flatten(root, String::new(), &mut map);
    Ok((value, map))
}

/// The message alone, in the user-facing wording (the position is reported apart):
/// not "error: line 2 column 1: duplicate mapping key: name, set DuplicateKeyPolicy
/// in Options if acceptable".
fn message(error: &serde_saphyr::Error) -> String {
    use serde_saphyr::MessageFormatter;
    let text = serde_saphyr::UserMessageFormatter.format_message(error);
    let line = text.lines().next().unwrap_or_default().trim();
    line.chars().filter(|c| !c.is_control()).collect()
}

fn flatten(node: Spanned<Node>, pointer: String, map: &mut SourceMap) -> Value {
    map.values
        .insert(pointer.clone(), Position::of(&node.referenced));
    let span = node.referenced.span();
    if node.referenced == node.defined
        && let (Some(start), Some(len)) = (span.byte_offset(), span.byte_len())
        && let (Ok(start), Ok(len)) = (usize::try_from(start), usize::try_from(len))
    {
        map.spans.insert(pointer.clone(), start..start + len);
    }
    match node.value {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(b),
        Node::Number(n) => Value::Number(n),
        Node::String(s) => Value::String(s),
        Node::Seq(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| flatten(item, format!("{pointer}/{i}"), map))
                .collect(),
        ),
        Node::Map(entries) => {
            let mut object = Map::new();
            for (key, value) in entries {
                let child = format!("{pointer}/{}", escape(&key.value.0));
                map.keys
                    .insert(child.clone(), Position::of(&key.referenced));
                object.insert(key.value.0, flatten(value, child, map));
            }
            Value::Object(object)
        }
    }
}

/// Escape one reference token of a JSON pointer (RFC 6901).
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// One YAML node with its children's positions.
enum Node {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Seq(Vec<Spanned<Node>>),
    Map(Vec<(Spanned<Key>, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
        Number::from_f64(v)
            .map(Node::Number)
            .ok_or_else(|| E::custom(format!("{v} is not a number JSON can hold")))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Node, E> {
        Ok(Node::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = access.next_key::<Spanned<Key>>()? {
            let value = access.next_value::<Spanned<Node>>()?;
            entries.push((key, value));
        }
        Ok(Node::Map(entries))
    }
}

/// A mapping key: any scalar, as written (JSON keys are strings). An input called `n`
/// or an env variable called `0x10` keeps its name; it is not read as `false` or `16`.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a scalar mapping key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key, E> {
                Ok(Key(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Key, E> {
                Ok(Key("null".into()))
            }
            fn visit_none<E: de::Error>(self) -> Result<Key, E> {
                Ok(Key("null".into()))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
                d.deserialize_string(KeyVisitor)
            }
        }
        // Through `option`, so that a null key (`~:`) is a key and not an error; any
        // other key is asked for as a string, which gives its text as written.
        deserializer.deserialize_option(KeyVisitor)
    }
}

#[cfg(test)]
mod tests;
