//! Tools staged for insertion, and the split of a tool name into namespace and last segment.

use crate::project::Field;

use super::short_keys::ShortKeys;

/// Parameter texts up to this many bytes are numbered as they are staged (the same text, the
/// same number, for the whole add) and tokenized once an add (`pass1.rs`).
pub(super) const MEMO_TEXT_LEN: usize = 256;
/// In [`Staged::numbers`]: a text not numbered.
pub(super) const UNNUMBERED: u32 = u32::MAX;
/// In [`Staged::numbers`]: the text was staged before under this number (its text is not
/// in this stage's arena again).
pub(super) const SEEN: u32 = 1 << 31;

/// Tools staged for insertion: every text in one arena, tagged with its field. Building the
/// stage can fail (a bad schema); inserting a stage cannot, which makes `add` all or nothing.
#[derive(Debug, Default)]
pub struct Staged {
    pub(super) arena: String,
    pub(super) texts: Vec<(usize, usize, Field)>,
    /// Per text: its number (a short parameter text: the first of its kind in the add, or
    /// `SEEN |` the number of the first), or `UNNUMBERED`.
    pub(super) numbers: Vec<u32>,
    /// The add's short parameter texts so far, by number; moves on to the add's next chunk.
    numbering: ShortKeys<u32>,
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
            self.push_text_at(start, start + ns.len(), Field::ParamText);
        }
    }

    pub(super) fn push(&mut self, from: usize, to: usize, field: Field) {
        self.push_numbered(from, to, field, UNNUMBERED);
    }

    fn push_numbered(&mut self, from: usize, to: usize, field: Field, number: u32) {
        self.texts.push((from, to, field));
        self.numbers.push(number);
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

    /// A text of the tool begun last. A short parameter text met before in the add is
    /// staged as its number alone (pass 1 reuses its terms).
    pub fn text(&mut self, field: Field, text: &str) {
        let start = self.arena.len();
        let number = number_of(&mut self.numbering, field, text).unwrap_or(UNNUMBERED);
        if number != UNNUMBERED && number & SEEN != 0 {
            return self.push_numbered(start, start, field, number);
        }
        self.arena.push_str(text);
        self.push_numbered(start, self.arena.len(), field, number);
    }

    /// A text already in the arena at `from..to`, numbered if it is a short parameter text.
    fn push_text_at(&mut self, from: usize, to: usize, field: Field) {
        let number = match number_of(&mut self.numbering, field, &self.arena[from..to]) {
            Some(n) if n & SEEN != 0 => return self.push_numbered(from, from, field, n),
            Some(n) => n,
            None => UNNUMBERED,
        };
        self.push_numbered(from, to, field, number);
    }

    /// Every staged text with its field, in order (a text staged before in an earlier chunk
    /// of the add is not in this one: it reads as empty).
    pub fn texts(&self) -> impl Iterator<Item = (Field, &str)> {
        self.texts
            .iter()
            .zip(&self.numbers)
            .map(|(&(from, to, f), &n)| {
                if n != UNNUMBERED && n & SEEN != 0 {
                    let first = self.numbers.iter().position(|&m| m == n & !SEEN);
                    let (a, b, _) = first.map_or((0, 0, f), |i| self.texts[i]);
                    return (f, &self.arena[a..b]);
                }
                (f, &self.arena[from..to])
            })
    }

    /// An empty stage for the next tools of the same add (their vectors must have this
    /// stage's dimension); the add's text numbering moves on to it.
    pub fn next_chunk(&mut self) -> Staged {
        Staged {
            dim: self.dim,
            numbering: std::mem::take(&mut self.numbering),
            ..Staged::default()
        }
    }

    /// The next chunk of the same add in `spare`'s buffers (a chunk already tokenized and
    /// emptied by [`Staged::take_names`]), or in new ones. Each chunk holds about 0.5 kB of
    /// text a tool; the first writes into fresh buffers cost the walk more in page faults
    /// and regrowth than the copying itself.
    pub fn next_chunk_in(&mut self, spare: Option<Staged>) -> Staged {
        match spare {
            Some(mut spare) => {
                debug_assert!(spare.is_empty() && spare.arena.is_empty());
                spare.dim = self.dim;
                spare.numbering = std::mem::take(&mut self.numbering);
                spare
            }
            None => Staged {
                arena: String::with_capacity(self.arena.len()),
                texts: Vec::with_capacity(self.texts.len()),
                numbers: Vec::with_capacity(self.numbers.len()),
                tools: Vec::with_capacity(self.tools.len()),
                ..self.next_chunk()
            },
        }
    }

    /// What the insertion reads of a tokenized chunk (each tool's name and vector) as a stage
    /// of its own; this one is left empty, its text buffers kept for
    /// [`Staged::next_chunk_in`].
    pub fn take_names(&mut self) -> Staged {
        let mut arena = String::with_capacity(self.names_len());
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
        self.numbers.clear();
        self.tools.clear();
        Staged {
            arena,
            texts: Vec::new(),
            numbers: Vec::new(),
            numbering: ShortKeys::default(),
            tools,
            vectors: std::mem::take(&mut self.vectors),
            vector_arena: std::mem::take(&mut self.vector_arena),
            dim: self.dim,
        }
    }

    /// The name of a staged tool.
    pub(super) fn name(&self, tool: &StagedTool) -> &str {
        &self.arena[tool.key.0..tool.key.1]
    }

    /// The length of every staged tool's name, in bytes, added up.
    pub(super) fn names_len(&self) -> usize {
        self.tools.iter().map(|t| t.key.1 - t.key.0).sum()
    }

    /// Number of tools staged.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// The number of a short parameter text (`SEEN |` it if the add has staged it before,
/// and then the text needs no staging again), numbering it if new; `None` for any other
/// text (or past 2^31 distinct texts, or 4 GiB of them).
fn number_of(numbering: &mut ShortKeys<u32>, field: Field, text: &str) -> Option<u32> {
    if !matches!(field, Field::ParamNames | Field::ParamText) || text.len() > MEMO_TEXT_LEN {
        return None;
    }
    let hash = ShortKeys::<u32>::hash(text.as_bytes());
    if let Some(n) = numbering.get(hash, text.as_bytes()) {
        return Some(SEEN | n);
    }
    let n = numbering.len() as u32;
    (n < SEEN && numbering.insert(hash, text.as_bytes(), n)).then_some(n)
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
