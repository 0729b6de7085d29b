//! A streamed reply: server-sent events to chunks, chunks to one [`ChatReply`].
//!
//! The body arrives in pieces that cut anywhere, mid-line or mid-character, so bytes
//! are kept until a line is complete and only whole lines are decoded. Every
//! `data:` line is one chunk: the Chat Completions API writes each chunk's JSON on
//! one line, and taking lines one by one also reads servers that leave out the
//! blank line between events. Other fields (`event:`, `id:`, comments) are skipped.
//!
//! A chunk carries, for choice 0, a piece of text (`delta.content`), pieces of tool
//! calls (`delta.tool_calls[{index, id?, function: {name?, arguments?}}]`, joined by
//! `index`: the first piece names the call, the next ones add to its arguments) and
//! at last a `finish_reason`; with `stream_options.include_usage` a final chunk has
//! the usage and no choices; `data: [DONE]` ends the stream. A stream that stops
//! with neither `[DONE]` nor a `finish_reason` was cut off: the reply is incomplete,
//! so it is an error rather than half an answer.
//!
//! The pending line and the reply are bounded (8 MiB), like a whole reply.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{ChatReply, MAX_BODY_BYTES, ModelError, ToolCall, Usage, clip, error_message};

/// One chunk of a streamed reply.
#[derive(Deserialize)]
struct Chunk {
    model: Option<String>,
    choices: Option<Vec<ChunkChoice>>,
    usage: Option<Usage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u32,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    tool_calls: Option<Vec<ToolCallPiece>>,
}

#[derive(Deserialize)]
struct ToolCallPiece {
    index: Option<usize>,
    id: Option<String>,
    function: Option<FunctionPiece>,
}

#[derive(Deserialize)]
struct FunctionPiece {
    name: Option<String>,
    arguments: Option<String>,
}

/// A tool call as far as its pieces have come.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Bytes in, one reply out: feed it with [`Assembler::push`], end with
/// [`Assembler::finish`].
#[derive(Default)]
pub(super) struct Assembler {
    /// The start of a line whose end has not arrived.
    pending: Vec<u8>,
    done: bool,
    saw_choice: bool,
    content: Option<String>,
    calls: BTreeMap<usize, PartialCall>,
    finish_reason: Option<String>,
    usage: Usage,
    model: String,
    /// Bytes of text and arguments so far.
    size: usize,
}

impl Assembler {
    /// Take the next piece of the body; text is passed to `on_delta` as its chunk is
    /// read. `true` once `[DONE]` arrived (what follows is not read).
    pub(super) fn push(
        &mut self,
        bytes: &[u8],
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<bool, ModelError> {
        if self.done {
            return Ok(true);
        }
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.pending.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let line = std::mem::take(&mut self.pending);
            self.done = self.line(&line, on_delta)?;
            self.pending = line;
            self.pending.clear();
            if self.done {
                return Ok(true);
            }
        }
        self.pending.extend_from_slice(rest);
        if self.pending.len() > MAX_BODY_BYTES {
            return Err(ModelError::malformed(format!(
                "a line of the stream is longer than {} MiB",
                MAX_BODY_BYTES / 1024 / 1024
            )));
        }
        Ok(false)
    }

    /// The reply, once the body has ended (a last line without a line break is read).
    pub(super) fn finish(
        mut self,
        on_delta: &mut dyn FnMut(&str),
    ) -> Result<ChatReply, ModelError> {
        if !self.done && !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.done = self.line(&line, on_delta)?;
        }
        if !self.done && self.finish_reason.is_none() {
            return Err(ModelError::malformed(
                "the stream ended before the reply did (no finish_reason, no [DONE])",
            ));
        }
        if !self.saw_choice {
            return Err(ModelError::malformed("the stream held no choices"));
        }
        let tool_calls = self
            .calls
            .into_iter()
            .map(|(index, call)| ToolCall {
                id: if call.id.is_empty() {
                    format!("call_{index}")
                } else {
                    call.id
                },
                name: call.name,
                arguments: call.arguments,
            })
            .collect();
        Ok(ChatReply {
            content: self.content,
            tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
            model: self.model,
        })
    }

    /// One line; `true` for `data: [DONE]`.
    fn line(&mut self, line: &[u8], on_delta: &mut dyn FnMut(&str)) -> Result<bool, ModelError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            // a blank line, a comment, `event:`, `id:`, `retry:`
            return Ok(false);
        };
        let data = std::str::from_utf8(data)
            .map_err(|_| ModelError::malformed("the stream is not UTF-8"))?
            .trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            ModelError::malformed(format!(
                "an event of the stream is not a chunk ({e}): {}",
                clip(data, 200)
            ))
        })?;
        self.chunk(chunk, on_delta)?;
        Ok(false)
    }

    fn chunk(&mut self, chunk: Chunk, on_delta: &mut dyn FnMut(&str)) -> Result<(), ModelError> {
        if let Some(error) = chunk.error {
            return Err(ModelError::malformed(format!(
                "the stream broke off with an error: {}",
                clip(&error_message(&error), 500)
            )));
        }
        if let Some(model) = chunk.model
            && self.model.is_empty()
        {
            self.model = model;
        }
        if let Some(usage) = chunk.usage {
            self.usage = usage;
        }
        let choices = chunk.choices.unwrap_or_default();
        for choice in choices.into_iter().filter(|c| c.index == 0) {
            self.saw_choice = true;
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            if let Some(delta) = choice.delta {
                self.delta(delta, on_delta)?;
            }
        }
        Ok(())
    }

    fn delta(&mut self, delta: Delta, on_delta: &mut dyn FnMut(&str)) -> Result<(), ModelError> {
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            self.grow(text.len())?;
            on_delta(&text);
            self.content.get_or_insert_default().push_str(&text);
        }
        for piece in delta.tool_calls.unwrap_or_default() {
            self.tool_call_piece(piece)?;
        }
        Ok(())
    }

    /// A piece of a tool call: the first id and name stay, arguments are appended.
    fn tool_call_piece(&mut self, piece: ToolCallPiece) -> Result<(), ModelError> {
        let index = match piece.index {
            Some(index) => index,
            None => self.implied_index(piece.id.as_deref()),
        };
        let (name, arguments) = match piece.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        self.grow(arguments.as_ref().map_or(0, String::len))?;
        let call = self.calls.entry(index).or_default();
        if let Some(id) = piece.id
            && call.id.is_empty()
        {
            call.id = id;
        }
        if let Some(name) = name
            && call.name.is_empty()
        {
            call.name = name;
        }
        if let Some(arguments) = arguments {
            call.arguments.push_str(&arguments);
        }
        Ok(())
    }

    /// For servers that number no pieces: a new id starts a new call, anything else
    /// continues the last one.
    fn implied_index(&self, id: Option<&str>) -> usize {
        let last = self.calls.last_key_value();
        match (id, last) {
            (_, None) => 0,
            (Some(id), Some((&index, call))) if !id.is_empty() && call.id != id => index + 1,
            (_, Some((&index, _))) => index,
        }
    }

    fn grow(&mut self, by: usize) -> Result<(), ModelError> {
        self.size += by;
        if self.size > MAX_BODY_BYTES {
            return Err(ModelError::malformed(format!(
                "the streamed reply is larger than {} MiB",
                MAX_BODY_BYTES / 1024 / 1024
            )));
        }
        Ok(())
    }
}
