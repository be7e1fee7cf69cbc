//! The memory backend: the store's own maps are the only copy.

use super::backend::{Backend, ObjKey, StoreError};
use serde_json::Value;

/// Keeps nothing outside the process; a restart starts empty.
pub struct MemoryBackend;

impl Backend for MemoryBackend {
    fn load(&mut self) -> Result<(Vec<(ObjKey, Value)>, u64), StoreError> {
        Ok((Vec::new(), 0))
    }
    fn put(&mut self, _key: &ObjKey, _json: &[u8], _rv: u64) -> Result<(), StoreError> {
        Ok(())
    }
    fn delete(&mut self, _key: &ObjKey, _rv: u64) -> Result<(), StoreError> {
        Ok(())
    }
}
