use std::path::PathBuf;

/// Every error names the file (or process) concerned and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum ToolkitError {
    #[error(
        "{path}: invalid TOML at line {line}, column {column}: {message} (file left untouched)"
    )]
    Toml {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error(
        "{path}: invalid JSON at line {line}, column {column}: {message} (file left untouched)"
    )]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message} (file left untouched)")]
    Config { path: PathBuf, message: String },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reloading {runtime}: {message}")]
    Reload { runtime: String, message: String },
    #[error("CDI: {0}")]
    Cdi(String),
}

impl ToolkitError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn config(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Self::Config {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// 1-based line and column of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}
