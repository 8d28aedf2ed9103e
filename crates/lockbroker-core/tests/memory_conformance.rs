//! The in-memory store passes the store conformance suite, like every backend.

use lockbroker_core::conformance::Backend;
use lockbroker_core::memory::MemoryStore;
use lockbroker_core::LockName;

/// Brokers on one in-memory store.
struct Memory(MemoryStore);

impl Backend for Memory {
    type Store = MemoryStore;

    async fn broker(&self) -> MemoryStore {
        self.0.peer()
    }

    async fn lose_data(&self) {
        self.0.lose_data();
    }

    async fn put_last_fence(&self, name: &LockName, fence: u64) {
        self.0.put_last_fence(name, fence);
    }
}

lockbroker_core::store_conformance!(Memory(MemoryStore::new()));
