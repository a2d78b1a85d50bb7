//! Where each entry of a configuration file is, so that every error names the file, the
//! entry's path (`limits.b.window`, `domains[0].descriptors[2].rate_limit.unit`) and its line.
//!
//! [`Source::read`] walks the YAML text's events once (with their positions), before any
//! value is read from it: it refuses text that is not YAML, and a key written twice in one
//! mapping, at the second one's line, naming the first's. It records every mapping entry and
//! list item by its path, with its line and, for a scalar, its text.
//!
//! Errors found later are placed with it:
//! - [`Source::place`] puts a [`ConfigFileError::Invalid`] (a value checked when the
//!   configuration is built) at the line of its path, or of the nearest enclosing entry the
//!   file has;
//! - [`Source::serde_error`] rewrites an error of the YAML reader. That reader often names
//!   only an enclosing entry, and a line near it (inside a tagged spec such as an algorithm's,
//!   or a duration read by a conversion, it cannot see further): when the message quotes the
//!   offending value or an unknown field's name, and exactly one entry below the named one
//!   holds it, the error is put at that entry's path and line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use saphyr_parser::{Event, Parser};

use super::envoy::{DescriptorConfig, DomainConfig};
use super::ConfigFileError;

/// The file a configuration was read from, with its positions, for placing the errors found
/// when the configuration is built; nothing for a configuration made in code. Any two are
/// equal: where a configuration came from is not part of its value.
#[derive(Clone, Debug, Default)]
pub struct Origin(Option<Arc<Source>>);

impl PartialEq for Origin {
    fn eq(&self, _: &Origin) -> bool {
        true
    }
}

impl Origin {
    /// Whether the file writes the entry at `path` (`rls.merge_domains`); never without one.
    pub fn writes(&self, path: &str) -> bool {
        self.0.as_ref().is_some_and(|source| source.writes(path))
    }

    /// `error` placed in the file (see [`Source::place`]); as it is without a file.
    pub fn place(&self, error: ConfigFileError) -> ConfigFileError {
        match &self.0 {
            Some(source) => source.place(error),
            None => error,
        }
    }
}

/// Where one entry is written: its file and line. Any two are equal, as for [`Origin`].
#[derive(Clone, Debug, Default)]
pub struct Written(Option<Arc<(Option<PathBuf>, usize)>>);

impl PartialEq for Written {
    fn eq(&self, _: &Written) -> bool {
        true
    }
}

impl Written {
    /// `error` at this entry's file and line ([`ConfigFileError::InFile`]); as it is when the
    /// entry's place is unknown.
    pub fn place(&self, error: ConfigFileError) -> ConfigFileError {
        match &self.0 {
            Some(at) => ConfigFileError::InFile {
                file: at.0.clone(),
                line: Some(at.1),
                error: Box::new(error),
            },
            None => error,
        }
    }
}

/// One file's text, read for positions (see the [module documentation](self)).
#[derive(Clone, Debug, Default)]
pub struct Source {
    file: Option<PathBuf>,
    entries: Vec<Entry>,
    by_path: HashMap<String, usize>,
}

/// A mapping entry or list item.
#[derive(Clone, Debug)]
struct Entry {
    path: String,
    /// 1-based.
    line: usize,
    /// The entry's own key, for a mapping entry.
    key: Option<String>,
    /// Its value's text, when it is a scalar.
    scalar: Option<String>,
}

/// What the walk is inside of.
enum Container {
    Mapping {
        path: String,
        /// The key read, waiting for its value (with the key's line).
        key: Option<(String, usize)>,
        /// Keys seen in this mapping, with their lines.
        seen: HashMap<String, usize>,
    },
    Sequence {
        path: String,
        next: usize,
    },
}

/// `parent.key` (or `parent["key"]` for a key that is not a plain word), `key` at the top.
pub(crate) fn join(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (parent.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{parent}.{key}"),
        (_, false) => format!("{parent}[{key:?}]"),
    }
}

impl Source {
    /// Reads `text` (from `file`, if it came from one) for positions; refuses text that is not
    /// YAML and keys written twice in one mapping ([`ConfigFileError::Yaml`], with the line).
    pub fn read(text: &str, file: Option<&Path>) -> Result<Source, ConfigFileError> {
        let mut source = Source {
            file: file.map(Path::to_path_buf),
            ..Source::default()
        };
        let yaml_error = |line: usize, message: String| ConfigFileError::Yaml {
            file: file.map(Path::to_path_buf),
            line: Some(line),
            message,
        };
        let mut stack: Vec<Container> = Vec::new();
        let mut documents = 0;
        for event in Parser::new_from_str(text) {
            let (event, span) = event
                .map_err(|e| yaml_error(e.marker().line(), format!("not YAML: {}", e.info())))?;
            let line = span.start.line();
            match event {
                Event::DocumentStart(_) => {
                    documents += 1;
                    if documents > 1 {
                        // Only the first document is read; the positions stop with it.
                        break;
                    }
                    continue;
                }
                Event::Scalar(..)
                | Event::Alias(_)
                | Event::MappingStart(..)
                | Event::SequenceStart(..) => {}
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                    continue;
                }
                _ => continue,
            }
            let scalar = match &event {
                Event::Scalar(text, ..) => Some(text.to_string()),
                _ => None,
            };
            let path = match source.node_path(stack.last_mut(), line, scalar) {
                Ok(Some(path)) => path,
                Ok(None) => continue, // a key: recorded with its value
                Err(message) => return Err(yaml_error(line, message)),
            };
            match event {
                Event::MappingStart(..) => stack.push(Container::Mapping {
                    path,
                    key: None,
                    seen: HashMap::new(),
                }),
                Event::SequenceStart(..) => stack.push(Container::Sequence { path, next: 0 }),
                _ => {}
            }
        }
        Ok(source)
    }

    /// The path of a node read at `line` in `parent` (the top when none), recorded as an
    /// entry; `None` for a mapping's key, which is recorded with its value; the message for a
    /// key written twice in one mapping.
    fn node_path(
        &mut self,
        parent: Option<&mut Container>,
        line: usize,
        scalar: Option<String>,
    ) -> Result<Option<String>, String> {
        match parent {
            None => Ok(Some(String::new())),
            Some(Container::Sequence { path, next }) => {
                let item = format!("{path}[{next}]");
                *next += 1;
                self.push(item.clone(), line, None, scalar);
                Ok(Some(item))
            }
            Some(Container::Mapping { path, key, seen }) => match key.take() {
                None => {
                    // A key. Keys that are not scalars are kept out of paths.
                    let name = scalar.unwrap_or_default();
                    if let Some(first) = seen.insert(name.clone(), line) {
                        return Err(format!(
                            "{}: duplicate key `{name}` (first at line {first}): \
                             a key may appear once in a mapping",
                            join(path, &name)
                        ));
                    }
                    *key = Some((name, line));
                    Ok(None)
                }
                Some((name, key_line)) => {
                    let entry = join(path, &name);
                    self.push(entry.clone(), key_line, Some(name), scalar);
                    Ok(Some(entry))
                }
            },
        }
    }

    fn push(&mut self, path: String, line: usize, key: Option<String>, scalar: Option<String>) {
        self.by_path.insert(path.clone(), self.entries.len());
        self.entries.push(Entry {
            path,
            line,
            key,
            scalar,
        });
    }

    /// The file the text came from.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// This source as a configuration's [`Origin`].
    pub fn into_origin(self) -> Origin {
        Origin(Some(Arc::new(self)))
    }

    /// Marks every descriptor of `domain` (written at `prefix`: empty for an
    /// envoyproxy/ratelimit file, `domains[i]` in a native one) with where it is written.
    pub fn mark(&self, domain: &mut DomainConfig, prefix: &str) {
        fn walk(source: &Source, descriptors: &mut [DescriptorConfig], parent: &str) {
            for (j, descriptor) in descriptors.iter_mut().enumerate() {
                let path = format!("{}descriptors[{j}]", parent);
                if let Some(line) = source.line_of(&path) {
                    descriptor.written = Written(Some(Arc::new((source.file.clone(), line))));
                }
                walk(source, &mut descriptor.descriptors, &format!("{path}."));
            }
        }
        let parent = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}.")
        };
        walk(self, &mut domain.descriptors, &parent);
    }

    /// Whether the text has an entry at exactly `path`.
    pub fn writes(&self, path: &str) -> bool {
        self.by_path.contains_key(path)
    }

    /// The line of the entry at `path`, or of the nearest entry enclosing it that the text
    /// has (`limits.b.window` → `limits.b` → `limits`). A path may end in words that are not
    /// part of it (`domains[d] descriptor k`): only its first word counts.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut path = path.split(' ').next().unwrap_or_default();
        loop {
            if let Some(&i) = self.by_path.get(path) {
                return Some(self.entries[i].line);
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }

    /// `error` placed in this file: an [`ConfigFileError::Invalid`] gets the file and the
    /// line of its path ([`ConfigFileError::InFile`]); an error already placed, or about
    /// several files, is returned as it is.
    pub fn place(&self, error: ConfigFileError) -> ConfigFileError {
        match error {
            ConfigFileError::Invalid { ref path, .. } => {
                let line = self.line_of(path);
                ConfigFileError::InFile {
                    file: self.file.clone(),
                    line,
                    error: Box::new(error),
                }
            }
            other => other,
        }
    }

    /// The YAML reader's `error`, at the entry it is about (see the [module
    /// documentation](self)).
    pub fn serde_error(&self, error: &serde_norway::Error) -> ConfigFileError {
        let text = error.to_string();
        // The reader's own position, which the line found here replaces.
        let message = match text.rfind(" at line ") {
            Some(at) => &text[..at],
            None => text.as_str(),
        };
        let reader_line = error.location().map(|l| l.line());
        let (path, what) = match message.split_once(": ") {
            Some((path, what)) if !path.contains(' ') => (path, what),
            _ => ("", message),
        };
        let (path, line) = match self.culprit(path, what) {
            Some(entry) => (entry.path.as_str(), Some(entry.line)),
            None => (
                path,
                self.line_of(path)
                    .filter(|_| !path.is_empty())
                    .or(reader_line),
            ),
        };
        let what = beyond_whole_numbers(what).unwrap_or_else(|| without_repeated_path(path, what));
        ConfigFileError::Yaml {
            file: self.file.clone(),
            line,
            message: if path.is_empty() {
                what
            } else {
                format!("{path}: {what}")
            },
        }
    }

    /// The one entry at or below `path` that `message` is about: the field an "unknown field"
    /// names, or the one holding the value the message quotes (in backticks or double
    /// quotes). `None` when no entry, or more than one, fits.
    fn culprit(&self, path: &str, message: &str) -> Option<&Entry> {
        let below = |e: &&Entry| {
            path.is_empty()
                || e.path == path
                || e.path.starts_with(&format!("{path}."))
                || e.path.starts_with(&format!("{path}["))
        };
        fn unique(mut found: Vec<&Entry>) -> Option<&Entry> {
            found.dedup_by_key(|e| e.line);
            (found.len() == 1).then(|| found[0])
        }
        if let Some(rest) = message.strip_prefix("unknown field `") {
            let field = rest.split('`').next().unwrap_or_default();
            let found = self
                .entries
                .iter()
                .filter(below)
                .filter(|e| e.key.as_deref() == Some(field))
                .collect();
            return unique(found);
        }
        let quoted: Vec<&str> = message
            .split('`')
            .skip(1)
            .step_by(2)
            .chain(message.split('"').skip(1).step_by(2))
            .filter(|q| !q.is_empty())
            .collect();
        let found = self
            .entries
            .iter()
            .filter(below)
            .filter(|e| e.scalar.as_deref().is_some_and(|s| quoted.contains(&s)))
            .collect();
        unique(found)
    }
}

/// `what` without a lead that repeats the end of `path` (`rate_limit: requests_per_unit: `-1` …`
/// at `descriptors[0].rate_limit.requests_per_unit` reads `` `-1` … ``): a checker inside a
/// section names the field it refuses, and the entry found for it here names it again.
fn without_repeated_path(path: &str, what: &str) -> String {
    let segments: Vec<&str> = path.split('.').collect();
    for k in (1..=segments.len()).rev() {
        let lead = format!("{}: ", segments[segments.len() - k..].join(": "));
        if let Some(rest) = what.strip_prefix(&lead) {
            return rest.to_string();
        }
    }
    what.to_string()
}

/// The reader's words for a whole number too large for any field ("invalid type: integer
/// `99999999999999999999999` as u128, expected any YAML value", from an integer beyond 64
/// bits) in the terms of the configuration: what the largest accepted number is.
fn beyond_whole_numbers(what: &str) -> Option<String> {
    let rest = what.strip_prefix("invalid type: integer `")?;
    let (number, rest) = rest.split_once('`')?;
    rest.starts_with(" as u128").then(|| {
        format!(
            "{number} is beyond the largest whole number a limit takes ({})",
            u64::MAX
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
plans:
  free: {algorithm: token_bucket, rate: 5, capacity: 10}
default_plan: free
limits:
  a: {algorithm: fixed_window, limit: 5, window: 1m}
  b:
    algorithm: fixed_window
    limit: 5
    window: \"1 fortnight\"
domains:
  - domain: d
    descriptors:
      - key: k
        rate_limit: {unit: hour, requests_per_unit: 2}
endpoint_costs: {/v1/search: 5}
";

    #[test]
    fn every_entry_has_its_line() {
        let source = Source::read(TEXT, None).unwrap();
        for (path, line) in [
            ("plans", 1),
            ("plans.free.rate", 2),
            ("default_plan", 3),
            ("limits.b", 6),
            ("limits.b.window", 9),
            ("limits.b.window.more", 9),
            ("domains[0]", 11),
            ("domains[0].descriptors[0].rate_limit.unit", 14),
            ("domains[d] descriptor k", 10),
            ("endpoint_costs[\"/v1/search\"]", 15),
        ] {
            assert_eq!(source.line_of(path), Some(line), "{path}");
        }
        assert_eq!(source.line_of("nothing"), None);
    }

    #[test]
    fn a_key_written_twice_is_refused_at_the_second() {
        let text = "limits:\n  a: {algorithm: gcra, max_burst: 1, count: 1, period: 1}\nusers: {}\nlimits:\n  b: {}\n";
        let e = Source::read(text, Some(Path::new("f.yaml"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.yaml:4: invalid configuration: limits: duplicate key `limits` (first at line 1): a key may appear once in a mapping"
        );
        let nested = "store: {url: memory, url: memory}\n";
        let e = Source::read(nested, None).unwrap_err().to_string();
        assert!(e.contains("store.url: duplicate key `url`"), "{e}");
    }

    #[test]
    fn reader_errors_are_put_at_the_entry_they_are_about() {
        let source = Source::read(TEXT, Some(Path::new("f.yaml"))).unwrap();
        let e = serde_norway::from_str::<super::super::Config>(TEXT).unwrap_err();
        let placed = source.serde_error(&e).to_string();
        assert!(
            placed.starts_with("f.yaml:9: invalid configuration: limits.b.window: `1 fortnight`"),
            "{placed}"
        );
    }
}
