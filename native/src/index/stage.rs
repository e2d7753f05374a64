//! Tools staged for insertion, and the split of a tool name into namespace and last segment.

use crate::project::Field;

/// Tools staged for insertion: every text in one arena, tagged with its field. Building the
/// stage can fail (a bad schema); inserting a stage cannot, which makes `add` all or nothing.
#[derive(Debug, Default)]
pub struct Staged {
    pub(super) arena: String,
    pub(super) texts: Vec<(usize, usize, Field)>,
    pub(super) tools: Vec<StagedTool>,
    /// Per tool, when any tool of the batch has one: its vector (see [`StagedVector`]).
    pub(super) vectors: Vec<StagedVector>,
    /// The new vectors, unit length, one after the other.
    pub(super) vector_arena: Vec<f32>,
    pub(super) dim: usize,
}

/// What a staged tool brings for the vector side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StagedVector {
    /// No vector (a tool re-added without one loses the one it had).
    None,
    /// Keep the vector the tool (same name) already has, if its key is this one.
    Keep(u64),
    /// A new vector: the `i`-th of the arena, with the key of the text it came from.
    New(usize, u64),
}

#[derive(Debug)]
pub(super) struct StagedTool {
    pub(super) key: (usize, usize),   // the name in the arena
    pub(super) texts: (usize, usize), // its texts: first and end
}

impl Staged {
    /// Start a tool. Its name is its key; the name's last segment is its [`Field::Name`]
    /// text and any namespace before it a [`Field::ParamText`] text (see [`split_name`]).
    pub fn begin(&mut self, name: &str) {
        let start = self.arena.len();
        self.arena.push_str(name);
        let at = self.texts.len();
        self.tools.push(StagedTool {
            key: (start, self.arena.len()),
            texts: (at, at),
        });
        let (namespace, last) = split_name(name);
        let last_at = start + name.len() - last.len(); // `last` is a suffix of `name`
        self.push(last_at, last_at + last.len(), Field::Name);
        if let Some(ns) = namespace {
            self.push(start, start + ns.len(), Field::ParamText);
        }
    }

    pub(super) fn push(&mut self, from: usize, to: usize, field: Field) {
        self.texts.push((from, to, field));
        if let Some(last) = self.tools.last_mut() {
            last.texts.1 = self.texts.len();
        }
    }

    /// The vector of the tool begun last (call once per tool, for every tool of a batch that
    /// has vectors). A new vector is checked (finite, same dimension as the batch's others)
    /// and scaled to unit length.
    pub fn vector(&mut self, v: Option<&[f32]>, key: Option<u64>) -> Result<(), String> {
        let entry = match (v, key) {
            (Some(v), key) => {
                if self.dim != 0 && v.len() != self.dim {
                    return Err(format!(
                        "vector has {} dimensions, the others of this add have {}",
                        v.len(),
                        self.dim
                    ));
                }
                let u = super::vectors::unit(v)?;
                self.dim = u.len();
                let i = self.vector_arena.len() / self.dim;
                self.vector_arena.extend_from_slice(&u);
                StagedVector::New(i, key.unwrap_or(0))
            }
            (None, Some(key)) => StagedVector::Keep(key),
            (None, None) => StagedVector::None,
        };
        self.vectors.push(entry);
        Ok(())
    }

    /// A text of the tool begun last.
    pub fn text(&mut self, field: Field, text: &str) {
        let start = self.arena.len();
        self.arena.push_str(text);
        self.push(start, self.arena.len(), field);
    }

    /// Every staged text with its field, in order.
    pub fn texts(&self) -> impl Iterator<Item = (Field, &str)> {
        self.texts
            .iter()
            .map(|&(from, to, f)| (f, &self.arena[from..to]))
    }

    /// An empty stage for the next tools of the same add (their vectors must have this
    /// stage's dimension).
    pub fn next_chunk(&self) -> Staged {
        Staged {
            dim: self.dim,
            ..Staged::default()
        }
    }

    /// The next chunk of the same add in `spare`'s buffers (a chunk already tokenized and
    /// emptied by [`Staged::take_names`]), or in new ones. Each chunk holds about 0.5 kB of
    /// text a tool; the first writes into fresh buffers cost the walk more in page faults
    /// and regrowth than the copying itself.
    pub fn next_chunk_in(&self, spare: Option<Staged>) -> Staged {
        match spare {
            Some(mut spare) => {
                debug_assert!(spare.is_empty() && spare.arena.is_empty());
                spare.dim = self.dim;
                spare
            }
            None => Staged {
                arena: String::with_capacity(self.arena.len()),
                texts: Vec::with_capacity(self.texts.len()),
                tools: Vec::with_capacity(self.tools.len()),
                ..self.next_chunk()
            },
        }
    }

    /// What the insertion reads of a tokenized chunk (each tool's name and vector) as a stage
    /// of its own; this one is left empty, its text buffers kept for
    /// [`Staged::next_chunk_in`].
    pub fn take_names(&mut self) -> Staged {
        let names: usize = self.tools.iter().map(|t| t.key.1 - t.key.0).sum();
        let mut arena = String::with_capacity(names);
        let tools = self
            .tools
            .iter()
            .map(|t| {
                let from = arena.len();
                arena.push_str(&self.arena[t.key.0..t.key.1]);
                StagedTool {
                    key: (from, arena.len()),
                    texts: (0, 0),
                }
            })
            .collect();
        self.arena.clear();
        self.texts.clear();
        self.tools.clear();
        Staged {
            arena,
            texts: Vec::new(),
            tools,
            vectors: std::mem::take(&mut self.vectors),
            vector_arena: std::mem::take(&mut self.vector_arena),
            dim: self.dim,
        }
    }

    /// Number of tools staged.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// A tool name as `(namespace, last segment)`: split at the last `.`, `/` or `:` that has
/// a letter or digit on both sides somewhere (`math.factorial` -> `math` + `factorial`,
/// `huggingface.org/model-name` -> `huggingface.org` + `model-name`). A name without such a
/// separator is all last segment. The last segment is what the tool is; the namespace says
/// where it lives, which many tools share.
pub fn split_name(name: &str) -> (Option<&str>, &str) {
    let has_word = |s: &str| s.chars().any(char::is_alphanumeric);
    for (i, c) in name.char_indices().rev() {
        if matches!(c, '.' | '/' | ':') {
            let (ns, last) = (&name[..i], &name[i + 1..]);
            if has_word(last) {
                return if has_word(ns) {
                    (Some(ns), last)
                } else {
                    (None, name)
                };
            }
        }
    }
    (None, name)
}
