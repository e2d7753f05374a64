//! The PyO3 binding of the tool index, one concept per module: errors, the schema walk's
//! adapter, argument conversion, the build, the `Bm25Index` class and its searches.

pub(crate) mod build;
pub(crate) mod convert;
pub(crate) mod errors;
pub(crate) mod functions;
pub(crate) mod index;
pub(crate) mod info;
pub(crate) mod json;
pub(crate) mod search;
pub(crate) mod tools;
