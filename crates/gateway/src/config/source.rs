//! [`Source`]: where the served configuration comes from — the file (or the embedded default)
//! and the command line's flags over it. `serve` loads it at start and again on every reload,
//! the same way, so a reload judges the file exactly as a start does.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::{Config, ConfigError, Mode};

/// The config file and the flags that override it.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// The TOML file; `None`: the embedded default.
    pub path: Option<PathBuf>,
    /// `--listen`.
    pub listen: Option<String>,
    /// `--store`.
    pub store: Option<String>,
    /// `--mode`.
    pub mode: Option<Mode>,
}

/// A configuration as loaded, and what identifies it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    /// SHA-256 of the file's bytes as they are on disk (`${NAME}` references, not their
    /// values), lower-case hex: what `sha256sum` prints for the file. Of the empty document
    /// for the embedded default.
    pub hash: String,
}

impl Source {
    /// Read the file (its `${NAME}` values from the environment), apply the flags, validate:
    /// a flag overrides the file before the file's own rules judge it.
    pub fn load(&self) -> Result<Loaded, ConfigError> {
        let text = match &self.path {
            Some(p) => std::fs::read_to_string(p)
                .map_err(|source| ConfigError::Read { path: p.display().to_string(), source })?,
            None => String::new(),
        };
        let hash = hex(&Sha256::digest(text.as_bytes()));
        let mut config = match &self.path {
            Some(p) => {
                Config::parse_with_env(&text, &|name| std::env::var(name).ok()).map_err(|e| match e {
                    ConfigError::Parse { message, .. } => {
                        ConfigError::Parse { path: p.display().to_string(), message }
                    }
                    other => other,
                })?
            }
            None => Config::default(),
        };
        if let Some(l) = &self.listen {
            config.listen = l.clone();
        }
        if let Some(s) = &self.store {
            config.store.url = s.clone();
        }
        if let Some(m) = self.mode {
            config.mode = m;
        }
        config.validate()?;
        Ok(Loaded { config, hash })
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_files_and_flags_override_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:9\"\n").unwrap();
        let source = Source { path: Some(path.clone()), mode: Some(Mode::Dev), ..Source::default() };
        let loaded = source.load().unwrap();
        assert_eq!(loaded.config.listen, "127.0.0.1:9");
        assert_eq!(loaded.hash, hex(&Sha256::digest(b"listen = \"127.0.0.1:9\"\n")));
        let over = Source { listen: Some("127.0.0.1:10".into()), ..source.clone() }.load().unwrap();
        assert_eq!(over.config.listen, "127.0.0.1:10");
        std::fs::write(&path, "listen = [").unwrap();
        assert!(matches!(source.load(), Err(ConfigError::Parse { .. })));
        std::fs::write(&path, "nonsense = 1\n").unwrap();
        let err = source.load().unwrap_err().to_string();
        assert!(err.contains("nonsense"), "{err}");
        assert_eq!(Source::default().load().unwrap().hash.len(), 64);
    }
}
