//! The build of an add: tools projected with the GIL held while a worker thread tokenizes them
//! chunk by chunk, then inserted with the GIL released; the progress reporter, the guard
//! against a callback using the index it builds, and the memory given back after a large add.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::convert::{optional_keys, VectorRows};
use super::errors::{guarded, panic_message};
use super::index::PyIndex;
use super::tools::{stage_tool, staged_name};
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

/// Tools per chunk of an add; an add of more tokenizes on a worker thread while it projects.
const PIPELINE_CHUNK: usize = 16_384;
/// Chunks projected ahead of the tokenizing worker at most.
const PIPELINE_DEPTH: usize = 4;

/// The tokenizing worker of an add: pass 1 over every chunk it is sent, in order, sending back
/// the count of tools tokenized every `every` tools; returns the chunks and pass 1, or what
/// a panic said.
fn tokenize_chunks(
    rx: mpsc::Receiver<Staged>,
    every: usize,
    done: mpsc::Sender<usize>,
    spare: mpsc::Sender<Staged>,
) -> Result<(Vec<Staged>, Pass1), String> {
    catch_unwind(AssertUnwindSafe(|| {
        let mut pass1 = Pass1::new();
        let mut chunks = Vec::new();
        for mut staged in rx {
            pass1.tokenize(&staged, every, &mut |d| {
                let _ = done.send(d);
            });
            // Pass 2 reads only the names (and vectors): the texts' buffers go back to the
            // walk for a later chunk.
            chunks.push(staged.take_names());
            let _ = spare.send(staged);
        }
        (chunks, pass1)
    }))
    .map_err(|p| {
        format!(
            "internal error in the native tool index: {}",
            panic_message(p)
        )
    })
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

/// The item `add` stages: the item itself if it is a dict holding a `"name"` (or no
/// `convert` was given), else what `convert(item)` returns.
fn converted<'py>(
    item: Bound<'py, PyAny>,
    convert: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let Some(convert) = convert else {
        return Ok(item);
    };
    if let Ok(d) = item.cast_exact::<PyDict>() {
        if d.contains(intern!(item.py(), "name"))? {
            return Ok(item);
        }
    }
    convert.call1((item,))
}

/// `Bm25Index.add` (documented on the method in `index.rs`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn add(
    this: &PyIndex,
    py: Python<'_>,
    tools: &Bound<'_, PyAny>,
    progress: Option<Py<PyAny>>,
    every: usize,
    vectors: Option<&Bound<'_, PyAny>>,
    vector_keys: Option<&Bound<'_, PyAny>>,
    convert: Option<&Bound<'_, PyAny>>,
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
    // Pass 1 (tokenizing) needs nothing of the index: past the first chunk it runs on a
    // worker thread, chunk by chunk, while this thread (holding the GIL) projects the next
    // tools. It reports back how many tools it has tokenized.
    let (chunks, pass1) = std::thread::scope(|scope| -> PyResult<(Vec<Staged>, Pass1)> {
        let (done_tx, done_rx) = mpsc::channel::<usize>();
        let (spare_tx, spare_rx) = mpsc::channel::<Staged>();
        let mut spare_tx = Some(spare_tx);
        let mut feed: Option<mpsc::SyncSender<Staged>> = None;
        let mut worker = None;
        let mut staged = Staged::default();
        let mut projected = 0usize;
        for (i, item) in tools.try_iter()?.enumerate() {
            let item = converted(item?, convert)?;
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
            if staged.len() == PIPELINE_CHUNK {
                let next = staged.next_chunk_in(spare_rx.try_recv().ok());
                let full = std::mem::replace(&mut staged, next);
                let tx = feed.get_or_insert_with(|| {
                    let (tx, rx) = mpsc::sync_channel::<Staged>(PIPELINE_DEPTH);
                    let done_tx = done_tx.clone();
                    let spare_tx = spare_tx.take().expect("one worker");
                    worker =
                        Some(scope.spawn(move || tokenize_chunks(rx, every, done_tx, spare_tx)));
                    tx
                });
                // Ahead of the worker by PIPELINE_DEPTH chunks: wait for it without the
                // GIL. Fails only if the worker is gone (it panicked): its join says why.
                let sent = match tx.try_send(full) {
                    Ok(()) => true,
                    Err(mpsc::TrySendError::Full(full)) => py.detach(|| tx.send(full).is_ok()),
                    Err(mpsc::TrySendError::Disconnected(_)) => false,
                };
                if !sent {
                    break;
                }
            }
            if progress.is_some() {
                if projected.is_multiple_of(every) {
                    report("project", projected)?;
                }
                for done in done_rx.try_iter() {
                    report("tokenize", done)?;
                }
            }
        }
        if !projected.is_multiple_of(every) || projected == 0 {
            report("project", projected)?;
        }
        drop(done_tx);
        let Some(worker) = worker else {
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
        };
        if let Some(tx) = feed.take() {
            if !staged.is_empty() {
                let _ = tx.send(staged);
            }
        }
        // Wait for the worker without the GIL, reporting what it has done as it goes.
        let mut done_rx = done_rx;
        loop {
            let rx = &mut done_rx; // `&mut` is `Send` where `&` is not
            match py.detach(move || rx.recv()) {
                Ok(done) => report("tokenize", done)?,
                Err(_) => break, // the worker is done
            }
        }
        let joined = py.detach(|| worker.join());
        joined
            .unwrap_or_else(|p| Err(panic_message(p)))
            .map_err(PyValueError::new_err)
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
