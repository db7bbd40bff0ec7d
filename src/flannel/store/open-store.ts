// Opens the lease store the flags ask for. The backends are loaded only here,
// on demand: the etcd client (grpc) only when etcd is asked for.
import { DEFAULT_LEASE_DIR, type LeaseStore, type StoreOptions } from './store';

/** Opens the store the flags ask for: etcd with endpoints, else the file store. */
export async function openStore(opts: StoreOptions): Promise<LeaseStore> {
  if (opts.etcdEndpoints && opts.etcdEndpoints.length > 0) {
    const { EtcdStore } = await import('./etcd-store');
    return EtcdStore.open(opts);
  }
  const { FileStore } = await import('./file-store');
  return new FileStore(opts.leaseDir ?? DEFAULT_LEASE_DIR);
}

/** Runs `fn` on the store the flags ask for, and closes the store however `fn` ends. */
export async function withStore<T>(opts: StoreOptions, fn: (store: LeaseStore) => Promise<T>): Promise<T> {
  const store = await openStore(opts);
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}
