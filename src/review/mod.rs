//! The review loop of `findings` (issues 21 and 33): the queue listed as a
//! table, JSON lines or CSV, one finding shown with its history, and findings
//! resolved by hand (one, or a file of them in one transaction). Every flow
//! takes a connection and the settings group it needs, and fails with a
//! [`ReviewError`] that knows its exit code.
//!
//! - `error`: [`ReviewError`], why a review step failed, and its exit code.
//! - `list`: `findings list`, as a table, JSON lines or CSV.
//! - `table`: the table of `findings list`.
//! - `csv_export`: the CSV of `findings list --csv` ([`CSV_HEADER`]).
//! - `show`: `findings show ID`, as text or one JSON object.
//! - `file`: reading a resolution CSV ([`parse_file`]).
//! - `resolve`: `findings resolve`, one finding or a file's.

mod csv_export;
mod error;
mod file;
mod list;
mod resolve;
mod show;
mod table;

pub use csv_export::CSV_HEADER;
pub use error::ReviewError;
pub use file::{parse_file, read_file, FileError, FileLine};
pub use list::{list, ListFormat, ListQuery};
pub use resolve::{resolve, resolve_file, who_resolves};
pub use show::show;
