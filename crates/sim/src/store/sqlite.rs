//! The SQLite backend: one row per object, plus the last handed-out resourceVersion.
//! WAL mode with `synchronous=NORMAL`: a committed transaction is in the WAL file before
//! the write is acknowledged, so killing the process (even with SIGKILL) loses nothing;
//! only an OS crash or power loss can drop the last commits.

use super::backend::{Backend, ObjKey, StoreError};
use rusqlite::{Connection, params};
use serde_json::Value;
use std::path::{Path, PathBuf};

pub struct SqliteBackend {
    conn: Connection,
    path: PathBuf,
}

impl SqliteBackend {
    /// Opens (creating if needed) `dir/state.db`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        // It holds Secrets: the directory 0700 and the database 0600 from the start (SQLite
        // gives the WAL and shared-memory files the database file's mode).
        crate::kubeconfig::create_private_dir(dir).map_err(|source| StoreError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let path = dir.join("state.db");
        crate::kubeconfig::open_private(&path, false).map_err(|source| StoreError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let conn = Connection::open(&path).map_err(|source| StoreError::Sqlite {
            path: path.display().to_string(),
            source,
        })?;
        let this = Self { conn, path };
        this.conn
            .execute_batch(
                "PRAGMA journal_mode=WAL;
                 PRAGMA synchronous=NORMAL;
                 CREATE TABLE IF NOT EXISTS objects (
                     gr TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
                     rv INTEGER NOT NULL, data BLOB NOT NULL,
                     PRIMARY KEY (gr, namespace, name));
                 CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);",
            )
            .map_err(|e| this.err(e))?;
        Ok(this)
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn set_rv(&self, rv: u64) -> rusqlite::Result<usize> {
        self.conn
            .prepare_cached("INSERT INTO meta (key, value) VALUES ('rv', ?1) ON CONFLICT(key) DO UPDATE SET value = ?1")?
            .execute(params![rv as i64])
    }
}

impl Backend for SqliteBackend {
    fn load(&mut self) -> Result<(Vec<(ObjKey, Value)>, u64), StoreError> {
        let rv: i64 = self
            .conn
            .query_row(
                "SELECT COALESCE((SELECT value FROM meta WHERE key = 'rv'), 0)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        let mut stmt = self
            .conn
            .prepare("SELECT gr, namespace, name, data FROM objects")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    ObjKey {
                        gr: r.get(0)?,
                        namespace: r.get(1)?,
                        name: r.get(2)?,
                    },
                    r.get::<_, Vec<u8>>(3)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (key, data) = row.map_err(|e| StoreError::Sqlite {
                path: self.path.display().to_string(),
                source: e,
            })?;
            let value = serde_json::from_slice(&data).map_err(|source| StoreError::Corrupt {
                key: key.to_string(),
                source,
            })?;
            out.push((key, value));
        }
        Ok((out, rv.max(0) as u64))
    }

    fn put(&mut self, key: &ObjKey, data: &[u8], rv: u64) -> Result<(), StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        self.conn
            .prepare_cached(
                "INSERT INTO objects (gr, namespace, name, rv, data) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(gr, namespace, name) DO UPDATE SET rv = ?4, data = ?5",
            )
            .and_then(|mut s| s.execute(params![key.gr, key.namespace, key.name, rv as i64, data]))
            .and_then(|_| self.set_rv(rv))
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    fn delete(&mut self, key: &ObjKey, rv: u64) -> Result<(), StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        self.conn
            .prepare_cached("DELETE FROM objects WHERE gr = ?1 AND namespace = ?2 AND name = ?3")
            .and_then(|mut s| s.execute(params![key.gr, key.namespace, key.name]))
            .and_then(|_| self.set_rv(rv))
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Mutation, Store};
    use serde_json::json;

    #[test]
    fn reopen_keeps_objects_and_rv() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = ObjKey {
            gr: "/configmaps".into(),
            namespace: "default".into(),
            name: "a".into(),
        };
        let rv = {
            let store = Store::open(
                Box::new(SqliteBackend::open(dir.path()).expect("open")),
                100,
            )
            .expect("store");
            store
                .mutate::<StoreError>(&key, |_, _| {
                    Ok(Mutation::Put(json!({"metadata": {"name": "a"}})))
                })
                .expect("put");
            store.current_rv()
        };
        let store = Store::open(
            Box::new(SqliteBackend::open(dir.path()).expect("reopen")),
            100,
        )
        .expect("store");
        assert_eq!(store.current_rv(), rv);
        let obj = store
            .get("/configmaps", "default", "a")
            .expect("object survives");
        assert_eq!(obj["metadata"]["resourceVersion"], json!(rv.to_string()));
    }
}
