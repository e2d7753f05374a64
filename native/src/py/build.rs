//! The build of an add: tools projected with the GIL held while a worker thread tokenizes them
//! chunk by chunk, then inserted with the GIL released; the progress reporter, the guard
//! against a callback using the index it builds, and the memory given back after a large add.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use super::convert::{optional_keys, VectorRows};
use super::errors::{guarded, panic_message};
use super::index::PyIndex;
use super::tools::{stage_tool, staged_name};
use crate::index::pass1::{ChunkTerms, Remap};
use crate::index::{Pass1, Staged};

thread_local! {
    /// Set while this thread builds an index (and may call a progress callback).
    static BUILDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pub(crate) fn not_building() -> Result<(), String> {
    if BUILDING.with(|b| b.get()) {
        return Err("the tool index is being built: a progress callback must not use it".into());
    }
    Ok(())
}

/// Give the allocator's free memory back to the system (glibc keeps freed blocks of the size
/// of a chunk in its arenas, where they would count in the process's RSS after a large add).
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: glibc's malloc_trim only returns free pages to the system.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Tools per chunk of an add; an add of more tokenizes on worker threads while it projects.
const PIPELINE_CHUNK: usize = 16_384;
/// Chunks projected ahead of each tokenizing worker at most.
const PIPELINE_DEPTH: usize = 2;
/// Tokenizing workers of a large add (chunk `c` goes to worker `c % TOKENIZERS`): one of them
/// alone takes longer than the projection (which waited for it a third of its time).
const TOKENIZERS: usize = 2;

/// A tokenized chunk, as a worker sends it back: its number, what pass 2 reads of it (names
/// and vectors), its terms.
type Tokenized = (usize, Staged, ChunkTerms);

/// A tokenizing worker of an add: pass 1 over every chunk it is sent, in order, each sent back
/// with its terms (to be merged in chunk order); returns what a panic said, if one did.
fn tokenize_chunks(
    rx: mpsc::Receiver<(usize, Staged)>,
    done: mpsc::Sender<Tokenized>,
    spare: mpsc::Sender<Staged>,
) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(|| {
        let mut pass1 = Pass1::new();
        for (c, mut staged) in rx {
            let terms = pass1.tokenize_chunk(&staged);
            // Pass 2 reads only the names (and vectors): the texts' buffers go back to the
            // walk for a later chunk.
            let _ = done.send((c, staged.take_names(), terms));
            let _ = spare.send(staged);
        }
    }))
    .map_err(|p| {
        format!(
            "internal error in the native tool index: {}",
            panic_message(p)
        )
    })
}

/// The tokenized chunks merged in order into one pass 1 (on the walk's thread).
struct Merger {
    pass1: Pass1,
    remaps: [Remap; TOKENIZERS],
    chunks: Vec<Staged>,
    /// Chunks back from the workers ahead of their turn, by number.
    early: Vec<Option<(Staged, ChunkTerms)>>,
}

impl Merger {
    /// Take a chunk back; merge it and those after it that are back. Returns whether any
    /// chunk was merged.
    fn take(&mut self, (c, names, terms): Tokenized) -> bool {
        if self.early.len() <= c {
            self.early.resize_with(c + 1, || None);
        }
        self.early[c] = Some((names, terms));
        let before = self.chunks.len();
        while let Some(slot) = self.early.get_mut(self.chunks.len()) {
            let Some((names, terms)) = slot.take() else {
                break;
            };
            let w = self.chunks.len() % TOKENIZERS;
            self.pass1.merge(terms, &mut self.remaps[w]);
            self.chunks.push(names);
        }
        self.chunks.len() > before
    }
}

/// Calls a Python `progress(phase, done, total)` from the build (re-taking the GIL); the
/// first exception it raises stops further calls and is raised once the add is complete.
struct Reporter<'a> {
    callback: Option<&'a Py<PyAny>>,
    total: usize,
    error: Option<PyErr>,
}

impl Reporter<'_> {
    fn report(&mut self, phase: &str, done: usize) {
        let Some(callback) = self.callback else {
            return;
        };
        if self.error.is_some() {
            return;
        }
        Python::attach(|py| {
            if let Err(e) = callback.call1(py, (phase, done, self.total)) {
                self.error = Some(e);
            }
        });
    }
}

/// `Bm25Index.add` (documented on the method in `index.rs`).
pub(crate) fn add(
    this: &PyIndex,
    py: Python<'_>,
    tools: &Bound<'_, PyAny>,
    progress: Option<Py<PyAny>>,
    every: usize,
    vectors: Option<&Bound<'_, PyAny>>,
    vector_keys: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    not_building().map_err(PyRuntimeError::new_err)?;
    let every = every.max(1);
    let vectors = vectors.filter(|v| !v.is_none());
    let n_tools = if progress.is_some() || vectors.is_some() || vector_keys.is_some() {
        tools.len().unwrap_or(0)
    } else {
        0
    };
    let total = if progress.is_some() { n_tools } else { 0 };
    let rows = vectors.map(|v| VectorRows::new(v, n_tools)).transpose()?;
    let keys = optional_keys(vector_keys, n_tools)?;
    let report = |phase: &str, done: usize| -> PyResult<()> {
        match &progress {
            Some(callback) => callback.call1(py, (phase, done, total)).map(|_| ()),
            None => Ok(()),
        }
    };
    // Pass 1 (tokenizing) needs nothing of the index: past the first chunk it runs on worker
    // threads, chunk by chunk, while this thread (holding the GIL) projects the next tools
    // and merges what the workers send back, in chunk order.
    let (chunks, pass1) = std::thread::scope(|scope| -> PyResult<(Vec<Staged>, Pass1)> {
        let (done_tx, mut done_rx) = mpsc::channel::<Tokenized>();
        let (spare_tx, spare_rx) = mpsc::channel::<Staged>();
        let mut feeds: Vec<mpsc::SyncSender<(usize, Staged)>> = Vec::new();
        let mut workers = Vec::new();
        let mut merger = Merger {
            pass1: Pass1::new(),
            remaps: Default::default(),
            chunks: Vec::new(),
            early: Vec::new(),
        };
        // Chunks sent to the workers, and tools reported tokenized.
        let (mut sent, mut reported) = (0usize, 0usize);
        // Report every multiple of `every` the merged tools have passed.
        let report_merged = |merger: &Merger, reported: &mut usize| -> PyResult<()> {
            let merged = merger.pass1.len();
            while progress.is_some() && (*reported / every + 1) * every <= merged {
                *reported = (*reported / every + 1) * every;
                report("tokenize", *reported)?;
            }
            Ok(())
        };
        // Send chunk `sent` to its worker (started on its first chunk), merging what comes
        // back while its queue is full. False if that worker is gone (it panicked: its join
        // says why).
        let mut send = |full: Staged,
                        sent: &mut usize,
                        merger: &mut Merger,
                        reported: &mut usize,
                        rx: &mut mpsc::Receiver<Tokenized>|
         -> PyResult<bool> {
            let w = *sent % TOKENIZERS;
            if w == feeds.len() {
                let (tx, rx) = mpsc::sync_channel::<(usize, Staged)>(PIPELINE_DEPTH);
                let (done_tx, spare_tx) = (done_tx.clone(), spare_tx.clone());
                workers.push(scope.spawn(move || tokenize_chunks(rx, done_tx, spare_tx)));
                feeds.push(tx);
            }
            let mut item = (*sent, full);
            loop {
                match feeds[w].try_send(item) {
                    Ok(()) => break,
                    Err(mpsc::TrySendError::Full(back)) => {
                        item = back;
                        // Ahead of the worker: wait (without the GIL) for a chunk to come
                        // back, and merge it. Polled: a worker that panicked sends nothing.
                        let rx = &mut *rx; // `&mut` is `Send` where `&` is not
                        let got = py.detach(move || rx.recv_timeout(Duration::from_millis(20)));
                        if let Ok(t) = got {
                            if merger.take(t) {
                                report_merged(merger, reported)?;
                            }
                        }
                    }
                    Err(mpsc::TrySendError::Disconnected(_)) => return Ok(false),
                }
            }
            *sent += 1;
            Ok(true)
        };
        let mut staged = Staged::default();
        let mut projected = 0usize;
        for (i, item) in tools.try_iter()?.enumerate() {
            let item = item?;
            guarded(|| stage_tool(&item, &mut staged))?;
            if rows.is_some() || keys.is_some() {
                let row = match &rows {
                    Some(r) => r.row(i)?,
                    None => None,
                };
                let key = keys.as_ref().and_then(|k| k[i]);
                let name = staged_name(&item);
                guarded(|| {
                    staged
                        .vector(row.as_deref(), key)
                        .map_err(|e| format!("tool '{name}': {e}"))
                })?;
            }
            projected += 1;
            if progress.is_some() && projected.is_multiple_of(every) {
                report("project", projected)?;
            }
            if staged.len() == PIPELINE_CHUNK {
                let next = staged.next_chunk_in(spare_rx.try_recv().ok());
                let full = std::mem::replace(&mut staged, next);
                if !send(full, &mut sent, &mut merger, &mut reported, &mut done_rx)? {
                    break;
                }
                let mut any = false;
                for t in done_rx.try_iter() {
                    any |= merger.take(t);
                }
                if any {
                    report_merged(&merger, &mut reported)?;
                }
            }
        }
        if !projected.is_multiple_of(every) || projected == 0 {
            report("project", projected)?;
        }
        if sent == 0 {
            // A small add: tokenized here, in one go, with the GIL released.
            let mut pass1 = Pass1::new();
            let mut done = Vec::new();
            py.detach(|| {
                guarded(|| {
                    catch_unwind(AssertUnwindSafe(|| {
                        pass1.tokenize(&staged, every, &mut |d| done.push(d))
                    }))
                    .map_err(|p| format!("internal error: {}", panic_message(p)))
                })
            })?;
            if progress.is_some() {
                for d in done {
                    report("tokenize", d)?;
                }
            }
            return Ok((vec![staged], pass1));
        }
        if !staged.is_empty() {
            send(staged, &mut sent, &mut merger, &mut reported, &mut done_rx)?;
        }
        // The workers end once their queues are empty.
        drop((done_tx, spare_tx, feeds));
        // Merge the rest without the GIL as it comes back, reporting as it goes.
        while merger.chunks.len() < sent {
            let rx = &mut done_rx;
            match py.detach(move || rx.recv()) {
                Ok(t) => {
                    if merger.take(t) {
                        report_merged(&merger, &mut reported)?;
                    }
                }
                Err(_) => break, // every worker is done (one of them panicked)
            }
        }
        for worker in workers {
            py.detach(|| worker.join())
                .unwrap_or_else(|p| Err(panic_message(p)))
                .map_err(PyValueError::new_err)?;
        }
        if merger.chunks.len() < sent {
            return Err(PyValueError::new_err(
                "internal error in the native tool index: a chunk was not tokenized",
            ));
        }
        Ok((merger.chunks, merger.pass1))
    })?;
    if progress.is_some() && !pass1.len().is_multiple_of(every) {
        report("tokenize", pass1.len())?;
    }
    let pipelined = chunks.len() > 1;
    let mut reporter = Reporter {
        callback: progress.as_ref(),
        total,
        error: None,
    };
    py.detach(|| {
        guarded(|| {
            let mut index = this.write()?;
            for staged in &chunks {
                index.check_staged(staged)?;
            }
            let chunks: Vec<&Staged> = chunks.iter().collect();
            BUILDING.with(|b| b.set(true));
            let result = catch_unwind(AssertUnwindSafe(|| {
                index.insert_pass1(&chunks, pass1, every, &mut |done| {
                    reporter.report("index", done)
                })
            }));
            BUILDING.with(|b| b.set(false));
            result.map_err(|p| format!("internal error: {}", panic_message(p)))
        })?;
        if pipelined {
            drop(chunks);
            release_free_memory();
        }
        Ok::<(), PyErr>(())
    })?;
    reporter.error.map_or(Ok(()), Err)
}
